// The waiting room of one model version's Batcher: one FIFO per priority level, each with
// Triton's queue policy (max size; a default timeout with REJECT or DELAY when it passes; a
// per-request timeout override that may only shorten it). Levels are 1 (highest) .. N; a
// task asking for level 0 gets the default level.
// Thread-compatible: the Batcher owns it and calls it under its own mutex.
#ifndef FORECASTD_ENGINE_SERVING_PRIORITY_QUEUE_H_
#define FORECASTD_ENGINE_SERVING_PRIORITY_QUEUE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <tuple>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "engine/serving/predict_task.h"

namespace forecastd {

// Scheduling order (what Front(), PopFront() and ForEachInOrder() follow):
//   level 1's waiting tasks, then level 1's delayed tasks, then level 2's waiting tasks,
//   then level 2's delayed tasks, ... Waiting tasks are FIFO by enqueue time; delayed tasks
//   are in the order their queue timeouts passed. This is Triton's DELAY: a timed-out task
//   goes behind every task of its own and higher levels that has not timed out, but never
//   behind a lower level's tasks (a timeout must not turn into a priority inversion).
//
// Time limits of a queued task (applied by TakeExpired(now)):
//   - its client deadline (PredictTask::deadline): once now >= deadline the task leaves the
//     queue with DEADLINE_EXCEEDED, whether waiting or delayed;
//   - its queue deadline, enqueue time + the effective timeout of its level's policy:
//       effective = default_timeout (zero: none), except that when allow_timeout_override is
//       set and the task asks for a positive timeout_override, the override applies if the
//       default is none or the override is shorter than the default. An override never
//       lengthens the default.
//     Once now >= queue deadline, REJECT removes the task with UNAVAILABLE ("request timeout
//     expired": the server is too busy, a retry may succeed; DEADLINE_EXCEEDED is kept for
//     the client's own deadline) and DELAY moves it to its level's delayed tasks, where only
//     its client deadline applies.
//   A task whose client and queue deadlines pass together gets DEADLINE_EXCEEDED.
//
// Invariants (between calls):
//   - every queued task is in exactly one level's waiting or delayed tasks, and its
//     `priority` is that level (Push rewrote 0 to the default level);
//   - size(level) <= the level's max_queue_size when that is nonzero (delayed tasks count);
//   - NextExpiry() is the earliest client deadline of all queued tasks and queue deadline of
//     the waiting ones, so after TakeExpired(now) none of them is <= now.
//
// Worst-case time in the queue: a task leaves by its client deadline, and by its queue
// deadline when its level REJECTs. Without either (no timeout, or DELAY), sustained load at
// higher levels (or at its own level, for a delayed task) can starve it, as in Triton.
class PriorityQueue {
 public:
  struct Policy {
    enum class TimeoutAction { kReject, kDelay };
    // What happens when a task has waited its effective timeout: see the class comment.
    TimeoutAction timeout_action = TimeoutAction::kReject;
    // The level's queue timeout, >= 0; zero: none.
    absl::Duration default_timeout = absl::ZeroDuration();
    // Whether a task's timeout_override may replace default_timeout (only to shorten it, or
    // to set one when default_timeout is none).
    bool allow_timeout_override = false;
    // Tasks the level holds at most, waiting and delayed together; 0: unbounded.
    uint32_t max_queue_size = 0;
  };
  struct Options {
    // Number of priority levels, in [1, kMaxLevels].
    uint32_t levels = 1;
    // The level of a task whose priority is 0, in [1, levels].
    uint32_t default_level = 1;
    // The policy of every level not named in level_policies.
    Policy default_policy;
    // Policies of single levels, each key in [1, levels].
    std::map<uint32_t, Policy> level_policies;
  };
  // One vector slot per level; Triton-style configurations use a handful.
  static constexpr uint32_t kMaxLevels = 1024;

  // A task that TakeExpired() removed, and the status it must complete with.
  struct Expired {
    std::unique_ptr<PredictTask> task;
    absl::Status status;
  };

  // INVALID_ARGUMENT for inconsistent options.
  static absl::Status Validate(const Options& options);
  // `options` must pass Validate() (CHECKed).
  explicit PriorityQueue(const Options& options);

  PriorityQueue(const PriorityQueue&) = delete;
  PriorityQueue& operator=(const PriorityQueue&) = delete;

  // Assigns the level (0 -> default), enqueue_time = `now` and the queue deadline (see the
  // class comment). Ownership moves in iff OK; otherwise `task` is left untouched.
  // INVALID_ARGUMENT: null task, or a level outside [0, levels]; DEADLINE_EXCEEDED: the
  // client deadline is already <= now; RESOURCE_EXHAUSTED: the level is full.
  absl::Status Push(std::unique_ptr<PredictTask>& task, absl::Time now);

  // Applies the time limits at `now` (class comment): removes the tasks that must complete
  // now and returns them, in the order their limits passed, and moves DELAY tasks.
  std::vector<Expired> TakeExpired(absl::Time now);
  // When TakeExpired() next has something to do; InfiniteFuture when never (as things are).
  absl::Time NextExpiry() const;

  // The first task in scheduling order, or nullptr when empty.
  const PredictTask* Front() const;
  // Removes and returns the first task in scheduling order; nullptr when empty.
  std::unique_ptr<PredictTask> PopFront();
  // Calls `visit` on the queued tasks in scheduling order until it returns false.
  void ForEachInOrder(absl::FunctionRef<bool(const PredictTask&)> visit) const;
  // Removes every task, in scheduling order.
  std::vector<std::unique_ptr<PredictTask>> TakeAll();

  bool empty() const { return size_ == 0; }
  int64_t size() const { return size_; }
  // Tasks at `level` (waiting and delayed); 0 for a level outside [1, levels].
  int64_t size(uint32_t level) const;
  // Of those, the delayed ones.
  int64_t delayed_size(uint32_t level) const;
  uint32_t levels() const { return static_cast<uint32_t>(levels_.size()); }
  // The policy of `level`, in [1, levels].
  const Policy& policy(uint32_t level) const;

 private:
  struct Entry {
    std::unique_ptr<PredictTask> task;
    absl::Time queue_deadline;  // InfiniteFuture: none (or already delayed)
    absl::Time expiry;          // min(task->deadline, queue_deadline): its key in expiries_
  };
  struct Level {
    Policy policy;
    std::map<uint64_t, Entry> waiting;  // key: enqueue sequence number (FIFO)
    std::map<uint64_t, Entry> delayed;  // key: sequence number of the delay
  };
  // (expiry, level, delayed, key): where each queued task's next time limit is.
  using ExpiryKey = std::tuple<absl::Time, uint32_t, bool, uint64_t>;

  // Removes `it` from `level`'s waiting (or delayed) tasks and from expiries_.
  Entry RemoveEntry(uint32_t level, bool delayed, std::map<uint64_t, Entry>::iterator it);
  // Where the first task in scheduling order lies; false when empty.
  bool FindFront(uint32_t* level, bool* delayed) const;

  std::vector<Level> levels_;  // levels_[l - 1] is level l
  uint32_t default_level_;
  std::set<ExpiryKey> expiries_;
  uint64_t next_seq_ = 0;
  int64_t size_ = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_PRIORITY_QUEUE_H_
