#include "server/predict_input.h"

#include <cmath>
#include <cstring>
#include <limits>

#include "absl/base/config.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

static_assert(ABSL_IS_LITTLE_ENDIAN, "raw tensors are little-endian float32");

}  // namespace

absl::StatusOr<int64_t> CheckWindowShape(const Forecaster& model, absl::Span<const int64_t> shape,
                                         const WindowLimits& limits) {
  const int64_t T = model.lookback(), F = model.num_features();
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
  const int64_t T = model.lookback(), F = model.num_features();
  if (!raw.empty() && !values.empty()) {
    return absl::InvalidArgumentError("send the inputs either as raw bytes or as values, not both");
  }
  absl::string_view bytes = raw;
  if (!raw.empty()) {
    if (static_cast<int64_t>(raw.size()) != n * 4) {
      return absl::InvalidArgumentError(absl::StrCat("raw inputs hold ", raw.size(),
                                                     " bytes; shape [", absl::StrJoin(shape, ", "),
                                                     "] of float32 needs ", n * 4));
    }
  } else {
    if (static_cast<int64_t>(values.size()) != n) {
      return absl::InvalidArgumentError(absl::StrCat(values.size(), " input values; shape [",
                                                     absl::StrJoin(shape, ", "), "] needs ", n));
    }
    bytes = absl::string_view(reinterpret_cast<const char*>(values.data()),
                              values.size() * sizeof(float));
  }
  if (!limits.allow_non_finite) {
    for (int64_t i = 0; i < n; ++i) {
      float x;  // raw bytes need not be aligned for float
      std::memcpy(&x, bytes.data() + i * 4, sizeof(x));
      if (!std::isfinite(x)) {
        const int64_t b = i / (T * F), t = (i / F) % T, f = i % F;
        return absl::InvalidArgumentError(
            absl::StrCat("input [", b, ", ", t, ", ", f, "] (feature '",
                         model.config().feature_names(static_cast<int>(f)), "') is ", x,
                         "; only finite values are accepted"));
      }
    }
  }
  return bytes;
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
  const int64_t T = model.lookback(), F = model.num_features();
  const int64_t floats = B * T * F + B * model.num_outputs() + model.WorkspaceFloats(B);
  return floats * static_cast<int64_t>(sizeof(float));
}

std::string EncodeFloats(absl::Span<const float> values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

}  // namespace forecastd
