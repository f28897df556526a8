#include "server/triton_model_config.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "engine/serving/batching_config.h"
#include "kernels/base/status.h"
#include "server/kserve_request.h"

namespace forecastd {
namespace {

using kserve::ForecastDims;

inference::ModelQueuePolicy ToTritonPolicy(const PriorityQueue::Policy& policy) {
  inference::ModelQueuePolicy out;
  out.set_timeout_action(policy.timeout_action == PriorityQueue::Policy::TimeoutAction::kDelay
                             ? inference::ModelQueuePolicy::DELAY
                             : inference::ModelQueuePolicy::REJECT);
  out.set_default_timeout_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(policy.default_timeout)));
  out.set_allow_timeout_override(policy.allow_timeout_override);
  out.set_max_queue_size(policy.max_queue_size);
  return out;
}

}  // namespace

absl::StatusOr<inference::ModelConfig> ToTritonModelConfig(const v1::ModelConfig& config) {
  ASSIGN_OR_RETURN(const Batcher::Options batching, BatcherOptionsFromConfig(config.batching()));
  inference::ModelConfig out;
  out.set_name(config.name());
  out.set_platform(kKServePlatform);
  out.set_backend(kKServePlatform);
  if (config.serving_version() > 0) {
    out.mutable_version_policy()->mutable_specific()->add_versions(config.serving_version());
  } else {
    out.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  out.set_max_batch_size(static_cast<int32_t>(batching.max_batch_size));

  for (const kserve::InputSpec& spec : kserve::InputSpecs(config)) {
    inference::ModelInput* input = out.add_input();
    input->set_name(spec.name);
    input->set_data_type(spec.datatype == kKServeInt64   ? inference::TYPE_INT64
                         : spec.datatype == kKServeBytes ? inference::TYPE_STRING
                                                         : inference::TYPE_FP32);
    for (const int64_t dim : spec.dims) input->add_dims(dim);
  }
  inference::ModelOutput* output = out.add_output();
  output->set_name(kKServeOutputName);
  output->set_data_type(inference::TYPE_FP32);
  for (const int64_t dim : ForecastDims(config.horizon(), NumTargets(config), NumQuantiles(config),
                                        !config.quantiles().empty())) {
    output->add_dims(dim);
  }

  if (config.has_streaming()) {
    // A model configured for tick streams is a sequence model to Triton's clients: requests
    // with a sequence_id go to its streams (forecastd still batches requests without one).
    const StreamLimits streams = StreamLimitsFor(config, batching.max_batch_size);
    inference::ModelSequenceBatching* sequence = out.mutable_sequence_batching();
    sequence->set_max_sequence_idle_microseconds(
        streams.idle_ttl > absl::ZeroDuration()
            ? static_cast<uint64_t>(absl::ToInt64Microseconds(streams.idle_ttl))
            : std::numeric_limits<uint64_t>::max());
    inference::ModelSequenceBatching::StrategyOldest* oldest = sequence->mutable_oldest();
    oldest->set_max_candidate_sequences(static_cast<int32_t>(streams.max_streams));
    oldest->add_preferred_batch_size(static_cast<int32_t>(streams.max_tick_batch));
  } else {
    inference::ModelDynamicBatching* dynamic = out.mutable_dynamic_batching();
    for (const int64_t size : batching.preferred_batch_sizes) {
      dynamic->add_preferred_batch_size(static_cast<int32_t>(size));
    }
    dynamic->set_max_queue_delay_microseconds(
        static_cast<uint64_t>(absl::ToInt64Microseconds(batching.max_queue_delay)));
    dynamic->set_priority_levels(batching.queue.levels);
    dynamic->set_default_priority_level(batching.queue.default_level);
    *dynamic->mutable_default_queue_policy() = ToTritonPolicy(batching.queue.default_policy);
    for (const auto& [level, policy] : batching.queue.level_policies) {
      (*dynamic->mutable_priority_queue_policy())[level] = ToTritonPolicy(policy);
    }
  }

  // InstanceConfig: replicas per device; devices "cpu" and "cuda:N", empty for every device.
  const int count = std::max(1, config.instances().count());
  std::vector<int32_t> gpus;
  bool cpu = false;
  for (const std::string& device : config.instances().devices()) {
    absl::string_view rest = device;
    int32_t gpu = 0;
    if (device == "cpu") {
      cpu = true;
    } else if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &gpu)) {
      gpus.push_back(gpu);
    }
  }
  if (config.instances().devices().empty()) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_AUTO);
    group->set_count(count);
  }
  if (cpu) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
    group->set_count(count);
  }
  if (!gpus.empty()) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
    group->set_count(count);
    for (const int32_t gpu : gpus) group->add_gpus(gpu);
  }
  return out;
}

}  // namespace forecastd
