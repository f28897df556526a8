#include "engine/clock.h"

#include <algorithm>

namespace forecastd {

void Clock::SleepUntil(absl::Time deadline) {
  absl::Mutex mu;
  absl::MutexLock lock(&mu);
  static constexpr bool kNever = false;
  AwaitWithDeadline(&mu, absl::Condition(&kNever), deadline);
}

Clock* Clock::Real() {
  static RealClock* const clock = new RealClock();
  return clock;
}

bool RealClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) {
  return mu->AwaitWithDeadline(cond, deadline);
}

FakeClock::FakeClock(absl::Time start) : now_ns_(absl::ToUnixNanos(start)) {}

absl::Time FakeClock::Now() const {
  return absl::FromUnixNanos(now_ns_.load(std::memory_order_acquire));
}

bool FakeClock::AwaitWithDeadline(absl::Mutex* mu, const absl::Condition& cond,
                                  absl::Time deadline) {
  // Register and unregister without holding `mu`: WakeWaiters() holds waiters_mu_ while it
  // locks each waiter's mutex, so taking waiters_mu_ under `mu` could deadlock. Dropping
  // `mu` for a moment is no different to the caller from the release inside Await.
  mu->Unlock();
  {
    absl::MutexLock lock(&waiters_mu_);
    waiters_.push_back(mu);
  }
  mu->Lock();
  const int64_t deadline_ns = absl::ToUnixNanos(deadline);
  const std::atomic<int64_t>* now_ns = &now_ns_;
  auto done = [&cond, now_ns, deadline_ns]() {
    return cond.Eval() || now_ns->load(std::memory_order_acquire) >= deadline_ns;
  };
  mu->Await(absl::Condition(&done));
  mu->Unlock();
  {
    absl::MutexLock lock(&waiters_mu_);
    waiters_.erase(std::find(waiters_.begin(), waiters_.end(), mu));
  }
  mu->Lock();
  return cond.Eval();
}

void FakeClock::Advance(absl::Duration duration) {
  if (duration > absl::ZeroDuration()) {
    now_ns_.fetch_add(absl::ToInt64Nanoseconds(duration), std::memory_order_acq_rel);
  }
  WakeWaiters();
}

void FakeClock::SetTime(absl::Time time) {
  const int64_t target = absl::ToUnixNanos(time);
  int64_t current = now_ns_.load(std::memory_order_acquire);
  while (target > current &&
         !now_ns_.compare_exchange_weak(current, target, std::memory_order_acq_rel)) {
  }
  WakeWaiters();
}

void FakeClock::WakeWaiters() {
  // A waiter's condition is re-evaluated when its mutex is released, so passing through
  // each waiter's mutex makes it see the new time.
  absl::MutexLock lock(&waiters_mu_);
  for (absl::Mutex* mu : waiters_) {
    mu->Lock();
    mu->Unlock();
  }
}

int FakeClock::num_waiters() const {
  absl::MutexLock lock(&waiters_mu_);
  return static_cast<int>(waiters_.size());
}

void FakeClock::BlockUntilWaiters(int n) const {
  absl::MutexLock lock(&waiters_mu_);
  auto enough = [this, n]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(waiters_mu_) {
    return static_cast<int>(waiters_.size()) >= n;
  };
  waiters_mu_.Await(absl::Condition(&enough));
}

}  // namespace forecastd
