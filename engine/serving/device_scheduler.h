// Runs work on one device's worker slots. On the CPU the slots are worker threads (the CPU
// backend's "streams"), as many as the options say. Work is taken highest priority first
// (level 1 before 2 ...), then earliest deadline, then first come. Training steps are the
// lowest priority of all: a training job asks for a TrainingLease before each step, which is
// granted only while no inference work is waiting and a worker is idle, and it holds that one
// worker only; so inference submitted during a step waits at most for that step (and the
// other workers keep taking inference meanwhile).
// Thread-safe: Submit, AcquireTrainingLease, Shutdown and the accessors may be called from
// any thread, including from inside running work.
#ifndef FORECASTD_ENGINE_SERVING_DEVICE_SCHEDULER_H_
#define FORECASTD_ENGINE_SERVING_DEVICE_SCHEDULER_H_

#include <cstdint>
#include <functional>
#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/clock.h"

namespace forecastd {

class DeviceScheduler {
  class Impl;  // first: SlotHold points to it

 public:
  struct Options {
    // Worker slots, in [1, 1024]. Each runs one item at a time; `worker` passed to the work is
    // in [0, num_workers), so callers can keep per-worker scratch memory.
    int num_workers = 1;
    // Not owned; nullptr: the real clock. AcquireTrainingLease waits on it, so a test with a
    // FakeClock sees a blocked acquirer as a waiter (FakeClock::BlockUntilWaiters).
    Clock* clock = nullptr;
    // Runs first on each worker thread, before it takes any work; for per-thread setup such
    // as how many threads the backend may fan a call out to. Empty: none.
    std::function<void(int worker)> on_worker_start;
    // Runs on the calling thread before each TryRunInline work, for the same per-thread setup.
    // Empty: none.
    std::function<void(int worker)> on_inline;
    // false: TryRunInline and TryStartInline never run work (it queues for the workers). For a
    // CPU whose workers fan a call out over several OpenMP threads: a team belongs to the thread
    // that starts it, so work run inline on other threads would start teams of their own, and
    // once the process has more OpenMP threads than cores, libgomp stops spinning at barriers
    // and sleeps (a B=1 LSTM forward with a barrier per time step then takes 10x as long).
    bool allow_inline = true;
    // CPU workers of one thread each: the most idle workers whose threads a running item may
    // borrow for a parallel region of a CPU kernel (backends/cpu/cpu_helpers.h), installed on
    // every thread that runs an item. A team is lent only while nothing is queued, and only
    // as long as busy, leased and lent workers together stay within half of the workers: on
    // a quiet server a forecast spreads over idle cores, under load each keeps to its own. A
    // lent worker takes no item until the region ends. 0: none lent.
    int max_helpers = 0;
  };

  // INVALID_ARGUMENT for bad options. Starts the workers.
  static absl::StatusOr<std::unique_ptr<DeviceScheduler>> Create(const Options& options);
  // Shutdown(), then joins the workers. Every TrainingLease must be gone by then.
  ~DeviceScheduler();

  // Queues `work`; it runs exactly once: on some worker with `cancelled` = false, or, when
  // submitted after Shutdown() began, at once on the caller's thread with `worker` = -1 and
  // `cancelled` = true, so its owner can complete it. Lower `priority` runs first, then the
  // earlier `deadline` (InfiniteFuture for none), then the earlier Submit.
  using Work = std::function<void(int worker, bool cancelled)>;
  void Submit(uint32_t priority, absl::Time deadline, Work work);

  // Runs `work` at once on the calling thread, as an idle worker slot, when nothing is queued,
  // a slot is neither running work nor leased, and Shutdown() has not begun: the slot counts
  // as busy meanwhile (its thread takes no work), and `work` gets that slot's index with
  // `cancelled` = false. Returns false, having run nothing, otherwise, and also when called
  // from inside work running on this thread, inline or on a worker (its next request then
  // queues, one run deep), and always when Options::allow_inline is false. So a caller whose work
  // would only wait for a thread to wake (one request on an idle device) skips the hand-off; under
  // load, work queues as with Submit.
  bool TryRunInline(const Work& work);

  // A worker slot kept busy after the inline work that took it has returned, until the hold is
  // released (Release() or destruction, on any thread): for work that started something
  // asynchronous on the slot's instance, such as a GPU batch whose completion is noticed and
  // answered on another thread. Move-only; an empty hold releases nothing.
  class SlotHold {
   public:
    SlotHold() = default;
    SlotHold(SlotHold&& other) noexcept;
    SlotHold& operator=(SlotHold&& other) noexcept;
    SlotHold(const SlotHold&) = delete;
    SlotHold& operator=(const SlotHold&) = delete;
    ~SlotHold() { Release(); }
    void Release();
    bool held() const { return impl_ != nullptr; }

   private:
    friend class DeviceScheduler;
    SlotHold(Impl* impl, int worker) : impl_(impl), worker_(worker) {}
    Impl* impl_ = nullptr;  // nullptr once released or moved from
    int worker_ = -1;
  };
  // TryRunInline for work that may keep its slot past its return: `work` also gets the slot's
  // hold, and the slot stays busy until that hold is released. (TryRunInline is this with the
  // hold released when `work` returns.) Shutdown() waits for held slots too.
  using HeldWork = std::function<void(int worker, SlotHold hold)>;
  bool TryStartInline(const HeldWork& work);

  // Holds one worker for a training step; the worker takes no inference work until the lease
  // is destroyed. Move-only.
  class TrainingLease {
   public:
    TrainingLease(TrainingLease&& other) noexcept;
    TrainingLease& operator=(TrainingLease&&) = delete;
    ~TrainingLease();
    int worker() const { return worker_; }

   private:
    friend class DeviceScheduler;
    TrainingLease(DeviceScheduler* scheduler, int worker)
        : scheduler_(scheduler), worker_(worker) {}
    DeviceScheduler* scheduler_;  // nullptr once moved from
    int worker_;
  };
  // Blocks until no inference work is queued and a worker is idle (neither running work nor
  // leased), then returns a lease on that worker. Waiting is condition-based: it ends when
  // work drains or a lease is released. UNAVAILABLE after Shutdown() (also for a caller
  // blocked here when it begins); DEADLINE_EXCEEDED when `deadline` (on the scheduler's clock)
  // passes first.
  absl::StatusOr<TrainingLease> AcquireTrainingLease(absl::Time deadline = absl::InfiniteFuture());

  // Refuses new work from now on (Submit runs it cancelled, leases are refused), lets the
  // workers run everything already queued (waiting for leased workers to be released where
  // no other is left), and returns once nothing is queued or running. Idempotent.
  void Shutdown();

  int num_workers() const;
  int64_t queued() const;        // inference items waiting
  int64_t busy_workers() const;  // running an item
  int64_t leased_workers() const;
  int64_t lent_workers() const;  // lent to a running item's team (Options::max_helpers)
  int64_t lent_teams() const;    // teams lent since Create

 private:
  explicit DeviceScheduler(std::unique_ptr<Impl> impl);
  void ReleaseLease(int worker);
  std::unique_ptr<Impl> impl_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_DEVICE_SCHEDULER_H_
