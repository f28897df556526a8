#include "engine/models/forecaster.h"

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/reference_backend.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

ModelConfig Base(int F, int T, int P) {
  ModelConfig c;
  c.set_name("m");
  c.set_lookback(T);
  c.set_horizon(P);
  for (int f = 0; f < F; ++f) c.add_feature_names(absl::StrCat("f", f));
  c.add_target_names("f1");
  c.add_target_names("f0");
  return c;
}

void FillRandom(ParameterArena& arena, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  for (int64_t i = 0; i < arena.size(); ++i) arena.data()[i] = dist(gen);
}

TEST_CASE("Recurrent forecasters lay out PyTorch's parameter names and shapes", "[unit][model]") {
  ModelConfig c = Base(3, 7, 4);
  c.mutable_lstm()->set_hidden_size(5);
  c.mutable_lstm()->set_num_layers(2);
  c.mutable_lstm()->set_bidirectional(true);
  auto model = Forecaster::Create(c).value();
  const ParameterArena& p = model->parameters();
  REQUIRE(p.Find("rnn.weight_ih_l0").value()->shape == std::vector<int64_t>{20, 3});
  REQUIRE(p.Find("rnn.weight_ih_l1_reverse").value()->shape == std::vector<int64_t>{20, 10});
  REQUIRE(p.Find("rnn.bias_hh_l1_reverse").value()->shape == std::vector<int64_t>{20});
  REQUIRE(p.Find("head.weight").value()->shape == std::vector<int64_t>{8, 10});
  REQUIRE(p.Find("normalizer.std").value()->shape == std::vector<int64_t>{3});
  REQUIRE(p.Find("rnn.weight_ih_l2").status().code() == absl::StatusCode::kNotFound);
  // nn.LSTM(3, 5, 2, bidirectional) has 2*(20*3+20*5+40) + 2*(20*10+20*5+40) parameters.
  REQUIRE(p.size() == 2 * (60 + 100 + 40) + 2 * (200 + 100 + 40) + 8 * 10 + 8 + 3 + 3);
}

TEST_CASE("Create refuses a valid config with more than kMaxParameters parameters",
          "[unit][model]") {
  // Each field is within its bound, but together they ask for about 3.3e12 parameters (13 TB),
  // which a Train request could otherwise make the daemon try to allocate.
  ModelConfig c = Base(3, 7, 4);
  c.mutable_lstm()->set_hidden_size(32768);
  c.mutable_lstm()->set_num_layers(128);
  c.mutable_lstm()->set_bidirectional(true);
  REQUIRE(ValidateModelConfig(c).ok());
  const auto model = Forecaster::Create(c);
  REQUIRE(model.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(model.status().message(), "parameters; at most 134217728"));
  c.mutable_lstm()->set_hidden_size(64);
  c.mutable_lstm()->set_num_layers(2);
  CHECK(Forecaster::Create(c).ok());
}

TEST_CASE("Forward de-standardises the targets it forecasts", "[unit][model]") {
  ModelConfig c = Base(3, 6, 2);
  c.mutable_gru()->set_hidden_size(4);
  c.mutable_gru()->set_num_layers(1);
  auto model = Forecaster::Create(c).value();
  FillRandom(model->parameters(), 7);
  // With a zero head the standardised forecast is 0, so the raw one is each target's mean.
  const auto* head_w = model->parameters().Find("head.weight").value();
  const auto* head_b = model->parameters().Find("head.bias").value();
  std::fill_n(model->parameters().data() + head_w->offset, head_w->numel, 0.0f);
  std::fill_n(model->parameters().data() + head_b->offset, head_b->numel, 0.0f);
  float* mean = model->parameters().at("normalizer.mean");
  float* std = model->parameters().at("normalizer.std");
  mean[0] = 10.0f, mean[1] = -3.0f, mean[2] = 0.5f;
  std[0] = 2.0f, std[1] = 4.0f, std[2] = 1.0f;

  std::vector<float> inp(2 * 6 * 3, 1.25f), out(2 * 2 * 2, 0.0f);
  ReferenceBackend backend;
  Workspace ws;
  REQUIRE(model->Forward(backend, out.data(), inp.data(), 2, ws).ok());
  for (int i = 0; i < 4; ++i) {
    REQUIRE(out[i * 2 + 0] == -3.0f);  // target f1
    REQUIRE(out[i * 2 + 1] == 10.0f);  // target f0
  }
}

TEST_CASE("Forward rejects an empty batch and reuses its workspace", "[unit][model]") {
  ModelConfig c = Base(2, 5, 3);
  auto* t = c.mutable_transformer();
  t->set_d_model(8);
  t->set_num_heads(2);
  t->set_num_layers(2);
  t->set_dim_feedforward(16);
  t->set_norm_first(true);
  auto model = Forecaster::Create(c).value();
  FillRandom(model->parameters(), 11);
  ReferenceBackend backend;
  Workspace ws;
  std::vector<float> inp(4 * 5 * 2), out(4 * 3 * 2), again(4 * 3 * 2);
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  for (float& v : inp) v = dist(gen);
  REQUIRE(model->Forward(backend, out.data(), inp.data(), 0, ws).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(model->Forward(backend, out.data(), inp.data(), 4, ws).ok());
  REQUIRE(model->Forward(backend, again.data(), inp.data(), 4, ws).ok());
  REQUIRE(out == again);
  // Each window is forecast on its own: batch row 2 alone gives the same numbers.
  std::vector<float> one(3 * 2);
  REQUIRE(model->Forward(backend, one.data(), inp.data() + 2 * 5 * 2, 1, ws).ok());
  for (int i = 0; i < 6; ++i) REQUIRE(one[i] == Approx(out[2 * 6 + i]).epsilon(1e-6));
}

// Windows (B, T, F) whose features sit at level `level` (raw units) plus noise.
std::vector<float> LevelWindows(int64_t B, int T, int F, float level, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(B * T * F));
  for (float& v : x) v = level + dist(gen);
  return x;
}

TEST_CASE("Window scaling makes a forecast follow its window's level", "[unit][model]") {
  // With each window centred on its own statistics, adding c to every value of a window adds c
  // to its forecast; without window scaling a level far outside the normaliser's range gives a
  // forecast that does not move with it.
  for (const auto kind :
       {v1::WindowScaling::WINDOW_SCALING_MEAN_STD, v1::WindowScaling::WINDOW_SCALING_LAST_VALUE}) {
    for (const bool affine : {false, true}) {
      ModelConfig c = Base(3, 6, 2);
      c.mutable_lstm()->set_hidden_size(4);
      c.mutable_lstm()->set_num_layers(2);
      c.mutable_window_scaling()->set_kind(kind);
      c.mutable_window_scaling()->set_affine(affine);
      c.mutable_window_scaling()->set_forecast_change(kind ==
                                                      v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
      CAPTURE(c.ShortDebugString());
      auto model = Forecaster::Create(c).value();
      FillRandom(model->parameters(), 5);
      float* std = model->parameters().at("normalizer.std");
      for (int f = 0; f < 3; ++f) std[f] = 1.0f + 0.5f * static_cast<float>(f);
      if (affine) {
        float* gain = model->parameters().at("window_scaling.weight");
        for (int f = 0; f < 3; ++f) gain[f] = 0.8f + 0.2f * static_cast<float>(f);
      }
      ReferenceBackend backend;
      Workspace ws;
      const std::vector<float> low = LevelWindows(2, 6, 3, 0.0f, 9);
      std::vector<float> high = low;
      for (float& v : high) v += 1000.0f;
      std::vector<float> out_low(2 * 2 * 2), out_high(2 * 2 * 2);
      REQUIRE(model->Forward(backend, out_low.data(), low.data(), 2, ws).ok());
      REQUIRE(model->Forward(backend, out_high.data(), high.data(), 2, ws).ok());
      for (size_t i = 0; i < out_low.size(); ++i) {
        REQUIRE(out_high[i] - out_low[i] == Approx(1000.0f).margin(2e-3));
      }
    }
  }
  // The same weights without window scaling: the forecast does not follow.
  ModelConfig c = Base(3, 6, 2);
  c.mutable_lstm()->set_hidden_size(4);
  c.mutable_lstm()->set_num_layers(2);
  auto model = Forecaster::Create(c).value();
  FillRandom(model->parameters(), 5);
  ReferenceBackend backend;
  Workspace ws;
  const std::vector<float> low = LevelWindows(1, 6, 3, 0.0f, 9);
  std::vector<float> high = low;
  for (float& v : high) v += 1000.0f;
  std::vector<float> out_low(2 * 2), out_high(2 * 2);
  REQUIRE(model->Forward(backend, out_low.data(), low.data(), 1, ws).ok());
  REQUIRE(model->Forward(backend, out_high.data(), high.data(), 1, ws).ok());
  REQUIRE(std::abs(out_high[0] - out_low[0] - 1000.0f) > 100.0f);
}

TEST_CASE("forecast_change adds each target's last observed value", "[unit][model]") {
  // With a zero head the model forecasts no change: every step repeats the window's last value.
  ModelConfig c = Base(3, 5, 3);
  c.mutable_gru()->set_hidden_size(4);
  c.mutable_gru()->set_num_layers(1);
  c.mutable_window_scaling()->set_forecast_change(true);
  auto model = Forecaster::Create(c).value();
  FillRandom(model->parameters(), 3);
  for (const char* name : {"head.weight", "head.bias"}) {
    const auto* spec = model->parameters().Find(name).value();
    std::fill_n(model->parameters().data() + spec->offset, spec->numel, 0.0f);
  }
  float* std = model->parameters().at("normalizer.std");
  for (int f = 0; f < 3; ++f) std[f] = 2.0f;
  const std::vector<float> x = LevelWindows(2, 5, 3, 40.0f, 4);
  std::vector<float> out(2 * 3 * 2);
  ReferenceBackend backend;
  Workspace ws;
  REQUIRE(model->Forward(backend, out.data(), x.data(), 2, ws).ok());
  for (int b = 0; b < 2; ++b) {
    const float* last = x.data() + (b * 5 + 4) * 3;
    for (int p = 0; p < 3; ++p) {
      REQUIRE(out[(b * 3 + p) * 2 + 0] == Approx(last[1]).epsilon(1e-6));  // target f1
      REQUIRE(out[(b * 3 + p) * 2 + 1] == Approx(last[0]).epsilon(1e-6));  // target f0
    }
  }
}

TEST_CASE("A model with window scaling has no state mode", "[unit][model]") {
  ModelConfig c = Base(3, 5, 2);
  c.mutable_lstm()->set_hidden_size(4);
  c.mutable_lstm()->set_num_layers(1);
  c.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_LAST_VALUE);
  REQUIRE_FALSE(SupportsStateMode(c));
  auto model = Forecaster::Create(c).value();
  REQUIRE(model->StateFloats() == 0);
  const absl::Status stateful = model->SupportsStatefulTraining();
  REQUIRE(stateful.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(stateful.message(), "window_scaling"));
  c.clear_window_scaling();
  REQUIRE(SupportsStateMode(c));
}
}  // namespace
}  // namespace forecastd

namespace forecastd {
namespace {

TEST_CASE("Forward fits in the workspace it asks for at any batch size", "[unit][model]") {
  // Workspace::Alloc aborts the process on overflow, so reaching the end is the assertion.
  std::vector<ModelConfig> configs;
  for (const bool pre : {false, true}) {
    ModelConfig c = Base(3, 9, 4);
    auto* t = c.mutable_transformer();
    t->set_d_model(32);
    t->set_num_heads(4);
    t->set_num_layers(2);
    t->set_dim_feedforward(16);
    t->set_norm_first(pre);
    configs.push_back(c);
  }
  ModelConfig lstm = Base(3, 9, 4);
  lstm.mutable_lstm()->set_hidden_size(16);
  lstm.mutable_lstm()->set_num_layers(2);
  lstm.mutable_lstm()->set_bidirectional(true);
  configs.push_back(lstm);
  // Window scaling, with and without the normaliser's buffer to scale in place.
  for (const bool standard : {false, true}) {
    ModelConfig scaled = lstm;
    scaled.set_normalization(standard ? v1::NORMALIZATION_STANDARD : v1::NORMALIZATION_NONE);
    scaled.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
    scaled.mutable_window_scaling()->set_affine(true);
    scaled.mutable_window_scaling()->set_forecast_change(true);
    configs.push_back(scaled);
  }
  ModelConfig changes = configs[0];
  changes.mutable_window_scaling()->set_forecast_change(true);
  configs.push_back(changes);
  ReferenceBackend backend;
  for (const ModelConfig& config : configs) {
    auto model = Forecaster::Create(config).value();
    FillRandom(model->parameters(), 3);
    for (const int64_t B : {1, 7, 32, 64}) {
      CAPTURE(B);
      std::vector<float> inp(static_cast<size_t>(B * 9 * 3), 0.5f);
      std::vector<float> out(static_cast<size_t>(B * model->num_outputs()));
      Workspace ws;  // fresh: sized by WorkspaceFloats(B) alone
      REQUIRE(model->Forward(backend, out.data(), inp.data(), B, ws).ok());
    }
  }
}

}  // namespace
}  // namespace forecastd
