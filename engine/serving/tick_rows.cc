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

}  // namespace forecastd
