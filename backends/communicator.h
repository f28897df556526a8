// The collectives a data-parallel training job needs between its ranks: every rank holds the
// same arena-shaped buffers, and a step sums their gradients. A Communicator is one rank's end
// of a group of `size()` ranks; every rank of the group makes the same calls in the same order
// (a collective completes only when all ranks have made it). NcclCommunicator
// (backends/cuda/nccl_communicator.h) runs them on GPUs over NCCL; HostCommunicatorGroup
// (host_communicator.h) over host memory between threads of one process (the CPU's ranks).
// A lost rank never blocks the others forever: a collective that does not complete within the
// communicator's timeout aborts this end and reports which wait failed.
// Thread-compatible: one rank's thread drives its Communicator; Abort() may come from any
// thread.
#ifndef FORECASTD_BACKENDS_COMMUNICATOR_H_
#define FORECASTD_BACKENDS_COMMUNICATOR_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace forecastd {

class Communicator {
 public:
  virtual ~Communicator() = default;

  // This rank, in [0, size()).
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // data <- sum over ranks r of scale_r * data_r, for `count` floats, where scale_r is the
  // `scale` rank r passed (its share of the global batch, so the sum is the global mean).
  // `stream` is the cudaStream_t the buffer's producers and consumers are ordered on (device
  // memory: the sum is queued there and this returns once queued) or nullptr (host memory:
  // returns once done). Every rank ends with bitwise the same values.
  virtual absl::Status AllReduceScaledSum(float* data, int64_t count, float scale,
                                          void* stream) = 0;
  // data <- rank `root`'s data on every rank, for `count` floats; `stream` as above.
  virtual absl::Status Broadcast(float* data, int64_t count, int root, void* stream) = 0;
  // Returns once everything queued on `stream` has completed (nullptr: at once), checking the
  // group meanwhile: UNAVAILABLE when another rank failed or this end was aborted;
  // DEADLINE_EXCEEDED when the work does not complete within the timeout (this end is then
  // aborted). Whether the other ranks learn of it depends on the transport (host groups: at
  // once; NCCL: where the broken connection shows, else at their own timeout), so whoever owns
  // several ranks aborts them all on the first failure.
  virtual absl::Status Wait(void* stream) = 0;
  // Ends the group: every collective in flight or to come, on every rank, fails with
  // UNAVAILABLE. Idempotent.
  virtual void Abort() = 0;
  // How long a later wait may take before the group is given up on (from the rank's thread,
  // between collectives); > 0.
  virtual void SetTimeout(absl::Duration timeout) = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_COMMUNICATOR_H_
