#include "engine/serving/batching_config.h"

#include <algorithm>
#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/serving/priority_queue.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// Larger than any sane delay or timeout, small enough that absl::Duration cannot overflow.
constexpr uint64_t kMaxMicroseconds = uint64_t{1} << 50;

absl::Status InvalidBatching(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("batching.", what));
}

absl::StatusOr<PriorityQueue::Policy> PolicyFromProto(const v1::QueuePolicy& proto,
                                                      absl::string_view field) {
  PriorityQueue::Policy policy;
  switch (proto.timeout_action()) {
    case v1::QueuePolicy::REJECT:
      policy.timeout_action = PriorityQueue::Policy::TimeoutAction::kReject;
      break;
    case v1::QueuePolicy::DELAY:
      policy.timeout_action = PriorityQueue::Policy::TimeoutAction::kDelay;
      break;
    default:
      return InvalidBatching(
          absl::StrCat(field, ".timeout_action ", proto.timeout_action(), " is unknown"));
  }
  if (proto.default_timeout_us() > kMaxMicroseconds) {
    return InvalidBatching(
        absl::StrCat(field, ".default_timeout_us ", proto.default_timeout_us(), " is too large"));
  }
  policy.default_timeout = absl::Microseconds(static_cast<int64_t>(proto.default_timeout_us()));
  policy.allow_timeout_override = proto.allow_timeout_override();
  policy.max_queue_size = proto.max_queue_size();
  return policy;
}

}  // namespace

absl::StatusOr<Batcher::Options> BatcherOptionsFromConfig(const v1::BatchingConfig& config) {
  Batcher::Options options;
  if (config.max_batch_size() < 0) {
    return InvalidBatching(
        absl::StrCat("max_batch_size is ", config.max_batch_size(), "; it must be >= 0 (0: 32)"));
  }
  options.max_batch_size = config.max_batch_size() == 0 ? 32 : config.max_batch_size();
  for (const int32_t size : config.preferred_batch_size()) {
    if (size < 1 || size > options.max_batch_size) {
      return InvalidBatching(absl::StrCat("preferred_batch_size ", size, " is not in [1, ",
                                          options.max_batch_size, "] (max_batch_size)"));
    }
    options.preferred_batch_sizes.push_back(size);
  }
  if (config.max_queue_delay_us() > kMaxMicroseconds) {
    return InvalidBatching(
        absl::StrCat("max_queue_delay_us ", config.max_queue_delay_us(), " is too large"));
  }
  options.max_queue_delay = absl::Microseconds(static_cast<int64_t>(config.max_queue_delay_us()));

  PriorityQueue::Options& queue = options.queue;
  queue.levels = config.priority_levels() == 0 ? 1 : config.priority_levels();
  if (config.default_priority_level() == 0) {
    if (queue.levels > 1) {
      return InvalidBatching(absl::StrCat("default_priority_level must be set, in [1, ",
                                          queue.levels, "], when priority_levels is ",
                                          queue.levels));
    }
    queue.default_level = 1;
  } else if (config.default_priority_level() > queue.levels) {
    return InvalidBatching(absl::StrCat("default_priority_level ", config.default_priority_level(),
                                        " is not in [1, ", queue.levels, "] (priority_levels)"));
  } else {
    queue.default_level = config.default_priority_level();
  }
  ASSIGN_OR_RETURN(queue.default_policy,
                   PolicyFromProto(config.default_queue_policy(), "default_queue_policy"));
  for (const auto& [level, proto] : config.priority_queue_policy()) {
    if (level < 1 || level > queue.levels) {
      return InvalidBatching(absl::StrCat("priority_queue_policy has level ", level,
                                          ", not in [1, ", queue.levels, "] (priority_levels)"));
    }
    ASSIGN_OR_RETURN(queue.level_policies[level],
                     PolicyFromProto(proto, absl::StrCat("priority_queue_policy[", level, "]")));
  }
  if (absl::Status status = PriorityQueue::Validate(queue); !status.ok()) {
    return WithContext(status, "batching");
  }
  return options;
}

StreamLimits StreamLimitsFor(const ModelConfig& config, int64_t max_batch_size) {
  const v1::StreamingConfig& streaming = config.streaming();
  StreamLimits limits;
  limits.mode = StreamMode(config);
  if (streaming.max_streams() > 0) limits.max_streams = streaming.max_streams();
  const bool state = limits.mode == v1::StreamingConfig::STREAM_MODE_STATE;
  limits.max_tick_batch = streaming.max_tick_batch() > 0 ? streaming.max_tick_batch()
                          : state                        ? 1024
                                                         : max_batch_size;
  if (!state) limits.max_tick_batch = std::min(limits.max_tick_batch, max_batch_size);
  limits.idle_ttl = absl::Seconds(static_cast<int64_t>(streaming.idle_ttl_seconds()));
  limits.keep_on_disconnect = streaming.on_disconnect() == v1::StreamingConfig::DISCONNECT_KEEP;
  return limits;
}

}  // namespace forecastd
