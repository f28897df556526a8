// A Communicator over NCCL: one rank per GPU, in one process (a thread per rank) or spread over
// several processes and hosts, joined by an NCCL unique id that rank 0's process makes and hands
// to the others. The NCCL communicator is non-blocking (blocking = 0): its initialisation and
// every collective return at once, and we poll the stream and NCCL's asynchronous error, so a
// rank whose peer died sees UNAVAILABLE (or DEADLINE_EXCEEDED after the timeout) instead of
// hanging, and its communicator is aborted (ncclCommAbort). NCCL tells the other ranks only where
// a transport sees the connection close (a remote error, as over the network); between GPUs of
// one host their waits end at their own timeout, or sooner where the job aborts every rank's
// communicator. Built with CUDA only.
// Thread-compatible (see Communicator): one rank's thread drives it; Abort() may come from any
// thread at any time (it waits at most for one NCCL call that returns at once, never for a
// collective). Destroying a healthy communicator finalises it, waiting up to the timeout for its
// queued work; one that failed or does not finish in time is aborted.
#ifndef FORECASTD_BACKENDS_CUDA_NCCL_COMMUNICATOR_H_
#define FORECASTD_BACKENDS_CUDA_NCCL_COMMUNICATOR_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/communicator.h"

namespace forecastd {

// A fresh NCCL unique id (ncclGetUniqueId), as the bytes every rank passes to
// CreateNcclCommunicator. It names the group; rank 0's process makes it.
absl::StatusOr<std::string> NewNcclUniqueId();

struct NcclCommunicatorOptions {
  int device = 0;  // the CUDA ordinal this rank's buffers and streams are on
  int rank = 0;    // in [0, size)
  int size = 1;
  std::string unique_id;  // from NewNcclUniqueId, the same for every rank
  // How long initialisation, each Wait (and each call that NCCL answers "in progress") may
  // take before the group is given up on and aborted. Must be > 0.
  absl::Duration timeout = absl::Seconds(30);
};

// Joins the group: blocks until every rank has joined (each rank calls this at the same time,
// from its own thread or process), DEADLINE_EXCEEDED after options.timeout, INVALID_ARGUMENT
// for a bad rank, size or id, the NCCL error otherwise.
absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclCommunicatorOptions& options);

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_NCCL_COMMUNICATOR_H_
