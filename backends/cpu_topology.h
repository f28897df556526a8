// The CPUs this process may run on, as Linux's sysfs describes them (which hardware threads
// share a core, which cores share a socket and a NUMA node, the caches), and the plan that
// forecastd's CPU device makes from them: how many workers, how many OpenMP threads each,
// which CPUs each worker may run on.
//
// The rules of PlanCpuWorkers, each with a flag to override it (server/command_line.cc):
//   - Workers: one per physical core of the affinity mask (`--cpu-workers`). A worker computes
//     one batch at a time on one core; the core's other hardware threads (SMT siblings) are
//     left to the gRPC threads and the system, since two workers on one core would share its
//     vector units and each batch would take longer.
//   - OpenMP threads a worker: the physical cores divided by the workers, at least 1, so that
//     workers never compete for cores (several threads a worker make one request faster and
//     the server slower under load).
//   - Pinning (`--cpu-pinning`): `auto` pins each worker to the CPUs of one NUMA node when the
//     mask spans several (workers dealt out to the nodes in proportion to their cores), so a
//     batch's memory stays local, and pins nothing on one node; `node` always pins per node,
//     `core` pins each worker to its own cores' hardware threads, `none` pins nothing.
// Values, free to copy and share between threads.
#ifndef FORECASTD_BACKENDS_CPU_TOPOLOGY_H_
#define FORECASTD_BACKENDS_CPU_TOPOLOGY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace forecastd {

struct CpuTopology {
  struct Cpu {
    int id = 0;       // the kernel's CPU number
    int package = 0;  // physical_package_id: the socket
    int core = 0;     // index into the distinct (package, core_id) pairs, in order of first CPU
    int node = 0;     // NUMA node; 0 where the kernel shows none
  };
  std::vector<Cpu> cpus;   // the CPUs of the mask, ascending id
  int cores = 0;           // physical cores among them (distinct package and core_id)
  int sockets = 0;         // distinct packages among them
  std::vector<int> nodes;  // NUMA nodes that hold at least one of them, ascending
  int64_t l2_bytes = 0;    // one core's L2 (its unified or data cache at level 2); 0: unknown
  int64_t l3_bytes = 0;    // one L3 instance; 0: unknown or none

  // The hardware threads (CPU ids) of `node`, ascending.
  std::vector<int> CpusOfNode(int node) const;
  // "16 CPUs on 8 cores, 1 socket, 1 NUMA node, L2 2 MiB a core, L3 105 MiB".
  std::string Describe() const;
};

// Reads `system_root` (normally /sys/devices/system) for the CPUs `allowed` lists. A file that
// is missing or unreadable (a container that hides sysfs) falls back: each CPU its own core on
// package 0, node 0, caches unknown. `allowed` must be non-empty.
CpuTopology ReadCpuTopology(const std::string& system_root, const std::vector<int>& allowed);

// The CPUs of this process's affinity mask (taskset, a container's cpuset), ascending; at
// least one.
std::vector<int> AllowedCpus();

// ReadCpuTopology("/sys/devices/system", AllowedCpus()).
CpuTopology ThisProcessCpuTopology();

enum class CpuPinning { kAuto, kNone, kNode, kCore };

// "auto", "none", "node" or "core"; anything else is INVALID_ARGUMENT listing them.
absl::StatusOr<CpuPinning> ParseCpuPinning(absl::string_view text);

struct CpuWorkerPlan {
  int workers = 1;
  int threads_per_worker = 1;
  // worker_cpus[w]: the CPU ids worker w is pinned to; all empty when nothing is pinned.
  std::vector<std::vector<int>> worker_cpus;
  CpuPinning pinning = CpuPinning::kNone;  // what was applied (never kAuto)

  // "16 workers x 1 thread, pinned per NUMA node".
  std::string Describe() const;
};

// The plan by the rules at the top of this file. `workers` > 0 overrides the count (it may
// exceed the cores; the workers then share them). INVALID_ARGUMENT for workers < 0.
absl::StatusOr<CpuWorkerPlan> PlanCpuWorkers(const CpuTopology& topology, int workers,
                                             CpuPinning pinning);

// Pins the calling thread to `cpus` (no-op when empty); the OpenMP threads it starts later
// inherit the mask. An error names the CPUs.
absl::Status PinCallingThread(const std::vector<int>& cpus);

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CPU_TOPOLOGY_H_
