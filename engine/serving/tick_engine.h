// The tick path of one loaded model version: computes the ticks of many streams as batches on the
// version's device. A TickTask is one stream's next piece of work: a time step of its recurrent
// state (state mode: the state lives in the version's state slab, at the stream's slot), a
// forward over its last T ticks (window mode), or a read or write of its state (snapshots,
// export, import). The StreamHub (engine/serving/stream_hub.h) decides what each stream needs and
// keeps at most one task per stream in flight, so slots in one batch are distinct.
// Thread-safe: Enqueue, the slot calls, Drain and the accessors may be called from any thread.
#ifndef FORECASTD_ENGINE_SERVING_TICK_ENGINE_H_
#define FORECASTD_ENGINE_SERVING_TICK_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/clock.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_instance.h"
#include "forecastd/v1/model_config.pb.h"

namespace forecastd {

struct TickResult {
  absl::Status status;
  // kStep, kWindow: the (P, targets[, Q]) raw forecast; kReadState: the state.
  std::vector<float> output;
  int64_t version = 0;
  absl::Duration queue_time;    // enqueue until its batch started
  absl::Duration compute_time;  // its batch's step or forward
  int64_t batch_rows = 0;       // tasks in the batch it ran in
  // kStep, kWindow: more of the batch's computed tasks (kStep, kWindow) complete right after
  // this one, on the same thread, so a `done` may leave work it can share with theirs (such as
  // delivering replies) to the last of them. Always false for state reads and writes.
  bool more_in_batch = false;
};

struct TickTask {
  enum class Kind {
    kStep,        // state mode: one time step of `input` (F raw values) at `slot`
    kWindow,      // window mode: a forward over `input`, the input record (input_floats():
                  // the last T rows oldest first, then any future-known values and series)
    kReadState,   // state mode: output = the state at `slot`
    kWriteState,  // state mode: the state at `slot` = `input` (StateFloats values; empty: zeros)
  };
  Kind kind = Kind::kStep;
  int32_t slot = -1;
  // kStep: the state at `slot` is zero before this step (a new, reset or replayed stream).
  bool zero_state = false;
  std::vector<float> input;
  // Called once: on an engine thread, or inside Enqueue when the task ran inline (an idle
  // device); so Enqueue's caller must not hold a lock that `done` takes.
  std::function<void(TickResult)> done;
  absl::Time enqueue_time;  // set by Enqueue
};

class TickEngine {
 public:
  struct Options {
    int64_t version = 0;
    v1::StreamingConfig::Mode mode = v1::StreamingConfig::STREAM_MODE_WINDOW;
    // Stream slots of the state slab (state mode); slots are handed out in [0, slots).
    int64_t slots = 0;
    // Step or window tasks in one batch at most, >= 1: the instances' max_step_rows in state
    // mode, their max_batch_size in window mode.
    int64_t max_batch = 1;
    // Floats of one input tick (F), of one window's input record (Forecaster::input_floats():
    // T * F for a model without covariates or series), of one forecast and of one state.
    int64_t tick_floats = 0;
    int64_t window_floats = 0;
    int64_t output_floats = 0;
    int64_t state_floats = 0;
    // The version's instances, instances[w] for scheduler worker w; not owned, must outlive
    // the engine.
    const std::vector<std::unique_ptr<ModelInstance>>* instances = nullptr;
    // Not owned; must outlive the engine.
    DeviceScheduler* scheduler = nullptr;
    // Not owned; nullptr: the real clock.
    Clock* clock = nullptr;
    // The scheduler priority its batches run at (1: before every Predict level but the first).
    uint32_t priority = 1;
    // A task that finds the engine idle (nothing queued or computing; a batch whose answers
    // are still going out counts as done) runs at once on Enqueue's thread when the scheduler
    // has an idle worker slot (DeviceScheduler::TryRunInline).
    bool run_inline_when_idle = false;
    // Batches of this engine computing at once, at most (0: as many as there are workers).
    // While that many compute, ticks queue and the next batch takes them together: on a
    // device with many workers, ticks then go out in batches of tens or hundreds instead of a
    // worker waking for every few.
    int64_t max_concurrent_batches = 0;
  };

  // INVALID_ARGUMENT for bad options (negative max_concurrent_batches among them).
  static absl::StatusOr<std::unique_ptr<TickEngine>> Create(const Options& options);
  // Drain(), then waits for its batches on the scheduler.
  ~TickEngine();

  // A free slot of the state slab; RESOURCE_EXHAUSTED when all `slots` are taken.
  absl::StatusOr<int32_t> AllocateSlot();
  void ReleaseSlot(int32_t slot);
  int64_t slots_in_use() const;

  // Ownership of the task moves to the engine iff OK (its `done` is then called exactly once).
  // INVALID_ARGUMENT for a task of the wrong size or kind for the mode; UNAVAILABLE once
  // Drain() has begun.
  absl::Status Enqueue(std::unique_ptr<TickTask>& task);

  // Refuses new tasks and returns when every accepted task has completed or `timeout` passed.
  void Drain(absl::Duration timeout = absl::InfiniteDuration());

 private:
  class Impl;
  explicit TickEngine(std::shared_ptr<Impl> impl);
  // Shared with the work on the scheduler, which touches it until its last task's `done`.
  std::shared_ptr<Impl> impl_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_TICK_ENGINE_H_
