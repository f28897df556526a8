#include "engine/train/chronological_split.h"

#include <algorithm>
#include <cmath>

namespace forecastd {
namespace {

// Slack, in rows, for the split point, so that a fraction whose binary value is a hair off its
// decimal (0.2f of 5 rows: 5 * (1 - 0.2000000030) = 3.99999998) still splits where the decimal
// says.
constexpr double kSplitSlackRows = 1e-6;

}  // namespace

int64_t TrainRowsFor(int64_t rows, double fraction) {
  const double n = std::floor(static_cast<double>(rows) * (1.0 - fraction) + kSplitSlackRows);
  return std::clamp(static_cast<int64_t>(n), int64_t{0}, rows);
}

int64_t WindowsIn(int64_t part_rows, int64_t window_rows, int64_t stride) {
  return part_rows < window_rows ? 0 : (part_rows - window_rows) / stride + 1;
}

int64_t MinRowsFor(int64_t window_rows, double fraction) {
  const auto ok = [&](int64_t rows) {
    const int64_t n_train = TrainRowsFor(rows, fraction);
    return n_train >= window_rows && (fraction == 0.0 || rows - n_train >= window_rows);
  };
  double estimate = static_cast<double>(window_rows) / (1.0 - fraction);
  if (fraction > 0.0) {
    estimate = std::max({estimate, static_cast<double>(window_rows) / fraction,
                         2.0 * static_cast<double>(window_rows)});
  }
  if (!(estimate < 1e15)) return static_cast<int64_t>(std::min(estimate, 9e18));
  int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(estimate) - 2);
  while (!ok(rows)) ++rows;
  while (rows > 1 && ok(rows - 1)) --rows;
  return rows;
}

}  // namespace forecastd
