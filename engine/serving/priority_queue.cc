#include "engine/serving/priority_queue.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

// The queue deadline of a task pushed at `now` under `policy` (see the class comment).
absl::Time QueueDeadline(const PriorityQueue::Policy& policy, absl::Duration timeout_override,
                         absl::Time now) {
  absl::Duration timeout = policy.default_timeout;  // zero: none
  if (policy.allow_timeout_override && timeout_override > absl::ZeroDuration() &&
      (timeout == absl::ZeroDuration() || timeout_override < timeout)) {
    timeout = timeout_override;
  }
  return timeout > absl::ZeroDuration() ? now + timeout : absl::InfiniteFuture();
}

}  // namespace

absl::Status PriorityQueue::Validate(const Options& options) {
  if (options.levels < 1 || options.levels > kMaxLevels) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority levels must be in [1, ", kMaxLevels, "], got ", options.levels));
  }
  if (options.default_level < 1 || options.default_level > options.levels) {
    return absl::InvalidArgumentError(absl::StrCat("default priority level ", options.default_level,
                                                   " is not in [1, ", options.levels, "]"));
  }
  auto check_policy = [](const Policy& policy, const std::string& what) -> absl::Status {
    if (policy.default_timeout < absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": default_timeout must be >= 0, got ",
                                                     absl::FormatDuration(policy.default_timeout)));
    }
    return absl::OkStatus();
  };
  if (absl::Status status = check_policy(options.default_policy, "default queue policy");
      !status.ok()) {
    return status;
  }
  for (const auto& [level, policy] : options.level_policies) {
    if (level < 1 || level > options.levels) {
      return absl::InvalidArgumentError(absl::StrCat("queue policy for priority level ", level,
                                                     ", outside [1, ", options.levels, "]"));
    }
    if (absl::Status status =
            check_policy(policy, absl::StrCat("queue policy of priority level ", level));
        !status.ok()) {
      return status;
    }
  }
  return absl::OkStatus();
}

PriorityQueue::PriorityQueue(const Options& options) : default_level_(options.default_level) {
  if (absl::Status status = Validate(options); !status.ok()) {
    // The Batcher validates before constructing: invalid options here are a bug.
    spdlog::critical("PriorityQueue: {}", status.ToString());
    std::abort();
  }
  levels_.resize(options.levels);
  for (uint32_t level = 1; level <= options.levels; ++level) {
    const auto it = options.level_policies.find(level);
    levels_[level - 1].policy =
        it == options.level_policies.end() ? options.default_policy : it->second;
  }
}

absl::Status PriorityQueue::Push(std::unique_ptr<PredictTask>& task, absl::Time now) {
  if (task == nullptr) return absl::InvalidArgumentError("null PredictTask");
  const uint32_t level = task->priority == 0 ? default_level_ : task->priority;
  if (level > levels()) {
    return absl::InvalidArgumentError(
        absl::StrCat("priority ", task->priority, " is not in [0, ", levels(), "]"));
  }
  if (task->deadline <= now) {
    return absl::DeadlineExceededError("the request's deadline passed before it was queued");
  }
  Level& queue = levels_[level - 1];
  if (queue.policy.max_queue_size != 0 &&
      queue.waiting.size() + queue.delayed.size() >= queue.policy.max_queue_size) {
    return absl::ResourceExhaustedError(absl::StrCat("the priority-", level,
                                                     " queue is full (max_queue_size ",
                                                     queue.policy.max_queue_size, ")"));
  }
  task->priority = level;
  task->enqueue_time = now;
  Entry entry;
  entry.queue_deadline = QueueDeadline(queue.policy, task->timeout_override, now);
  entry.expiry = std::min(task->deadline, entry.queue_deadline);
  entry.task = std::move(task);
  const uint64_t key = next_seq_++;
  expiries_.emplace(entry.expiry, level, false, key);
  queue.waiting.emplace(key, std::move(entry));
  ++size_;
  return absl::OkStatus();
}

PriorityQueue::Entry PriorityQueue::RemoveEntry(uint32_t level, bool delayed,
                                                std::map<uint64_t, Entry>::iterator it) {
  Level& queue = levels_[level - 1];
  Entry entry = std::move(it->second);
  expiries_.erase(ExpiryKey(entry.expiry, level, delayed, it->first));
  (delayed ? queue.delayed : queue.waiting).erase(it);
  --size_;
  return entry;
}

std::vector<PriorityQueue::Expired> PriorityQueue::TakeExpired(absl::Time now) {
  std::vector<Expired> expired;
  while (!expiries_.empty() && std::get<0>(*expiries_.begin()) <= now) {
    const auto [expiry, level, delayed, key] = *expiries_.begin();
    Level& queue = levels_[level - 1];
    auto& tasks = delayed ? queue.delayed : queue.waiting;
    Entry entry = RemoveEntry(level, delayed, tasks.find(key));
    const absl::Duration waited = now - entry.task->enqueue_time;
    if (entry.task->deadline <= now) {
      expired.push_back(Expired{
          std::move(entry.task),
          absl::DeadlineExceededError(absl::StrCat("the request's deadline passed after ",
                                                   absl::FormatDuration(waited), " in queue"))});
    } else if (queue.policy.timeout_action == Policy::TimeoutAction::kReject) {
      expired.push_back(Expired{std::move(entry.task), absl::UnavailableError(absl::StrCat(
                                                           "request timeout expired: waited ",
                                                           absl::FormatDuration(waited),
                                                           " in the priority-", level, " queue"))});
    } else {
      // DELAY: behind every waiting task of this level; only the client deadline is left.
      entry.queue_deadline = absl::InfiniteFuture();
      entry.expiry = entry.task->deadline;
      const uint64_t delay_key = next_seq_++;
      expiries_.emplace(entry.expiry, level, true, delay_key);
      queue.delayed.emplace(delay_key, std::move(entry));
      ++size_;
    }
  }
  return expired;
}

absl::Time PriorityQueue::NextExpiry() const {
  return expiries_.empty() ? absl::InfiniteFuture() : std::get<0>(*expiries_.begin());
}

bool PriorityQueue::FindFront(uint32_t* level, bool* delayed) const {
  if (size_ == 0) return false;
  for (uint32_t l = 1; l <= levels(); ++l) {
    const Level& queue = levels_[l - 1];
    if (!queue.waiting.empty() || !queue.delayed.empty()) {
      *level = l;
      *delayed = queue.waiting.empty();
      return true;
    }
  }
  return false;
}

const PredictTask* PriorityQueue::Front() const {
  uint32_t level;
  bool delayed;
  if (!FindFront(&level, &delayed)) return nullptr;
  const Level& queue = levels_[level - 1];
  return (delayed ? queue.delayed : queue.waiting).begin()->second.task.get();
}

std::unique_ptr<PredictTask> PriorityQueue::PopFront() {
  uint32_t level;
  bool delayed;
  if (!FindFront(&level, &delayed)) return nullptr;
  Level& queue = levels_[level - 1];
  auto& tasks = delayed ? queue.delayed : queue.waiting;
  return RemoveEntry(level, delayed, tasks.begin()).task;
}

void PriorityQueue::ForEachInOrder(absl::FunctionRef<bool(const PredictTask&)> visit) const {
  if (size_ == 0) return;
  for (const Level& queue : levels_) {
    for (const auto* tasks : {&queue.waiting, &queue.delayed}) {
      for (const auto& [key, entry] : *tasks) {
        if (!visit(*entry.task)) return;
      }
    }
  }
}

std::vector<std::unique_ptr<PredictTask>> PriorityQueue::TakeAll() {
  std::vector<std::unique_ptr<PredictTask>> tasks;
  tasks.reserve(static_cast<size_t>(size_));
  for (Level& queue : levels_) {
    for (auto* level_tasks : {&queue.waiting, &queue.delayed}) {
      for (auto& [key, entry] : *level_tasks) tasks.push_back(std::move(entry.task));
      level_tasks->clear();
    }
  }
  expiries_.clear();
  size_ = 0;
  return tasks;
}

int64_t PriorityQueue::size(uint32_t level) const {
  if (level < 1 || level > levels()) return 0;
  const Level& queue = levels_[level - 1];
  return static_cast<int64_t>(queue.waiting.size() + queue.delayed.size());
}

int64_t PriorityQueue::delayed_size(uint32_t level) const {
  if (level < 1 || level > levels()) return 0;
  return static_cast<int64_t>(levels_[level - 1].delayed.size());
}

const PriorityQueue::Policy& PriorityQueue::policy(uint32_t level) const {
  if (level < 1 || level > levels()) {
    spdlog::critical("PriorityQueue::policy: level {} is not in [1, {}]", level, levels());
    std::abort();
  }
  return levels_[level - 1].policy;
}

}  // namespace forecastd
