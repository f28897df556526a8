// Communicators between threads of one process over host memory: the ranks of a data-parallel
// job on the CPU, and the stand-in for NCCL wherever there is no GPU. Each collective is a
// barrier: every rank posts its buffer, each computes the same sum in rank order (so every rank
// ends with bitwise the same values), and a second barrier lets the buffers be overwritten. A
// barrier that not every rank reaches within the timeout aborts the group (DEADLINE_EXCEEDED on
// the rank that waited, UNAVAILABLE on the others). Thread-safe: each rank's Communicator is
// driven by its own thread; the group lives as long as any of them.
#ifndef FORECASTD_BACKENDS_HOST_COMMUNICATOR_H_
#define FORECASTD_BACKENDS_HOST_COMMUNICATOR_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/communicator.h"

namespace forecastd {

// The `size` ranks' ends of one group, rank r at index r. INVALID_ARGUMENT for size < 1 or a
// timeout that is not positive.
absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeHostCommunicators(
    int size, absl::Duration timeout = absl::Seconds(30));

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_HOST_COMMUNICATOR_H_
