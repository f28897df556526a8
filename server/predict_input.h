// Turns a request's window tensor into the (B, T, F) floats a model takes, checking it
// against the model: rank, lookback, features, batch bounds, byte size and finiteness. Shared
// by the Forecaster and the KServe services so both refuse the same inputs with the same
// messages. Stateless; thread-safe.
#ifndef FORECASTD_SERVER_PREDICT_INPUT_H_
#define FORECASTD_SERVER_PREDICT_INPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/models/forecaster.h"

namespace forecastd {

struct WindowLimits {
  int64_t max_batch_rows = 0;  // the model's max_batch_size
  bool allow_non_finite = false;
};

// Exactly one of `raw` (little-endian float32 bytes) and `values` may be non-empty.
// INVALID_ARGUMENT naming what is wrong: "inputs must have shape [B, 48, 3] ...".
absl::StatusOr<std::vector<float>> DecodeWindows(const Forecaster& model,
                                                 absl::Span<const int64_t> shape,
                                                 absl::string_view raw,
                                                 absl::Span<const float> values,
                                                 const WindowLimits& limits);

// The little-endian float32 bytes of `values`.
std::string EncodeFloats(absl::Span<const float> values);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_PREDICT_INPUT_H_
