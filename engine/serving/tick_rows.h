// Validation of a tick stream's new observations: rows of F raw features, finite unless the
// server allows otherwise. The StreamHub checks every Ticks call with it; the fuzz target of the
// stream decoder (tests/fuzz/stream_request_fuzzer.cc) holds it to its contract. Stateless;
// thread-safe.
#ifndef FORECASTD_ENGINE_SERVING_TICK_ROWS_H_
#define FORECASTD_ENGINE_SERVING_TICK_ROWS_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace forecastd {

// The number of rows in `values` (n >= 1 rows of F >= 1 features), or INVALID_ARGUMENT saying
// what is wrong: no values, a count that is not a multiple of F, or (unless allow_non_finite)
// the first non-finite value with its row and feature.
absl::StatusOr<int64_t> CheckTickRows(absl::Span<const float> values, int64_t F,
                                      bool allow_non_finite);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_TICK_ROWS_H_
