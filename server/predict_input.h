// Turns a request's window tensor into the (B, T, F) floats a model takes, checking it
// against the model and the server's limits: rank, lookback, features, batch bounds, the
// request's estimated memory (before anything is allocated), byte size and finiteness. Used
// by the admission step (server/predict_call.h) that every front door goes through, so all
// refuse the same inputs with the same messages. Stateless; thread-safe.
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
  // The server's --max-batch-rows: windows per request whatever the model; 0: none.
  int64_t server_max_batch_rows = 0;
  // The server's --max-request-memory-bytes, against EstimatePredictBytes; 0: none.
  int64_t max_request_bytes = 0;
  bool allow_non_finite = false;
};

// What serving B windows of `model` in one request takes at most, in bytes: the request's
// inputs (B, T, F), which stay in its message until the batch is staged, the forecasts in the
// reply and the model's forward-pass workspace for B rows (Forecaster::WorkspaceFloats), all
// float32. The request message itself is bounded by --max-message-bytes before it is parsed.
// B must be >= 0 and small enough that the product fits in int64 (callers check the batch
// bounds first).
int64_t EstimatePredictBytes(const Forecaster& model, int64_t B);

// The shape and limit checks of CheckWindows alone, for windows the server does not read
// (in a client's device memory): the number of floats, B * T * F.
absl::StatusOr<int64_t> CheckWindowShape(const Forecaster& model, absl::Span<const int64_t> shape,
                                         const WindowLimits& limits);

// Checks a window tensor without copying it and returns its (B, T, F) float32 bytes: `raw`
// itself or the bytes of `values`. Exactly one of `raw` (little-endian float32 bytes) and
// `values` may be non-empty. INVALID_ARGUMENT naming what is wrong: "inputs have shape ...";
// batches above the model's or the server's row limit are INVALID_ARGUMENT, a request above the
// memory limit RESOURCE_EXHAUSTED, each checked before anything else is read.
absl::StatusOr<absl::string_view> CheckWindows(const Forecaster& model,
                                               absl::Span<const int64_t> shape,
                                               absl::string_view raw,
                                               absl::Span<const float> values,
                                               const WindowLimits& limits);

// CheckWindows, then the windows copied out as floats (for callers that keep no message).
absl::StatusOr<std::vector<float>> DecodeWindows(const Forecaster& model,
                                                 absl::Span<const int64_t> shape,
                                                 absl::string_view raw,
                                                 absl::Span<const float> values,
                                                 const WindowLimits& limits);

// The little-endian float32 bytes of `values`.
std::string EncodeFloats(absl::Span<const float> values);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_PREDICT_INPUT_H_
