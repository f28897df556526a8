#include "engine/serving/tick_rows.h"

#include <cmath>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace forecastd {

absl::StatusOr<int64_t> CheckTickRows(absl::Span<const float> values, int64_t F,
                                      bool allow_non_finite) {
  const int64_t n = static_cast<int64_t>(values.size());
  if (F < 1 || n == 0 || n % F != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ticks of ", n, " values; expected rows of ", F, " features"));
  }
  if (!allow_non_finite) {
    for (int64_t i = 0; i < n; ++i) {
      if (!std::isfinite(values[static_cast<size_t>(i)])) {
        return absl::InvalidArgumentError(absl::StrCat("tick value ", i, " is not finite (row ",
                                                       i / F, ", feature ", i % F, ")"));
      }
    }
  }
  return n / F;
}

absl::Status CheckTickCovariates(int64_t rows, absl::Span<const float> future,
                                 absl::Span<const int64_t> timestamps,
                                 const TickCovariateSizes& sizes, bool allow_non_finite) {
  const int64_t P = sizes.horizon, FkIn = sizes.future_inputs;
  const int64_t n_future = static_cast<int64_t>(future.size());
  if (FkIn == 0 && n_future > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ticks carry ", n_future,
                     " future values; the model has no future-known covariates: send none"));
  }
  if (FkIn > 0 && n_future != P * FkIn) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ticks carry ", n_future, " future values; the model's future-known covariates need ",
        P * FkIn, " (", P, " forecast steps after the last row, ", FkIn, " values each)"));
  }
  if (!allow_non_finite) {
    for (int64_t i = 0; i < n_future; ++i) {
      if (!std::isfinite(future[static_cast<size_t>(i)])) {
        return absl::InvalidArgumentError(absl::StrCat("future value ", i, " is not finite (step ",
                                                       i / FkIn, ", covariate ", i % FkIn, ")"));
      }
    }
  }
  const int64_t n_times = static_cast<int64_t>(timestamps.size());
  if (!sizes.timestamps && n_times > 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ticks carry ", n_times, " timestamps; the model has no calendar features: send none"));
  }
  if (sizes.timestamps) {
    if (n_times != rows + P) {
      return absl::InvalidArgumentError(absl::StrCat(
          "ticks carry ", n_times, " timestamps; the model's calendar features need ", rows + P,
          " (each of the ", rows, " rows' times, then the ", P, " forecast steps', Unix seconds)"));
    }
    for (int64_t i = 1; i < n_times; ++i) {
      if (timestamps[static_cast<size_t>(i)] <= timestamps[static_cast<size_t>(i - 1)]) {
        return absl::InvalidArgumentError(
            absl::StrCat("tick timestamps must increase: timestamp ", i, " is ",
                         timestamps[static_cast<size_t>(i)], ", after ",
                         timestamps[static_cast<size_t>(i - 1)]));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
