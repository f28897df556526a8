// Forecaster::Step, the state mode of tick streams: a unidirectional LSTM or GRU fed x_1..x_N one
// step at a time from zero states forecasts what Forward does on the window x_1..x_N (a model of
// lookback N with the same weights), on the reference and the oneDNN backends, for N = 1, T and
// 5T, several streams at once in scattered slots, within 1e-5; with and without the normaliser,
// with quantiles, and for more streams than one tile of the CPU's one-call step (and enough
// for it to pack the weights).
#include <algorithm>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/models/forecaster.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

constexpr int kF = 3, kT = 6, kP = 2;

ModelConfig Config(bool lstm, int layers, int hidden, int lookback, bool bidirectional = false) {
  ModelConfig c;
  c.set_name(lstm ? "lstm" : "gru");
  c.set_lookback(lookback);
  c.set_horizon(kP);
  for (int f = 0; f < kF; ++f) c.add_feature_names(absl::StrCat("f", f));
  c.add_target_names("f2");
  c.add_target_names("f0");
  v1::RecurrentConfig* rnn = lstm ? c.mutable_lstm() : c.mutable_gru();
  rnn->set_hidden_size(hidden);
  rnn->set_num_layers(layers);
  rnn->set_bidirectional(bidirectional);
  return c;
}

std::vector<float> Random(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// A model with random weights and normaliser statistics.
std::unique_ptr<Forecaster> Build(const ModelConfig& config, uint32_t seed) {
  auto model = Forecaster::Create(config).value();
  ParameterArena& p = model->parameters();
  const std::vector<float> w = Random(p.size(), seed, 0.4f);
  std::copy(w.begin(), w.end(), p.data());
  if (config.normalization() == v1::NORMALIZATION_NONE) return model;
  float* mean = p.at("normalizer.mean");
  float* std = p.at("normalizer.std");
  for (int f = 0; f < kF; ++f) {
    mean[f] = 1.0f + f;
    std[f] = 0.5f + 0.25f * f;
  }
  return model;
}

// The same weights in a model of lookback N.
std::unique_ptr<Forecaster> WithLookback(const Forecaster& model, int N) {
  ModelConfig config = model.config();
  config.set_lookback(N);
  auto copy = Forecaster::Create(config).value();
  REQUIRE(copy->parameters().size() == model.parameters().size());
  std::copy_n(model.parameters().data(), model.parameters().size(), copy->parameters().data());
  return copy;
}

void RequireNear(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f + 1e-5f * std::fabs(want[i]));
  }
}

void CheckStepsEqualWindows(Backend& backend, const ModelConfig& config, int64_t streams = 3) {
  const auto model = Build(config, 7);
  const int64_t S = model->StateFloats();
  const int64_t H = config.has_lstm() ? config.lstm().hidden_size() : config.gru().hidden_size();
  const int64_t L = config.has_lstm() ? config.lstm().num_layers() : config.gru().num_layers();
  REQUIRE(S == L * H * (config.has_lstm() ? 2 : 1));
  // The streams in scattered slots of a slab of 2 * streams + 1, the others holding junk that
  // must stay.
  const int64_t kB = streams, kSlots = 2 * streams + 1;
  std::vector<int32_t> slots;
  // 2 and the odd kSlots are coprime: distinct slots.
  for (int64_t b = 0; b < kB; ++b) slots.push_back(static_cast<int32_t>((5 + 2 * b) % kSlots));
  REQUIRE(std::set<int32_t>(slots.begin(), slots.end()).size() == slots.size());
  std::vector<float> slab = Random(kSlots * S, 3, 1.0f);
  const std::vector<float> untouched = slab;
  for (const int32_t slot : slots) std::fill_n(slab.begin() + slot * S, S, 0.0f);
  const int N = 5 * kT;
  const std::vector<float> series = Random(kB * N * kF, 11, 2.0f);  // (B, N, F)
  Workspace workspace;
  std::vector<float> x(kB * kF), out(static_cast<size_t>(kB * model->num_outputs()));
  for (int n = 1; n <= N; ++n) {
    for (int64_t b = 0; b < kB; ++b) {
      std::copy_n(series.begin() + (b * N + n - 1) * kF, kF, x.begin() + b * kF);
    }
    REQUIRE(model
                ->Step(backend, out.data(), x.data(), slab.data(), slots.data(), kB, workspace,
                       ForwardPlacement{})
                .ok());
    if (n != 1 && n != kT && n != N) continue;
    CAPTURE(n);
    // The reference: Forward of a model of lookback n over x_1..x_n.
    const auto windowed = WithLookback(*model, n);
    std::vector<float> windows(kB * n * kF);
    for (int64_t b = 0; b < kB; ++b) {
      std::copy_n(series.begin() + b * N * kF, n * kF, windows.begin() + b * n * kF);
    }
    std::vector<float> want(out.size());
    Workspace forward_workspace;
    REQUIRE(windowed->Forward(backend, want.data(), windows.data(), kB, forward_workspace).ok());
    RequireNear(out, want);
  }
  for (int64_t slot = 0; slot < kSlots; ++slot) {
    if (std::find(slots.begin(), slots.end(), slot) != slots.end()) continue;
    for (int64_t i = 0; i < S; ++i) REQUIRE(slab[slot * S + i] == untouched[slot * S + i]);
  }
}

TEST_CASE("Step from zero states forecasts what Forward does on the ticks so far",
          "[unit][model][stream]") {
  ReferenceBackend reference;
  auto dnnl = DnnlBackend::Create({}).value();
  for (const bool lstm : {true, false}) {
    for (const int layers : {1, 2, 3}) {
      const ModelConfig config = Config(lstm, layers, /*hidden=*/5, kT);
      CAPTURE(lstm, layers);
      CheckStepsEqualWindows(reference, config);
      CheckStepsEqualWindows(*dnnl, config);
    }
  }
}

TEST_CASE("Step forecasts quantiles, unstandardised models and many streams as Forward does",
          "[unit][model][stream]") {
  ReferenceBackend reference;
  auto dnnl = DnnlBackend::Create({}).value();
  ModelConfig quantiles = Config(/*lstm=*/true, /*layers=*/2, /*hidden=*/9, kT);
  for (const float q : {0.1f, 0.5f, 0.9f}) quantiles.add_quantiles(q);
  ModelConfig raw = Config(/*lstm=*/false, /*layers=*/2, /*hidden=*/17, kT);
  raw.set_normalization(v1::NORMALIZATION_NONE);
  for (const ModelConfig& config : {quantiles, raw}) {
    // 9 streams: two full tiles of four and one of one; 37: enough for packed weights.
    for (const int64_t streams : {int64_t{1}, int64_t{9}, int64_t{37}}) {
      CAPTURE(config.name(), config.quantiles_size(), streams);
      CheckStepsEqualWindows(reference, config, streams);
      CheckStepsEqualWindows(*dnnl, config, streams);
    }
  }
}

TEST_CASE("Models without a state mode say so", "[unit][model][stream]") {
  ReferenceBackend reference;
  const auto bidirectional = Build(Config(true, 1, 4, kT, /*bidirectional=*/true), 1);
  REQUIRE(bidirectional->StateFloats() == 0);
  std::vector<float> x(kF), out(bidirectional->num_outputs()), slab(16);
  const int32_t slot = 0;
  Workspace workspace;
  const absl::Status status = bidirectional->Step(reference, out.data(), x.data(), slab.data(),
                                                  &slot, 1, workspace, ForwardPlacement{});
  REQUIRE(status.code() == absl::StatusCode::kUnimplemented);
  REQUIRE(std::string(status.message()).find("state mode") != std::string::npos);

  ModelConfig config = Config(true, 1, 4, kT, /*bidirectional=*/true);
  config.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  const absl::Status invalid = ValidateModelConfig(config);
  REQUIRE(invalid.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(invalid.message()).find("streaming.mode") != std::string::npos);
}

}  // namespace
}  // namespace forecastd
