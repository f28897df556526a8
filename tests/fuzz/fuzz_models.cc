#include "tests/fuzz/fuzz_models.h"

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "engine/models/model_config.h"

namespace forecastd::fuzz {
namespace {

// A fixture that does not build is a bug in this file, not a finding: say so and stop.
std::unique_ptr<Forecaster> Build(const std::string& json) {
  absl::StatusOr<ModelConfig> config = ParseModelConfigJson(json);
  absl::StatusOr<std::unique_ptr<Forecaster>> model =
      config.ok() ? Forecaster::Create(*config) : config.status();
  if (!model.ok()) {
    std::fprintf(stderr, "fuzz fixture model does not build: %s\n",
                 std::string(model.status().message()).c_str());
    std::abort();
  }
  return *std::move(model);
}

}  // namespace

const Forecaster& LstmModel() {
  static const Forecaster* const model = Build(R"json({
    "name": "lstm_uni_l1", "lookback": 7, "horizon": 4,
    "featureNames": ["load", "temperature", "price"], "targetNames": ["load", "price"],
    "lstm": {"hiddenSize": 5, "numLayers": 1},
    "normalization": "NORMALIZATION_STANDARD",
    "batching": {"maxBatchSize": 8}
  })json")
                                             .release();
  return *model;
}

const Forecaster& TransformerModel() {
  static const Forecaster* const model = Build(R"json({
    "name": "transformer_quantile", "lookback": 7, "horizon": 4,
    "featureNames": ["load", "temperature", "price"], "targetNames": ["load", "temperature"],
    "quantiles": [0.1, 0.5, 0.9],
    "transformer": {"dModel": 8, "numHeads": 2, "numLayers": 2, "dimFeedforward": 16,
                    "activation": "ACTIVATION_GELU", "normFirst": true, "dropout": 0.1},
    "normalization": "NORMALIZATION_STANDARD",
    "batching": {"maxBatchSize": 1000000}
  })json")
                                             .release();
  return *model;
}

const Forecaster& CovariateModel() {
  static const Forecaster* const model = Build(R"json({
    "name": "gru_covariates", "lookback": 5, "horizon": 3,
    "featureNames": ["load", "temperature", "holiday"], "targetNames": ["load"],
    "gru": {"hiddenSize": 4, "numLayers": 1},
    "normalization": "NORMALIZATION_STANDARD",
    "covariates": {"future": ["holiday"], "calendar": ["CALENDAR_HOUR_OF_DAY"]},
    "series": ["north", "south"],
    "batching": {"maxBatchSize": 8}
  })json")
                                             .release();
  return *model;
}

int64_t MaxBatchRows(const Forecaster& model) {
  const int32_t configured = model.config().batching().max_batch_size();
  return configured == 0 ? 32 : configured;
}

}  // namespace forecastd::fuzz
