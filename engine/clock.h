// The engine's only source of time. Batchers, queues and jobs ask a Clock for "now" and
// wait on it, so tests drive them with a FakeClock and never sleep for a timeout.
// RealClock is stateless and thread-safe; FakeClock is thread-safe (see its comment).
#ifndef FORECASTD_ENGINE_CLOCK_H_
#define FORECASTD_ENGINE_CLOCK_H_

#include <atomic>
#include <cstdint>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"

namespace forecastd {

class Clock {
 public:
  virtual ~Clock() = default;

  virtual absl::Time Now() const = 0;

  // With `mu` held, blocks until `cond` holds or Now() >= `deadline`, whichever is first,
  // releasing `mu` while blocked. Returns with `mu` held and says whether `cond` holds.
  // `cond` is evaluated with `mu` held and must depend only on state `mu` protects.
  virtual bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) = 0;

  // Blocks until Now() >= deadline.
  void SleepUntil(absl::Time deadline);

  // The process-wide real clock; never null, never destroyed.
  static Clock* Real();
};

// absl::Now() and absl::Mutex's own deadline waits.
class RealClock final : public Clock {
 public:
  absl::Time Now() const override { return absl::Now(); }
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
};

// Time that moves only when a test calls Advance() or SetTime(). Waiters blocked in
// AwaitWithDeadline wake when the fake time passes their deadline (or their condition
// becomes true through the usual mutex release). Thread-safe; Advance() and SetTime() must
// not be called while holding a mutex that some waiter passed to AwaitWithDeadline.
class FakeClock final : public Clock {
 public:
  explicit FakeClock(absl::Time start = absl::UnixEpoch() + absl::Hours(24 * 365 * 50));

  absl::Time Now() const override;
  bool AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond, absl::Time deadline) override
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);

  // Moves time forward (a negative duration is ignored: time never goes back) and wakes the
  // waiters whose deadline has passed.
  void Advance(absl::Duration duration);
  void SetTime(absl::Time time);

  // How many threads are blocked in AwaitWithDeadline now, and a way for a test to wait
  // (in real time, as a synchronisation point, not a timeout) until `n` are.
  int num_waiters() const;
  void BlockUntilWaiters(int n) const;

 private:
  void WakeWaiters();

  // Nanoseconds since the Unix epoch; atomic so that waiters' conditions read it without
  // taking waiters_mu_ (they run with the caller's mutex held).
  std::atomic<int64_t> now_ns_;

  mutable absl::Mutex waiters_mu_;
  std::vector<absl::Mutex*> waiters_ ABSL_GUARDED_BY(waiters_mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_CLOCK_H_
