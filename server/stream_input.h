// Decoding the ticks of a Forecaster.Stream request (StreamTicks: raw float32 bytes or values)
// into floats; the shape check against the model is CheckTickRows (engine/serving/tick_rows.h).
// Shared by the stream call and its fuzz target. Stateless; thread-safe.
#ifndef FORECASTD_SERVER_STREAM_INPUT_H_
#define FORECASTD_SERVER_STREAM_INPUT_H_

#include <vector>

#include "absl/status/status.h"
#include "forecastd/v1/forecaster.pb.h"

namespace forecastd {

// `values` = the ticks' floats; `raw` = whether they came as raw bytes (the reply then answers
// in raw bytes too). INVALID_ARGUMENT for both encodings at once, none, or raw bytes that are
// not whole float32s.
absl::Status DecodeStreamTicks(const v1::StreamTicks& ticks, std::vector<float>* values, bool* raw);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_STREAM_INPUT_H_
