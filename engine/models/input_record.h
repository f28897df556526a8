// What a forecast reads per window (Forecaster::input_floats()): the input record built from
// what a request carries, the calendar features computed from timestamps
// (ModelConfig.covariates.calendar) and the index of a named series (ModelConfig.series). Every
// front door (Predict, KServe, tick streams, the CLI) and the training data build records here,
// so the layout is written once. Stateless functions; thread-safe.
#ifndef FORECASTD_ENGINE_MODELS_INPUT_RECORD_H_
#define FORECASTD_ENGINE_MODELS_INPUT_RECORD_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/models/model_config.h"

namespace forecastd {

// The phase u in [0, 1) of a time (Unix seconds, UTC) in a calendar feature's period (see
// CalendarFeature in model_config.proto).
double CalendarPhase(v1::CalendarFeature feature, int64_t unix_seconds);

// The 2 * calendar features values of one time, in FeatureColumnNames order after
// feature_names: sin(2 pi u), cos(2 pi u) per calendar feature (computed in double, rounded).
void CalendarValues(const ModelConfig& config, int64_t unix_seconds, float* out);

// The index of `name` in ModelConfig.series; NOT_FOUND naming the model's series (the first few)
// when it is not one.
absl::StatusOr<int> SeriesIndex(const ModelConfig& config, absl::string_view name);

// What a request carries for B windows, all row-major host memory:
struct RequestWindows {
  int64_t batch = 0;                // B
  const float* window = nullptr;    // (B, T, NumInputColumns) raw observations
  const float* future = nullptr;    // (B, P, NumFutureInputColumns); nullptr when that is 0
  const int64_t* times = nullptr;   // (B, T + P) Unix seconds; only with NeedsTimestamps
  const int32_t* series = nullptr;  // (B) indices in ModelConfig.series; only with series
};

// B input records (B, InputRecordFloats(config)) into `records`: each window's rows with the
// calendar features of its times appended, the future-known values of its P forecast steps
// (covariates.future, then the calendar features of the forecast steps' times) and its series
// index. INVALID_ARGUMENT when a pointer the config needs is missing, or a window's times do not
// increase.
absl::Status BuildInputRecords(const ModelConfig& config, const RequestWindows& request,
                               float* records);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_INPUT_RECORD_H_
