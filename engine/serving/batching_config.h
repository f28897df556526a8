// The Batcher::Options a model's BatchingConfig asks for: batch sizes, delay, priority levels
// and their queue policies, with the proto's defaults applied. The registry calls it when a
// version loads; KServe's ModelConfig and the fuzzers read a model's limits through it. Also
// the tick-stream limits of a StreamingConfig.
// Thread-safe: a function of its argument only.
#ifndef FORECASTD_ENGINE_SERVING_BATCHING_CONFIG_H_
#define FORECASTD_ENGINE_SERVING_BATCHING_CONFIG_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/models/model_config.h"
#include "engine/serving/batcher.h"
#include "forecastd/v1/model_config.pb.h"

namespace forecastd {

// The Batcher::Options a BatchingConfig asks for (batch sizes, delay, priority levels and
// queue policies), with the proto's defaults applied: max_batch_size 0 -> 32,
// priority_levels 0 -> 1, default_priority_level 0 -> 1 when there is one level. The
// remaining fields (sizes per row, run_batch, scheduler, clock, observer) are left for the
// caller. INVALID_ARGUMENT naming the field for a config the batcher cannot honour.
absl::StatusOr<Batcher::Options> BatcherOptionsFromConfig(const v1::BatchingConfig& config);

// A validated config's tick-stream settings with their defaults filled in.
struct StreamLimits {
  v1::StreamingConfig::Mode mode = v1::StreamingConfig::STREAM_MODE_WINDOW;  // never UNSPECIFIED
  int64_t max_streams = 10000;
  // Ticks in one batch at most: streaming.max_tick_batch (1024 in state mode when 0), never more
  // than max_batch_size in window mode, where a batch is a Predict batch of windows.
  int64_t max_tick_batch = 1024;
  absl::Duration idle_ttl = absl::ZeroDuration();  // zero: never
  bool keep_on_disconnect = true;
};
StreamLimits StreamLimitsFor(const ModelConfig& config, int64_t max_batch_size);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_BATCHING_CONFIG_H_
