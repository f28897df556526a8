// Fuzz target: the tick decoder of tick streams. The input is a serialized
// forecastd.v1.StreamRequest, as a client's bytes arrive on Forecaster.Stream; its ticks go
// through DecodeStreamTicks (server/stream_input.h) and CheckTickRows (engine/serving/
// tick_rows.h) for F = 1 + (key length mod 4) features, with non-finite values allowed when the
// key starts with "nan". Checks that a request is either refused with INVALID_ARGUMENT and a
// message, or decoded into n * F floats equal to the ones sent, finite unless allowed.
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
  return 0;
}
