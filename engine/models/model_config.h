// Reading, validating and writing ModelConfig (proto/forecastd/v1/model_config.proto), the
// schema of `models/<name>/config.json`. Every number a model relies on is checked here
// once, so the models can trust their config. Stateless; thread-safe.
#ifndef FORECASTD_ENGINE_MODELS_MODEL_CONFIG_H_
#define FORECASTD_ENGINE_MODELS_MODEL_CONFIG_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "forecastd/v1/model_config.pb.h"

namespace forecastd {

using v1::ModelConfig;

// Parses protobuf JSON; unknown fields are errors, so a misspelt setting is never ignored.
absl::StatusOr<ModelConfig> ParseModelConfigJson(const std::string& json);
// Reads and parses `path`; errors name the file.
absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path);
// The config as indented protobuf JSON, as config.json stores it.
absl::StatusOr<std::string> ModelConfigToJson(const ModelConfig& config);

// INVALID_ARGUMENT naming the first field that is missing, out of range or inconsistent.
absl::Status ValidateModelConfig(const ModelConfig& config);

// Derived sizes, for a validated config.
int NumFeatures(const ModelConfig& config);  // F
int NumTargets(const ModelConfig& config);   // targets
// Q: outputs per target and step; the number of quantiles, or 1 for point forecasts.
int NumQuantiles(const ModelConfig& config);
// For each target, its column in the input features.
std::vector<int> TargetFeatureIndices(const ModelConfig& config);
float LayerNormEps(const v1::TransformerConfig& config);
// Whether the model scales each window by its own statistics or forecasts changes
// (ModelConfig.window_scaling: a kind other than NONE, or forecast_change).
bool HasWindowScaling(const ModelConfig& config);
// window_scaling.eps, or its default 1e-5 when 0.
float WindowScalingEps(const ModelConfig& config);
// Whether tick streams may keep the model's recurrent state (StreamingConfig::STREAM_MODE_STATE):
// a unidirectional LSTM or GRU without window scaling.
bool SupportsStateMode(const ModelConfig& config);
// The mode tick streams of a validated config run in: STATE or WINDOW (never UNSPECIFIED).
v1::StreamingConfig::Mode StreamMode(const ModelConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_MODEL_CONFIG_H_
