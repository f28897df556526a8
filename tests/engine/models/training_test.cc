// The forecasters' training pair, ForwardTrain and Backward, on every architecture variant:
// the training forward computes what inference computes, Backward's parameter gradients match
// central finite differences of the forward, and the oneDNN backend's gradients match the
// reference backend's. (Parity with PyTorch's gradients is tests/golden/train_golden_test.cc.)
#include <algorithm>
#include <cmath>
#include <memory>
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

std::vector<ModelConfig> Variants() {
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

// L = sum(out * R): its gradient with respect to out is R.
double Loss(const Forecaster& model, Backend& backend, const std::vector<float>& xn,
            const std::vector<float>& r) {
  std::vector<float> out(r.size());
  TrainingTape tape;
  REQUIRE(model.ForwardTrain(backend, out.data(), xn.data(), kB, tape).ok());
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += double{out[i]} * r[i];
  return sum;
}

std::vector<float> Gradients(const Forecaster& model, Backend& backend,
                             const std::vector<float>& xn, const std::vector<float>& r) {
  std::vector<float> out(r.size());
  std::vector<float> grads(static_cast<size_t>(model.parameters().size()), NAN);
  TrainingTape tape;
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

TEST_CASE("Backward matches finite differences for every architecture", "[unit][model][train]") {
  ReferenceBackend backend;
  for (const ModelConfig& config : Variants()) {
    CAPTURE(config.name());
    auto model = Build(config, 3);
    const std::vector<float> xn = Random(kB * kT * kF, 9);
    const std::vector<float> r = Random(kB * model->num_outputs(), 10);
    const std::vector<float> grads = Gradients(*model, backend, xn, r);
    ParameterArena& arena = model->parameters();
    int checked = 0;
    for (const ParameterSpec& spec : arena.specs()) {
      CAPTURE(spec.name);
      if (!Forecaster::IsTrainable(spec)) {
        for (int64_t i = 0; i < spec.numel; ++i) REQUIRE(grads[spec.offset + i] == 0.0f);
        continue;
      }
      // Every element of small tensors, a spread of a larger one's.
      const int64_t stride = std::max<int64_t>(1, spec.numel / 12);
      for (int64_t i = 0; i < spec.numel; i += stride) {
        float& w = arena.data()[spec.offset + i];
        const float saved = w;
        const float eps = 1e-3f;  // small enough to rarely straddle a ReLU kink
        w = saved + eps;
        const double up = Loss(*model, backend, xn, r);
        w = saved - eps;
        const double down = Loss(*model, backend, xn, r);
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
    REQUIRE(checked > 50);
  }
}

TEST_CASE("The oneDNN backend's gradients match the reference backend's", "[unit][model][train]") {
  ReferenceBackend reference;
  auto dnnl = DnnlBackend::Create({});
  REQUIRE(dnnl.ok());
  for (const ModelConfig& config : Variants()) {
    CAPTURE(config.name());
    auto model = Build(config, 21);
    const std::vector<float> xn = Random(kB * kT * kF, 22);
    const std::vector<float> r = Random(kB * model->num_outputs(), 23);
    const std::vector<float> want = Gradients(*model, reference, xn, r);
    const std::vector<float> got = Gradients(*model, **dnnl, xn, r);
    for (const ParameterSpec& spec : model->parameters().specs()) {
      for (int64_t i = 0; i < spec.numel; ++i) {
        const float a = got[spec.offset + i], b = want[spec.offset + i];
        CAPTURE(spec.name, i, a, b);
        REQUIRE(std::abs(a - b) <= 1e-5f + 1e-4f * std::abs(b));
      }
    }
  }
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

}  // namespace
}  // namespace forecastd
