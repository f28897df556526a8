// The forecasters' training pair, ForwardTrain and Backward, on every architecture variant:
// the training forward computes what inference computes, Backward's parameter gradients match
// central finite differences of the forward (with dropout too, its masks held fixed by the
// seed), and the oneDNN backend's gradients match the reference backend's. Dropout: its
// masks, and what it must leave alone (p = 0, evaluation, inference). (Parity with PyTorch's
// gradients is tests/golden/train_golden_test.cc.)
#include <algorithm>
#include <cmath>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/models/forecaster.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

constexpr int kB = 2, kT = 5, kF = 3, kP = 2;

ModelConfig Base(const std::string& name) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(kT);
  c.set_horizon(kP);
  for (int f = 0; f < kF; ++f) c.add_feature_names(absl::StrCat("f", f));
  c.add_target_names("f2");
  c.add_target_names("f0");
  return c;
}

// Every architecture variant, each with `dropout` set (recurrent ones have two layers, so
// their dropout acts between them).
std::vector<ModelConfig> Variants(float dropout = 0.0f) {
  std::vector<ModelConfig> configs;
  {
    ModelConfig c = Base("lstm_uni_l2");
    c.mutable_lstm()->set_hidden_size(4);
    c.mutable_lstm()->set_num_layers(2);
    configs.push_back(c);
  }
  {
    ModelConfig c = Base("lstm_bi_l2_quantile");
    c.mutable_lstm()->set_hidden_size(3);
    c.mutable_lstm()->set_num_layers(2);
    c.mutable_lstm()->set_bidirectional(true);
    c.add_quantiles(0.1f);
    c.add_quantiles(0.5f);
    c.add_quantiles(0.9f);
    configs.push_back(c);
  }
  {
    ModelConfig c = Base("gru_bi_l2");
    c.mutable_gru()->set_hidden_size(4);
    c.mutable_gru()->set_num_layers(2);
    c.mutable_gru()->set_bidirectional(true);
    configs.push_back(c);
  }
  for (const bool pre : {false, true}) {
    for (const auto act : {v1::ACTIVATION_GELU, v1::ACTIVATION_RELU, v1::ACTIVATION_GELU_TANH}) {
      ModelConfig c = Base(absl::StrCat("transformer_", pre ? "pre" : "post", "_", act));
      auto* t = c.mutable_transformer();
      t->set_d_model(6);
      t->set_num_heads(2);
      t->set_num_layers(2);
      t->set_dim_feedforward(8);
      t->set_norm_first(pre);
      t->set_activation(act);
      t->set_causal(act == v1::ACTIVATION_GELU_TANH);
      configs.push_back(c);
    }
  }
  for (const int layers : {0, 1, 2}) {
    const v1::Activation act = layers == 0   ? v1::ACTIVATION_UNSPECIFIED
                               : layers == 1 ? v1::ACTIVATION_GELU_TANH
                                             : v1::ACTIVATION_RELU;
    ModelConfig c = Base(absl::StrCat("mlp_", layers));
    c.mutable_mlp()->set_num_layers(layers);
    if (layers > 0) c.mutable_mlp()->set_hidden_size(5);
    c.mutable_mlp()->set_activation(act);
    configs.push_back(c);
  }
  for (ModelConfig& c : configs) {
    if (c.has_mlp()) c.mutable_mlp()->set_dropout(dropout);
    if (c.has_lstm()) c.mutable_lstm()->set_dropout(dropout);
    if (c.has_gru()) c.mutable_gru()->set_dropout(dropout);
    if (c.has_transformer()) c.mutable_transformer()->set_dropout(dropout);
  }
  return configs;
}

std::unique_ptr<Forecaster> Build(const ModelConfig& config, uint32_t seed) {
  auto model = Forecaster::Create(config);
  REQUIRE(model.ok());
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.6f, 0.6f);
  ParameterArena& arena = (*model)->parameters();
  for (const ParameterSpec& spec : arena.specs()) {
    float* p = arena.data() + spec.offset;
    for (int64_t i = 0; i < spec.numel; ++i) {
      if (spec.name == "normalizer.std") {
        p[i] = 1.0f + 0.5f * static_cast<float>(i);
      } else if (spec.name.find("norm") != std::string::npos &&
                 spec.name.find(".weight") != std::string::npos) {
        p[i] = 1.0f + dist(gen) * 0.5f;  // LayerNorm gains around 1
      } else {
        p[i] = dist(gen);
      }
    }
  }
  return *std::move(model);
}

std::vector<float> Random(int64_t n, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// L = sum(out * R): its gradient with respect to out is R. With a dropout seed, every call
// draws the same masks, so L is a smooth function of the parameters to differentiate.
double Loss(const Forecaster& model, Backend& backend, const std::vector<float>& xn,
            const std::vector<float>& r, std::optional<uint64_t> dropout_seed = std::nullopt) {
  std::vector<float> out(r.size());
  TrainingTape tape;
  tape.dropout_seed = dropout_seed;
  REQUIRE(model.ForwardTrain(backend, out.data(), xn.data(), kB, tape).ok());
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += double{out[i]} * r[i];
  return sum;
}

std::vector<float> Gradients(const Forecaster& model, Backend& backend,
                             const std::vector<float>& xn, const std::vector<float>& r,
                             std::optional<uint64_t> dropout_seed = std::nullopt) {
  std::vector<float> out(r.size());
  std::vector<float> grads(static_cast<size_t>(model.parameters().size()), NAN);
  TrainingTape tape;
  tape.dropout_seed = dropout_seed;
  REQUIRE(model.ForwardTrain(backend, out.data(), xn.data(), kB, tape).ok());
  const absl::Status status = model.Backward(backend, grads.data(), r.data(), tape);
  INFO(status.ToString());
  REQUIRE(status.ok());
  return grads;
}

TEST_CASE("ForwardTrain computes inference's standardised forecast", "[unit][model][train]") {
  ReferenceBackend backend;
  for (const ModelConfig& config : Variants()) {
    CAPTURE(config.name());
    ModelConfig plain = config;
    plain.set_normalization(v1::NORMALIZATION_NONE);  // raw == standardised
    auto model = Build(plain, 11);
    const std::vector<float> x = Random(kB * kT * kF, 5);
    std::vector<float> want(static_cast<size_t>(kB * model->num_outputs()));
    std::vector<float> got(want.size());
    Workspace ws;
    REQUIRE(model->Forward(backend, want.data(), x.data(), kB, ws).ok());
    TrainingTape tape;
    REQUIRE(model->ForwardTrain(backend, got.data(), x.data(), kB, tape).ok());
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i, got[i], want[i]);
      REQUIRE(std::abs(got[i] - want[i]) <= 1e-5f + 1e-5f * std::abs(want[i]));
    }
  }
}

// Backward against central differences of ForwardTrain, with dropout `dropout` and, when it
// is > 0, the masks of seed `dropout_seed` held fixed.
void CheckFiniteDifferences(float dropout, std::optional<uint64_t> dropout_seed) {
  ReferenceBackend backend;
  for (const ModelConfig& config : Variants(dropout)) {
    CAPTURE(config.name());
    auto model = Build(config, 3);
    const std::vector<float> xn = Random(kB * kT * kF, 9);
    const std::vector<float> r = Random(kB * model->num_outputs(), 10);
    const std::vector<float> grads = Gradients(*model, backend, xn, r, dropout_seed);
    ParameterArena& arena = model->parameters();
    int64_t checked = 0, least = 0;
    for (const ParameterSpec& spec : arena.specs()) {
      CAPTURE(spec.name);
      if (!Forecaster::IsTrainable(spec)) {
        for (int64_t i = 0; i < spec.numel; ++i) REQUIRE(grads[spec.offset + i] == 0.0f);
        continue;
      }
      least += std::min<int64_t>(spec.numel, 12);
      // Every element of small tensors, a spread of a larger one's.
      const int64_t stride = std::max<int64_t>(1, spec.numel / 12);
      for (int64_t i = 0; i < spec.numel; i += stride) {
        float& w = arena.data()[spec.offset + i];
        const float saved = w;
        const float eps = 1e-3f;  // small enough to rarely straddle a ReLU kink
        w = saved + eps;
        const double up = Loss(*model, backend, xn, r, dropout_seed);
        w = saved - eps;
        const double down = Loss(*model, backend, xn, r, dropout_seed);
        w = saved;
        const double fd = (up - down) / (2.0 * eps);
        const double analytic = grads[spec.offset + i];
        CAPTURE(i, fd, analytic);
        // fp32 forward: the difference quotient carries ~1e-6/eps of rounding, and eps^2
        // curvature terms; the analytic gradient is exact up to fp32 rounding.
        REQUIRE(std::abs(fd - analytic) <= 2e-3 + 2e-2 * std::abs(analytic));
        ++checked;
      }
    }
    // At least 12 elements of every trainable tensor (all of a smaller one).
    REQUIRE(checked >= least);
    REQUIRE(checked >= 16);
  }
}

TEST_CASE("Backward matches finite differences for every architecture", "[unit][model][train]") {
  CheckFiniteDifferences(/*dropout=*/0.0f, /*dropout_seed=*/std::nullopt);
}

TEST_CASE("With dropout, Backward matches finite differences under the same masks",
          "[unit][model][train]") {
  CheckFiniteDifferences(/*dropout=*/0.3f, /*dropout_seed=*/1234);
}

TEST_CASE("The oneDNN backend's gradients match the reference backend's", "[unit][model][train]") {
  ReferenceBackend reference;
  auto dnnl = DnnlBackend::Create({});
  REQUIRE(dnnl.ok());
  const float dropout = GENERATE(0.0f, 0.3f);
  CAPTURE(dropout);
  for (const ModelConfig& config : Variants(dropout)) {
    CAPTURE(config.name());
    auto model = Build(config, 21);
    const std::vector<float> xn = Random(kB * kT * kF, 22);
    const std::vector<float> r = Random(kB * model->num_outputs(), 23);
    const std::optional<uint64_t> seed = 77;
    const std::vector<float> want = Gradients(*model, reference, xn, r, seed);
    const std::vector<float> got = Gradients(*model, **dnnl, xn, r, seed);
    for (const ParameterSpec& spec : model->parameters().specs()) {
      for (int64_t i = 0; i < spec.numel; ++i) {
        const float a = got[spec.offset + i], b = want[spec.offset + i];
        CAPTURE(spec.name, i, a, b);
        REQUIRE(std::abs(a - b) <= 1e-5f + 1e-4f * std::abs(b));
      }
    }
  }
}

// ForwardTrain's output and Backward's gradients on `tape`, as one vector.
std::vector<float> OutputAndGradients(const Forecaster& model, Backend& backend,
                                      const std::vector<float>& xn, const std::vector<float>& r,
                                      TrainingTape& tape) {
  std::vector<float> result(r.size() + static_cast<size_t>(model.parameters().size()));
  REQUIRE(model.ForwardTrain(backend, result.data(), xn.data(), kB, tape).ok());
  REQUIRE(model.Backward(backend, result.data() + r.size(), r.data(), tape).ok());
  return result;
}

TEST_CASE("Dropout 0, or no dropout seed, is training without dropout bit for bit",
          "[unit][model][train]") {
  ReferenceBackend backend;
  const std::vector<ModelConfig> off = Variants(0.0f), on = Variants(0.3f);
  for (size_t v = 0; v < off.size(); ++v) {
    CAPTURE(off[v].name());
    // An MLP without hidden layers has no dropout site.
    if (off[v].has_mlp() && off[v].mlp().num_layers() == 0) continue;
    auto model = Build(off[v], 4);
    auto dropping = Build(on[v], 4);  // the same weights
    const std::vector<float> xn = Random(kB * kT * kF, 12);
    const std::vector<float> r = Random(kB * model->num_outputs(), 13);
    TrainingTape plain, seeded, unseeded, dropped;
    seeded.dropout_seed = 99;
    dropped.dropout_seed = 99;
    const std::vector<float> want = OutputAndGradients(*model, backend, xn, r, plain);
    // p = 0 with a seed: no mask is drawn.
    REQUIRE(OutputAndGradients(*model, backend, xn, r, seeded) == want);
    // p > 0 without a seed: evaluation, no dropout.
    REQUIRE(OutputAndGradients(*dropping, backend, xn, r, unseeded) == want);
    // p > 0 with a seed does drop.
    REQUIRE(OutputAndGradients(*dropping, backend, xn, r, dropped) != want);
  }
}

TEST_CASE("Forward (inference) ignores the dropout setting", "[unit][model][train]") {
  ReferenceBackend backend;
  const std::vector<ModelConfig> off = Variants(0.0f), on = Variants(0.5f);
  for (size_t v = 0; v < off.size(); ++v) {
    CAPTURE(off[v].name());
    auto model = Build(off[v], 6);
    auto dropping = Build(on[v], 6);
    const std::vector<float> x = Random(kB * kT * kF, 14);
    std::vector<float> want(static_cast<size_t>(kB * model->num_outputs())), got(want.size());
    Workspace ws;
    REQUIRE(model->Forward(backend, want.data(), x.data(), kB, ws).ok());
    REQUIRE(dropping->Forward(backend, got.data(), x.data(), kB, ws).ok());
    REQUIRE(got == want);
  }
}

TEST_CASE("Dropout masks: inverted-dropout values, a fraction near p, fixed by seed and site",
          "[unit][model][train]") {
  constexpr int64_t kN = 4096;
  for (const float p : {0.1f, 0.3f, 0.5f}) {
    CAPTURE(p);
    TrainingTape tape;
    REQUIRE(*tape.DropoutMask(kN, p, 0) == nullptr);  // no seed: no dropout
    int64_t dropped = 0, total = 0;
    for (uint64_t seed = 0; seed < 25; ++seed) {
      tape.Reset();
      tape.dropout_seed = seed;
      REQUIRE(*tape.DropoutMask(kN, 0.0f, 0) == nullptr);  // p = 0: nothing drawn
      for (uint64_t site = 0; site < 4; ++site) {
        const float* mask = *tape.DropoutMask(kN, p, site);
        REQUIRE(mask != nullptr);
        for (int64_t i = 0; i < kN; ++i) {
          REQUIRE((mask[i] == 0.0f || mask[i] == 1.0f / (1.0f - p)));
          dropped += mask[i] == 0.0f;
        }
        total += kN;
      }
    }
    // 409,600 draws: the standard deviation of the fraction is below 1e-3; the masks are
    // fixed by the seeds, so this band is a property of them, not a flaky bound.
    const double fraction = static_cast<double>(dropped) / static_cast<double>(total);
    CAPTURE(fraction);
    REQUIRE(std::abs(fraction - p) < 0.01);
  }

  // The same seed and site give the same mask; another site or seed another one.
  TrainingTape a, b;
  a.dropout_seed = 5;
  b.dropout_seed = 5;
  const float* a0 = *a.DropoutMask(kN, 0.3f, 0);
  const float* b0 = *b.DropoutMask(kN, 0.3f, 0);
  const float* a1 = *a.DropoutMask(kN, 0.3f, 1);
  REQUIRE(std::equal(a0, a0 + kN, b0));
  REQUIRE(!std::equal(a0, a0 + kN, a1));
  b.Reset();
  b.dropout_seed = 6;
  const float* other = *b.DropoutMask(kN, 0.3f, 0);
  REQUIRE(!std::equal(a0, a0 + kN, other));
}

TEST_CASE("Backward without a ForwardTrain is refused", "[unit][model][train]") {
  ReferenceBackend backend;
  auto model = Build(Variants()[0], 1);
  std::vector<float> grads(static_cast<size_t>(model->parameters().size()));
  std::vector<float> dout(static_cast<size_t>(kB * model->num_outputs()), 1.0f);
  TrainingTape tape;
  REQUIRE(model->Backward(backend, grads.data(), dout.data(), tape).code() ==
          absl::StatusCode::kFailedPrecondition);
}

// The tape holds the forward's own tape struct, so a backward of another architecture finds
// none of its own type instead of reading the other's buffers.
TEST_CASE("Backward on a tape another architecture's ForwardTrain filled is refused",
          "[unit][model][train]") {
  ReferenceBackend backend;
  const std::vector<ModelConfig> variants = Variants();
  auto recurrent = Build(variants.front(), 1);
  const auto first_transformer = std::find_if(
      variants.begin(), variants.end(), [](const ModelConfig& c) { return c.has_transformer(); });
  REQUIRE(first_transformer != variants.end());
  auto transformer = Build(*first_transformer, 2);
  REQUIRE(transformer->config().has_transformer());
  REQUIRE(recurrent->num_outputs() == transformer->num_outputs());
  const std::vector<float> xn = Random(int64_t{kB} * kT * kF, 3);
  std::vector<float> out(static_cast<size_t>(kB * transformer->num_outputs()));
  TrainingTape tape;
  REQUIRE(transformer->ForwardTrain(backend, out.data(), xn.data(), kB, tape).ok());
  std::vector<float> grads(static_cast<size_t>(recurrent->parameters().size()));
  const std::vector<float> dout(out.size(), 1.0f);
  REQUIRE(recurrent->Backward(backend, grads.data(), dout.data(), tape).code() ==
          absl::StatusCode::kFailedPrecondition);
  std::vector<float> transformer_grads(static_cast<size_t>(transformer->parameters().size()));
  REQUIRE(transformer->Backward(backend, transformer_grads.data(), dout.data(), tape).ok());
}

}  // namespace
}  // namespace forecastd
