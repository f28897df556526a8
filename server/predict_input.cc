#include "server/predict_input.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/base/config.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/models/input_record.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

static_assert(ABSL_IS_LITTLE_ENDIAN, "raw tensors are little-endian float32");

// Float32 bytes as floats: in place when they are aligned for float, else copied into `copy`.
const float* AlignedFloats(absl::string_view bytes, std::vector<float>& copy) {
  if (reinterpret_cast<uintptr_t>(bytes.data()) % alignof(float) == 0) {
    return reinterpret_cast<const float*>(bytes.data());
  }
  copy.resize(bytes.size() / sizeof(float));
  std::memcpy(copy.data(), bytes.data(), copy.size() * sizeof(float));
  return copy.data();
}

// How CheckFloatTensor names a tensor in its messages: the texts around the sizes, and what
// element i is (its index and column).
struct TensorWording {
  absl::string_view both;        // the message for raw bytes and values sent together
  absl::string_view raw_before;  // before the raw byte count
  absl::string_view raw_after;   // after it
  absl::string_view values_before;
  absl::string_view values_after;
  absl::FunctionRef<std::string(int64_t i)> element;
};

// The float32 bytes of a tensor of n values of `shape`, sent as `raw` bytes or as `values` (one
// of the two): INVALID_ARGUMENT when both are sent, when their size is not n values, or, unless
// allow_non_finite, naming the first value that is not finite.
absl::StatusOr<absl::string_view> CheckFloatTensor(absl::Span<const int64_t> shape, int64_t n,
                                                   absl::string_view raw,
                                                   absl::Span<const float> values,
                                                   bool allow_non_finite,
                                                   const TensorWording& wording) {
  if (!raw.empty() && !values.empty()) return absl::InvalidArgumentError(wording.both);
  absl::string_view bytes = raw;
  if (!raw.empty()) {
    if (static_cast<int64_t>(raw.size()) != n * 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(wording.raw_before, raw.size(), wording.raw_after, "; shape [",
                       absl::StrJoin(shape, ", "), "] of float32 needs ", n * 4));
    }
  } else {
    if (static_cast<int64_t>(values.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(wording.values_before, values.size(),
                                                     wording.values_after, "; shape [",
                                                     absl::StrJoin(shape, ", "), "] needs ", n));
    }
    bytes = absl::string_view(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
  }
  if (!allow_non_finite) {
    for (int64_t i = 0; i < n; ++i) {
      float x;  // raw bytes need not be aligned for float
      std::memcpy(&x, bytes.data() + i * 4, sizeof(x));
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrCat(wording.element(i), " is ", x, "; only finite values are accepted"));
      }
    }
  }
  return bytes;
}

// The future-known covariates (B, P, FkIn) as float32 bytes, checked as CheckWindows checks
// windows.
absl::StatusOr<absl::string_view> CheckFuture(const Forecaster& model, int64_t B,
                                              const FloatTensorView& future,
                                              const std::string& name, bool allow_non_finite) {
  const ModelConfig& config = model.config();
  const int64_t P = model.horizon(), FkIn = NumFutureInputColumns(config);
  if (future.shape.size() != 3 || future.shape[0] != B || future.shape[1] != P ||
      future.shape[2] != FkIn) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, " has shape [", absl::StrJoin(future.shape, ", "), "]; model '",
                     config.name(), "' takes [", B, ", ", P, ", ", FkIn, "] (for each of the ", B,
                     " windows, the ", P, " forecast steps' values of its future-known covariates ",
                     absl::StrJoin(config.covariates().future(), ", "), ")"));
  }
  const std::string both =
      absl::StrCat("send ", name, " either as raw bytes or as values, not both");
  const std::string holds = absl::StrCat(name, " holds ");
  const auto element = [&](int64_t i) {
    const int64_t b = i / (P * FkIn), p = (i / FkIn) % P, k = i % FkIn;
    return absl::StrCat(name, " [", b, ", ", p, ", ", k, "] (covariate '",
                        config.covariates().future(static_cast<int>(k)), "')");
  };
  return CheckFloatTensor(future.shape, B * P * FkIn, future.raw, future.values, allow_non_finite,
                          {both, holds, " raw bytes", holds, " values", element});
}

}  // namespace

absl::StatusOr<int64_t> CheckWindowShape(const Forecaster& model, absl::Span<const int64_t> shape,
                                         const WindowLimits& limits) {
  const int64_t T = model.lookback(), F = NumInputColumns(model.config());
  const std::string expected =
      absl::StrCat("[B, ", T, ", ", F, "] (B windows of lookback ", T, " with ", F, " features)");
  if (shape.size() != 3 || shape[1] != T || shape[2] != F) {
    return absl::InvalidArgumentError(absl::StrCat("inputs have shape [",
                                                   absl::StrJoin(shape, ", "), "]; model '",
                                                   model.config().name(), "' takes ", expected));
  }
  const int64_t B = shape[0];
  if (B < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("inputs are empty: the batch dimension is ", B, "; send at least one window"));
  }
  if (limits.max_batch_rows > 0 && B > limits.max_batch_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", B, " windows is above the max_batch_size ", limits.max_batch_rows,
                     " of model '", model.config().name(), "'"));
  }
  if (limits.server_max_batch_rows > 0 && B > limits.server_max_batch_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", B, " windows is above this server's limit of ",
                     limits.server_max_batch_rows, " per request (--max-batch-rows)"));
  }
  if (limits.max_request_bytes > 0) {
    // Guards the estimate's arithmetic when neither row limit is set.
    constexpr int64_t kMaxEstimatedRows = int64_t{1} << 31;
    const int64_t bytes = B > kMaxEstimatedRows ? std::numeric_limits<int64_t>::max()
                                                : EstimatePredictBytes(model, B);
    if (bytes > limits.max_request_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("batch of ", B, " windows needs an estimated ", bytes,
                       " bytes of memory (inputs, forecasts and activations), above this "
                       "server's limit of ",
                       limits.max_request_bytes,
                       " per request (--max-request-memory-bytes); send fewer windows"));
    }
  }
  return B * T * F;
}

absl::StatusOr<absl::string_view> CheckWindows(const Forecaster& model,
                                               absl::Span<const int64_t> shape,
                                               absl::string_view raw,
                                               absl::Span<const float> values,
                                               const WindowLimits& limits) {
  ASSIGN_OR_RETURN(const int64_t n, CheckWindowShape(model, shape, limits));
  const int64_t T = model.lookback(), F = NumInputColumns(model.config());
  const auto element = [&](int64_t i) {
    const int64_t b = i / (T * F), t = (i / F) % T, f = i % F;
    return absl::StrCat("input [", b, ", ", t, ", ", f, "] (feature '",
                        model.config().feature_names(static_cast<int>(f)), "')");
  };
  return CheckFloatTensor(shape, n, raw, values, limits.allow_non_finite,
                          {"send the inputs either as raw bytes or as values, not both",
                           "raw inputs hold ", " bytes", "", " input values", element});
}

absl::StatusOr<std::vector<float>> DecodeWindows(const Forecaster& model,
                                                 absl::Span<const int64_t> shape,
                                                 absl::string_view raw,
                                                 absl::Span<const float> values,
                                                 const WindowLimits& limits) {
  ASSIGN_OR_RETURN(const absl::string_view bytes, CheckWindows(model, shape, raw, values, limits));
  std::vector<float> out(bytes.size() / sizeof(float));
  std::memcpy(out.data(), bytes.data(), bytes.size());
  return out;
}

int64_t EstimatePredictBytes(const Forecaster& model, int64_t B) {
  const int64_t T = model.lookback(), F = NumInputColumns(model.config());
  const int64_t records = HasRecordExtras(model.config()) ? B * model.input_floats() : 0;
  const int64_t floats = B * T * F + records + B * model.num_outputs() + model.WorkspaceFloats(B);
  return floats * static_cast<int64_t>(sizeof(float));
}

absl::Status CheckNoExtras(const Forecaster& model, const RequestExtras& extras) {
  const ModelConfig& config = model.config();
  if (extras.future.has_value() && NumFutureInputColumns(config) == 0) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name(),
                                                   "' has no future-known covariates: send no ",
                                                   extras.future_name));
  }
  if (extras.timestamps.has_value() && !NeedsTimestamps(config)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name(), "' has no calendar features: send no ", extras.timestamps_name));
  }
  if (extras.series.has_value() && NumSeries(config) == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", config.name(), "' was trained on one series: send no ", extras.series_name));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<float>> BuildRequestRecords(const Forecaster& model, int64_t B,
                                                       absl::string_view windows,
                                                       const RequestExtras& extras,
                                                       bool allow_non_finite) {
  const ModelConfig& config = model.config();
  const int64_t T = model.lookback(), P = model.horizon();
  RETURN_IF_ERROR(CheckNoExtras(model, extras));
  RequestWindows request;
  request.batch = B;
  std::vector<float> window_copy, future_copy;
  request.window = AlignedFloats(windows, window_copy);
  if (NumFutureInputColumns(config) > 0) {
    if (!extras.future.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat("model '", config.name(), "' has future-known covariates (",
                       absl::StrJoin(config.covariates().future(), ", "), "): send ",
                       extras.future_name, " [", B, ", ", P, ", ", NumFutureInputColumns(config),
                       "], their values for the ", P, " forecast steps of each window"));
    }
    ASSIGN_OR_RETURN(const absl::string_view future,
                     CheckFuture(model, B, *extras.future, extras.future_name, allow_non_finite));
    request.future = AlignedFloats(future, future_copy);
  }
  if (NeedsTimestamps(config)) {
    if (!extras.timestamps.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", config.name(), "' has calendar features: send ", extras.timestamps_name, " [",
          B, ", ", T + P, "], the times of each window's ", T, " rows and ", P,
          " forecast steps (Unix seconds)"));
    }
    const int64_t n = static_cast<int64_t>(extras.timestamps->size());
    if (n != B * (T + P)) {
      return absl::InvalidArgumentError(
          absl::StrCat(extras.timestamps_name, " holds ", n, " values; model '", config.name(),
                       "' takes ", B * (T + P), " for ", B, " windows (", T, " rows and ", P,
                       " forecast steps each, Unix seconds)"));
    }
    request.times = extras.timestamps->data();
  }
  std::vector<int32_t> series;
  if (NumSeries(config) > 0) {
    if (!extras.series.has_value() || extras.series->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", config.name(), "' was trained on ", NumSeries(config), " series: send ",
          extras.series_name, ", the series of each window (", B, " names, or one for all)"));
    }
    const int64_t n = static_cast<int64_t>(extras.series->size());
    if (n != 1 && n != B) {
      return absl::InvalidArgumentError(absl::StrCat(extras.series_name, " holds ", n,
                                                     " names for ", B,
                                                     " windows: send one per window, or one "
                                                     "for all"));
    }
    series.resize(static_cast<size_t>(B));
    for (int64_t b = 0; b < n; ++b) {
      ASSIGN_OR_RETURN(const int index,
                       SeriesIndex(config, (*extras.series)[static_cast<size_t>(b)]));
      series[static_cast<size_t>(b)] = index;
    }
    if (n == 1) std::fill(series.begin(), series.end(), series[0]);
    request.series = series.data();
  }
  std::vector<float> records(static_cast<size_t>(B * model.input_floats()));
  if (absl::Status built = BuildInputRecords(config, request, records.data()); !built.ok()) {
    // What BuildInputRecords can still refuse here is a window's times.
    return absl::Status(built.code(), absl::StrCat(extras.timestamps_name, ": ", built.message()));
  }
  return records;
}

std::string EncodeFloats(absl::Span<const float> values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace forecastd
