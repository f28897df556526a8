#include "engine/serving/batcher.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/ref/finite.h"

namespace forecastd {

// The batcher thread runs Loop(): under mu_ it applies the queue's time limits, forms at most
// one batch, then (without mu_) completes what expired and hands the batch to the scheduler,
// and repeats until there is nothing to do; then it waits on the Clock until the earliest
// time limit or delay, or until wakeup_ says the queue, the draining state or the number of
// unstarted batches changed. The batches run RunBatch() on scheduler workers, several at once.
class Batcher::Impl : public std::enable_shared_from_this<Batcher::Impl> {
 public:
  explicit Impl(Options options)
      : options_(std::move(options)),
        clock_(options_.clock != nullptr ? options_.clock : Clock::Real()),
        preferred_(options_.preferred_batch_sizes),
        queue_(options_.queue) {
    std::sort(preferred_.begin(), preferred_.end());
  }

  // Starts the batcher thread; called once, before the Impl is shared with anyone.
  void Start() {
    thread_ = std::thread([this] { Loop(); });
  }

  // ~Batcher: everything completes, then the thread stops and the last batch finishes.
  void Shutdown() {
    Drain(absl::InfiniteDuration());
    {
      absl::MutexLock lock(&mu_);
      stopping_ = true;
      wakeup_ = true;
    }
    thread_.join();
    absl::MutexLock lock(&mu_);
    auto finished = [this]()
                        ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return outstanding_batches_ == 0; };
    mu_.Await(absl::Condition(&finished));
  }

  absl::Status Enqueue(std::unique_ptr<PredictTask>& task) {
    if (task == nullptr) return absl::InvalidArgumentError("null PredictTask");
    if (task->rows < 1 || task->rows > options_.max_batch_size) {
      return absl::InvalidArgumentError(absl::StrCat("a request of ", task->rows,
                                                     " rows; this model takes 1 to ",
                                                     options_.max_batch_size, " per request"));
    }
    const int64_t floats = task->rows * options_.input_floats_per_row;
    const bool device_input = !task->device_input.empty();
    if (device_input && !task->InputBytes().empty()) {
      return absl::InvalidArgumentError("input both in host and in device memory");
    }
    const size_t bytes =
        device_input ? static_cast<size_t>(task->device_input.bytes) : task->InputBytes().size();
    const int64_t given = static_cast<int64_t>(bytes / sizeof(float));
    if (given != floats || bytes % sizeof(float) != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("input holds ", given, " values; ", task->rows, " rows need ", floats));
    }
    if (!task->device_output.empty()) {
      const int64_t out_bytes =
          task->rows * options_.output_floats_per_row * static_cast<int64_t>(sizeof(float));
      if (task->output != nullptr) {
        return absl::InvalidArgumentError("output both to host and to device memory");
      }
      if (task->device_output.bytes != out_bytes) {
        return absl::InvalidArgumentError(
            absl::StrCat("device output of ", task->device_output.bytes, " bytes; ", task->rows,
                         " rows of forecasts take ", out_bytes));
      }
    }
    if (!task->done) return absl::InvalidArgumentError("PredictTask without a done callback");
    {
      absl::MutexLock lock(&mu_);
      if (draining_) return absl::UnavailableError("model version is draining");
      // Queued in any case: the queue's checks and bookkeeping apply to every task.
      if (absl::Status status = queue_.Push(task, clock_->Now()); !status.ok()) return status;
      ++in_flight_;
      if (!options_.run_inline_when_idle || inline_claim_ || queue_.size() != 1 ||
          computing_batches_ != 0) {
        wakeup_ = true;
        return absl::OkStatus();
      }
      // The batcher thread forms no batch while the claim stands; tasks arriving meanwhile
      // queue behind this one.
      inline_claim_ = true;
    }
    std::shared_ptr<Impl> self = shared_from_this();
    const bool ran =
        options_.scheduler->TryStartInline([&self](int worker, DeviceScheduler::SlotHold hold) {
          self->RunClaimed(worker, std::move(hold));
        });
    if (!ran) {
      // No idle worker: the task stays queued, for the batcher thread.
      absl::MutexLock lock(&mu_);
      inline_claim_ = false;
      wakeup_ = true;
    }
    return absl::OkStatus();
  }

  void Drain(absl::Duration timeout) {
    std::vector<std::unique_ptr<PredictTask>> leftovers;
    absl::Time now;
    {
      absl::MutexLock lock(&mu_);
      draining_ = true;
      wakeup_ = true;  // queued tasks no longer wait for max_queue_delay
      auto drained = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_ == 0; };
      if (clock_->AwaitWithDeadline(&mu_, absl::Condition(&drained), clock_->Now() + timeout)) {
        return;
      }
      leftovers = queue_.TakeAll();
      abandon_unstarted_ = true;
      now = clock_->Now();
    }
    for (std::unique_ptr<PredictTask>& task : leftovers) {
      CompleteUnrun(std::move(task),
                    absl::UnavailableError("model version drained before the request ran"), now);
    }
    absl::MutexLock lock(&mu_);
    in_flight_ -= static_cast<int64_t>(leftovers.size());
  }

  int64_t queued_tasks() const {
    absl::MutexLock lock(&mu_);
    return queue_.size();
  }
  int64_t in_flight_tasks() const {
    absl::MutexLock lock(&mu_);
    return in_flight_;
  }

  void WaitUntilIdleForTesting() const {
    absl::MutexLock lock(&mu_);
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return idle_ && !wakeup_ && wait_until_ > clock_->Now();
    };
    mu_.Await(absl::Condition(&idle));
  }

 private:
  using Tasks = std::vector<std::unique_ptr<PredictTask>>;

  void Loop() {
    absl::MutexLock lock(&mu_);
    while (true) {
      wakeup_ = false;  // what happens from here on is seen below or wakes the wait
      const absl::Time now = clock_->Now();
      std::vector<PriorityQueue::Expired> expired = queue_.TakeExpired(now);
      absl::Time wake = queue_.NextExpiry();
      Tasks batch;
      if (options_.max_enqueued_batches == 0 ||
          unstarted_batches_ < options_.max_enqueued_batches) {
        absl::Time delay_end = absl::InfiniteFuture();
        const int64_t count = PlanBatchLocked(now, &delay_end);
        wake = std::min(wake, delay_end);
        for (int64_t i = 0; i < count; ++i) batch.push_back(queue_.PopFront());
      }
      if (expired.empty() && batch.empty()) {
        if (stopping_) return;
        idle_ = true;
        wait_until_ = wake;
        clock_->AwaitWithDeadline(&mu_, absl::Condition(&wakeup_), wake);
        idle_ = false;
        continue;
      }
      if (!batch.empty()) {
        ++unstarted_batches_;
        ++outstanding_batches_;
        ++computing_batches_;
      }
      mu_.Unlock();
      for (PriorityQueue::Expired& e : expired) {
        CompleteUnrun(std::move(e.task), std::move(e.status), now);
      }
      if (!batch.empty()) Dispatch(std::move(batch));
      mu_.Lock();
      in_flight_ -= static_cast<int64_t>(expired.size());
    }
  }

  // How many tasks from the front of the queue to batch now, by the rules in batcher.h and
  // spread_over_idle_workers; 0 with *delay_end set to when rule 2 would apply.
  int64_t PlanBatchLocked(absl::Time now, absl::Time* delay_end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    const int64_t count = PlanByRulesLocked(now, delay_end);
    if (!options_.spread_over_idle_workers || count <= 1) return count;
    const DeviceScheduler& s = *options_.scheduler;
    const int64_t free =
        std::max<int64_t>(1, int64_t{s.num_workers()} - s.busy_workers() - s.queued());
    int64_t rows = 0, seen = 0;
    queue_.ForEachInOrder([&](const PredictTask& task) {
      rows += task.rows;
      return ++seen < count;
    });
    const int64_t share = std::max((rows + free - 1) / free, options_.min_spread_rows);
    int64_t taken = 0, taken_rows = 0;
    queue_.ForEachInOrder([&](const PredictTask& task) {
      taken_rows += task.rows;
      ++taken;
      return taken < count && taken_rows < share;
    });
    return taken;
  }

  // PlanBatchLocked by rules 1-5 alone.
  int64_t PlanByRulesLocked(absl::Time now, absl::Time* delay_end)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    int64_t rows = 0;
    int64_t count = 0;
    int64_t preferred_count = 0;
    bool blocked = false;
    absl::Time oldest = absl::InfiniteFuture();
    queue_.ForEachInOrder([&](const PredictTask& task) {
      if (rows + task.rows > options_.max_batch_size) {
        blocked = true;
        return false;
      }
      rows += task.rows;
      ++count;
      oldest = std::min(oldest, task.enqueue_time);
      if (std::binary_search(preferred_.begin(), preferred_.end(), rows)) preferred_count = count;
      return true;
    });
    if (count == 0 || inline_claim_) return 0;
    if (rows == options_.max_batch_size) return count;
    const absl::Time oldest_due = oldest + options_.max_queue_delay;
    if (draining_ || now >= oldest_due) return count;
    if (preferred_count > 0) return preferred_count;
    if (blocked || (!preferred_.empty() && rows >= preferred_.back())) return count;
    *delay_end = oldest_due;
    return 0;
  }

  // Hands `batch` to the scheduler at the level of its best task and the deadline of its
  // earliest.
  void Dispatch(Tasks batch) {
    uint32_t priority = batch.front()->priority;
    absl::Time deadline = batch.front()->deadline;
    for (const std::unique_ptr<PredictTask>& task : batch) {
      priority = std::min(priority, task->priority);
      deadline = std::min(deadline, task->deadline);
    }
    // std::function must be copyable, so the tasks travel behind a shared_ptr.
    auto tasks = std::make_shared<Tasks>(std::move(batch));
    options_.scheduler->Submit(priority, deadline,
                               [self = shared_from_this(), tasks](int worker, bool cancelled) {
                                 self->RunBatch(std::move(*tasks), worker, cancelled);
                               });
  }

  // Inline, on Enqueue's thread as worker `worker`, whose slot `hold` keeps busy: the front
  // task (the claimed one unless a task of a higher level came meanwhile, or it expired) as a
  // batch of its own.
  void RunClaimed(int worker, DeviceScheduler::SlotHold hold) {
    Tasks batch;
    {
      absl::MutexLock lock(&mu_);
      inline_claim_ = false;
      if (queue_.size() == 0) return;  // it expired meanwhile: the batcher thread completed it
      batch.push_back(queue_.PopFront());
      // Tasks that queued behind it are the batcher thread's again.
      if (queue_.size() > 0) wakeup_ = true;
      ++unstarted_batches_;
      ++outstanding_batches_;
      ++computing_batches_;
    }
    RunBatch(std::move(batch), worker, /*cancelled=*/false, &hold);
  }

  // A batch whose inputs are staged: what its completion needs.
  struct Staged {
    Tasks tasks;
    int64_t rows = 0;
    absl::Time start;
    Batcher::Staging staging;
    std::vector<float> own_input, own_output;  // when the options stage nowhere
    // Rows in device memory that run_batch reads and writes itself (Options::device_rows);
    // flags of non-finite windows (batch rows), set by run_batch or, for windows copied from
    // device memory here, by Stage.
    DeviceRowsIo device;
    std::vector<uint8_t> non_finite;
    // Per task: why it fails whatever the batch's status (its device-memory input could not be
    // read); OK otherwise. Empty when every task is OK.
    std::vector<absl::Status> failed;
  };

  // On a scheduler worker (or inline with `cancelled` after the scheduler shut down), or inline
  // on Enqueue's thread with the slot's `hold`: then a batch is started (Options::start_batch)
  // where the options allow, and finishes, replies and counts itself out later.
  void RunBatch(Tasks tasks, int worker, bool cancelled,
                DeviceScheduler::SlotHold* hold = nullptr) {
    bool abandoned;
    {
      absl::MutexLock lock(&mu_);
      --unstarted_batches_;
      // With max_enqueued_batches, a batch held back by the limit may form now. Only then is
      // the batcher thread woken: waking it costs the caller a futex call (and on a busy host
      // the core), which an inline run on an idle batcher would pay on every request.
      if (options_.max_enqueued_batches != 0 && queue_.size() > 0) wakeup_ = true;
      abandoned = abandon_unstarted_;
    }
    const int64_t num_tasks = static_cast<int64_t>(tasks.size());
    const absl::Time start = clock_->Now();
    if (cancelled || abandoned) {
      const absl::Status status =
          cancelled ? absl::UnavailableError("the device scheduler is shut down")
                    : absl::UnavailableError("model version drained before the request ran");
      for (std::unique_ptr<PredictTask>& task : tasks)
        CompleteUnrun(std::move(task), status, start);
      EndBatch(num_tasks, /*computed=*/false);
      return;
    }
    // The worker may start late: a task whose deadline passed meanwhile is not computed.
    Tasks live;
    live.reserve(tasks.size());
    for (std::unique_ptr<PredictTask>& task : tasks) {
      if (task->deadline <= start) {
        CompleteUnrun(
            std::move(task),
            absl::DeadlineExceededError("the request's deadline passed before its batch started"),
            start);
      } else {
        live.push_back(std::move(task));
      }
    }
    if (live.empty()) {
      EndBatch(num_tasks, /*computed=*/false);
      return;
    }
    Staged batch = Stage(std::move(live), worker, start);
    const float* input = batch.staging.input;
    float* output = batch.staging.output;
    const int64_t rows = batch.rows;
    // A copy: `batch` moves into the completion below, its buffers (which `device` points
    // into) with it.
    const DeviceRowsIo device = batch.device;
    if (hold != nullptr && options_.start_batch) {
      options_.start_batch(input, rows, output, device, worker,
                           [self = shared_from_this(), batch = std::move(batch),
                            hold = std::move(*hold), num_tasks](absl::Status status) mutable {
                             self->Finish(batch, status, &hold);
                             self->EndBatch(num_tasks, /*computed=*/true);
                           });
      return;
    }
    const absl::Status status = options_.run_batch(input, rows, output, device, worker);
    Finish(batch, status, hold);
    EndBatch(num_tasks, /*computed=*/true);
  }

  // Copies the tasks' inputs into the worker's staging buffers (or buffers of the batch's own).
  Staged Stage(Tasks tasks, int worker, absl::Time start) {
    Staged batch;
    batch.tasks = std::move(tasks);
    batch.start = start;
    const int64_t in = options_.input_floats_per_row;
    const int64_t out = options_.output_floats_per_row;
    for (const std::unique_ptr<PredictTask>& task : batch.tasks) batch.rows += task->rows;
    batch.staging = options_.staging ? options_.staging(worker) : Batcher::Staging{};
    if (batch.staging.input == nullptr) {
      batch.own_input.resize(static_cast<size_t>(batch.rows * in));
      batch.staging.input = batch.own_input.data();
    }
    if (batch.staging.output == nullptr) {
      batch.own_output.resize(static_cast<size_t>(batch.rows * out));
      batch.staging.output = batch.own_output.data();
    }
    char* next = reinterpret_cast<char*>(batch.staging.input);
    int64_t row = 0;
    for (size_t i = 0; i < batch.tasks.size(); ++i) {
      const PredictTask& task = *batch.tasks[i];
      if (task.device_input.empty()) {
        const absl::string_view input = task.InputBytes();
        std::memcpy(next, input.data(), input.size());
      }
      if (!task.device_input.empty() || !task.device_output.empty()) {
        StageDeviceRows(batch, i, row, next);
      }
      next += static_cast<size_t>(task.rows * in) * sizeof(float);
      row += task.rows;
    }
    if (options_.observer != nullptr) {
      int64_t benchmark_rows = 0;
      for (const std::unique_ptr<PredictTask>& task : batch.tasks) {
        if (task->benchmark) benchmark_rows += task->rows;
      }
      options_.observer->OnBatch(batch.rows, static_cast<int64_t>(batch.tasks.size()),
                                 benchmark_rows);
    }
    return batch;
  }

  // Task `i` of `batch`, whose rows start at `row` and are staged at `staged`, has its windows
  // or forecasts in device memory: they become a run of batch.device for run_batch
  // (Options::device_rows), or its windows in device memory are copied here and checked as
  // admission checks host windows.
  void StageDeviceRows(Staged& batch, size_t i, int64_t row, char* staged) {
    const PredictTask& task = *batch.tasks[i];
    const int64_t in = options_.input_floats_per_row;
    if (options_.device_rows) {
      DeviceRows run;
      run.first_row = row;
      run.rows = task.rows;
      if (!task.device_input.empty()) {
        run.input = reinterpret_cast<const float*>(task.device_input.data());
        if (!task.allow_non_finite) {
          batch.non_finite.resize(static_cast<size_t>(batch.rows), 0);
          batch.device.non_finite_rows = batch.non_finite.data();
        }
      }
      if (!task.device_output.empty()) {
        run.output = reinterpret_cast<float*>(task.device_output.data());
      }
      batch.device.runs.push_back(run);
      return;
    }
    if (task.device_input.empty()) return;  // staged by Stage; its forecasts go out in Finish
    absl::Status copied = task.device_input.region->CopyToHost(staged, task.device_input.offset,
                                                               task.device_input.bytes);
    if (!copied.ok()) {
      // The rows still run with the batch: finite zeros, whose forecasts nobody gets.
      std::memset(staged, 0, static_cast<size_t>(task.rows * in) * sizeof(float));
      batch.failed.resize(batch.tasks.size());
      batch.failed[i] = std::move(copied);
      return;
    }
    if (!task.allow_non_finite) {
      // Finish reads the flags as it reads an instance's (DeviceRowsIo::non_finite_rows).
      batch.non_finite.resize(static_cast<size_t>(batch.rows), 0);
      ref::NonFiniteRows(batch.non_finite.data() + row, reinterpret_cast<const float*>(staged),
                         task.rows, in);
    }
  }

  static absl::Status NonFiniteRow(int64_t row) {
    return absl::InvalidArgumentError(
        absl::StrCat("input window ", row,
                     " (in device memory) holds a NaN or an infinity; only finite values are "
                     "accepted"));
  }

  // After the batch computed with `status`: counts it out of computing_batches_ before the
  // replies (a request that arrives while they go out, a client answered first sending its
  // next one, finds the batcher idle and may run inline), copies each task's rows out of the
  // staging buffer, releases `hold` (the slot's buffers are free from here), and completes the
  // tasks.
  void Finish(Staged& batch, const absl::Status& status, DeviceScheduler::SlotHold* hold) {
    const int64_t out = options_.output_floats_per_row;
    const absl::Duration compute_time = clock_->Now() - batch.start;
    {
      absl::MutexLock lock(&mu_);
      --computing_batches_;
    }
    std::vector<PredictResult> results(batch.tasks.size());
    int64_t row = 0;
    for (size_t i = 0; i < batch.tasks.size(); ++i) {
      PredictTask& task = *batch.tasks[i];
      PredictResult& result = results[i];
      result.status = status;
      result.version = options_.version;
      result.queue_time = batch.start - task.enqueue_time;
      result.compute_time = compute_time;
      result.batch_rows = batch.rows;
      if (status.ok() && i < batch.failed.size()) result.status = batch.failed[i];
      if (result.status.ok() && !batch.non_finite.empty() && !task.device_input.empty() &&
          !task.allow_non_finite) {
        for (int64_t r = 0; r < task.rows; ++r) {
          if (batch.non_finite[static_cast<size_t>(row + r)] != 0) {
            result.status = NonFiniteRow(r);
            break;
          }
        }
      }
      if (result.status.ok()) {
        const float* first = batch.staging.output + row * out;
        const int64_t floats = task.rows * out;
        if (task.output != nullptr) {
          std::memcpy(task.output, first, static_cast<size_t>(floats) * sizeof(float));
        } else if (!task.device_output.empty()) {
          // Written by run_batch where it takes device rows; else from the host output here.
          if (!options_.device_rows) {
            result.status = task.device_output.region->CopyFromHost(
                task.device_output.offset, first, task.device_output.bytes);
          }
        } else {
          result.output.assign(first, first + floats);
        }
      }
      row += task.rows;
    }
    if (hold != nullptr) hold->Release();
    for (size_t i = 0; i < batch.tasks.size(); ++i) {
      Complete(std::move(batch.tasks[i]), std::move(results[i]));
    }
  }

  // The batch's tasks have all completed: counts them and it out (computing_batches_ too unless
  // Finish did).
  void EndBatch(int64_t num_tasks, bool computed) {
    absl::MutexLock lock(&mu_);
    in_flight_ -= num_tasks;
    --outstanding_batches_;
    if (!computed) --computing_batches_;
  }

  // Completes a task that never ran, with `status`, at `now`.
  void CompleteUnrun(std::unique_ptr<PredictTask> task, absl::Status status, absl::Time now) {
    PredictResult result;
    result.status = std::move(status);
    result.version = options_.version;
    result.queue_time = now - task->enqueue_time;
    result.compute_time = absl::ZeroDuration();
    Complete(std::move(task), std::move(result));
  }

  // Reports and calls `done`; the caller then counts the task out of in_flight_.
  void Complete(std::unique_ptr<PredictTask> task, PredictResult result) {
    if (options_.observer != nullptr) {
      options_.observer->OnTaskDone(task->priority, result.status, result.queue_time,
                                    result.compute_time);
    }
    task->done(std::move(result));
  }

  // Constant after construction (thread_: set by Start before sharing, joined by Shutdown).
  const Options options_;
  Clock* const clock_;
  std::vector<int64_t> preferred_;  // sorted
  std::thread thread_;

  mutable absl::Mutex mu_;
  PriorityQueue queue_ ABSL_GUARDED_BY(mu_);
  // Accepted tasks whose `done` has not returned.
  int64_t in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Batches handed to the scheduler and not started / not finished.
  int64_t unstarted_batches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t outstanding_batches_ ABSL_GUARDED_BY(mu_) = 0;
  // Of those, the ones still computing (not yet replying): a task runs inline only at 0.
  int64_t computing_batches_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
  // A Drain timed out: batches not started yet complete without running.
  bool abandon_unstarted_ ABSL_GUARDED_BY(mu_) = false;
  // Enqueue is about to run the front task inline (Options::run_inline_when_idle).
  bool inline_claim_ ABSL_GUARDED_BY(mu_) = false;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  // Set by whatever may let the batcher thread do something; cleared by it before it looks.
  bool wakeup_ ABSL_GUARDED_BY(mu_) = false;
  // The batcher thread is waiting, until wait_until_ or a wakeup.
  bool idle_ ABSL_GUARDED_BY(mu_) = false;
  absl::Time wait_until_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<std::unique_ptr<Batcher>> Batcher::Create(Options options) {
  if (!options.run_batch) return absl::InvalidArgumentError("Batcher needs a run_batch");
  if (options.scheduler == nullptr) return absl::InvalidArgumentError("Batcher needs a scheduler");
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_batch_size must be >= 1, got ", options.max_batch_size));
  }
  for (int64_t size : options.preferred_batch_sizes) {
    if (size < 1 || size > options.max_batch_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("preferred batch size ", size,
                       " is not in [1, max_batch_size = ", options.max_batch_size, "]"));
    }
  }
  if (options.max_queue_delay < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("max_queue_delay must be >= 0, got ",
                                                   absl::FormatDuration(options.max_queue_delay)));
  }
  if (options.input_floats_per_row < 1 || options.output_floats_per_row < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input_floats_per_row and output_floats_per_row must be >= 1, got ",
                     options.input_floats_per_row, " and ", options.output_floats_per_row));
  }
  if (options.min_spread_rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("min_spread_rows must be >= 1, got ", options.min_spread_rows));
  }
  if (options.max_enqueued_batches < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_enqueued_batches must be >= 0, got ", options.max_enqueued_batches));
  }
  if (absl::Status status = PriorityQueue::Validate(options.queue); !status.ok()) return status;
  auto impl = std::make_shared<Impl>(std::move(options));
  impl->Start();
  return std::unique_ptr<Batcher>(new Batcher(std::move(impl)));
}

Batcher::Batcher(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

Batcher::~Batcher() { impl_->Shutdown(); }

absl::Status Batcher::Enqueue(std::unique_ptr<PredictTask>& task) { return impl_->Enqueue(task); }

void Batcher::Drain(absl::Duration timeout) { impl_->Drain(timeout); }

int64_t Batcher::queued_tasks() const { return impl_->queued_tasks(); }

int64_t Batcher::in_flight_tasks() const { return impl_->in_flight_tasks(); }

void Batcher::WaitUntilIdleForTesting() const { impl_->WaitUntilIdleForTesting(); }

}  // namespace forecastd
