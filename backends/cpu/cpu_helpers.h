// Threads a CPU kernel may borrow for one parallel region, beyond the OpenMP threads of the
// thread that calls it. A server whose CPU workers run one thread each installs a CpuHelpers on
// each thread that runs a request (SetThisThreadCpuHelpers); a kernel whose work would spread
// over more threads than it has (the recurrent time loop of a few rows) asks it for a team, and
// gets the threads of workers that are idle at that moment, for that region only. So a forecast
// on an otherwise idle server runs on several cores, and under load, when no worker is idle,
// each runs on its own. Threads that are not OpenMP's own keep libgomp's count of threads at the
// number of cores (more would make its barriers sleep instead of spinning).
// Thread-safety: the thread-local accessors are per thread; a CpuHelpers is called from any
// thread that has it installed; a CpuTeam is used by the thread that borrowed it.
#ifndef FORECASTD_BACKENDS_CPU_CPU_HELPERS_H_
#define FORECASTD_BACKENDS_CPU_CPU_HELPERS_H_

#include <memory>

#include "absl/functional/function_ref.h"

namespace forecastd::cpu {

// Threads lent to one caller until the team is destroyed: the caller is member 0, the helpers
// members 1 .. size() - 1.
class CpuTeam {
 public:
  virtual ~CpuTeam() = default;
  // The members, the caller included: >= 1.
  virtual int size() const = 0;
  // Runs fn(q) for every member q at once, fn(0) on the calling thread, and returns when every
  // call has returned. The calls may wait for each other (a barrier): they run concurrently.
  virtual void Run(absl::FunctionRef<void(int member)> fn) = 0;
};

class CpuHelpers {
 public:
  virtual ~CpuHelpers() = default;
  // A team of at most `threads` members (the caller and up to threads - 1 helpers that are
  // idle now); nullptr when no helper can be lent (the caller then runs alone).
  virtual std::unique_ptr<CpuTeam> Borrow(int threads) = 0;
};

// The calling thread's helpers, or nullptr (the default).
CpuHelpers* ThisThreadCpuHelpers();
// Installs `helpers` (not owned; nullptr: none) for the calling thread; returns the previous.
CpuHelpers* SetThisThreadCpuHelpers(CpuHelpers* helpers);

// A team of up to `threads` members from the calling thread's helpers, when it has some and
// `threads` > 1; else nullptr.
std::unique_ptr<CpuTeam> BorrowCpuTeam(int threads);

}  // namespace forecastd::cpu

#endif  // FORECASTD_BACKENDS_CPU_CPU_HELPERS_H_
