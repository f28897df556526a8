// Small random models for the tests of the serving path (model_registry_test,
// kserve_service_test): a Forecaster with random weights, input windows that suit it, and the
// forecast the reference backend makes of them, to hold a served forecast against. Each
// function draws from its own generator; thread-safe.
#ifndef FORECASTD_TESTS_TESTING_TEST_MODELS_H_
#define FORECASTD_TESTS_TESTING_TEST_MODELS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_registry.h"

namespace forecastd::testing {

// `name`: a one-layer GRU (hidden size 3) over the two features "price" and "volume" that
// RandomWindows draws, forecasting "price" `horizon` steps ahead from `lookback` steps.
ModelConfig SmallGruConfig(const std::string& name, int64_t lookback, int64_t horizon);

// A started ModelRegistry serving on the CPU with `backend` and a scheduler of `workers` workers
// made into `scheduler` (both must outlive the registry); `options` gives the repository and the
// rest. The test fails if it cannot start.
std::unique_ptr<ModelRegistry> StartCpuRegistry(ModelRegistry::Options options, Backend& backend,
                                                std::unique_ptr<DeviceScheduler>& scheduler,
                                                int workers = 2);

// A Forecaster of `config` (which must have two features and be valid) whose weights `seed`
// draws uniformly from [-0.8, 0.8], with normaliser statistics near RandomWindows' features:
// means 10 and 100, stds 2 and 25; window scaling's gains (where affine) in [0.6, 1.4].
std::unique_ptr<Forecaster> RandomModel(const ModelConfig& config, uint32_t seed);

// (rows, lookback, 2) windows that `seed` draws: feature 0 from N(10, 2), feature 1 from
// N(100, 25).
std::vector<float> RandomWindows(int64_t rows, int64_t lookback, uint32_t seed);

// The forecast of `rows` windows by `model` on the reference backend; the test fails if the
// forward pass does.
std::vector<float> ReferenceForward(const Forecaster& model, const std::vector<float>& input,
                                    int64_t rows);

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_TEST_MODELS_H_
