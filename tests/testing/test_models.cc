#include "tests/testing/test_models.h"

#include <random>

#include "backends/reference_backend.h"
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
