// Ctrl-C (SIGINT) for commands that run until the operator stops them: while a SigintTrap
// lives, SIGINT no longer ends the process but sets a flag the command polls (Interrupted), so
// that it can finish cleanly: ask what to do with a watched job, end a --watch listing.
// The flag is set from the signal handler and read from any thread.
#ifndef FORECASTD_CLIENT_FORECASTCTL_INTERRUPT_H_
#define FORECASTD_CLIENT_FORECASTCTL_INTERRUPT_H_

#include <signal.h>

#include "absl/time/time.h"

namespace forecastd::ctl {

// Routes SIGINT to the flag while it lives (clearing the flag first) and restores the previous
// disposition after. SA_RESTART is left off, so a Ctrl-C also interrupts a blocking read.
class SigintTrap {
 public:
  SigintTrap();
  SigintTrap(const SigintTrap&) = delete;
  SigintTrap& operator=(const SigintTrap&) = delete;
  ~SigintTrap();

 private:
  struct sigaction previous_ = {};
  bool installed_ = false;
};

// Whether SIGINT arrived since the trap was set (or since ClearInterrupted).
bool Interrupted();
void ClearInterrupted();

// Sleeps for `duration`, waking early (within 50 ms) on SIGINT; returns Interrupted().
bool SleepUnlessInterrupted(absl::Duration duration);

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_INTERRUPT_H_
