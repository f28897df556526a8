#include "engine/serving/device_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <future>
#include <memory>
#include <optional>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "backends/cpu/cpu_helpers.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

// A generous real-time bound for things that happen at once: only a broken scheduler (or a
// hung machine) hits it; no test waits for it to pass.
const absl::Duration kSafety = absl::Seconds(30);

// What the work in a test did, in order, and a gate that holds work until opened.
class Recorder {
 public:
  void Record(int id, int worker = 0) {
    absl::MutexLock lock(&mu_);
    order_.push_back(id);
    workers_.push_back(worker);
  }
  // Blocks the calling work until Open().
  void WaitForGate() {
    absl::MutexLock lock(&mu_);
    ++at_gate_;
    mu_.Await(absl::Condition(&open_));
  }
  void Open() {
    absl::MutexLock lock(&mu_);
    open_ = true;
  }
  bool WaitForRecords(size_t n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return order_.size() >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kSafety);
  }
  bool WaitAtGate(int n) {
    absl::MutexLock lock(&mu_);
    auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return at_gate_ >= n; };
    return mu_.AwaitWithTimeout(absl::Condition(&enough), kSafety);
  }
  std::vector<int> order() const {
    absl::MutexLock lock(&mu_);
    return order_;
  }
  std::vector<int> workers() const {
    absl::MutexLock lock(&mu_);
    return workers_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<int> order_ ABSL_GUARDED_BY(mu_);
  std::vector<int> workers_ ABSL_GUARDED_BY(mu_);
  int at_gate_ ABSL_GUARDED_BY(mu_) = 0;
  bool open_ ABSL_GUARDED_BY(mu_) = false;
};

std::unique_ptr<DeviceScheduler> MakeScheduler(int num_workers, Clock* clock = nullptr) {
  DeviceScheduler::Options options;
  options.num_workers = num_workers;
  options.clock = clock;
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> scheduler = DeviceScheduler::Create(options);
  REQUIRE(scheduler.ok());
  return *std::move(scheduler);
}

// Occupies a worker until the recorder's gate opens; records -1 when it starts.
void SubmitBlocker(DeviceScheduler& scheduler, Recorder& recorder, uint32_t priority = 1) {
  scheduler.Submit(priority, absl::InfiniteFuture(), [&recorder](int worker, bool) {
    recorder.Record(-1, worker);
    recorder.WaitForGate();
  });
}

TEST_CASE("DeviceScheduler::Create validates num_workers", "[unit][device_scheduler]") {
  DeviceScheduler::Options options;
  options.num_workers = 0;
  REQUIRE(DeviceScheduler::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  options.num_workers = 3;
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> scheduler = DeviceScheduler::Create(options);
  REQUIRE(scheduler.ok());
  REQUIRE((*scheduler)->num_workers() == 3);
}

TEST_CASE("on_worker_start runs once on each worker thread before its first work",
          "[unit][device_scheduler]") {
  absl::Mutex mu;
  std::vector<std::pair<int, std::thread::id>> started;  // guarded by mu
  DeviceScheduler::Options options;
  options.num_workers = 3;
  options.on_worker_start = [&](int worker) {
    absl::MutexLock lock(&mu);
    started.emplace_back(worker, std::this_thread::get_id());
  };
  auto scheduler = *DeviceScheduler::Create(options);
  Recorder recorder;
  std::vector<std::thread::id> ran_on(3);
  for (int i = 0; i < 6; ++i) {
    scheduler->Submit(1, absl::InfiniteFuture(), [&, i](int worker, bool) {
      {
        absl::MutexLock lock(&mu);
        ran_on[static_cast<size_t>(worker)] = std::this_thread::get_id();
      }
      recorder.Record(i, worker);
    });
  }
  REQUIRE(recorder.WaitForRecords(6));
  scheduler.reset();  // joins the workers

  REQUIRE(started.size() == 3);
  std::vector<int> workers;
  for (const auto& [worker, thread] : started) {
    workers.push_back(worker);
    // Work that ran on a worker ran on the thread its start hook ran on.
    const std::thread::id ran = ran_on[static_cast<size_t>(worker)];
    if (ran != std::thread::id()) REQUIRE(ran == thread);
  }
  std::sort(workers.begin(), workers.end());
  REQUIRE(workers == std::vector<int>{0, 1, 2});
}

TEST_CASE("Work runs by priority - then deadline - then submission order",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(1);
  SubmitBlocker(*scheduler, recorder);
  REQUIRE(recorder.WaitAtGate(1));  // the only worker is busy: everything below queues

  const absl::Time t = absl::UnixEpoch() + absl::Hours(1);
  auto submit = [&](int id, uint32_t priority, absl::Time deadline) {
    scheduler->Submit(priority, deadline, [&recorder, id](int worker, bool cancelled) {
      recorder.Record(cancelled ? -100 : id, worker);
    });
  };
  submit(1, 3, absl::InfiniteFuture());
  submit(2, 2, t + absl::Seconds(5));
  submit(3, 1, absl::InfiniteFuture());
  submit(4, 2, t + absl::Seconds(1));
  submit(5, 1, t + absl::Seconds(9));
  submit(6, 2, t + absl::Seconds(1));  // same key as 4: after it
  submit(7, 1, t + absl::Seconds(9));
  REQUIRE(scheduler->queued() == 7);
  recorder.Open();
  REQUIRE(recorder.WaitForRecords(8));
  REQUIRE(recorder.order() == std::vector<int>{-1, 5, 7, 3, 4, 6, 2, 1});
}

TEST_CASE("Several workers run work at the same time", "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(3);
  for (int i = 0; i < 3; ++i) SubmitBlocker(*scheduler, recorder);
  // All three are inside their work at once, or this times out.
  REQUIRE(recorder.WaitAtGate(3));
  REQUIRE(scheduler->busy_workers() == 3);
  std::vector<int> workers = recorder.workers();
  std::sort(workers.begin(), workers.end());
  REQUIRE(workers == std::vector<int>{0, 1, 2});
  recorder.Open();
}

TEST_CASE("A training lease waits while inference is queued", "[unit][device_scheduler]") {
  FakeClock clock;
  Recorder recorder;
  auto scheduler = MakeScheduler(1, &clock);
  SubmitBlocker(*scheduler, recorder);
  REQUIRE(recorder.WaitAtGate(1));
  scheduler->Submit(1, absl::InfiniteFuture(), [&](int, bool) { recorder.Record(1); });

  std::optional<absl::StatusOr<DeviceScheduler::TrainingLease>> lease;
  std::thread trainer([&] {
    absl::StatusOr<DeviceScheduler::TrainingLease> got = scheduler->AcquireTrainingLease();
    recorder.Record(100);  // granted
    lease.emplace(std::move(got));
  });
  clock.BlockUntilWaiters(1);  // the trainer is blocked in AcquireTrainingLease
  REQUIRE(recorder.order() == std::vector<int>{-1});
  recorder.Open();
  trainer.join();
  // The queued inference ran before the lease was granted.
  REQUIRE(recorder.order() == std::vector<int>{-1, 1, 100});
  REQUIRE(lease->ok());
  REQUIRE((*lease)->worker() == 0);
  REQUIRE(scheduler->leased_workers() == 1);
  lease.reset();
  REQUIRE(scheduler->leased_workers() == 0);
}

TEST_CASE("A training lease holds one worker - inference waits only for that step",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(2);
  absl::StatusOr<DeviceScheduler::TrainingLease> lease = scheduler->AcquireTrainingLease();
  REQUIRE(lease.ok());
  const int leased = lease->worker();
  REQUIRE(scheduler->leased_workers() == 1);

  // The other worker keeps taking inference.
  for (int id = 1; id <= 4; ++id) {
    scheduler->Submit(1, absl::InfiniteFuture(),
                      [&recorder, id](int worker, bool) { recorder.Record(id, worker); });
  }
  REQUIRE(recorder.WaitForRecords(4));
  for (int worker : recorder.workers()) REQUIRE(worker == 1 - leased);

  // With the other worker busy too, new inference waits for the step to end...
  SubmitBlocker(*scheduler, recorder);
  REQUIRE(recorder.WaitAtGate(1));
  scheduler->Submit(1, absl::InfiniteFuture(),
                    [&recorder](int worker, bool) { recorder.Record(7, worker); });
  REQUIRE(scheduler->queued() == 1);  // no free worker may take it: deterministic
  REQUIRE(scheduler->busy_workers() == 1);
  // ...and runs on the leased worker as soon as the lease goes.
  {
    DeviceScheduler::TrainingLease moved(std::move(*lease));  // a moved-from lease releases nothing
    REQUIRE(scheduler->leased_workers() == 1);
  }
  REQUIRE(recorder.WaitForRecords(6));
  REQUIRE(recorder.order().back() == 7);
  REQUIRE(recorder.workers().back() == leased);
  recorder.Open();
}

TEST_CASE("Inference submitted during a training step on the only worker runs after it",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(1);
  std::optional<absl::StatusOr<DeviceScheduler::TrainingLease>> lease;
  lease.emplace(scheduler->AcquireTrainingLease());
  REQUIRE(lease->ok());
  scheduler->Submit(1, absl::InfiniteFuture(), [&](int, bool) { recorder.Record(1); });
  REQUIRE(scheduler->queued() == 1);
  REQUIRE(recorder.order().empty());
  lease.reset();  // the step ends
  REQUIRE(recorder.WaitForRecords(1));
}

TEST_CASE("AcquireTrainingLease gives up at its deadline on the scheduler's clock",
          "[unit][device_scheduler]") {
  FakeClock clock;
  auto scheduler = MakeScheduler(1, &clock);
  absl::StatusOr<DeviceScheduler::TrainingLease> first = scheduler->AcquireTrainingLease();
  REQUIRE(first.ok());
  std::optional<absl::Status> second;
  std::thread trainer(
      [&] { second = scheduler->AcquireTrainingLease(clock.Now() + absl::Seconds(1)).status(); });
  clock.BlockUntilWaiters(1);
  clock.Advance(absl::Seconds(1) - absl::Microseconds(1));
  REQUIRE(clock.num_waiters() == 1);
  clock.Advance(absl::Microseconds(1));
  trainer.join();
  REQUIRE(second->code() == absl::StatusCode::kDeadlineExceeded);
}

TEST_CASE("Shutdown runs queued work - then Submit runs work cancelled on the caller's thread",
          "[unit][device_scheduler]") {
  FakeClock clock;
  Recorder recorder;
  auto scheduler = MakeScheduler(1, &clock);
  SubmitBlocker(*scheduler, recorder);
  REQUIRE(recorder.WaitAtGate(1));
  for (int id = 1; id <= 3; ++id) {
    scheduler->Submit(2, absl::InfiniteFuture(), [&recorder, id](int, bool cancelled) {
      recorder.Record(cancelled ? -100 : id);
    });
  }
  // A trainer blocked when shutdown begins is refused.
  std::optional<absl::Status> lease_status;
  std::thread trainer([&] { lease_status = scheduler->AcquireTrainingLease().status(); });
  clock.BlockUntilWaiters(1);

  std::atomic<bool> shut_down{false};
  std::thread shutdown([&] {
    scheduler->Shutdown();
    shut_down = true;
  });
  trainer.join();
  REQUIRE(lease_status->code() == absl::StatusCode::kUnavailable);
  REQUIRE(!shut_down.load());  // the blocker is still running
  recorder.Open();
  shutdown.join();
  REQUIRE(recorder.order() == std::vector<int>{-1, 1, 2, 3});
  REQUIRE(scheduler->queued() == 0);
  REQUIRE(scheduler->busy_workers() == 0);

  const std::thread::id caller = std::this_thread::get_id();
  bool ran_cancelled = false;
  scheduler->Submit(1, absl::InfiniteFuture(), [&](int worker, bool cancelled) {
    ran_cancelled = cancelled && worker == -1 && std::this_thread::get_id() == caller;
  });
  REQUIRE(ran_cancelled);
  REQUIRE(scheduler->AcquireTrainingLease().status().code() == absl::StatusCode::kUnavailable);
  scheduler->Shutdown();  // idempotent
}

TEST_CASE("TryRunInline runs work on the calling thread as an idle worker slot",
          "[unit][device_scheduler]") {
  Recorder recorder;
  std::atomic<int> inline_setups{0};
  DeviceScheduler::Options options;
  options.num_workers = 2;
  options.on_inline = [&inline_setups](int) { ++inline_setups; };
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> created = DeviceScheduler::Create(options);
  REQUIRE(created.ok());
  DeviceScheduler& scheduler = **created;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  int slot = -1;
  bool was_cancelled = true;
  int64_t busy_inside = 0;
  REQUIRE(scheduler.TryRunInline([&](int worker, bool cancelled) {
    ran_on = std::this_thread::get_id();
    slot = worker;
    was_cancelled = cancelled;
    busy_inside = scheduler.busy_workers();
  }));
  REQUIRE(ran_on == caller);
  REQUIRE((slot == 0 || slot == 1));
  REQUIRE_FALSE(was_cancelled);
  REQUIRE(busy_inside == 1);  // its slot counts as busy while it runs
  REQUIRE(inline_setups == 1);
  REQUIRE(scheduler.busy_workers() == 0);
}

TEST_CASE("Without allow_inline nothing runs inline - the work goes to a worker thread",
          "[unit][device_scheduler]") {
  std::atomic<int> inline_setups{0};
  DeviceScheduler::Options options;
  options.num_workers = 1;
  options.allow_inline = false;
  options.on_inline = [&inline_setups](int) { ++inline_setups; };
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> created = DeviceScheduler::Create(options);
  REQUIRE(created.ok());
  DeviceScheduler& scheduler = **created;
  bool ran = false;
  // Idle, nothing queued: still refused, and the caller submits instead.
  REQUIRE_FALSE(scheduler.TryRunInline([&ran](int, bool) { ran = true; }));
  REQUIRE_FALSE(scheduler.TryStartInline([&ran](int, DeviceScheduler::SlotHold) { ran = true; }));
  REQUIRE_FALSE(ran);
  REQUIRE(inline_setups == 0);
  std::promise<std::thread::id> ran_on;
  scheduler.Submit(1, absl::InfiniteFuture(),
                   [&ran_on](int, bool) { ran_on.set_value(std::this_thread::get_id()); });
  REQUIRE(ran_on.get_future().get() != std::this_thread::get_id());
}

TEST_CASE("TryRunInline refuses while work is queued or no slot is free",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(1);
  bool ran = false;
  const auto work = [&ran](int, bool) { ran = true; };
  // The only worker is busy: nothing runs inline.
  SubmitBlocker(*scheduler, recorder);
  REQUIRE(recorder.WaitAtGate(1));
  REQUIRE_FALSE(scheduler->TryRunInline(work));
  // Work is queued behind it: inline work would overtake it, so it is refused too.
  scheduler->Submit(1, absl::InfiniteFuture(), [&recorder](int, bool) { recorder.Record(1); });
  REQUIRE(scheduler->queued() == 1);
  REQUIRE_FALSE(scheduler->TryRunInline(work));
  recorder.Open();
  REQUIRE(recorder.WaitForRecords(2));
  // A leased slot is not free either.
  {
    absl::StatusOr<DeviceScheduler::TrainingLease> lease = scheduler->AcquireTrainingLease();
    REQUIRE(lease.ok());
    REQUIRE_FALSE(scheduler->TryRunInline(work));
  }
  REQUIRE_FALSE(ran);
  REQUIRE(scheduler->TryRunInline(work));
  REQUIRE(ran);
  // After Shutdown nothing runs inline: the caller submits and the work runs cancelled.
  scheduler->Shutdown();
  ran = false;
  REQUIRE_FALSE(scheduler->TryRunInline(work));
  REQUIRE_FALSE(ran);
}

TEST_CASE("TryRunInline from inside running work - inline or on a worker - refuses",
          "[unit][device_scheduler]") {
  auto scheduler = MakeScheduler(2);  // a free slot in every case below
  const auto nested = [&scheduler](int, bool) { return scheduler->TryRunInline([](int, bool) {}); };
  bool from_inline = true;
  REQUIRE(scheduler->TryRunInline(
      [&](int worker, bool cancelled) { from_inline = nested(worker, cancelled); }));
  REQUIRE_FALSE(from_inline);
  std::promise<bool> from_worker;
  scheduler->Submit(1, absl::InfiniteFuture(), [&](int worker, bool cancelled) {
    from_worker.set_value(nested(worker, cancelled));
  });
  std::future<bool> result = from_worker.get_future();
  REQUIRE(result.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  REQUIRE_FALSE(result.get());
  // Outside any work, the same call runs inline.
  REQUIRE(scheduler->TryRunInline([](int, bool) {}));
}

TEST_CASE("A slot running inline work takes no queued work until it returns",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(1);
  std::atomic<bool> ran_inline{false};
  std::thread caller([&] {
    ran_inline = scheduler->TryRunInline([&recorder](int worker, bool) {
      recorder.Record(-1, worker);
      recorder.WaitForGate();
    });
  });
  REQUIRE(recorder.WaitAtGate(1));
  // Submitted while the only slot runs inline work: it waits, although the worker thread idles.
  scheduler->Submit(1, absl::InfiniteFuture(),
                    [&recorder](int worker, bool) { recorder.Record(1, worker); });
  REQUIRE(scheduler->queued() == 1);
  REQUIRE(scheduler->busy_workers() == 1);
  recorder.Open();
  caller.join();
  REQUIRE(ran_inline);
  REQUIRE(recorder.WaitForRecords(2));
  REQUIRE(recorder.order() == std::vector<int>{-1, 1});
  REQUIRE(recorder.workers() == std::vector<int>{0, 0});
}

TEST_CASE("A slot held past its inline work stays busy until the hold is released",
          "[unit][device_scheduler]") {
  Recorder recorder;
  auto scheduler = MakeScheduler(1);
  DeviceScheduler::SlotHold kept;
  int slot = -1;
  REQUIRE(scheduler->TryStartInline([&](int worker, DeviceScheduler::SlotHold hold) {
    slot = worker;
    kept = std::move(hold);
  }));
  REQUIRE(slot == 0);
  REQUIRE(kept.held());
  // The work returned, but its slot is still busy: nothing runs inline, queued work waits.
  REQUIRE(scheduler->busy_workers() == 1);
  REQUIRE_FALSE(scheduler->TryRunInline([](int, bool) {}));
  scheduler->Submit(1, absl::InfiniteFuture(),
                    [&recorder](int worker, bool) { recorder.Record(1, worker); });
  REQUIRE(scheduler->queued() == 1);
  // Shutdown waits for the held slot too.
  std::atomic<bool> shut_down{false};
  std::thread shutting([&] {
    scheduler->Shutdown();
    shut_down = true;
  });
  absl::SleepFor(absl::Milliseconds(20));  // real time: Shutdown must still be waiting
  REQUIRE_FALSE(shut_down);
  REQUIRE(recorder.order().empty());
  // Released on another thread: the slot takes the queued work, and Shutdown returns.
  std::thread releasing([&kept] { kept.Release(); });
  releasing.join();
  REQUIRE_FALSE(kept.held());
  shutting.join();
  REQUIRE(shut_down);
  REQUIRE(recorder.order() == std::vector<int>{1});
  REQUIRE(scheduler->busy_workers() == 0);
  kept.Release();  // a second release frees nothing
  REQUIRE(scheduler->busy_workers() == 0);
}

TEST_CASE("A hold released inside its work frees the slot at once", "[unit][device_scheduler]") {
  auto scheduler = MakeScheduler(1);
  int64_t busy_after_release = -1;
  REQUIRE(scheduler->TryStartInline([&](int, DeviceScheduler::SlotHold hold) {
    REQUIRE(scheduler->busy_workers() == 1);
    hold.Release();
    busy_after_release = scheduler->busy_workers();
  }));
  REQUIRE(busy_after_release == 0);
  // A hold dropped without Release frees its slot as well.
  REQUIRE(scheduler->TryStartInline([](int, DeviceScheduler::SlotHold) {}));
  REQUIRE(scheduler->busy_workers() == 0);
  REQUIRE(scheduler->TryRunInline([](int, bool) {}));
}

TEST_CASE("Submit from many threads runs every item exactly once", "[unit][device_scheduler]") {
  constexpr int kThreads = 4;
  constexpr int kPerThread = 500;
  std::vector<std::atomic<int>> runs(kThreads * kPerThread);
  std::atomic<int> training_steps{0};
  std::atomic<int> lease_failures{0};
  {
    auto scheduler = MakeScheduler(3);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) {
      threads.emplace_back([&, t] {
        for (int i = 0; i < kPerThread; ++i) {
          const int id = t * kPerThread + i;
          scheduler->Submit(static_cast<uint32_t>(i % 3 + 1), absl::InfiniteFuture(),
                            [&runs, id](int, bool cancelled) {
                              if (!cancelled) runs[static_cast<size_t>(id)]++;
                            });
        }
      });
    }
    // A trainer competing for workers meanwhile.
    threads.emplace_back([&] {
      for (int step = 0; step < 50; ++step) {
        absl::StatusOr<DeviceScheduler::TrainingLease> lease = scheduler->AcquireTrainingLease();
        (lease.ok() ? training_steps : lease_failures)++;
      }
    });
    for (std::thread& thread : threads) thread.join();
    scheduler->Shutdown();
    REQUIRE(scheduler->queued() == 0);
  }
  for (const std::atomic<int>& count : runs) REQUIRE(count.load() == 1);
  REQUIRE(training_steps.load() == 50);
  REQUIRE(lease_failures.load() == 0);
}

// Waits (spinning, bounded by kSafety) until `count` reaches `n`.
bool SpinUntil(const std::atomic<int>& count, int n) {
  const absl::Time give_up = absl::Now() + kSafety;
  while (count.load() < n) {
    if (absl::Now() > give_up) return false;
    std::this_thread::yield();
  }
  return true;
}

absl::StatusOr<std::unique_ptr<DeviceScheduler>> MakeLendingScheduler(int workers, int helpers) {
  DeviceScheduler::Options options;
  options.num_workers = workers;
  options.max_helpers = helpers;
  return DeviceScheduler::Create(options);
}

TEST_CASE("Running work borrows idle workers' threads as a team that runs its members at once",
          "[unit][device_scheduler]") {
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> created = MakeLendingScheduler(8, 3);
  REQUIRE(created.ok());
  DeviceScheduler& scheduler = **created;
  std::promise<void> done;
  int team_size = 0;
  int64_t lent_inside = -1, lent_after = -1;
  std::thread::id item_thread;
  std::vector<std::thread::id> member_threads(4);
  std::atomic<int> arrived{0};
  bool all_arrived = true;
  scheduler.Submit(1, absl::InfiniteFuture(), [&](int, bool) {
    item_thread = std::this_thread::get_id();
    {
      // 1 + min(7 asked, 3 helpers at most, 8 / 2 - 1 busy).
      std::unique_ptr<cpu::CpuTeam> team = cpu::BorrowCpuTeam(8);
      REQUIRE(team != nullptr);
      team_size = team->size();
      lent_inside = scheduler.lent_workers();
      team->Run([&](int member) {
        member_threads[static_cast<size_t>(member)] = std::this_thread::get_id();
        // Every member waits for all the others: they run at once, or this gives up.
        arrived.fetch_add(1);
        if (!SpinUntil(arrived, 4)) all_arrived = false;
      });
    }
    lent_after = scheduler.lent_workers();
    done.set_value();
  });
  REQUIRE(done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(team_size == 4);
  REQUIRE(all_arrived);
  REQUIRE(lent_inside == 3);
  REQUIRE(lent_after == 0);
  REQUIRE(scheduler.lent_teams() == 1);
  REQUIRE(member_threads[0] == item_thread);
  std::vector<std::thread::id> helpers(member_threads.begin() + 1, member_threads.end());
  std::sort(helpers.begin(), helpers.end());
  REQUIRE(std::unique(helpers.begin(), helpers.end()) == helpers.end());
  REQUIRE(std::find(helpers.begin(), helpers.end(), item_thread) == helpers.end());
}

TEST_CASE("A team is lent only while busy and lent workers stay within half of the workers",
          "[unit][device_scheduler]") {
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> created = MakeLendingScheduler(8, 3);
  REQUIRE(created.ok());
  DeviceScheduler& scheduler = **created;
  // Item A holds a team of 4 (A's worker and 3 helpers: half of 8) while item B, on a fifth
  // worker, asks for one.
  std::atomic<int> stage{0};
  bool b_got_team = true;
  int a_size = 0;
  std::promise<void> a_done, b_done;
  scheduler.Submit(1, absl::InfiniteFuture(), [&](int, bool) {
    std::unique_ptr<cpu::CpuTeam> team = cpu::BorrowCpuTeam(4);
    a_size = team != nullptr ? team->size() : 1;
    stage.store(1);
    SpinUntil(stage, 2);  // until B has asked
    a_done.set_value();
  });
  REQUIRE(SpinUntil(stage, 1));
  scheduler.Submit(1, absl::InfiniteFuture(), [&](int, bool) {
    b_got_team = cpu::BorrowCpuTeam(4) != nullptr;
    stage.store(2);
    b_done.set_value();
  });
  REQUIRE(b_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(a_done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE(a_size == 4);
  REQUIRE_FALSE(b_got_team);
  REQUIRE(scheduler.lent_teams() == 1);  // A's; B got none
}

TEST_CASE("Work run inline borrows helpers too - none without max_helpers",
          "[unit][device_scheduler]") {
  absl::StatusOr<std::unique_ptr<DeviceScheduler>> lending = MakeLendingScheduler(4, 3);
  REQUIRE(lending.ok());
  int size = 0;
  REQUIRE((*lending)->TryRunInline([&](int, bool) {
    std::unique_ptr<cpu::CpuTeam> team = cpu::BorrowCpuTeam(4);
    size = team != nullptr ? team->size() : 1;  // 1 + min(3, 3, 4 / 2 - 1)
  }));
  REQUIRE(size == 2);
  REQUIRE(cpu::ThisThreadCpuHelpers() == nullptr);  // installed for the work only

  absl::StatusOr<std::unique_ptr<DeviceScheduler>> plain = MakeLendingScheduler(4, 0);
  REQUIRE(plain.ok());
  bool installed = true;
  std::promise<void> done;
  (*plain)->Submit(1, absl::InfiniteFuture(), [&](int, bool) {
    installed = cpu::ThisThreadCpuHelpers() != nullptr;
    done.set_value();
  });
  REQUIRE(done.get_future().wait_for(std::chrono::seconds(30)) == std::future_status::ready);
  REQUIRE_FALSE(installed);
  REQUIRE(MakeLendingScheduler(2, -1).status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace forecastd
