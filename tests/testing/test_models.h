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

// `name`: a one-layer GRU (hidden size 4) over "price", "volume" and "event", forecasting
// "price" `horizon` steps ahead from `lookback` steps, with the future-known covariate "event",
// the calendar feature hour of day and the two series "AAPL" and "MSFT"; tick streams in window
// mode. Its requests carry windows (B, T, 3), future values (B, P, 1), timestamps (B, T + P) and
// series names.
ModelConfig CovariateConfig(const std::string& name, int64_t lookback, int64_t horizon);

// A Forecaster of a CovariateConfig whose weights `seed` draws uniformly from [-0.8, 0.8], with
// each series' normaliser statistics near CovariateRequest's values.
std::unique_ptr<Forecaster> RandomCovariateModel(const ModelConfig& config, uint32_t seed);

// What a request to a CovariateConfig model carries for `rows` windows, drawn by `seed`:
// windows (rows, T, 3) (price, volume as RandomWindows', event 0 or 1), future (rows, P, 1)
// event values, timestamps (rows, T + P) hourly from a per-window start, and series names
// alternating "AAPL", "MSFT".
struct CovariateRequest {
  std::vector<float> windows;
  std::vector<float> future;
  std::vector<int64_t> timestamps;
  std::vector<std::string> series;
};
CovariateRequest RandomCovariateRequest(const Forecaster& model, int64_t rows, uint32_t seed);

// The input records BuildInputRecords makes of `request` (the test fails if it cannot).
std::vector<float> CovariateRecords(const Forecaster& model, const CovariateRequest& request);

// (rows, lookback, 2) windows that `seed` draws: feature 0 from N(10, 2), feature 1 from
// N(100, 25).
std::vector<float> RandomWindows(int64_t rows, int64_t lookback, uint32_t seed);

// The forecast of `rows` windows by `model` on the reference backend; the test fails if the
// forward pass does.
std::vector<float> ReferenceForward(const Forecaster& model, const std::vector<float>& input,
                                    int64_t rows);

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_TEST_MODELS_H_
