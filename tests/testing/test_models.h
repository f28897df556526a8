// Small random models for the tests of the serving path (model_registry_test,
// kserve_service_test): a Forecaster with random weights, input windows that suit it, and the
// forecast the reference backend makes of them, to hold a served forecast against. Each
// function draws from its own generator; thread-safe.
#ifndef FORECASTD_TESTS_TESTING_TEST_MODELS_H_
#define FORECASTD_TESTS_TESTING_TEST_MODELS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"

namespace forecastd::testing {

// A Forecaster of `config` (which must have two features and be valid) whose weights `seed`
// draws uniformly from [-0.8, 0.8], with normaliser statistics near RandomWindows' features:
// means 10 and 100, stds 2 and 25.
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
