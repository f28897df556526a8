#include "tests/testing/test_models.h"

#include <algorithm>
#include <random>

#include "backends/reference_backend.h"
#include "engine/models/input_record.h"
#include "tests/testing/catch.h"

namespace forecastd::testing {

ModelConfig SmallGruConfig(const std::string& name, int64_t lookback, int64_t horizon) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(lookback);
  c.set_horizon(horizon);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.mutable_gru()->set_hidden_size(3);
  c.mutable_gru()->set_num_layers(1);
  return c;
}

std::unique_ptr<ModelRegistry> StartCpuRegistry(ModelRegistry::Options options, Backend& backend,
                                                std::unique_ptr<DeviceScheduler>& scheduler,
                                                int workers) {
  DeviceScheduler::Options scheduler_options;
  scheduler_options.num_workers = workers;
  scheduler = DeviceScheduler::Create(scheduler_options).value();
  options.backend = &backend;
  options.scheduler = scheduler.get();
  std::unique_ptr<ModelRegistry> registry = ModelRegistry::Create(options).value();
  REQUIRE(registry->Start().ok());
  return registry;
}

std::unique_ptr<Forecaster> RandomModel(const ModelConfig& config, uint32_t seed) {
  std::unique_ptr<Forecaster> model = Forecaster::Create(config).value();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.8f, 0.8f);
  ParameterArena& p = model->parameters();
  for (int64_t i = 0; i < p.size(); ++i) p.data()[i] = dist(gen);
  float* mean = p.at("normalizer.mean");
  float* std = p.at("normalizer.std");
  mean[0] = 10.0f, mean[1] = 100.0f;
  std[0] = 2.0f, std[1] = 25.0f;
  if (config.window_scaling().affine()) {
    // Gains away from 0, which the forecast divides by.
    float* gain = p.at("window_scaling.weight");
    gain[0] = 1.0f + 0.5f * gain[0], gain[1] = 1.0f + 0.5f * gain[1];
  }
  return model;
}

ModelConfig CovariateConfig(const std::string& name, int64_t lookback, int64_t horizon) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(lookback);
  c.set_horizon(horizon);
  for (const char* feature : {"price", "volume", "event"}) c.add_feature_names(feature);
  c.add_target_names("price");
  c.mutable_gru()->set_hidden_size(4);
  c.mutable_gru()->set_num_layers(1);
  c.mutable_covariates()->add_future("event");
  c.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  c.add_series("AAPL");
  c.add_series("MSFT");
  c.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_WINDOW);
  return c;
}

std::unique_ptr<Forecaster> RandomCovariateModel(const ModelConfig& config, uint32_t seed) {
  absl::StatusOr<std::unique_ptr<Forecaster>> created = Forecaster::Create(config);
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  std::unique_ptr<Forecaster> model = *std::move(created);
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.8f, 0.8f);
  ParameterArena& p = model->parameters();
  for (int64_t i = 0; i < p.size(); ++i) p.data()[i] = dist(gen);
  // Per series (rows) and feature: price, volume, event, hour_of_day_sin, hour_of_day_cos.
  const int F = model->num_features();
  const float means[] = {10.0f, 100.0f, 0.5f, 0.0f, 0.0f};
  const float stds[] = {2.0f, 25.0f, 0.5f, 0.7f, 0.7f};
  REQUIRE(F == 5);
  float* mean = p.at("normalizer.mean");
  float* std = p.at("normalizer.std");
  for (int s = 0; s < std::max(1, NumSeries(config)); ++s) {
    for (int f = 0; f < F; ++f) {
      mean[s * F + f] = means[f] + (f == 0 ? 3.0f * static_cast<float>(s) : 0.0f);
      std[s * F + f] = stds[f] * (1.0f + 0.25f * static_cast<float>(s));
    }
  }
  return model;
}

CovariateRequest RandomCovariateRequest(const Forecaster& model, int64_t rows, uint32_t seed) {
  const int64_t T = model.lookback(), P = model.horizon();
  CovariateRequest request;
  const std::vector<float> base = RandomWindows(rows, T, seed);
  std::mt19937 gen(seed + 1000);
  std::bernoulli_distribution event(0.3);
  for (int64_t i = 0; i < rows * T; ++i) {
    request.windows.push_back(base[static_cast<size_t>(2 * i)]);
    request.windows.push_back(base[static_cast<size_t>(2 * i + 1)]);
    request.windows.push_back(event(gen) ? 1.0f : 0.0f);
  }
  for (int64_t i = 0; i < rows * P; ++i) request.future.push_back(event(gen) ? 1.0f : 0.0f);
  // 2026-03-02 00:00 UTC, then a few hours later per window: the hour-of-day features vary.
  constexpr int64_t kStart = 1772409600;
  for (int64_t b = 0; b < rows; ++b) {
    for (int64_t t = 0; t < T + P; ++t) {
      request.timestamps.push_back(kStart + (5 * b + t) * 3600 +
                                   static_cast<int64_t>(seed % 7) * 600);
    }
    request.series.push_back(b % 2 == 0 ? "AAPL" : "MSFT");
  }
  return request;
}

std::vector<float> CovariateRecords(const Forecaster& model, const CovariateRequest& request) {
  const int64_t B = static_cast<int64_t>(request.series.size());
  std::vector<int32_t> series;
  for (const std::string& name : request.series) {
    absl::StatusOr<int> index = SeriesIndex(model.config(), name);
    REQUIRE(index.ok());
    series.push_back(*index);
  }
  std::vector<float> records(static_cast<size_t>(B * model.input_floats()));
  const absl::Status built = BuildInputRecords(model.config(),
                                               {.batch = B,
                                                .window = request.windows.data(),
                                                .future = request.future.data(),
                                                .times = request.timestamps.data(),
                                                .series = series.data()},
                                               records.data());
  INFO(built.ToString());
  REQUIRE(built.ok());
  return records;
}

std::vector<float> RandomWindows(int64_t rows, int64_t lookback, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  std::vector<float> input(static_cast<size_t>(rows * lookback * 2));
  for (size_t i = 0; i < input.size(); i += 2) {
    input[i] = 10.0f + 2.0f * dist(gen);
    input[i + 1] = 100.0f + 25.0f * dist(gen);
  }
  return input;
}

std::vector<float> ReferenceForward(const Forecaster& model, const std::vector<float>& input,
                                    int64_t rows) {
  ReferenceBackend backend;
  Workspace workspace;
  std::vector<float> out(static_cast<size_t>(rows * model.num_outputs()));
  REQUIRE(model.Forward(backend, out.data(), input.data(), rows, workspace).ok());
  return out;
}

}  // namespace forecastd::testing
