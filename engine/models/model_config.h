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
// F: the model's input features: feature_names, then two per calendar feature
// (FeatureColumnNames).
int NumFeatures(const ModelConfig& config);
// The columns a request's window carries per row: feature_names (calendar features are computed
// from the request's timestamps).
int NumInputColumns(const ModelConfig& config);
// The F feature names: feature_names, then "<calendar>_sin", "<calendar>_cos" per calendar
// feature.
std::vector<std::string> FeatureColumnNames(const ModelConfig& config);
// Fk: the future-known features: covariates.future, then the calendar features' columns.
int NumFutureFeatures(const ModelConfig& config);
// For each future-known feature, its column in the F features.
std::vector<int> FutureFeatureIndices(const ModelConfig& config);
// The columns of a request's future tensor (B, P, covariates.future).
int NumFutureInputColumns(const ModelConfig& config);
// Whether a forecast needs timestamps (calendar features).
bool NeedsTimestamps(const ModelConfig& config);
// S: the series the model knows (ModelConfig.series); 0 for one series.
int NumSeries(const ModelConfig& config);
// Static covariates per series.
int NumStaticFeatures(const ModelConfig& config);
// The name of a calendar feature ("hour_of_day"), without "CALENDAR_".
std::string CalendarName(v1::CalendarFeature feature);
// Floats of one input record, the unit Forecaster::Forward reads per window: the window
// (T, F), then with future-known features their values for the forecast steps (P, Fk), then for
// a model with series the window's series index (one float). T * F for a model without either.
int64_t InputRecordFloats(const ModelConfig& config);
// Whether InputRecordFloats is more than the window: future-known features or series.
bool HasRecordExtras(const ModelConfig& config);
int NumTargets(const ModelConfig& config);  // targets
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
// a unidirectional LSTM or GRU without window scaling, future-known features or series.
bool SupportsStateMode(const ModelConfig& config);
// The mode tick streams of a validated config run in: STATE or WINDOW (never UNSPECIFIED).
v1::StreamingConfig::Mode StreamMode(const ModelConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_MODEL_CONFIG_H_
