#include "engine/serving/batcher.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "kernels/ref/finite.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using TimeoutAction = PriorityQueue::Policy::TimeoutAction;

// A generous real-time bound for things that happen at once: only a broken batcher (or a hung
// machine) reaches it; no test waits for it to pass. Timeouts under test run on a FakeClock.
const absl::Duration kSafety = absl::Seconds(30);
const absl::Duration kMs = absl::Milliseconds(1);
const absl::Duration kUs = absl::Microseconds(1);

constexpr int64_t kIn = 2;   // input floats per row
constexpr int64_t kOut = 3;  // output floats per row

// Row r of task `id` carries the tag id * 100 + r in its first input float, and the model
// below writes tag * 10 + j into output j of that row, so every output says where it came from.
float Tag(int64_t id, int64_t row) { return static_cast<float>(id * 100 + row); }

// Opens once; until then, whatever waits at it blocks.
class Gate {
 public:
  void Wait() {
    absl::MutexLock lock(&mu_);
    ++waiting_;
    mu_.Await(absl::Condition(&open_));
    --waiting_;
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  // Real-time synchronisation: true once `n` callers are blocked at the gate.
  bool WaitForWaiting(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return waiting_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kSafety);
  }

 private:
  absl::Mutex mu_;
  int waiting_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

// The model: records every batch (the tags of its rows), optionally blocks at a gate, and
// returns `status`.
class FakeModel {
 public:
  absl::Status Run(const float* input, int64_t rows, float* output, int /*worker*/) {
    std::vector<int64_t> tags;
    for (int64_t r = 0; r < rows; ++r) {
      tags.push_back(static_cast<int64_t>(input[r * kIn]));
      if (input[r * kIn + 1] != 0.5f) bad_inputs_++;
      for (int64_t j = 0; j < kOut; ++j) output[r * kOut + j] = input[r * kIn] * 10 + j;
    }
    {
      absl::MutexLock lock(&mu_);
      batches_.push_back(tags);
      ++running_;
      max_running_ = std::max(max_running_, running_);
    }
    if (gate_ != nullptr) gate_->Wait();
    absl::MutexLock lock(&mu_);
    --running_;
    return status_;
  }

  void set_gate(Gate* gate) { gate_ = gate; }  // before any batch runs
  void set_status(absl::Status status) { status_ = std::move(status); }

  // The task ids of each batch run so far, in row order (one entry per task).
  std::vector<std::vector<int64_t>> batch_ids() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::vector<int64_t>> ids;
    for (const std::vector<int64_t>& tags : batches_) {
      std::vector<int64_t> batch;
      for (int64_t tag : tags) {
        if (tag % 100 == 0) batch.push_back(tag / 100);  // a task's first row
      }
      ids.push_back(batch);
    }
    return ids;
  }
  std::vector<int64_t> batch_rows() const {
    absl::MutexLock lock(&mu_);
    std::vector<int64_t> rows;
    for (const std::vector<int64_t>& tags : batches_) rows.push_back(tags.size());
    return rows;
  }
  int64_t max_running() const {
    absl::MutexLock lock(&mu_);
    return max_running_;
  }
  int bad_inputs() const { return bad_inputs_.load(); }

 private:
  mutable absl::Mutex mu_;
  std::vector<std::vector<int64_t>> batches_ ABSL_GUARDED_BY(mu_);
  int64_t running_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t max_running_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<int> bad_inputs_{0};
  Gate* gate_ = nullptr;
  absl::Status status_;
};

// Every `done` call, by task id.
class Completions {
 public:
  void Add(int64_t id, PredictResult result) {
    absl::MutexLock lock(&mu_);
    results_[id].push_back(std::move(result));
    ++count_;
  }
  bool WaitFor(int64_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kSafety);
  }
  int64_t count() const {
    absl::MutexLock lock(&mu_);
    return count_;
  }
  int64_t times(int64_t id) const {
    absl::MutexLock lock(&mu_);
    const auto it = results_.find(id);
    return it == results_.end() ? 0 : static_cast<int64_t>(it->second.size());
  }
  // The result of `id`, which must have completed exactly once.
  PredictResult Get(int64_t id) const {
    REQUIRE(times(id) == 1);
    absl::MutexLock lock(&mu_);
    return results_.at(id).front();
  }

 private:
  mutable absl::Mutex mu_;
  std::map<int64_t, std::vector<PredictResult>> results_ ABSL_GUARDED_BY(mu_);
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

class CountingObserver : public BatcherObserver {
 public:
  void OnBatch(int64_t rows, int64_t tasks, int64_t benchmark_rows) override {
    absl::MutexLock lock(&mu_);
    ++batches_;
    rows_ += rows;
    batch_tasks_ += tasks;
    benchmark_rows_ += benchmark_rows;
  }
  void OnTaskDone(uint32_t priority, const absl::Status& status, absl::Duration,
                  absl::Duration) override {
    absl::MutexLock lock(&mu_);
    ++done_by_code_[status.code()];
    ++done_by_priority_[priority];
  }
  int64_t batches() const {
    absl::MutexLock lock(&mu_);
    return batches_;
  }
  int64_t rows() const {
    absl::MutexLock lock(&mu_);
    return rows_;
  }
  int64_t batch_tasks() const {
    absl::MutexLock lock(&mu_);
    return batch_tasks_;
  }
  int64_t benchmark_rows() const {
    absl::MutexLock lock(&mu_);
    return benchmark_rows_;
  }
  int64_t done(absl::StatusCode code) const {
    absl::MutexLock lock(&mu_);
    const auto it = done_by_code_.find(code);
    return it == done_by_code_.end() ? 0 : it->second;
  }
  int64_t done_at(uint32_t priority) const {
    absl::MutexLock lock(&mu_);
    const auto it = done_by_priority_.find(priority);
    return it == done_by_priority_.end() ? 0 : it->second;
  }

 private:
  mutable absl::Mutex mu_;
  int64_t batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t rows_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t batch_tasks_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t benchmark_rows_ ABSL_GUARDED_BY(mu_) = 0;
  std::map<absl::StatusCode, int64_t> done_by_code_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, int64_t> done_by_priority_ ABSL_GUARDED_BY(mu_);
};

struct TaskSpec {
  int64_t id = 0;
  int64_t rows = 1;
  uint32_t priority = 0;
  absl::Duration timeout_override = absl::ZeroDuration();
  absl::Time deadline = absl::InfiniteFuture();
  bool benchmark = false;
};

std::unique_ptr<PredictTask> MakeTask(const TaskSpec& spec, Completions* completions) {
  auto task = std::make_unique<PredictTask>();
  task->rows = spec.rows;
  task->benchmark = spec.benchmark;
  for (int64_t r = 0; r < spec.rows; ++r) {
    task->input.push_back(Tag(spec.id, r));
    task->input.push_back(0.5f);
  }
  task->priority = spec.priority;
  task->timeout_override = spec.timeout_override;
  task->deadline = spec.deadline;
  task->done = [completions, id = spec.id](PredictResult result) {
    completions->Add(id, std::move(result));
  };
  return task;
}

// Has `task` note the thread its completion runs on in *ran_on before it completes.
void NoteCompletionThread(PredictTask& task, std::thread::id* ran_on) {
  task.done = [ran_on, done = std::move(task.done)](PredictResult result) {
    *ran_on = std::this_thread::get_id();
    done(std::move(result));
  };
}

// Everything a batcher test needs, destroyed batcher first.
struct Harness {
  explicit Harness(int num_workers = 1) {
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = num_workers;
    scheduler_options.clock = &clock;
    scheduler = *DeviceScheduler::Create(scheduler_options);
    options.max_batch_size = 8;
    options.input_floats_per_row = kIn;
    options.output_floats_per_row = kOut;
    options.version = 7;
    options.run_batch = [this](const float* input, int64_t rows, float* output, const DeviceRowsIo&,
                               int worker) { return model.Run(input, rows, output, worker); };
    options.scheduler = scheduler.get();
    options.clock = &clock;
    options.observer = &observer;
  }

  void Start() {
    absl::StatusOr<std::unique_ptr<Batcher>> created = Batcher::Create(options);
    REQUIRE(created.ok());
    batcher = *std::move(created);
  }

  absl::Status Enqueue(const TaskSpec& spec) {
    std::unique_ptr<PredictTask> task = MakeTask(spec, &completions);
    absl::Status status = batcher->Enqueue(task);
    REQUIRE(status.ok() == (task == nullptr));  // ownership moved iff OK
    return status;
  }
  void EnqueueOk(const TaskSpec& spec) { REQUIRE(Enqueue(spec).ok()); }

  // Occupies a scheduler worker until `gate` opens (the batcher's batches then queue).
  void BlockWorker(Gate* gate) {
    scheduler->Submit(0, absl::InfiniteFuture(), [gate](int, bool) { gate->Wait(); });
    REQUIRE(gate->WaitForWaiting(1));
  }

  // The output of `id` (`rows` rows) is its own, OK and correctly routed.
  void CheckComputed(int64_t id, int64_t rows) {
    PredictResult result = completions.Get(id);
    REQUIRE(result.status.ok());
    REQUIRE(result.version == 7);
    REQUIRE(static_cast<int64_t>(result.output.size()) == rows * kOut);
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = 0; j < kOut; ++j) {
        REQUIRE(result.output[r * kOut + j] == Tag(id, r) * 10 + j);
      }
    }
  }

  FakeClock clock;
  FakeModel model;
  Completions completions;
  CountingObserver observer;
  std::unique_ptr<DeviceScheduler> scheduler;
  Batcher::Options options;
  std::unique_ptr<Batcher> batcher;
};

using Ids = std::vector<std::vector<int64_t>>;

TEST_CASE("Batcher::Create rejects bad options", "[unit][batcher]") {
  Harness h;
  auto rejects = [&](const std::function<void(Batcher::Options&)>& change) {
    Batcher::Options options = h.options;
    change(options);
    return Batcher::Create(options).status().code() == absl::StatusCode::kInvalidArgument;
  };
  REQUIRE(Batcher::Create(h.options).ok());
  REQUIRE(rejects([](Batcher::Options& o) { o.max_batch_size = 0; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.preferred_batch_sizes = {4, 9}; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.preferred_batch_sizes = {0}; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.max_queue_delay = -kUs; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.input_floats_per_row = 0; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.output_floats_per_row = 0; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.max_enqueued_batches = -1; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.min_spread_rows = 0; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.run_batch = nullptr; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.scheduler = nullptr; }));
  REQUIRE(rejects([](Batcher::Options& o) { o.queue.default_level = 2; }));
}

TEST_CASE("Enqueue refuses bad tasks and leaves them with the caller", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 4;
  h.options.queue.levels = 2;
  h.Start();
  REQUIRE(h.Enqueue({.id = 1, .rows = 5}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(h.Enqueue({.id = 2, .rows = 0}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(h.Enqueue({.id = 3, .priority = 3}).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(h.Enqueue({.id = 4, .deadline = h.clock.Now()}).code() ==
          absl::StatusCode::kDeadlineExceeded);

  std::unique_ptr<PredictTask> task = MakeTask({.id = 5, .rows = 2}, &h.completions);
  task->input.pop_back();
  REQUIRE(h.batcher->Enqueue(task).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(task != nullptr);
  task = MakeTask({.id = 6}, &h.completions);
  task->done = nullptr;
  REQUIRE(h.batcher->Enqueue(task).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(task != nullptr);
  std::unique_ptr<PredictTask> null_task;
  REQUIRE(h.batcher->Enqueue(null_task).code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(h.batcher->in_flight_tasks() == 0);
  REQUIRE(h.completions.count() == 0);
  h.EnqueueOk({.id = 7, .rows = 4});  // exactly max_batch_size is fine
  REQUIRE(h.completions.WaitFor(1));
  h.CheckComputed(7, 4);
}

TEST_CASE("A worker's staging buffers carry the batch: task bytes in, forecasts out to each task",
          "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 5;  // the two tasks' 2 + 3 rows close one batch
  h.options.max_queue_delay = absl::Seconds(1);
  std::vector<float> staged_input(static_cast<size_t>(h.options.max_batch_size * kIn));
  std::vector<float> staged_output(static_cast<size_t>(h.options.max_batch_size * kOut));
  std::atomic<int> unstaged_batches{0};
  std::atomic<int> other_workers{0};  // counted here, checked on the test's thread
  h.options.staging = [&](int worker) {
    if (worker != 0) other_workers++;
    return Batcher::Staging{staged_input.data(), staged_output.data()};
  };
  h.options.run_batch = [&](const float* input, int64_t rows, float* output, const DeviceRowsIo&,
                            int worker) {
    if (input != staged_input.data() || output != staged_output.data()) unstaged_batches++;
    return h.model.Run(input, rows, output, worker);
  };
  h.Start();
  // Each task's windows are bytes the caller keeps (as a request message does), and its
  // forecasts go to a buffer of the caller's (as a reply message's).
  std::vector<std::string> inputs(2), outputs(2);
  for (int64_t id = 1; id <= 2; ++id) {
    const int64_t rows = id + 1;
    std::unique_ptr<PredictTask> task = MakeTask({.id = id, .rows = rows}, &h.completions);
    std::string& bytes = inputs[static_cast<size_t>(id - 1)];
    bytes.assign(reinterpret_cast<const char*>(task->input.data()),
                 task->input.size() * sizeof(float));
    task->input.clear();
    task->input_bytes = bytes;
    std::string& out = outputs[static_cast<size_t>(id - 1)];
    out.resize(static_cast<size_t>(rows * kOut) * sizeof(float));
    task->output = out.data();
    REQUIRE(h.batcher->Enqueue(task).ok());
  }
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(unstaged_batches.load() == 0);
  REQUIRE(other_workers.load() == 0);
  REQUIRE(h.model.batch_ids() == Ids{{1, 2}});
  for (int64_t id = 1; id <= 2; ++id) {
    const PredictResult result = h.completions.Get(id);
    REQUIRE(result.status.ok());
    REQUIRE(result.output.empty());  // the forecasts are in the task's buffer
    const std::string& out = outputs[static_cast<size_t>(id - 1)];
    std::vector<float> forecasts(out.size() / sizeof(float));
    std::memcpy(forecasts.data(), out.data(), out.size());
    for (int64_t r = 0; r < id + 1; ++r) {
      for (int64_t j = 0; j < kOut; ++j) {
        REQUIRE(forecasts[static_cast<size_t>(r * kOut + j)] == Tag(id, r) * 10 + j);
      }
    }
  }
}

TEST_CASE("A batch closes as soon as it holds max_batch_size rows", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 4;
  h.options.max_queue_delay = absl::Hours(1);
  h.Start();
  for (int64_t id = 1; id <= 3; ++id) h.EnqueueOk({.id = id});
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 3);
  REQUIRE(h.model.batch_ids().empty());
  h.EnqueueOk({.id = 4});
  REQUIRE(h.completions.WaitFor(4));  // with the clock never moved
  REQUIRE(h.model.batch_ids() == Ids{{1, 2, 3, 4}});
  for (int64_t id = 1; id <= 4; ++id) {
    h.CheckComputed(id, 1);
    REQUIRE(h.completions.Get(id).batch_rows == 4);
  }
  // A task counts as in flight until its `done` has returned; Drain waits for that.
  h.batcher->Drain();
  REQUIRE(h.batcher->in_flight_tasks() == 0);
}

TEST_CASE("max_queue_delay closes a batch exactly when its oldest task has waited it",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = 10 * kMs;
  h.Start();
  const absl::Time t0 = h.clock.Now();
  h.EnqueueOk({.id = 1});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(4 * kMs);
  h.EnqueueOk({.id = 2, .rows = 2});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(6 * kMs - kUs);  // t0 + 10ms - 1us
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 2);
  REQUIRE(h.model.batch_ids().empty());
  h.clock.Advance(kUs);  // t0 + 10ms
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.model.batch_ids() == Ids{{1, 2}});
  h.CheckComputed(1, 1);
  h.CheckComputed(2, 2);
  REQUIRE(h.clock.Now() == t0 + 10 * kMs);
  REQUIRE(h.completions.Get(1).queue_time == 10 * kMs);
  REQUIRE(h.completions.Get(2).queue_time == 6 * kMs);
  REQUIRE(h.completions.Get(1).compute_time == absl::ZeroDuration());  // the fake clock stood
  REQUIRE(h.completions.Get(2).batch_rows == 3);
}

TEST_CASE("With run_inline_when_idle a task for an idle batcher runs at once on Enqueue's thread",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = 10 * kMs;
  h.options.run_inline_when_idle = true;
  h.Start();
  std::thread::id ran_on;
  auto task = MakeTask({.id = 1, .rows = 2}, &h.completions);
  NoteCompletionThread(*task, &ran_on);
  REQUIRE(h.batcher->Enqueue(task).ok());
  // Done before Enqueue returned, on this thread, with no wait for max_queue_delay (the fake
  // clock never moved).
  REQUIRE(h.completions.count() == 1);
  REQUIRE(ran_on == std::this_thread::get_id());
  h.CheckComputed(1, 2);
  REQUIRE(h.completions.Get(1).queue_time == absl::ZeroDuration());
  REQUIRE(h.model.batch_ids() == Ids{{1}});
  REQUIRE(h.batcher->in_flight_tasks() == 0);
}

TEST_CASE("With run_inline_when_idle tasks that arrive while one runs inline queue and batch",
          "[unit][batcher]") {
  Harness h(/*num_workers=*/2);
  h.options.max_queue_delay = 10 * kMs;
  h.options.run_inline_when_idle = true;
  Gate gate;
  h.model.set_gate(&gate);
  h.Start();
  absl::Status first_status;
  std::thread first([&h, &first_status] {
    std::unique_ptr<PredictTask> task = MakeTask({.id = 1}, &h.completions);
    first_status = h.batcher->Enqueue(task);
  });
  REQUIRE(gate.WaitForWaiting(1));  // task 1 runs inline on `first`, held at the gate
  h.EnqueueOk({.id = 2});
  h.EnqueueOk({.id = 3, .rows = 2});
  // Queued behind it, as a batch forming for max_queue_delay: not run inline.
  REQUIRE(h.completions.count() == 0);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 2);
  gate.Open();
  first.join();
  REQUIRE(first_status.ok());
  REQUIRE(h.completions.WaitFor(1));
  h.clock.Advance(10 * kMs);
  REQUIRE(h.completions.WaitFor(3));
  REQUIRE(h.model.batch_ids() == Ids{{1}, {2, 3}});
  h.CheckComputed(1, 1);
  h.CheckComputed(2, 1);
  h.CheckComputed(3, 2);
}

TEST_CASE("With run_inline_when_idle a task arriving while the last batch replies runs inline",
          "[unit][batcher]") {
  Harness h(/*num_workers=*/2);
  h.options.max_queue_delay = 10 * kMs;
  h.options.run_inline_when_idle = true;
  h.Start();
  // Task 1 runs inline on `first` and holds its reply there, as a slow reply write would.
  absl::Notification replying, release;
  absl::Status first_status;
  std::thread first([&h, &replying, &release, &first_status] {
    std::unique_ptr<PredictTask> task = MakeTask({.id = 1}, &h.completions);
    auto done = std::move(task->done);
    task->done = [&replying, &release, done = std::move(done)](PredictResult result) {
      replying.Notify();
      release.WaitForNotification();
      done(std::move(result));
    };
    first_status = h.batcher->Enqueue(task);
  });
  REQUIRE(replying.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // The batch has computed: task 2 runs here and now, not after max_queue_delay on a worker.
  std::thread::id ran_on;
  auto task = MakeTask({.id = 2, .rows = 2}, &h.completions);
  NoteCompletionThread(*task, &ran_on);
  REQUIRE(h.batcher->Enqueue(task).ok());
  REQUIRE(ran_on == std::this_thread::get_id());
  REQUIRE(h.completions.count() == 1);
  REQUIRE(h.completions.Get(2).queue_time == absl::ZeroDuration());
  release.Notify();
  first.join();
  REQUIRE(first_status.ok());
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.model.batch_ids() == Ids{{1}, {2}});
  h.CheckComputed(1, 1);
  h.CheckComputed(2, 2);
}

// A start_batch that computes at once (FakeModel::Run) but keeps `finish` for the test to
// call, from whatever thread it likes, as a GPU's completion thread would.
class StartedBatches {
 public:
  void Start(Harness& h, const float* input, int64_t rows, float* output, int worker,
             absl::AnyInvocable<void(absl::Status) &&> finish) {
    absl::Status status = h.model.Run(input, rows, output, worker);
    absl::MutexLock lock(&mu_);
    pending_.push_back({std::move(finish), std::move(status)});
  }
  // Starts h's batcher with tasks inline when idle and these as its start_batch.
  void StartBatcher(Harness& h) {
    h.options.run_inline_when_idle = true;
    h.options.start_batch = [this, &h](const float* input, int64_t rows, float* output,
                                       const DeviceRowsIo&, int worker,
                                       absl::AnyInvocable<void(absl::Status) &&> finish) {
      Start(h, input, rows, output, worker, std::move(finish));
    };
    h.Start();
  }
  int64_t pending() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(pending_.size());
  }
  // Finishes the oldest started batch, on the calling thread, with its run's status or
  // `status` when given.
  void FinishOldest(std::optional<absl::Status> status = std::nullopt) {
    Pending p;
    {
      absl::MutexLock lock(&mu_);
      REQUIRE_FALSE(pending_.empty());
      p = std::move(pending_.front());
      pending_.erase(pending_.begin());
    }
    std::move(p.finish)(status.has_value() ? *status : p.status);
  }

 private:
  struct Pending {
    absl::AnyInvocable<void(absl::Status) &&> finish;
    absl::Status status;
  };
  mutable absl::Mutex mu_;
  std::vector<Pending> pending_ ABSL_GUARDED_BY(mu_);
};

TEST_CASE("A batch started inline completes when its finish runs - on the finishing thread",
          "[unit][batcher]") {
  Harness h;  // one worker slot, which the started batch holds
  h.options.max_queue_delay = 10 * kMs;
  StartedBatches started;
  started.StartBatcher(h);
  std::thread::id ran_on;
  auto task = MakeTask({.id = 1, .rows = 2}, &h.completions);
  NoteCompletionThread(*task, &ran_on);
  REQUIRE(h.batcher->Enqueue(task).ok());
  // Started at once, without max_queue_delay, and not completed: Enqueue returned first.
  REQUIRE(started.pending() == 1);
  REQUIRE(h.completions.count() == 0);
  REQUIRE(h.batcher->in_flight_tasks() == 1);
  // Its slot stays busy, so a task arriving now neither runs inline nor finds a worker.
  REQUIRE(h.scheduler->busy_workers() == 1);
  h.EnqueueOk({.id = 2});
  h.clock.Advance(10 * kMs);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.model.batch_ids() == Ids{{1}});
  // Finished from another thread: the task completes there, with its own rows.
  std::thread::id finisher;
  std::thread finishing([&started, &finisher] {
    finisher = std::this_thread::get_id();
    started.FinishOldest();
  });
  finishing.join();
  REQUIRE(ran_on == finisher);
  h.CheckComputed(1, 2);
  REQUIRE(h.completions.Get(1).queue_time == absl::ZeroDuration());
  // The slot is free again: the queued task runs on the worker (run_batch, not started).
  REQUIRE(h.completions.WaitFor(2));
  h.CheckComputed(2, 1);
  REQUIRE(h.model.batch_ids() == Ids{{1}, {2}});
  REQUIRE(started.pending() == 0);
  // Task 2's batch counts itself out just after its `done`; Drain waits for that.
  h.batcher->Drain();
  REQUIRE(h.batcher->in_flight_tasks() == 0);
  REQUIRE(h.observer.batches() == 2);
}

TEST_CASE("A started batch's error goes to its tasks - and the batcher stays usable",
          "[unit][batcher]") {
  Harness h;
  StartedBatches started;
  started.StartBatcher(h);
  h.EnqueueOk({.id = 1});
  REQUIRE(started.pending() == 1);
  started.FinishOldest(absl::InternalError("the device failed"));
  REQUIRE(h.completions.Get(1).status.code() == absl::StatusCode::kInternal);
  REQUIRE(h.completions.Get(1).output.empty());
  REQUIRE(h.scheduler->busy_workers() == 0);
  h.EnqueueOk({.id = 2});
  started.FinishOldest();
  h.CheckComputed(2, 1);
  REQUIRE(h.batcher->in_flight_tasks() == 0);
}

TEST_CASE("The batcher's destruction waits for a started batch to finish", "[unit][batcher]") {
  Harness h;
  StartedBatches started;
  started.StartBatcher(h);
  h.EnqueueOk({.id = 1});
  REQUIRE(started.pending() == 1);
  std::atomic<bool> destroyed{false};
  std::thread destroying([&h, &destroyed] {
    h.batcher.reset();
    destroyed = true;
  });
  absl::SleepFor(20 * kMs);  // real time: destruction must still be waiting
  REQUIRE_FALSE(destroyed);
  started.FinishOldest();
  destroying.join();
  REQUIRE(destroyed);
  h.CheckComputed(1, 1);
}

TEST_CASE("With run_inline_when_idle and no idle worker a task queues as usual",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = 10 * kMs;
  h.options.run_inline_when_idle = true;
  h.Start();
  Gate gate;
  h.BlockWorker(&gate);  // the only worker is busy with other work
  h.EnqueueOk({.id = 1});
  REQUIRE(h.completions.count() == 0);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 1);
  h.clock.Advance(10 * kMs);
  gate.Open();
  REQUIRE(h.completions.WaitFor(1));
  h.CheckComputed(1, 1);
  REQUIRE(h.completions.Get(1).queue_time == 10 * kMs);
}

TEST_CASE("max_queue_delay of zero dispatches whatever is queued at once", "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::ZeroDuration();
  h.Start();
  h.EnqueueOk({.id = 1});
  REQUIRE(h.completions.WaitFor(1));
  h.EnqueueOk({.id = 2, .rows = 3});
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.model.batch_ids() == Ids{{1}, {2}});
  h.CheckComputed(1, 1);  // single-task batches run on the task's own buffers
  h.CheckComputed(2, 3);
}

TEST_CASE("Reaching a preferred batch size closes the batch", "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::Hours(1);
  h.options.preferred_batch_sizes = {3};
  h.Start();
  h.EnqueueOk({.id = 1});
  h.EnqueueOk({.id = 2});
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 2);
  h.EnqueueOk({.id = 3});
  REQUIRE(h.completions.WaitFor(3));
  REQUIRE(h.model.batch_rows() == std::vector<int64_t>{3});

  // Tasks are not split to hit a preferred size: 2 + 2 rows jump past 3, and a batch past
  // every preferred size goes at once rather than waiting for max_batch_size.
  h.EnqueueOk({.id = 4, .rows = 2});
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 1);
  h.EnqueueOk({.id = 5, .rows = 2});
  REQUIRE(h.completions.WaitFor(5));
  REQUIRE(h.model.batch_ids() == Ids{{1, 2, 3}, {4, 5}});
  REQUIRE(h.completions.Get(5).queue_time == absl::ZeroDuration());  // the clock never moved
}

TEST_CASE("With more queued than a preferred size - the largest reachable one is taken",
          "[unit][batcher]") {
  Harness h;  // one worker
  h.options.max_queue_delay = absl::Hours(1);
  h.options.preferred_batch_sizes = {4, 2};
  h.options.max_enqueued_batches = 1;
  h.Start();
  Gate worker_gate;
  h.BlockWorker(&worker_gate);
  h.EnqueueOk({.id = 1});
  h.EnqueueOk({.id = 2});  // preferred size 2: handed to the scheduler, waits for the worker
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 0);
  for (int64_t id = 3; id <= 7; ++id) h.EnqueueOk({.id = id});
  // max_enqueued_batches holds them: the queue grows while the device is busy.
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 5);
  worker_gate.Open();
  REQUIRE(h.completions.WaitFor(6));
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.model.batch_ids() == Ids{{1, 2}, {3, 4, 5, 6}});  // 4 of the 5 rows
  REQUIRE(h.batcher->queued_tasks() == 1);
  h.clock.Advance(absl::Hours(1));
  REQUIRE(h.completions.WaitFor(7));
  REQUIRE(h.model.batch_ids() == Ids{{1, 2}, {3, 4, 5, 6}, {7}});
  for (int64_t id = 1; id <= 7; ++id) h.CheckComputed(id, 1);
}

TEST_CASE("A batch takes tasks by priority level - FIFO within a level", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 16;
  h.options.max_queue_delay = 10 * kMs;
  h.options.queue.levels = 3;
  h.options.queue.default_level = 2;
  h.Start();
  h.EnqueueOk({.id = 1, .priority = 3});
  h.EnqueueOk({.id = 2, .rows = 2, .priority = 0});  // default: level 2
  h.EnqueueOk({.id = 3, .priority = 1});
  h.EnqueueOk({.id = 4, .priority = 2});
  h.EnqueueOk({.id = 5, .rows = 3, .priority = 1});
  h.EnqueueOk({.id = 6, .priority = 3});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(10 * kMs);
  REQUIRE(h.completions.WaitFor(6));
  REQUIRE(h.model.batch_ids() == Ids{{3, 5, 2, 4, 1, 6}});
  h.CheckComputed(5, 3);
  h.CheckComputed(2, 2);
  REQUIRE(h.observer.done_at(1) == 2);
  REQUIRE(h.observer.done_at(2) == 2);
  REQUIRE(h.observer.done_at(3) == 2);
}

TEST_CASE("A task is never split - and a smaller one behind it never jumps ahead",
          "[unit][batcher]") {
  Harness h;  // one worker
  h.options.max_batch_size = 4;
  h.options.max_queue_delay = absl::Hours(1);
  h.options.max_enqueued_batches = 1;
  h.Start();
  Gate worker_gate;
  h.BlockWorker(&worker_gate);
  h.EnqueueOk({.id = 1, .rows = 4});  // full: handed over, waits for the worker
  h.batcher->WaitUntilIdleForTesting();
  h.EnqueueOk({.id = 2, .rows = 3});
  h.EnqueueOk({.id = 3, .rows = 2});
  h.EnqueueOk({.id = 4, .rows = 1});  // would fit beside task 2, but task 3 is first
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 3);
  worker_gate.Open();
  // Task 2 cannot grow (task 3 does not fit), so it goes alone at once; 3 and 4 then wait.
  REQUIRE(h.completions.WaitFor(2));
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 2);
  h.clock.Advance(absl::Hours(1));
  REQUIRE(h.completions.WaitFor(4));
  REQUIRE(h.model.batch_ids() == Ids{{1}, {2}, {3, 4}});
  REQUIRE(h.model.batch_rows() == std::vector<int64_t>{4, 3, 3});
  h.CheckComputed(1, 4);
  h.CheckComputed(2, 3);
  h.CheckComputed(3, 2);
  h.CheckComputed(4, 1);
}

TEST_CASE("A full level answers RESOURCE_EXHAUSTED - the task stays the caller's",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::Hours(1);
  h.options.queue.levels = 2;
  h.options.queue.level_policies[1].max_queue_size = 2;
  h.Start();
  h.EnqueueOk({.id = 1, .priority = 1});
  h.EnqueueOk({.id = 2, .priority = 1});
  REQUIRE(h.Enqueue({.id = 3, .priority = 1}).code() == absl::StatusCode::kResourceExhausted);
  h.EnqueueOk({.id = 4, .priority = 2});  // another level has room
  REQUIRE(h.batcher->in_flight_tasks() == 3);
  h.clock.Advance(absl::Hours(1));
  REQUIRE(h.completions.WaitFor(3));
  REQUIRE(h.completions.times(3) == 0);
  h.EnqueueOk({.id = 5, .priority = 1});  // room again
  REQUIRE(h.batcher->queued_tasks() == 1);
}

TEST_CASE("REJECT completes a task with UNAVAILABLE when its queue timeout passes",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::Hours(1);
  h.options.queue.default_policy.default_timeout = 5 * kMs;
  h.options.queue.default_policy.timeout_action = TimeoutAction::kReject;
  h.Start();
  h.EnqueueOk({.id = 1});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(5 * kMs - kUs);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.completions.count() == 0);
  REQUIRE(h.batcher->queued_tasks() == 1);
  h.clock.Advance(kUs);
  REQUIRE(h.completions.WaitFor(1));
  const PredictResult result = h.completions.Get(1);
  REQUIRE(result.status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(result.output.empty());
  REQUIRE(result.queue_time == 5 * kMs);
  REQUIRE(result.compute_time == absl::ZeroDuration());
  REQUIRE(h.model.batch_ids().empty());  // never computed
  h.batcher->WaitUntilIdleForTesting();  // the batcher thread has counted it out
  REQUIRE(h.batcher->in_flight_tasks() == 0);
  REQUIRE(h.observer.done(absl::StatusCode::kUnavailable) == 1);
  REQUIRE(h.observer.batches() == 0);
}

TEST_CASE("A timeout override only shortens the level's timeout", "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::Hours(1);
  h.options.queue.default_policy.default_timeout = 10 * kMs;
  h.options.queue.default_policy.allow_timeout_override = true;
  h.Start();
  h.EnqueueOk({.id = 1, .timeout_override = 20 * kMs});  // longer: ignored
  h.EnqueueOk({.id = 2, .timeout_override = 3 * kMs});   // shorter: applies
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(3 * kMs);
  REQUIRE(h.completions.WaitFor(1));
  REQUIRE(h.completions.Get(2).status.code() == absl::StatusCode::kUnavailable);
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(7 * kMs - kUs);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.completions.times(1) == 0);
  h.clock.Advance(kUs);
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.completions.Get(1).status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(h.completions.Get(1).queue_time == 10 * kMs);
}

TEST_CASE("DELAY moves a timed-out task behind the others - it is still computed",
          "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = 20 * kMs;
  h.options.queue.default_policy.timeout_action = TimeoutAction::kDelay;
  h.options.queue.default_policy.allow_timeout_override = true;
  h.Start();
  h.EnqueueOk({.id = 1, .timeout_override = 5 * kMs});
  h.clock.Advance(kMs);
  h.EnqueueOk({.id = 2});
  h.clock.Advance(kMs);
  h.EnqueueOk({.id = 3, .rows = 2});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(3 * kMs);  // task 1's timeout: delayed, not completed
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.completions.count() == 0);
  REQUIRE(h.batcher->queued_tasks() == 3);
  h.clock.Advance(15 * kMs);  // task 1 has waited max_queue_delay
  REQUIRE(h.completions.WaitFor(3));
  REQUIRE(h.model.batch_ids() == Ids{{2, 3, 1}});
  h.CheckComputed(1, 1);
  h.CheckComputed(2, 1);
  h.CheckComputed(3, 2);
  REQUIRE(h.completions.Get(1).queue_time == 20 * kMs);
}

TEST_CASE("A task whose deadline passes in the queue is never computed", "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = 10 * kMs;
  h.Start();
  const absl::Time t0 = h.clock.Now();
  h.EnqueueOk({.id = 1, .deadline = t0 + 5 * kMs});
  h.EnqueueOk({.id = 2});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(5 * kMs - kUs);
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.completions.count() == 0);
  h.clock.Advance(kUs);
  REQUIRE(h.completions.WaitFor(1));
  REQUIRE(h.completions.Get(1).status.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(h.completions.Get(1).queue_time == 5 * kMs);
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(5 * kMs);
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.model.batch_ids() == Ids{{2}});
  h.CheckComputed(2, 1);
}

TEST_CASE("A task whose deadline passes while its batch waits for a worker is not computed",
          "[unit][batcher]") {
  Harness h;  // one worker
  h.options.max_batch_size = 3;
  h.options.max_queue_delay = absl::Hours(1);
  h.Start();
  Gate worker_gate;
  h.BlockWorker(&worker_gate);
  const absl::Time t0 = h.clock.Now();
  h.EnqueueOk({.id = 1, .deadline = t0 + 5 * kMs});
  h.EnqueueOk({.id = 2, .rows = 2});  // full: the batch {1, 2} goes to the busy scheduler
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 0);
  h.clock.Advance(5 * kMs);  // the worker starts late
  worker_gate.Open();
  REQUIRE(h.completions.WaitFor(2));
  REQUIRE(h.completions.Get(1).status.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(h.model.batch_ids() == Ids{{2}});  // run_batch never saw task 1's row
  h.CheckComputed(2, 2);
  REQUIRE(h.completions.Get(2).batch_rows == 2);
  REQUIRE(h.observer.batches() == 1);
  REQUIRE(h.observer.rows() == 2);
}

TEST_CASE("A run_batch error goes to every task of the batch", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 4;
  h.options.max_queue_delay = absl::Hours(1);
  h.model.set_status(absl::InternalError("device fell over"));
  h.Start();
  h.EnqueueOk({.id = 1});
  h.EnqueueOk({.id = 2, .rows = 2});
  h.EnqueueOk({.id = 3});
  REQUIRE(h.completions.WaitFor(3));
  for (int64_t id = 1; id <= 3; ++id) {
    const PredictResult result = h.completions.Get(id);
    REQUIRE(result.status.code() == absl::StatusCode::kInternal);
    REQUIRE(result.status.message() == "device fell over");
    REQUIRE(result.output.empty());
    REQUIRE(result.batch_rows == 4);
  }
  REQUIRE(h.observer.done(absl::StatusCode::kInternal) == 3);
}

TEST_CASE("Outputs go back to the task whose rows produced them", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 16;
  h.options.max_queue_delay = kMs;
  h.options.queue.levels = 2;
  h.Start();
  const std::vector<TaskSpec> specs = {{.id = 11, .rows = 1, .priority = 2},
                                       {.id = 12, .rows = 3, .priority = 1},
                                       {.id = 13, .rows = 2, .priority = 2},
                                       {.id = 14, .rows = 4, .priority = 1}};
  for (const TaskSpec& spec : specs) h.EnqueueOk(spec);
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(kMs);
  REQUIRE(h.completions.WaitFor(4));
  REQUIRE(h.model.batch_ids() == Ids{{12, 14, 11, 13}});  // rows reordered by priority...
  for (const TaskSpec& spec : specs) h.CheckComputed(spec.id, spec.rows);  // ...routed back
  REQUIRE(h.model.bad_inputs() == 0);
}

TEST_CASE("Batches reach the scheduler at their best priority and earliest deadline",
          "[unit][batcher]") {
  Harness h;  // one worker
  h.options.max_batch_size = 1;
  h.options.queue.levels = 2;
  h.Start();
  Gate worker_gate;
  h.BlockWorker(&worker_gate);
  const absl::Time t0 = h.clock.Now();
  h.EnqueueOk({.id = 1, .priority = 2});
  h.EnqueueOk({.id = 2, .priority = 1, .deadline = t0 + absl::Hours(2)});
  h.EnqueueOk({.id = 3, .priority = 1, .deadline = t0 + absl::Hours(1)});
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.scheduler->queued() == 3);
  worker_gate.Open();
  REQUIRE(h.completions.WaitFor(3));
  REQUIRE(h.model.batch_ids() == Ids{{3}, {2}, {1}});
}

TEST_CASE("With spread_over_idle_workers the free workers share what is queued",
          "[unit][batcher]") {
  Harness h(/*num_workers=*/4);
  h.options.max_batch_size = 16;
  h.options.max_queue_delay = 10 * kMs;
  h.options.spread_over_idle_workers = true;
  Gate model_gate;
  h.model.set_gate(&model_gate);  // each batch keeps its worker busy
  h.Start();
  for (int64_t id = 1; id <= 8; ++id) h.EnqueueOk({.id = id});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(10 * kMs);
  // 8 rows, 4 free workers: 2 rows; then 6 rows for 3, 4 for 2, 2 for 1.
  REQUIRE(model_gate.WaitForWaiting(4));
  std::vector<std::vector<int64_t>> batches = h.model.batch_ids();
  std::sort(batches.begin(), batches.end());
  REQUIRE(batches == Ids{{1, 2}, {3, 4}, {5, 6}, {7, 8}});
  model_gate.Open();
  REQUIRE(h.completions.WaitFor(8));
  for (int64_t id = 1; id <= 8; ++id) h.CheckComputed(id, 1);
}

TEST_CASE("With min_spread_rows a cut batch keeps at least that many rows", "[unit][batcher]") {
  Harness h(/*num_workers=*/4);
  h.options.max_batch_size = 16;
  h.options.max_queue_delay = 10 * kMs;
  h.options.spread_over_idle_workers = true;
  h.options.min_spread_rows = 3;
  Gate model_gate;
  h.model.set_gate(&model_gate);
  h.Start();
  for (int64_t id = 1; id <= 8; ++id) h.EnqueueOk({.id = id});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(10 * kMs);
  // 8 rows on 4 free workers would be 4 batches of 2; at least 3 rows each: 3, 3, then the 2
  // that are left (fewer than 3 queued are never held back).
  REQUIRE(model_gate.WaitForWaiting(3));
  std::vector<std::vector<int64_t>> batches = h.model.batch_ids();
  std::sort(batches.begin(), batches.end());
  REQUIRE(batches == Ids{{1, 2, 3}, {4, 5, 6}, {7, 8}});
  model_gate.Open();
  REQUIRE(h.completions.WaitFor(8));
  for (int64_t id = 1; id <= 8; ++id) h.CheckComputed(id, 1);
}

TEST_CASE("With spread_over_idle_workers and every worker busy the batch stays whole",
          "[unit][batcher]") {
  Harness h(/*num_workers=*/2);
  h.options.max_queue_delay = 10 * kMs;
  h.options.spread_over_idle_workers = true;
  h.Start();
  Gate busy;
  h.BlockWorker(&busy);
  h.BlockWorker(&busy);
  for (int64_t id = 1; id <= 4; ++id) h.EnqueueOk({.id = id, .rows = 2});
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(10 * kMs);
  h.batcher->WaitUntilIdleForTesting();
  busy.Open();
  REQUIRE(h.completions.WaitFor(4));
  REQUIRE(h.model.batch_ids() == Ids{{1, 2, 3, 4}});
}

TEST_CASE("Batches of one model run on several workers at once", "[unit][batcher]") {
  Harness h(/*num_workers=*/2);
  h.options.max_batch_size = 1;
  Gate model_gate;
  h.model.set_gate(&model_gate);
  h.Start();
  h.EnqueueOk({.id = 1});
  h.EnqueueOk({.id = 2});
  REQUIRE(model_gate.WaitForWaiting(2));  // both inside run_batch together
  REQUIRE(h.model.max_running() == 2);
  model_gate.Open();
  REQUIRE(h.completions.WaitFor(2));
  h.CheckComputed(1, 1);
  h.CheckComputed(2, 1);
}

TEST_CASE("Drain computes what is queued at once - then refuses new tasks", "[unit][batcher]") {
  Harness h;
  h.options.max_queue_delay = absl::Hours(1);
  h.Start();
  for (int64_t id = 1; id <= 3; ++id) h.EnqueueOk({.id = id});
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->in_flight_tasks() == 3);
  h.batcher->Drain();  // no need to wait for max_queue_delay: nothing more can come
  REQUIRE(h.completions.count() == 3);
  REQUIRE(h.batcher->in_flight_tasks() == 0);
  REQUIRE(h.model.batch_ids() == Ids{{1, 2, 3}});
  const absl::Status refused = h.Enqueue({.id = 4});
  REQUIRE(refused.code() == absl::StatusCode::kUnavailable);
  REQUIRE(refused.message() == "model version is draining");
  h.batcher->Drain();  // again: nothing to wait for
}

TEST_CASE("Drain with a timeout completes leftovers with UNAVAILABLE", "[unit][batcher]") {
  Harness h;  // one worker
  h.options.max_batch_size = 1;
  h.options.max_enqueued_batches = 1;
  Gate model_gate;
  h.model.set_gate(&model_gate);
  h.Start();
  h.EnqueueOk({.id = 1});
  REQUIRE(model_gate.WaitForWaiting(1));  // batch {1} is computing
  h.EnqueueOk({.id = 2});                 // batch {2} waits for the worker
  h.EnqueueOk({.id = 3});                 // held in the queue by max_enqueued_batches
  h.batcher->WaitUntilIdleForTesting();
  REQUIRE(h.batcher->queued_tasks() == 1);

  std::atomic<bool> drained{false};
  std::thread drainer([&] {
    h.batcher->Drain(10 * kMs);
    drained = true;
  });
  h.clock.BlockUntilWaiters(2);  // the batcher thread and Drain
  h.clock.Advance(10 * kMs - kUs);
  REQUIRE(!drained.load());
  h.clock.Advance(kUs);
  drainer.join();
  REQUIRE(h.completions.count() == 1);
  REQUIRE(h.completions.Get(3).status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(h.batcher->in_flight_tasks() == 2);

  model_gate.Open();
  REQUIRE(h.completions.WaitFor(3));
  h.CheckComputed(1, 1);  // it was already running
  REQUIRE(h.completions.Get(2).status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(h.model.batch_ids() == Ids{{1}});  // batch {2} never ran
  REQUIRE(h.observer.done(absl::StatusCode::kUnavailable) == 2);
  REQUIRE(h.observer.done(absl::StatusCode::kOk) == 1);
}

TEST_CASE("Batches handed to a scheduler that shut down complete with UNAVAILABLE",
          "[unit][batcher]") {
  Harness h;
  h.Start();
  h.scheduler->Shutdown();
  h.EnqueueOk({.id = 1, .rows = 2});
  REQUIRE(h.completions.WaitFor(1));
  REQUIRE(h.completions.Get(1).status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(h.model.batch_ids().empty());
}

TEST_CASE("The observer sees every batch and every completion", "[unit][batcher]") {
  Harness h;
  h.options.max_batch_size = 4;
  h.options.max_queue_delay = 10 * kMs;
  h.options.queue.levels = 2;
  h.options.queue.level_policies[2].default_timeout = 5 * kMs;
  h.Start();
  h.EnqueueOk({.id = 1, .rows = 3, .priority = 1});
  h.EnqueueOk({.id = 2, .rows = 1, .priority = 1, .benchmark = true});  // full: batch of 4
  h.EnqueueOk({.id = 3, .rows = 2, .priority = 2});                     // rejected after 5 ms
  h.EnqueueOk({.id = 4, .rows = 1, .priority = 1});                     // {4, 3}: 3 rows, waits
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(5 * kMs);
  REQUIRE(h.completions.WaitFor(3));
  h.batcher->WaitUntilIdleForTesting();
  h.clock.Advance(5 * kMs);
  REQUIRE(h.completions.WaitFor(4));
  REQUIRE(h.observer.batches() == 2);
  REQUIRE(h.observer.rows() == 5);
  REQUIRE(h.observer.batch_tasks() == 3);
  REQUIRE(h.observer.benchmark_rows() == 1);  // task 2's, told apart for the metrics
  REQUIRE(h.observer.done(absl::StatusCode::kOk) == 3);
  REQUIRE(h.observer.done(absl::StatusCode::kUnavailable) == 1);
  REQUIRE(h.observer.done_at(1) == 3);
  REQUIRE(h.observer.done_at(2) == 1);
}

// Many threads enqueue against a real clock; whatever the interleaving, every accepted task
// completes exactly once with its own rows, and the counts add up.
TEST_CASE("Concurrent enqueuers: every task completes exactly once", "[unit][batcher]") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 300;
  constexpr int64_t kMaxBatch = 8;
  Completions completions;
  CountingObserver observer;
  FakeModel model;
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> accepted_rows{0};
  std::atomic<int64_t> refused_full{0};
  std::atomic<int64_t> refused_other{0};
  std::atomic<int64_t> wrong_outputs{0};
  {
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = 3;
    auto scheduler = *DeviceScheduler::Create(scheduler_options);
    Batcher::Options options;
    options.max_batch_size = kMaxBatch;
    options.preferred_batch_sizes = {4};
    options.max_queue_delay = absl::Microseconds(200);
    options.queue.levels = 3;
    options.queue.default_level = 2;
    options.queue.level_policies[3].max_queue_size = 4;
    options.input_floats_per_row = kIn;
    options.output_floats_per_row = kOut;
    options.max_enqueued_batches = 2;
    options.run_batch = [&model](const float* input, int64_t rows, float* output,
                                 const DeviceRowsIo&,
                                 int worker) { return model.Run(input, rows, output, worker); };
    options.scheduler = scheduler.get();
    options.observer = &observer;
    auto batcher = *Batcher::Create(options);

    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        std::mt19937 rng(1234 + t);
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t id = t * kPerThread + i + 1;
          const int64_t rows = static_cast<int64_t>(rng() % 4) + 1;
          auto task = std::make_unique<PredictTask>();
          task->rows = rows;
          for (int64_t r = 0; r < rows; ++r) {
            task->input.push_back(Tag(id, r));
            task->input.push_back(0.5f);
          }
          task->priority = static_cast<uint32_t>(rng() % 4);
          task->done = [&, id, rows](PredictResult result) {
            bool right = result.status.ok() &&
                         static_cast<int64_t>(result.output.size()) == rows * kOut &&
                         result.batch_rows <= kMaxBatch;
            for (int64_t r = 0; right && r < rows; ++r) {
              right = result.output[r * kOut] == Tag(id, r) * 10;
            }
            if (!right) wrong_outputs++;
            completions.Add(id, std::move(result));
          };
          const absl::Status status = batcher->Enqueue(task);
          if (status.ok()) {
            accepted++;
            accepted_rows += rows;
          } else if (status.code() == absl::StatusCode::kResourceExhausted) {
            refused_full++;
          } else {
            refused_other++;
          }
        }
      });
    }
    for (std::thread& thread : threads) thread.join();
    batcher->Drain();
    REQUIRE(batcher->in_flight_tasks() == 0);
    REQUIRE(batcher->queued_tasks() == 0);
  }
  REQUIRE(accepted.load() + refused_full.load() == kThreads * kPerThread);
  REQUIRE(refused_other.load() == 0);
  REQUIRE(completions.count() == accepted.load());
  for (int64_t id = 1; id <= kThreads * kPerThread; ++id) REQUIRE(completions.times(id) <= 1);
  REQUIRE(wrong_outputs.load() == 0);
  REQUIRE(model.bad_inputs() == 0);
  REQUIRE(observer.done(absl::StatusCode::kOk) == accepted.load());
  REQUIRE(observer.batch_tasks() == accepted.load());
  REQUIRE(observer.rows() == accepted_rows.load());
  for (int64_t rows : model.batch_rows()) REQUIRE(rows <= kMaxBatch);
}

TEST_CASE("Enqueuers racing Drain: accepted tasks all complete - the rest are refused",
          "[unit][batcher]") {
  constexpr int kThreads = 3;
  constexpr int kPerThread = 200;
  Completions completions;
  std::atomic<int64_t> accepted{0};
  std::atomic<int64_t> draining{0};
  std::atomic<int64_t> other{0};
  FakeModel model;
  {
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = 2;
    auto scheduler = *DeviceScheduler::Create(scheduler_options);
    Batcher::Options options;
    options.max_batch_size = 4;
    options.max_queue_delay = absl::Microseconds(50);
    options.input_floats_per_row = kIn;
    options.output_floats_per_row = kOut;
    options.run_batch = [&model](const float* input, int64_t rows, float* output,
                                 const DeviceRowsIo&,
                                 int worker) { return model.Run(input, rows, output, worker); };
    options.scheduler = scheduler.get();
    auto batcher = *Batcher::Create(options);
    std::atomic<int> started{0};
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        started++;
        for (int i = 0; i < kPerThread; ++i) {
          const int64_t id = t * kPerThread + i + 1;
          std::unique_ptr<PredictTask> task = MakeTask({.id = id, .rows = 1 + i % 2}, &completions);
          const absl::Status status = batcher->Enqueue(task);
          if (status.ok()) {
            accepted++;
          } else if (status.code() == absl::StatusCode::kUnavailable) {
            draining++;
          } else {
            other++;
          }
        }
      });
    }
    while (started.load() < kThreads) std::this_thread::yield();
    batcher->Drain();
    for (std::thread& thread : threads) thread.join();
    REQUIRE(batcher->in_flight_tasks() == 0);
    REQUIRE(completions.count() == accepted.load());  // Drain waited for all of them
  }
  REQUIRE(accepted.load() + draining.load() == kThreads * kPerThread);
  REQUIRE(other.load() == 0);
  for (int64_t id = 1; id <= kThreads * kPerThread; ++id) {
    REQUIRE(completions.times(id) <= 1);
    if (completions.times(id) == 1) REQUIRE(completions.Get(id).status.ok());
  }
}

// --- Windows and forecasts in device memory (PredictTask::device_input / device_output)

// Device memory as these tests have it: host bytes standing in for a GPU's, with the copies a
// batch computed elsewhere makes counted.
class FakeDeviceRegion final : public DeviceMemoryRegion {
 public:
  explicit FakeDeviceRegion(int64_t bytes) : bytes_(static_cast<size_t>(bytes)) {}
  int device() const override { return 0; }
  char* data() const override { return bytes_.data(); }
  int64_t byte_size() const override { return static_cast<int64_t>(bytes_.size()); }
  absl::Status CopyToHost(void* host, int64_t offset, int64_t bytes) const override {
    ++copies_;
    std::memcpy(host, bytes_.data() + offset, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(int64_t offset, const void* host, int64_t bytes) const override {
    ++copies_;
    std::memcpy(bytes_.data() + offset, host, static_cast<size_t>(bytes));
    return absl::OkStatus();
  }
  float* floats() const { return reinterpret_cast<float*>(bytes_.data()); }
  int copies() const { return copies_.load(); }

 private:
  mutable std::vector<char> bytes_;
  mutable std::atomic<int> copies_{0};
};

// Task `id`'s `rows` windows in `region` at byte `offset` (tagged as MakeTask tags them), its
// forecasts to `region` after them, or to the host when `device_output` is false.
std::unique_ptr<PredictTask> DeviceTask(int64_t id, int64_t rows,
                                        const std::shared_ptr<FakeDeviceRegion>& region,
                                        int64_t offset, bool device_output,
                                        Completions* completions) {
  std::unique_ptr<PredictTask> task = MakeTask({.id = id, .rows = rows}, completions);
  const int64_t in_bytes = rows * kIn * int64_t{sizeof(float)};
  std::memcpy(region->data() + offset, task->input.data(), static_cast<size_t>(in_bytes));
  task->input.clear();
  task->device_input = {.region = region, .offset = offset, .bytes = in_bytes};
  if (device_output) {
    task->device_output = {.region = region,
                           .offset = offset + in_bytes,
                           .bytes = rows * kOut * int64_t{sizeof(float)}};
  }
  return task;
}

// Task `id`'s forecasts, written to `region` at `offset`, are its own.
void CheckDeviceForecasts(const FakeDeviceRegion& region, int64_t offset, int64_t id,
                          int64_t rows) {
  const float* out = reinterpret_cast<const float*>(region.data() + offset);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t j = 0; j < kOut; ++j) REQUIRE(out[r * kOut + j] == Tag(id, r) * 10 + j);
  }
}

// What a GPU instance does with a batch's rows in device memory, on FakeModel: their windows
// are read from there (and flagged when not finite), their forecasts written there.
absl::Status RunReadingDeviceRows(FakeModel& model, const float* input, int64_t rows, float* output,
                                  const DeviceRowsIo& device, int worker) {
  std::vector<float> windows(input, input + rows * kIn);
  for (const DeviceRows& run : device.runs) {
    if (run.input == nullptr) continue;
    std::copy_n(run.input, run.rows * kIn, windows.begin() + run.first_row * kIn);
    if (device.non_finite_rows != nullptr) {
      ref::NonFiniteRows(device.non_finite_rows + run.first_row, run.input, run.rows, kIn);
    }
    // The tags stay readable for FakeModel.
    for (int64_t r = 0; r < run.rows; ++r) windows[(run.first_row + r) * kIn + 1] = 0.5f;
  }
  absl::Status status = model.Run(windows.data(), rows, output, worker);
  for (const DeviceRows& run : device.runs) {
    if (run.output == nullptr) continue;
    std::copy_n(output + run.first_row * kOut, run.rows * kOut, run.output);
  }
  return status;
}

TEST_CASE(
    "Windows and forecasts in device memory go through host memory when the instances "
    "read none",
    "[unit][batcher]") {
  Harness h;
  // Both tasks form one batch.
  h.options.max_queue_delay = absl::Hours(1);
  h.options.preferred_batch_sizes = {3};
  h.Start();
  auto region = std::make_shared<FakeDeviceRegion>(4096);
  std::unique_ptr<PredictTask> task =
      DeviceTask(1, 2, region, 0, /*device_output=*/true, &h.completions);
  REQUIRE(h.batcher->Enqueue(task).ok());
  h.EnqueueOk({.id = 2, .rows = 1});
  REQUIRE(h.completions.WaitFor(2));
  const PredictResult result = h.completions.Get(1);
  REQUIRE(result.status.ok());
  REQUIRE(result.output.empty());  // in the region instead
  CheckDeviceForecasts(*region, 2 * kIn * 4, 1, 2);
  REQUIRE(region->copies() == 2);  // windows in, forecasts out
  h.CheckComputed(2, 1);
  REQUIRE(h.model.batch_ids() == Ids{{1, 2}});
  REQUIRE(h.model.bad_inputs() == 0);
}

TEST_CASE(
    "A window in device memory that is not finite fails its own task only, unless "
    "allowed",
    "[unit][batcher]") {
  for (const bool device_rows : {false, true}) {
    INFO("the instances read device memory: " << device_rows);
    Harness h;
    h.options.device_rows = device_rows;
    h.options.run_batch = [&h](const float* input, int64_t rows, float* output,
                               const DeviceRowsIo& device, int worker) {
      return RunReadingDeviceRows(h.model, input, rows, output, device, worker);
    };
    h.options.max_queue_delay = absl::Hours(1);
    h.options.preferred_batch_sizes = {5};  // the three tasks' rows: one batch
    h.Start();
    auto region = std::make_shared<FakeDeviceRegion>(4096);
    std::unique_ptr<PredictTask> good = DeviceTask(1, 2, region, 0, true, &h.completions);
    std::unique_ptr<PredictTask> bad = DeviceTask(2, 2, region, 1024, true, &h.completions);
    std::unique_ptr<PredictTask> allowed = DeviceTask(3, 1, region, 2048, false, &h.completions);
    region->floats()[1024 / 4 + kIn + 1] = std::numeric_limits<float>::quiet_NaN();  // row 1
    region->floats()[2048 / 4 + 1] = std::numeric_limits<float>::infinity();
    allowed->allow_non_finite = true;
    REQUIRE(h.batcher->Enqueue(good).ok());
    REQUIRE(h.batcher->Enqueue(bad).ok());
    REQUIRE(h.batcher->Enqueue(allowed).ok());
    REQUIRE(h.completions.WaitFor(3));
    REQUIRE(h.completions.Get(1).status.ok());
    CheckDeviceForecasts(*region, 2 * kIn * 4, 1, 2);
    const PredictResult refused = h.completions.Get(2);
    REQUIRE(refused.status.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(absl::StrContains(refused.status.message(), "input window 1"));
    REQUIRE(absl::StrContains(refused.status.message(), "NaN or an infinity"));
    REQUIRE(h.completions.Get(3).status.ok());
    REQUIRE(h.completions.Get(3).output.size() == kOut);  // a host output
    // Where the instances read device memory, the batcher copies nothing itself.
    REQUIRE((region->copies() == 0) == device_rows);
  }
}

TEST_CASE("Instances that read device memory get its rows as runs of the batch",
          "[unit][batcher]") {
  Harness h;
  h.options.device_rows = true;
  std::vector<DeviceRows> seen;
  h.options.run_batch = [&](const float* input, int64_t rows, float* output,
                            const DeviceRowsIo& device, int worker) {
    seen = device.runs;
    REQUIRE(device.non_finite_rows != nullptr);
    return RunReadingDeviceRows(h.model, input, rows, output, device, worker);
  };
  h.options.max_queue_delay = absl::Hours(1);
  h.options.preferred_batch_sizes = {5};  // the three tasks' rows: one batch
  h.Start();
  auto region = std::make_shared<FakeDeviceRegion>(4096);
  h.EnqueueOk({.id = 1, .rows = 1});
  std::unique_ptr<PredictTask> task = DeviceTask(2, 3, region, 0, true, &h.completions);
  REQUIRE(h.batcher->Enqueue(task).ok());
  // Host windows, forecasts to device memory.
  std::unique_ptr<PredictTask> out_only = MakeTask({.id = 3, .rows = 1}, &h.completions);
  out_only->device_output = {.region = region, .offset = 1024, .bytes = kOut * 4};
  REQUIRE(h.batcher->Enqueue(out_only).ok());
  REQUIRE(h.completions.WaitFor(3));
  h.CheckComputed(1, 1);
  REQUIRE(h.completions.Get(2).status.ok());
  CheckDeviceForecasts(*region, 3 * kIn * 4, 2, 3);
  REQUIRE(h.completions.Get(3).status.ok());
  CheckDeviceForecasts(*region, 1024, 3, 1);
  REQUIRE(seen.size() == 2);
  REQUIRE(seen[0].first_row == 1);
  REQUIRE(seen[0].rows == 3);
  REQUIRE(seen[0].input == region->floats());
  REQUIRE(seen[1].first_row == 4);
  REQUIRE(seen[1].input == nullptr);
  REQUIRE(seen[1].output == region->floats() + 1024 / 4);
  REQUIRE(region->copies() == 0);
}

TEST_CASE(
    "Enqueue refuses a task in both host and device memory or with a device output of "
    "the wrong size",
    "[unit][batcher]") {
  Harness h;
  h.Start();
  auto region = std::make_shared<FakeDeviceRegion>(4096);
  const auto refused = [&](std::unique_ptr<PredictTask> task, const std::string& part) {
    const absl::Status status = h.batcher->Enqueue(task);
    INFO(status.ToString());
    REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(absl::StrContains(status.message(), part));
    REQUIRE(task != nullptr);
  };
  std::unique_ptr<PredictTask> both = MakeTask({.id = 1}, &h.completions);
  both->device_input = {.region = region, .offset = 0, .bytes = kIn * 4};
  refused(std::move(both), "both in host and in device memory");
  std::unique_ptr<PredictTask> short_input = DeviceTask(2, 2, region, 0, false, &h.completions);
  short_input->device_input.bytes -= 4;
  refused(std::move(short_input), "2 rows need 4");
  std::unique_ptr<PredictTask> wrong_output = DeviceTask(3, 1, region, 0, true, &h.completions);
  wrong_output->device_output.bytes = 4;
  refused(std::move(wrong_output), "rows of forecasts take 12");
  std::unique_ptr<PredictTask> two_outputs = DeviceTask(4, 1, region, 0, true, &h.completions);
  float host[kOut];
  two_outputs->output = reinterpret_cast<char*>(host);
  refused(std::move(two_outputs), "both to host and to device memory");
}

}  // namespace
}  // namespace forecastd
