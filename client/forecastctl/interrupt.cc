#include "client/forecastctl/interrupt.h"

#include <algorithm>
#include <atomic>

#include "absl/time/clock.h"

namespace forecastd::ctl {
namespace {

// A lock-free atomic is safe to store to from a signal handler.
std::atomic<bool> g_interrupted{false};
static_assert(std::atomic<bool>::is_always_lock_free);

extern "C" void OnSigint(int) { g_interrupted.store(true); }

}  // namespace

SigintTrap::SigintTrap() {
  g_interrupted.store(false);
  struct sigaction action = {};
  action.sa_handler = OnSigint;
  sigemptyset(&action.sa_mask);
  action.sa_flags = 0;
  installed_ = sigaction(SIGINT, &action, &previous_) == 0;
}

SigintTrap::~SigintTrap() {
  if (installed_) sigaction(SIGINT, &previous_, nullptr);
}

bool Interrupted() { return g_interrupted.load(); }

void ClearInterrupted() { g_interrupted.store(false); }

bool SleepUnlessInterrupted(absl::Duration duration) {
  const absl::Time until = absl::Now() + duration;
  while (!Interrupted()) {
    const absl::Duration left = until - absl::Now();
    if (left <= absl::ZeroDuration()) break;
    absl::SleepFor(std::min(left, absl::Milliseconds(50)));
  }
  return Interrupted();
}

}  // namespace forecastd::ctl
