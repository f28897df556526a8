#include "backends/cpu/cpu_helpers.h"

namespace forecastd::cpu {
namespace {
thread_local CpuHelpers* this_thread_helpers = nullptr;
}  // namespace

CpuHelpers* ThisThreadCpuHelpers() { return this_thread_helpers; }

CpuHelpers* SetThisThreadCpuHelpers(CpuHelpers* helpers) {
  CpuHelpers* const previous = this_thread_helpers;
  this_thread_helpers = helpers;
  return previous;
}

std::unique_ptr<CpuTeam> BorrowCpuTeam(int threads) {
  if (threads <= 1 || this_thread_helpers == nullptr) return nullptr;
  std::unique_ptr<CpuTeam> team = this_thread_helpers->Borrow(threads);
  if (team != nullptr && team->size() <= 1) return nullptr;
  return team;
}

}  // namespace forecastd::cpu
