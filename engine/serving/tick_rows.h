// Validation of a tick stream's new observations: rows of F raw features, finite unless the
// server allows otherwise, and, for a model with future-known covariates or calendar features
// (window mode), the future values and timestamps that come with them. The StreamHub checks
// every Ticks call with it; the fuzz target of the stream decoder
// (tests/fuzz/stream_request_fuzzer.cc) holds it to its contract. Stateless; thread-safe.
#ifndef FORECASTD_ENGINE_SERVING_TICK_ROWS_H_
#define FORECASTD_ENGINE_SERVING_TICK_ROWS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace forecastd {

// The number of rows in `values` (n >= 1 rows of F >= 1 features), or INVALID_ARGUMENT saying
// what is wrong: no values, a count that is not a multiple of F, or (unless allow_non_finite)
// the first non-finite value with its row and feature.
absl::StatusOr<int64_t> CheckTickRows(absl::Span<const float> values, int64_t F,
                                      bool allow_non_finite);

// What one tick message of a model must carry beside its rows (StreamTicks.future and
// .timestamps); all zero for a model without future-known covariates or calendar features.
struct TickCovariateSizes {
  int64_t horizon = 0;        // P: the forecast steps after the message's last row
  int64_t future_inputs = 0;  // FkIn: covariates.future, values per forecast step
  bool timestamps = false;    // calendar features: each row's time and the P steps'
};

// INVALID_ARGUMENT naming the field at fault when a message of `rows` rows carries `future`
// and `timestamps` other than `sizes` asks: future values sent to a model without future-known
// covariates or missing for one that has them, a count other than P * FkIn, (unless
// allow_non_finite) a non-finite future value; timestamps sent to a model without calendar
// features or missing for one that has them, a count other than rows + P, or times that do not
// increase.
absl::Status CheckTickCovariates(int64_t rows, absl::Span<const float> future,
                                 absl::Span<const int64_t> timestamps,
                                 const TickCovariateSizes& sizes, bool allow_non_finite);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_TICK_ROWS_H_
