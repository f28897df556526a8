// BatcherOptionsFromConfig: BatchingConfig's fields and the proto's defaults mapped onto
// Batcher::Options, and INVALID_ARGUMENT naming the field for configs the batcher refuses.
#include "engine/serving/batching_config.h"

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

TEST_CASE("BatcherOptionsFromConfig maps BatchingConfig with the proto's defaults",
          "[unit][registry]") {
  v1::BatchingConfig c;
  Batcher::Options o = BatcherOptionsFromConfig(c).value();
  REQUIRE(o.max_batch_size == 32);
  REQUIRE(o.preferred_batch_sizes.empty());
  REQUIRE(o.max_queue_delay == absl::ZeroDuration());
  REQUIRE(o.queue.levels == 1);
  REQUIRE(o.queue.default_level == 1);
  REQUIRE(o.queue.default_policy.timeout_action == PriorityQueue::Policy::TimeoutAction::kReject);
  REQUIRE(o.queue.level_policies.empty());

  c.set_max_batch_size(16);
  c.add_preferred_batch_size(4);
  c.add_preferred_batch_size(8);
  c.set_max_queue_delay_us(250);
  c.set_priority_levels(3);
  c.set_default_priority_level(2);
  c.mutable_default_queue_policy()->set_max_queue_size(100);
  v1::QueuePolicy& high = (*c.mutable_priority_queue_policy())[1];
  high.set_timeout_action(v1::QueuePolicy::DELAY);
  high.set_default_timeout_us(5000);
  high.set_allow_timeout_override(true);
  high.set_max_queue_size(10);
  o = BatcherOptionsFromConfig(c).value();
  REQUIRE(o.max_batch_size == 16);
  REQUIRE(o.preferred_batch_sizes == std::vector<int64_t>{4, 8});
  REQUIRE(o.max_queue_delay == absl::Microseconds(250));
  REQUIRE(o.queue.levels == 3);
  REQUIRE(o.queue.default_level == 2);
  REQUIRE(o.queue.default_policy.max_queue_size == 100);
  REQUIRE(o.queue.level_policies.size() == 1);
  const PriorityQueue::Policy& p = o.queue.level_policies.at(1);
  REQUIRE(p.timeout_action == PriorityQueue::Policy::TimeoutAction::kDelay);
  REQUIRE(p.default_timeout == absl::Milliseconds(5));
  REQUIRE(p.allow_timeout_override);
  REQUIRE(p.max_queue_size == 10);

  const auto invalid = [](const v1::BatchingConfig& bad, const std::string& field) {
    const absl::Status s = BatcherOptionsFromConfig(bad).status();
    INFO(s.ToString());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(absl::StrContains(s.message(), field));
  };
  v1::BatchingConfig bad = c;
  bad.add_preferred_batch_size(17);
  invalid(bad, "preferred_batch_size");
  bad = c;
  bad.set_max_batch_size(-1);
  invalid(bad, "max_batch_size");
  bad = c;
  bad.set_default_priority_level(0);
  invalid(bad, "default_priority_level");
  bad = c;
  bad.set_default_priority_level(4);
  invalid(bad, "default_priority_level");
  bad = c;
  (*bad.mutable_priority_queue_policy())[5] = v1::QueuePolicy();
  invalid(bad, "priority_queue_policy");
}

}  // namespace
}  // namespace forecastd
