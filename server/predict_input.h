// Turns a request's window tensor into the (B, T, F) floats a model takes, checking it
// against the model and the server's limits: rank, lookback, features, batch bounds, the
// request's estimated memory (before anything is allocated), byte size and finiteness; and,
// for a model with covariates or series (HasRecordExtras), what the request carries beside the
// windows (future-known covariates, timestamps, series names) into the model's input records.
// Used by the admission step (server/predict_call.h) that every front door goes through, so all
// refuse the same inputs with the same messages. Stateless; thread-safe.
#ifndef FORECASTD_SERVER_PREDICT_INPUT_H_
#define FORECASTD_SERVER_PREDICT_INPUT_H_

#include <cstdint>
#include <optional>
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
// inputs (B, T, F), which stay in its message until the batch is staged, the input records
// built from them for a model with covariates or series, the forecasts in the reply and the
// model's forward-pass workspace for B rows (Forecaster::WorkspaceFloats), all float32. The
// request message itself is bounded by --max-message-bytes before it is parsed.
// B must be >= 0 and small enough that the product fits in int64 (callers check the batch
// bounds first).
int64_t EstimatePredictBytes(const Forecaster& model, int64_t B);

// The shape and limit checks of CheckWindows alone, for windows the server does not read
// (in a client's device memory): the number of floats, B * T * F. F here, as in every window a
// request sends, is the model's input columns (NumInputColumns: its feature_names; the calendar
// features are computed from the request's timestamps).
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

// A float32 tensor as a request carries it: `raw` (little-endian float32 bytes) or `values`,
// not both.
struct FloatTensorView {
  absl::Span<const int64_t> shape;
  absl::string_view raw;
  absl::Span<const float> values;
};

// What a request carries beside its windows for a model with covariates or series (see
// PredictRequest in forecaster.proto); each nullopt when the request does not send it.
struct RequestExtras {
  // (B, P, covariates.future) raw future-known covariates.
  std::optional<FloatTensorView> future;
  // (B, T + P) Unix seconds: each window's rows, then its forecast steps; increasing.
  std::optional<std::vector<int64_t>> timestamps;
  // B series names, or one for every window.
  std::optional<std::vector<std::string>> series;
  // How the front door names each in messages.
  std::string future_name = "future";
  std::string timestamps_name = "timestamps";
  std::string series_name = "series";

  bool empty() const { return !future && !timestamps && !series; }
};

// INVALID_ARGUMENT naming the first of `extras` that `model` takes none of (a model without
// future-known covariates, calendar features or series).
absl::Status CheckNoExtras(const Forecaster& model, const RequestExtras& extras);

// The B input records (B, Forecaster::input_floats()) of a request to a model with covariates or
// series, from its windows (B, T, NumInputColumns), checked by CheckWindows, and `extras`:
// INVALID_ARGUMENT naming the field that is missing, sent to a model that takes none of it, or
// malformed (the future-known covariates are checked as windows are: shape, one encoding, size,
// finiteness unless allow_non_finite; timestamps: exactly B * (T + P), increasing per window;
// series: 1 or B names); NOT_FOUND for a series the model does not know.
absl::StatusOr<std::vector<float>> BuildRequestRecords(const Forecaster& model, int64_t B,
                                                       absl::string_view windows,
                                                       const RequestExtras& extras,
                                                       bool allow_non_finite);

// The little-endian float32 bytes of `values`.
std::string EncodeFloats(absl::Span<const float> values);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_PREDICT_INPUT_H_
