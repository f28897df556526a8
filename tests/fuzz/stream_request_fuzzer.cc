// Fuzz target: the tick decoder of tick streams. The input is a serialized
// forecastd.v1.StreamRequest, as a client's bytes arrive on Forecaster.Stream; its ticks go
// through DecodeStreamTicks (server/stream_input.h) and CheckTickRows (engine/serving/
// tick_rows.h) for F = 1 + (key length mod 4) features, with non-finite values allowed when the
// key starts with "nan"; then its future values and timestamps through CheckTickCovariates for
// P = 1 + (key length mod 3) forecast steps of (key length / 4 mod 3) future-known covariates,
// with calendar features when the key contains "t". Checks that a request is either refused
// with INVALID_ARGUMENT and a message, or decoded into n * F floats equal to the ones sent,
// finite unless allowed, with P * covariates future values and, with calendar features,
// n + P increasing timestamps.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "engine/serving/tick_rows.h"
#include "forecastd/v1/forecaster.pb.h"
#include "server/stream_input.h"
#include "tests/fuzz/fuzz_check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  forecastd::v1::StreamRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  if (!request.has_ticks()) return 0;
  const int64_t F = 1 + static_cast<int64_t>(request.key().size() % 4);
  const bool allow_non_finite = absl::StartsWith(request.key(), "nan");
  std::vector<float> values;
  bool raw = false;
  const absl::Status decoded = forecastd::DecodeStreamTicks(request.ticks(), &values, &raw);
  if (!decoded.ok()) {
    FUZZ_CHECK(decoded.code() == absl::StatusCode::kInvalidArgument && !decoded.message().empty(),
               decoded.ToString());
    return 0;
  }
  FUZZ_CHECK(raw == !request.ticks().raw().empty(), "raw flag");
  if (raw) {
    FUZZ_CHECK(values.size() * sizeof(float) == request.ticks().raw().size(), "raw size");
    FUZZ_CHECK(
        std::memcmp(values.data(), request.ticks().raw().data(), request.ticks().raw().size()) == 0,
        "raw bytes");
  } else {
    FUZZ_CHECK(static_cast<int>(values.size()) == request.ticks().values_size(), "values size");
  }
  const absl::StatusOr<int64_t> rows = forecastd::CheckTickRows(values, F, allow_non_finite);
  if (!rows.ok()) {
    FUZZ_CHECK(rows.status().code() == absl::StatusCode::kInvalidArgument &&
                   !rows.status().message().empty(),
               rows.status().ToString());
    return 0;
  }
  FUZZ_CHECK(*rows >= 1 && *rows * F == static_cast<int64_t>(values.size()), "row count");
  if (!allow_non_finite) {
    for (const float v : values) FUZZ_CHECK(std::isfinite(v), "non-finite value accepted");
  }
  const forecastd::TickCovariateSizes sizes{
      .horizon = 1 + static_cast<int64_t>(request.key().size() % 3),
      .future_inputs = static_cast<int64_t>(request.key().size() / 4 % 3),
      .timestamps = absl::StrContains(request.key(), "t")};
  const auto& ticks = request.ticks();
  const absl::Span<const float> future(ticks.future().data(),
                                       static_cast<size_t>(ticks.future_size()));
  const absl::Span<const int64_t> times(ticks.timestamps().data(),
                                        static_cast<size_t>(ticks.timestamps_size()));
  const absl::Status covariates =
      forecastd::CheckTickCovariates(*rows, future, times, sizes, allow_non_finite);
  if (!covariates.ok()) {
    FUZZ_CHECK(
        covariates.code() == absl::StatusCode::kInvalidArgument && !covariates.message().empty(),
        covariates.ToString());
    return 0;
  }
  FUZZ_CHECK(static_cast<int64_t>(future.size()) == sizes.horizon * sizes.future_inputs,
             "future count");
  FUZZ_CHECK(static_cast<int64_t>(times.size()) == (sizes.timestamps ? *rows + sizes.horizon : 0),
             "timestamp count");
  for (size_t i = 1; i < times.size(); ++i) FUZZ_CHECK(times[i] > times[i - 1], "times increase");
  if (!allow_non_finite) {
    for (const float v : future) FUZZ_CHECK(std::isfinite(v), "non-finite future value accepted");
  }
  return 0;
}
