#include "engine/serving/priority_queue.h"

#include <memory>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using TimeoutAction = PriorityQueue::Policy::TimeoutAction;

const absl::Time kStart = absl::UnixEpoch() + absl::Hours(1000);

// A task tagged by its `rows` (the queue never looks at rows, so they serve as an id).
std::unique_ptr<PredictTask> Task(int64_t id, uint32_t priority = 0,
                                  absl::Duration timeout_override = absl::ZeroDuration(),
                                  absl::Time deadline = absl::InfiniteFuture()) {
  auto task = std::make_unique<PredictTask>();
  task->rows = id;
  task->priority = priority;
  task->timeout_override = timeout_override;
  task->deadline = deadline;
  task->done = [](PredictResult) {};
  return task;
}

void PushOk(PriorityQueue& queue, std::unique_ptr<PredictTask> task, absl::Time now = kStart) {
  REQUIRE(queue.Push(task, now).ok());
  REQUIRE(task == nullptr);
}

std::vector<int64_t> Order(const PriorityQueue& queue) {
  std::vector<int64_t> ids;
  queue.ForEachInOrder([&](const PredictTask& task) {
    ids.push_back(task.rows);
    return true;
  });
  return ids;
}

std::vector<int64_t> PopAll(PriorityQueue& queue) {
  std::vector<int64_t> ids;
  while (std::unique_ptr<PredictTask> task = queue.PopFront()) ids.push_back(task->rows);
  return ids;
}

PriorityQueue::Options Levels(uint32_t levels, uint32_t default_level = 1) {
  PriorityQueue::Options options;
  options.levels = levels;
  options.default_level = default_level;
  return options;
}

TEST_CASE("PriorityQueue::Validate rejects inconsistent options", "[unit][priority_queue]") {
  REQUIRE(PriorityQueue::Validate(Levels(3, 2)).ok());
  REQUIRE(PriorityQueue::Validate(Levels(0)).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(PriorityQueue::Validate(Levels(PriorityQueue::kMaxLevels + 1)).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(PriorityQueue::Validate(Levels(3, 0)).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(PriorityQueue::Validate(Levels(3, 4)).code() == absl::StatusCode::kInvalidArgument);

  PriorityQueue::Options bad_level = Levels(3);
  bad_level.level_policies[4] = PriorityQueue::Policy();
  REQUIRE(PriorityQueue::Validate(bad_level).code() == absl::StatusCode::kInvalidArgument);
  bad_level.level_policies.clear();
  bad_level.level_policies[0] = PriorityQueue::Policy();
  REQUIRE(PriorityQueue::Validate(bad_level).code() == absl::StatusCode::kInvalidArgument);

  PriorityQueue::Options negative = Levels(2);
  negative.level_policies[2].default_timeout = absl::Milliseconds(-1);
  REQUIRE(PriorityQueue::Validate(negative).code() == absl::StatusCode::kInvalidArgument);
  negative.level_policies.clear();
  negative.default_policy.default_timeout = absl::Milliseconds(-1);
  REQUIRE(PriorityQueue::Validate(negative).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Push assigns the default level to priority 0 and stamps the enqueue time",
          "[unit][priority_queue]") {
  PriorityQueue queue(Levels(3, 2));
  PushOk(queue, Task(7, 0), kStart + absl::Seconds(1));
  REQUIRE(queue.size() == 1);
  REQUIRE(queue.size(2) == 1);
  REQUIRE(queue.Front()->priority == 2);
  REQUIRE(queue.Front()->enqueue_time == kStart + absl::Seconds(1));
}

TEST_CASE("Push refuses a bad level - an expired deadline and a null task - keeping ownership",
          "[unit][priority_queue]") {
  PriorityQueue queue(Levels(3));
  std::unique_ptr<PredictTask> task = Task(1, 4);
  REQUIRE(queue.Push(task, kStart).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(task != nullptr);
  REQUIRE(task->priority == 4);  // untouched

  task = Task(1, 1, absl::ZeroDuration(), kStart);
  REQUIRE(queue.Push(task, kStart).code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(task != nullptr);

  std::unique_ptr<PredictTask> null_task;
  REQUIRE(queue.Push(null_task, kStart).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(queue.empty());
}

TEST_CASE("Tasks come out level 1 first - FIFO within a level", "[unit][priority_queue]") {
  PriorityQueue queue(Levels(3, 3));
  PushOk(queue, Task(31, 3));
  PushOk(queue, Task(21, 2));
  PushOk(queue, Task(32, 0));  // default level 3
  PushOk(queue, Task(11, 1));
  PushOk(queue, Task(22, 2));
  PushOk(queue, Task(12, 1));
  REQUIRE(Order(queue) == std::vector<int64_t>{11, 12, 21, 22, 31, 32});
  REQUIRE(queue.Front()->rows == 11);
  REQUIRE(PopAll(queue) == std::vector<int64_t>{11, 12, 21, 22, 31, 32});
  REQUIRE(queue.empty());
  REQUIRE(queue.Front() == nullptr);
  REQUIRE(queue.PopFront() == nullptr);
}

TEST_CASE("ForEachInOrder stops when the visitor says so", "[unit][priority_queue]") {
  PriorityQueue queue(Levels(2));
  for (int64_t id = 1; id <= 5; ++id) PushOk(queue, Task(id, id % 2 + 1));
  std::vector<int64_t> seen;
  queue.ForEachInOrder([&](const PredictTask& task) {
    seen.push_back(task.rows);
    return seen.size() < 3;
  });
  REQUIRE(seen == std::vector<int64_t>{2, 4, 1});
}

TEST_CASE("A full level refuses with RESOURCE_EXHAUSTED - other levels are unaffected",
          "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(2);
  options.level_policies[1].max_queue_size = 2;
  PriorityQueue queue(options);
  PushOk(queue, Task(1, 1));
  PushOk(queue, Task(2, 1));
  std::unique_ptr<PredictTask> task = Task(3, 1);
  REQUIRE(queue.Push(task, kStart).code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(task != nullptr);
  for (int64_t id = 4; id < 20; ++id) PushOk(queue, Task(id, 2));  // level 2 is unbounded
  REQUIRE(queue.size(1) == 2);
  REQUIRE(queue.size(2) == 16);
  queue.PopFront();
  PushOk(queue, std::move(task));  // room again
  REQUIRE(queue.size(1) == 2);
}

// The queue deadline, seen through NextExpiry() with no client deadline.
absl::Duration EffectiveTimeout(absl::Duration default_timeout, bool allow_override,
                                absl::Duration timeout_override) {
  PriorityQueue::Options options = Levels(1);
  options.default_policy.default_timeout = default_timeout;
  options.default_policy.allow_timeout_override = allow_override;
  PriorityQueue queue(options);
  PushOk(queue, Task(1, 1, timeout_override));
  const absl::Time expiry = queue.NextExpiry();
  return expiry == absl::InfiniteFuture() ? absl::InfiniteDuration() : expiry - kStart;
}

TEST_CASE("A timeout override only shortens the default - and only when allowed",
          "[unit][priority_queue]") {
  const absl::Duration ms = absl::Milliseconds(1);
  // Allowed and shorter: applies.
  REQUIRE(EffectiveTimeout(10 * ms, true, 3 * ms) == 3 * ms);
  // Allowed but longer (or equal): the default stays.
  REQUIRE(EffectiveTimeout(10 * ms, true, 20 * ms) == 10 * ms);
  REQUIRE(EffectiveTimeout(10 * ms, true, 10 * ms) == 10 * ms);
  // Not allowed: ignored either way.
  REQUIRE(EffectiveTimeout(10 * ms, false, 3 * ms) == 10 * ms);
  // No default: an allowed override sets one; a disallowed one does not.
  REQUIRE(EffectiveTimeout(absl::ZeroDuration(), true, 4 * ms) == 4 * ms);
  REQUIRE(EffectiveTimeout(absl::ZeroDuration(), false, 4 * ms) == absl::InfiniteDuration());
  // No override requested.
  REQUIRE(EffectiveTimeout(10 * ms, true, absl::ZeroDuration()) == 10 * ms);
  REQUIRE(EffectiveTimeout(absl::ZeroDuration(), true, absl::ZeroDuration()) ==
          absl::InfiniteDuration());
}

TEST_CASE("REJECT completes a task with UNAVAILABLE exactly when its queue timeout passes",
          "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(1);
  options.default_policy.default_timeout = absl::Milliseconds(5);
  options.default_policy.timeout_action = TimeoutAction::kReject;
  PriorityQueue queue(options);
  PushOk(queue, Task(1));
  PushOk(queue, Task(2), kStart + absl::Milliseconds(1));
  REQUIRE(queue.NextExpiry() == kStart + absl::Milliseconds(5));

  REQUIRE(queue.TakeExpired(kStart + absl::Milliseconds(5) - absl::Microseconds(1)).empty());
  REQUIRE(queue.size() == 2);
  std::vector<PriorityQueue::Expired> expired = queue.TakeExpired(kStart + absl::Milliseconds(5));
  REQUIRE(expired.size() == 1);
  REQUIRE(expired[0].task->rows == 1);
  REQUIRE(expired[0].status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(queue.size() == 1);
  REQUIRE(queue.NextExpiry() == kStart + absl::Milliseconds(6));
  expired = queue.TakeExpired(kStart + absl::Seconds(1));
  REQUIRE(expired.size() == 1);
  REQUIRE(expired[0].task->rows == 2);
  REQUIRE(queue.empty());
  REQUIRE(queue.NextExpiry() == absl::InfiniteFuture());
}

TEST_CASE("DELAY moves a timed-out task behind its level's others but ahead of lower levels",
          "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(2);
  options.default_policy.timeout_action = TimeoutAction::kDelay;
  options.default_policy.allow_timeout_override = true;  // no default timeout: overrides set one
  options.default_policy.max_queue_size = 3;
  PriorityQueue queue(options);
  const absl::Duration ms = absl::Milliseconds(1);
  PushOk(queue, Task(11, 1, 5 * ms));
  PushOk(queue, Task(12, 1, 2 * ms));
  PushOk(queue, Task(13, 1));
  PushOk(queue, Task(21, 2));
  REQUIRE(Order(queue) == std::vector<int64_t>{11, 12, 13, 21});

  REQUIRE(queue.TakeExpired(kStart + 2 * ms).empty());            // nothing completes...
  REQUIRE(Order(queue) == std::vector<int64_t>{11, 13, 12, 21});  // ...but 12 moved back
  REQUIRE(queue.delayed_size(1) == 1);
  REQUIRE(queue.TakeExpired(kStart + 5 * ms).empty());
  // Delayed in the order their timeouts passed; still ahead of level 2.
  REQUIRE(Order(queue) == std::vector<int64_t>{13, 12, 11, 21});
  REQUIRE(queue.delayed_size(1) == 2);
  REQUIRE(queue.NextExpiry() == absl::InfiniteFuture());  // only client deadlines remain

  // Delayed tasks still count against max_queue_size.
  std::unique_ptr<PredictTask> task = Task(14, 1);
  REQUIRE(queue.Push(task, kStart + 5 * ms).code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(PopAll(queue) == std::vector<int64_t>{13, 12, 11, 21});
}

TEST_CASE("A passed client deadline completes the task with DEADLINE_EXCEEDED - delayed or not",
          "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(1);
  options.default_policy.timeout_action = TimeoutAction::kDelay;
  options.default_policy.default_timeout = absl::Milliseconds(2);
  PriorityQueue queue(options);
  const absl::Duration ms = absl::Milliseconds(1);
  PushOk(queue, Task(1, 1, absl::ZeroDuration(), kStart + 10 * ms));  // delayed at 2, dies at 10
  PushOk(queue, Task(2, 1, absl::ZeroDuration(), kStart + 2 * ms));   // both limits at 2
  PushOk(queue, Task(3, 1));

  std::vector<PriorityQueue::Expired> expired = queue.TakeExpired(kStart + 2 * ms);
  REQUIRE(expired.size() == 1);
  REQUIRE(expired[0].task->rows == 2);
  REQUIRE(expired[0].status.code() == absl::StatusCode::kDeadlineExceeded);  // client's wins
  REQUIRE(queue.delayed_size(1) == 2);
  REQUIRE(queue.NextExpiry() == kStart + 10 * ms);

  REQUIRE(queue.TakeExpired(kStart + 10 * ms - absl::Microseconds(1)).empty());
  expired = queue.TakeExpired(kStart + 10 * ms);
  REQUIRE(expired.size() == 1);
  REQUIRE(expired[0].task->rows == 1);
  REQUIRE(expired[0].status.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(Order(queue) == std::vector<int64_t>{3});
}

TEST_CASE("Popping a task removes its time limits", "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(1);
  options.default_policy.default_timeout = absl::Milliseconds(1);
  PriorityQueue queue(options);
  PushOk(queue, Task(1));
  REQUIRE(queue.PopFront()->rows == 1);
  REQUIRE(queue.NextExpiry() == absl::InfiniteFuture());
  REQUIRE(queue.TakeExpired(kStart + absl::Hours(1)).empty());
}

TEST_CASE("TakeAll empties the queue in scheduling order", "[unit][priority_queue]") {
  PriorityQueue::Options options = Levels(2);
  options.default_policy.default_timeout = absl::Milliseconds(1);
  options.default_policy.timeout_action = TimeoutAction::kDelay;
  PriorityQueue queue(options);
  PushOk(queue, Task(21, 2));
  PushOk(queue, Task(11, 1));
  PushOk(queue, Task(12, 1), kStart + absl::Milliseconds(1));
  REQUIRE(queue.TakeExpired(kStart + absl::Milliseconds(1)).empty());  // 21 and 11 delayed
  std::vector<int64_t> ids;
  for (const std::unique_ptr<PredictTask>& task : queue.TakeAll()) ids.push_back(task->rows);
  REQUIRE(ids == std::vector<int64_t>{12, 11, 21});
  REQUIRE(queue.empty());
  REQUIRE(queue.size(1) == 0);
  REQUIRE(queue.NextExpiry() == absl::InfiniteFuture());
}

}  // namespace
}  // namespace forecastd
