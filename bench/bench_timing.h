// What the bench programs (forecast_bench, gpu_bench) share: a summary of per-call times and
// its JSON fields. Header-only; stateless.
#ifndef FORECASTD_BENCH_BENCH_TIMING_H_
#define FORECASTD_BENCH_BENCH_TIMING_H_

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_format.h"

namespace forecastd::bench {

struct Timing {
  double median_us, p90_us, mean_us, min_us;
};

// The summary of per-call times in microseconds; `us` must not be empty.
inline Timing Summarize(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const size_t n = us.size();
  const double median = n % 2 == 1 ? us[n / 2] : 0.5 * (us[n / 2 - 1] + us[n / 2]);
  const size_t p90 = static_cast<size_t>(std::max<double>(0.0, std::ceil(0.9 * n) - 1));
  return Timing{median, us[p90], std::accumulate(us.begin(), us.end(), 0.0) / n, us[0]};
}

// "median_us":...,"p90_us":...,"mean_us":...,"min_us":... (no braces).
inline std::string TimingJson(const Timing& t) {
  return absl::StrFormat(R"("median_us":%.3f,"p90_us":%.3f,"mean_us":%.3f,"min_us":%.3f)",
                         t.median_us, t.p90_us, t.mean_us, t.min_us);
}

}  // namespace forecastd::bench

#endif  // FORECASTD_BENCH_BENCH_TIMING_H_
