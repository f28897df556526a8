// Dynamic batching for one model version, with Triton's semantics: requests (PredictTasks of
// one or more rows) wait in a PriorityQueue; a batch closes when it holds max_batch_size rows,
// or a preferred size is reached, or the oldest request in it has waited max_queue_delay;
// then it goes to the DeviceScheduler at the priority of its best task and the deadline of
// its earliest, where it waits for a worker and runs `run_batch`. A request is never split
// across batches. One batcher thread per Batcher forms the batches, waiting on the injected
// Clock, so a FakeClock drives max_queue_delay and the queue timeouts in tests. A task whose
// windows or forecasts are in device memory (PredictTask::device_input / device_output) batches
// like any other; Options::device_rows says who moves those rows (see there).
// Thread-safe: Enqueue, Drain and the accessors may be called from any thread (not from a
// task's `done` for Drain, which would wait for itself).
#ifndef FORECASTD_ENGINE_SERVING_BATCHER_H_
#define FORECASTD_ENGINE_SERVING_BATCHER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/clock.h"
#include "engine/serving/device_memory.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/predict_task.h"
#include "engine/serving/priority_queue.h"

namespace forecastd {

// What the batcher reports, for metrics. Called on engine threads (workers, the batcher
// thread, a Drain caller); must be cheap and thread-safe. Every method has a no-op default.
class BatcherObserver {
 public:
  virtual ~BatcherObserver() = default;
  // A batch of `rows` rows from `tasks` requests starts computing (after the tasks whose
  // deadline passed meanwhile were taken out; a batch left empty by that is not reported), of
  // which `benchmark_rows` are Benchmark tasks' (PredictTask::benchmark).
  virtual void OnBatch(int64_t /*rows*/, int64_t /*tasks*/, int64_t /*benchmark_rows*/) {}
  // A task completed (OK or not), just before its `done`, after waiting `queue_time`
  // (enqueue until its batch started, or until it was completed without running) and
  // computing `compute_time` (zero when it never ran). `priority` is its level.
  virtual void OnTaskDone(uint32_t /*priority*/, const absl::Status& /*status*/,
                          absl::Duration /*queue_time*/, absl::Duration /*compute_time*/) {}
};

// Batch formation, each time the batcher thread looks at the queue (after an Enqueue, a time
// limit, or a batch starting). Let the candidate be the longest run of whole tasks, in the
// queue's scheduling order (level 1 first, FIFO within a level, a level's delayed tasks after
// its others; see PriorityQueue), whose rows fit max_batch_size. A task that does not fit
// ends the candidate even if a later, smaller one would fit: order is never traded for fill.
// The batcher then takes, in this order of rules:
//   1. the whole candidate if its rows == max_batch_size;
//   2. the whole candidate if its oldest task has waited max_queue_delay (at once when that
//      is zero), or the batcher is draining;
//   3. the longest prefix of the candidate whose rows equal a preferred batch size exactly
//      (the largest preferred size reachable; tasks are not split to reach one);
//   4. the whole candidate if it cannot grow: the next task does not fit, or its rows are at
//      least the largest preferred size;
//   5. otherwise nothing: it waits until the oldest task's delay runs out or the queue changes.
// With max_enqueued_batches set, no batch is taken while that many of this batcher's batches
// wait for a worker; the queue then grows and the next batch is larger.
// With spread_over_idle_workers, a batch taken by rules 1-4 is then cut to its first tasks
// whose rows reach max(min_spread_rows, ceil(its rows / free workers)), where free workers are
// the scheduler's workers less those running an item and the items waiting for one (at least
// 1): a queue that idle workers could share is shared, its rest forming the next batches at
// once (a CPU's workers each compute one batch on one core, so 8 rows on 4 idle workers run as
// 4 batches of 2, not one of 8 beside 3 idle cores; with min_spread_rows 4, as 2 batches of 4,
// where the kernels compute 4 rows at about the cost of 2).
//
// Invariants: every accepted task is in exactly one place: the PriorityQueue, a batch handed
// to the DeviceScheduler, or completing; its `done` is called exactly once; in_flight_tasks()
// counts accepted tasks whose `done` has not returned; a batch never holds more than
// max_batch_size rows; a task whose client deadline has passed when its batch forms or
// starts is never given to run_batch (it completes with DEADLINE_EXCEEDED).
//
// Worst-case queueing delay of a task that is first in scheduling order: max_queue_delay
// (exactly, with nothing else queued) plus, with max_enqueued_batches, the time until one of
// this batcher's batches starts, plus the wait for a worker: the longest item running on the
// device, extended by any work of a higher priority or an earlier deadline submitted
// meanwhile. A task further back also waits for the batches ahead of it; its level's REJECT
// timeout and its own deadline bound all of this (it then completes without running).
class Batcher {
 public:
  // Computes a batch: output (rows, output_floats_per_row) from input (rows,
  // input_floats_per_row), on DeviceScheduler worker `worker`. Called on worker threads;
  // several calls may run at once on different workers. `device` is empty unless
  // Options::device_rows is set and tasks of the batch have windows or forecasts in device
  // memory: those rows are then read from and also written to where `device` says (their rows
  // of `input` are not staged).
  using RunBatchFn = std::function<absl::Status(const float* input, int64_t rows, float* output,
                                                const DeviceRowsIo& device, int worker)>;
  // Starts a batch as run_batch computes it and calls `finish` exactly once with its status
  // when `output` is written: before returning, or later on another thread (a GPU instance's
  // completion thread, which then also hands the tasks their results). `input`, `output` and
  // what `device` points to stay valid until then.
  using StartBatchFn = std::function<void(const float* input, int64_t rows, float* output,
                                          const DeviceRowsIo& device, int worker,
                                          absl::AnyInvocable<void(absl::Status) &&> finish)>;
  // The host buffers a worker's batches are staged in (a GPU instance's pinned buffers, a CPU
  // instance's arena): `input` holds max_batch_size * input_floats_per_row floats, `output`
  // max_batch_size * output_floats_per_row. Only the batch running on that worker uses them.
  struct Staging {
    float* input = nullptr;
    float* output = nullptr;
  };
  using StagingFn = std::function<Staging(int worker)>;

  struct Options {
    // Rows in one batch at most, >= 1; Enqueue refuses a task with more.
    int64_t max_batch_size = 32;
    // Batch sizes (rows) worth dispatching at once, each in [1, max_batch_size]; see the
    // formation rules above. Empty: none.
    std::vector<int64_t> preferred_batch_sizes;
    // How long the oldest task of a forming batch may wait for more rows, >= 0. Zero:
    // dispatch at once whatever is queued.
    absl::Duration max_queue_delay = absl::ZeroDuration();
    // Levels and their policies (validated by PriorityQueue::Validate).
    PriorityQueue::Options queue;
    // Floats of one input row (the model's input record, Forecaster::input_floats()) and of
    // one output row (P * targets * Q), each >= 1.
    int64_t input_floats_per_row = 0;
    int64_t output_floats_per_row = 0;
    // Reported in every PredictResult.
    int64_t version = 0;
    // The model's forward pass; required.
    RunBatchFn run_batch;
    // For a batch that runs inline (run_inline_when_idle): started instead of run_batch, so
    // that Enqueue's thread returns once the device has its work; the worker slot stays busy
    // (DeviceScheduler::TryStartInline) and the batch counts as computing until `finish`,
    // which writes the replies from where the result became ready. Empty: run_batch.
    StartBatchFn start_batch;
    // Where worker `worker` stages its batches: the tasks' input bytes are copied into its
    // `input` (once: nothing else copies them), run_batch gets both buffers, and each task's
    // rows are copied from `output` into the task's `output` buffer. Empty: the batcher
    // stages in buffers of its own, per batch.
    StagingFn staging;
    // Whether run_batch and start_batch take rows in device memory (PredictTask::device_input
    // and device_output) as DeviceRowsIo: the model's instances run on a GPU. false: the
    // batcher copies such rows through host memory (DeviceMemoryRegion's copies), checks
    // their windows for non-finite values itself, and run_batch sees host memory only.
    bool device_rows = false;
    // Batches of this batcher handed to the scheduler and not yet started, at most, >= 0.
    // Zero: unbounded (a batch goes to the scheduler the moment it closes). A small value
    // (such as the scheduler's num_workers) lets batches grow while the device is busy.
    int64_t max_enqueued_batches = 0;
    // Cut batches so that the scheduler's free workers share what is queued (see the rules
    // above). For devices whose workers add compute (CPU cores), not for ones that run a
    // larger batch at about the cost of a smaller (a GPU).
    bool spread_over_idle_workers = false;
    // With spread_over_idle_workers, the fewest rows a cut leaves in a batch (>= 1): the rows
    // from which the device's kernels compute a row at about their lowest cost. A batch of
    // fewer rows than this is never cut.
    int64_t min_spread_rows = 1;
    // A task that finds this batcher idle (nothing queued, no batch waiting or computing; a
    // batch whose replies are still going out counts as done) runs at once on Enqueue's
    // thread when the scheduler has an idle worker slot and nothing queued
    // (DeviceScheduler::TryRunInline), without max_queue_delay: with the device idle there is
    // nothing to wait for, and no thread hand-off. Otherwise it queues as usual.
    bool run_inline_when_idle = false;
    // Not owned; required; must outlive the Batcher.
    DeviceScheduler* scheduler = nullptr;
    // Not owned; nullptr: the real clock.
    Clock* clock = nullptr;
    // Not owned; may be nullptr.
    BatcherObserver* observer = nullptr;
  };

  // INVALID_ARGUMENT for bad options. Starts the batcher thread.
  static absl::StatusOr<std::unique_ptr<Batcher>> Create(Options options);
  // Drain() without a timeout, then joins the batcher thread and waits until every batch it
  // handed to the scheduler has finished (run or cancelled).
  ~Batcher();

  // Ownership of the task moves to the batcher iff this returns OK (its `done` is then called
  // exactly once: on an engine thread, or inside Enqueue when it ran inline (see
  // Options::run_inline_when_idle and start_batch), so the caller must not hold a lock `done`
  // takes). Otherwise the task is still the caller's, untouched: INVALID_ARGUMENT for a null task,
  // rows outside [1, max_batch_size], an input size other than rows * input_floats_per_row (in
  // host or device memory, not both), a device output of another size than the rows'
  // forecasts or one beside a host `output`, no `done`, or a priority level outside [0, levels];
  // DEADLINE_EXCEEDED when its deadline has already passed; RESOURCE_EXHAUSTED when its level's
  // queue is full; UNAVAILABLE ("model version is draining") once Drain() has begun.
  absl::Status Enqueue(std::unique_ptr<PredictTask>& task);

  // Stops accepting, dispatches what is queued at once (max_queue_delay no longer applies),
  // and returns when every accepted task has completed or `timeout` (on the Clock) passes.
  // In the latter case, tasks still queued complete with UNAVAILABLE before it returns;
  // batches waiting for a worker complete with UNAVAILABLE when a worker takes them, without
  // running; batches already running complete normally, possibly after Drain returns.
  void Drain(absl::Duration timeout = absl::InfiniteDuration());

  int64_t queued_tasks() const;     // in the PriorityQueue, not yet batched
  int64_t in_flight_tasks() const;  // accepted and not yet completed (queued or in a batch)

  // For tests: blocks (in real time, as a synchronisation point) until the batcher thread has
  // looked at the queue since its last change and is waiting for a time later than the
  // Clock's Now() or for a change. Then "nothing dispatched yet" is a fact, not a race.
  void WaitUntilIdleForTesting() const;

 private:
  class Impl;
  explicit Batcher(std::shared_ptr<Impl> impl);
  // Shared with the work handed to the scheduler, which may touch it (to report and count)
  // until an instant after its last task's `done` returns.
  std::shared_ptr<Impl> impl_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_BATCHER_H_
