#include "engine/serving/tick_engine.h"

#include <algorithm>
#include <deque>
#include <limits>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "kernels/base/status.h"

namespace forecastd {

// Batching: a task queues; when no work item of this engine waits on the scheduler and fewer
// than max_concurrent_batches compute, one is submitted. A work item, once a worker runs it,
// takes up to max_batch tasks from the front (and submits a successor when more remain and the
// limit allows, so other workers can help; otherwise the next one goes out when a batch's
// compute ends). Under load the queue grows while the device is busy and batches get larger; with
// Options::run_inline_when_idle a task that finds the engine idle (nothing queued or running) and a
// worker slot free runs inline, on the thread that enqueued it (DeviceScheduler::TryRunInline), so
// one tick in flight waits for no thread to wake.
class TickEngine::Impl : public std::enable_shared_from_this<TickEngine::Impl> {
 public:
  explicit Impl(const Options& options)
      : options_(options), clock_(options.clock != nullptr ? options.clock : Clock::Real()) {
    free_slots_.reserve(static_cast<size_t>(options.slots));
    for (int64_t s = options.slots - 1; s >= 0; --s) {
      free_slots_.push_back(static_cast<int32_t>(s));
    }
  }

  absl::StatusOr<int32_t> AllocateSlot() {
    absl::MutexLock l(&mu_);
    if (free_slots_.empty()) {
      return absl::ResourceExhaustedError(
          absl::StrCat("all ", options_.slots, " stream slots of version ", options_.version,
                       " are taken (streaming.max_streams)"));
    }
    const int32_t slot = free_slots_.back();
    free_slots_.pop_back();
    return slot;
  }

  void ReleaseSlot(int32_t slot) {
    if (slot < 0) return;
    absl::MutexLock l(&mu_);
    free_slots_.push_back(slot);
  }

  int64_t slots_in_use() const {
    absl::MutexLock l(&mu_);
    return options_.slots - static_cast<int64_t>(free_slots_.size());
  }

  absl::Status Enqueue(std::unique_ptr<TickTask>& task) {
    if (task == nullptr || !task->done) {
      return absl::InvalidArgumentError("a tick task needs a completion callback");
    }
    RETURN_IF_ERROR(CheckTask(*task));
    bool submit = false;
    bool idle = false;
    {
      absl::MutexLock l(&mu_);
      if (draining_) {
        return absl::UnavailableError(
            absl::StrCat("model version ", options_.version, " is draining"));
      }
      idle = queue_.empty() && computing_ == 0;
      task->enqueue_time = clock_->Now();
      queue_.push_back(std::move(task));
      submit = TakeWorkLocked();
    }
    if (!submit) return absl::OkStatus();
    // A task for an idle engine on an idle device runs here and now, on the caller's thread.
    // Only then: while this engine computes, tasks queue and go to the workers in batches (a
    // caller computing inline is not reading its next request meanwhile).
    if (options_.run_inline_when_idle && idle) {
      std::shared_ptr<Impl> self = shared_from_this();
      if (options_.scheduler->TryRunInline(
              [&self](int worker, bool cancelled) { self->Run(worker, cancelled); })) {
        return absl::OkStatus();
      }
    }
    Submit();
    return absl::OkStatus();
  }

  void Drain(absl::Duration timeout) {
    const absl::Time deadline = clock_->Now() + timeout;
    absl::MutexLock l(&mu_);
    draining_ = true;
    const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return queue_.empty() && work_outstanding_ == 0;
    };
    while (!idle()) {
      if (timeout == absl::InfiniteDuration()) {
        mu_.Await(absl::Condition(&idle));
      } else if (!mu_.AwaitWithDeadline(absl::Condition(&idle), deadline)) {
        break;
      }
    }
  }

  // Waits for work still on the scheduler: it holds a pointer to the instances.
  void WaitForWork() {
    absl::MutexLock l(&mu_);
    const auto done = [this]()
                          ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return work_outstanding_ == 0; };
    mu_.Await(absl::Condition(&done));
  }

 private:
  using Kind = TickTask::Kind;

  absl::Status CheckTask(const TickTask& task) const {
    const bool state = options_.mode == v1::StreamingConfig::STREAM_MODE_STATE;
    int64_t want = -1;
    switch (task.kind) {
      case Kind::kStep:
        want = state ? options_.tick_floats : -1;
        break;
      case Kind::kWindow:
        want = options_.window_floats;
        break;
      case Kind::kReadState:
        want = state ? 0 : -1;
        break;
      case Kind::kWriteState:
        if (state && task.input.empty()) return absl::OkStatus();
        want = state ? options_.state_floats : -1;
        break;
    }
    if (want < 0) {
      return absl::InvalidArgumentError("a state task for a version without stream states");
    }
    if (static_cast<int64_t>(task.input.size()) != want) {
      return absl::InvalidArgumentError(
          absl::StrCat("tick task input of ", task.input.size(), " values; expected ", want));
    }
    if (task.kind != Kind::kWindow && (task.slot < 0 || task.slot >= options_.slots)) {
      return absl::InvalidArgumentError(
          absl::StrCat("slot ", task.slot, " outside [0, ", options_.slots, ")"));
    }
    return absl::OkStatus();
  }

  void Submit() {
    std::shared_ptr<Impl> self = shared_from_this();
    options_.scheduler->Submit(
        options_.priority, absl::InfiniteFuture(),
        [self](int worker, bool cancelled) { self->Run(worker, cancelled); });
  }

  void Run(int worker, bool cancelled) {
    std::vector<std::unique_ptr<TickTask>> batch;
    bool submit = false;
    {
      absl::MutexLock l(&mu_);
      work_waiting_ = false;
      const size_t n = std::min(queue_.size(), static_cast<size_t>(options_.max_batch));
      batch.reserve(n);
      for (size_t i = 0; i < n; ++i) {
        batch.push_back(std::move(queue_.front()));
        queue_.pop_front();
      }
      submit = !cancelled && TakeWorkLocked();
    }
    if (submit) Submit();
    bool step_done = false;  // computing_ counted down (RunBatch does it before the answers)
    if (cancelled || worker < 0 || worker >= static_cast<int>(options_.instances->size())) {
      const absl::Status status =
          cancelled ? absl::UnavailableError("the device is shutting down")
                    : absl::InternalError(absl::StrCat("worker ", worker, " has no instance"));
      for (auto& task : batch) Complete(*task, status, {}, absl::ZeroDuration(), 0);
    } else {
      RunBatch(*(*options_.instances)[static_cast<size_t>(worker)], batch, &step_done);
    }
    // Tasks still queued when a cancelled run finds no other work item left complete here.
    std::deque<std::unique_ptr<TickTask>> rest;
    {
      absl::MutexLock l(&mu_);
      if (cancelled && work_outstanding_ == 1) rest.swap(queue_);
    }
    for (auto& task : rest) {
      Complete(*task, absl::UnavailableError("the device is shutting down"), {},
               absl::ZeroDuration(), 0);
    }
    bool held_back = false;
    {
      absl::MutexLock l(&mu_);
      --work_outstanding_;
      if (!step_done) {
        --computing_;
        held_back = !cancelled && TakeWorkLocked();
      }
    }
    if (held_back) Submit();
  }

  // Fewer batches compute (or wait for a worker) than the limit allows: one more may go.
  bool BelowLimitLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.max_concurrent_batches == 0 || computing_ < options_.max_concurrent_batches;
  }

  // When ticks are queued, no work item waits for a worker and the limit allows one more:
  // counts in a work item for them and returns true; the caller must then Submit() it (without
  // mu_: a scheduler that shut down runs it on the calling thread) or run it inline.
  bool TakeWorkLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (queue_.empty() || work_waiting_ || !BelowLimitLocked()) return false;
    work_waiting_ = true;
    ++work_outstanding_;
    ++computing_;
    return true;
  }

  // Sets *step_done once the batch's step is done and computing_ counted down, before the
  // answers go out: a tick that arrives while they do (a client answered first sends its
  // next one) finds the engine idle and may run inline.
  void RunBatch(ModelInstance& instance, std::vector<std::unique_ptr<TickTask>>& batch,
                bool* step_done) {
    const absl::Time start = clock_->Now();
    // State reads and writes first, one by one (rare: snapshots, export, import).
    std::vector<TickTask*> computed;
    for (auto& task : batch) {
      if (task->kind == Kind::kReadState) {
        std::vector<float> state(static_cast<size_t>(options_.state_floats));
        const absl::Status status = instance.ReadState(task->slot, state.data());
        Complete(*task, status, std::move(state), clock_->Now() - start, 1, false, start);
      } else if (task->kind == Kind::kWriteState) {
        const absl::Status status =
            instance.WriteState(task->slot, task->input.empty() ? nullptr : task->input.data());
        Complete(*task, status, {}, clock_->Now() - start, 1, false, start);
      } else {
        computed.push_back(task.get());
      }
    }
    if (computed.empty()) return;
    const int64_t rows = static_cast<int64_t>(computed.size());
    const int64_t O = options_.output_floats;
    std::vector<float> output(static_cast<size_t>(rows * O));
    absl::Status status;
    const absl::Time compute_start = clock_->Now();
    if (options_.mode == v1::StreamingConfig::STREAM_MODE_STATE) {
      const int64_t F = options_.tick_floats;
      std::vector<int32_t> slots(static_cast<size_t>(rows));
      std::vector<uint8_t> zero(static_cast<size_t>(rows));
      std::vector<float> x(static_cast<size_t>(rows * F));
      for (int64_t r = 0; r < rows; ++r) {
        const TickTask& task = *computed[static_cast<size_t>(r)];
        slots[static_cast<size_t>(r)] = task.slot;
        zero[static_cast<size_t>(r)] = task.zero_state ? 1 : 0;
        std::copy(task.input.begin(), task.input.end(), x.begin() + r * F);
      }
      status = instance.Step(slots.data(), zero.data(), x.data(), rows, output.data());
    } else {
      const int64_t W = options_.window_floats;
      float* input = instance.input_staging();
      for (int64_t r = 0; r < rows; ++r) {
        const TickTask& task = *computed[static_cast<size_t>(r)];
        std::copy(task.input.begin(), task.input.end(), input + r * W);
      }
      status = instance.Run(input, rows, output.data());
    }
    const absl::Duration compute = clock_->Now() - compute_start;
    bool held_back = false;
    {
      absl::MutexLock l(&mu_);
      --computing_;
      *step_done = true;
      held_back = TakeWorkLocked();
    }
    if (held_back) Submit();
    for (int64_t r = 0; r < rows; ++r) {
      std::vector<float> forecast;
      if (status.ok()) forecast.assign(output.begin() + r * O, output.begin() + (r + 1) * O);
      Complete(*computed[static_cast<size_t>(r)], status, std::move(forecast), compute, rows,
               r + 1 < rows, compute_start);
    }
  }

  void Complete(TickTask& task, const absl::Status& status, std::vector<float> output,
                absl::Duration compute, int64_t rows, bool more_in_batch = false,
                absl::Time start = absl::InfinitePast()) {
    TickResult result;
    result.status = status;
    result.more_in_batch = more_in_batch;
    result.output = std::move(output);
    result.version = options_.version;
    result.queue_time = (start == absl::InfinitePast() ? clock_->Now() : start) - task.enqueue_time;
    result.compute_time = compute;
    result.batch_rows = rows;
    std::function<void(TickResult)> done = std::move(task.done);
    done(std::move(result));
  }

  const Options options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  std::vector<int32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<TickTask>> queue_ ABSL_GUARDED_BY(mu_);
  // A work item is submitted and has not yet taken its batch.
  bool work_waiting_ ABSL_GUARDED_BY(mu_) = false;
  // Work items submitted and not yet finished.
  int64_t work_outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  // Of those, the ones that have not finished computing (their answers not yet going out).
  int64_t computing_ ABSL_GUARDED_BY(mu_) = 0;
  bool draining_ ABSL_GUARDED_BY(mu_) = false;
};

absl::StatusOr<std::unique_ptr<TickEngine>> TickEngine::Create(const Options& options) {
  if (options.instances == nullptr || options.instances->empty() || options.scheduler == nullptr) {
    return absl::InvalidArgumentError("TickEngine needs instances and a scheduler");
  }
  if (options.max_batch < 1 || options.tick_floats < 1 || options.window_floats < 1 ||
      options.output_floats < 1 || options.slots < 0 ||
      options.slots > int64_t{std::numeric_limits<int32_t>::max()}) {
    return absl::InvalidArgumentError("TickEngine: bad sizes");
  }
  if (options.max_concurrent_batches < 0) {
    return absl::InvalidArgumentError("TickEngine: max_concurrent_batches must be >= 0");
  }
  if (options.mode == v1::StreamingConfig::STREAM_MODE_STATE &&
      (options.slots < 1 || options.state_floats < 1)) {
    return absl::InvalidArgumentError("TickEngine in state mode needs slots and a state size");
  }
  return std::unique_ptr<TickEngine>(new TickEngine(std::make_shared<Impl>(options)));
}

TickEngine::TickEngine(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}

TickEngine::~TickEngine() {
  impl_->Drain(absl::InfiniteDuration());
  impl_->WaitForWork();
}

absl::StatusOr<int32_t> TickEngine::AllocateSlot() { return impl_->AllocateSlot(); }
void TickEngine::ReleaseSlot(int32_t slot) { impl_->ReleaseSlot(slot); }
int64_t TickEngine::slots_in_use() const { return impl_->slots_in_use(); }
absl::Status TickEngine::Enqueue(std::unique_ptr<TickTask>& task) { return impl_->Enqueue(task); }
void TickEngine::Drain(absl::Duration timeout) { impl_->Drain(timeout); }

}  // namespace forecastd
