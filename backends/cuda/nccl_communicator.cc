#include "backends/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/library_status.h"
#include "kernels/cuda/cuda_status.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

// Timeouts here are waits on other GPUs, threads and processes, so they read the steady clock:
// there is no engine Clock below the engine, and nothing a fake clock could make deterministic.
using SteadyClock = std::chrono::steady_clock;

SteadyClock::time_point DeadlineAfter(absl::Duration timeout) {
  // Beyond a century the deadline is "never" (and now + timeout would overflow).
  if (timeout >= absl::Hours(24 * 365 * 100)) return SteadyClock::time_point::max();
  return SteadyClock::now() + absl::ToChronoNanoseconds(timeout);
}

bool Expired(SteadyClock::time_point deadline) { return SteadyClock::now() >= deadline; }

// Paces a polling loop: between polls it yields the CPU for `yield_for` from `yield_from` on
// (both since the pacer was made), and sleeps 20 us at other times, so that a long wait (a peer
// that is late or gone) does not keep a core busy. A sleep ends tens of microseconds after it was
// due (the timer's slack), so where the end of a wait can be foreseen (a training step's wait
// lasts about as long as the last one) yielding around it sees the end within a poll.
class PollPacer {
 public:
  explicit PollPacer(SteadyClock::duration yield_from = SteadyClock::duration::zero(),
                     SteadyClock::duration yield_for = std::chrono::microseconds(100))
      : yield_from_(yield_from), yield_for_(yield_for) {}

  void Pause() {
    const SteadyClock::duration elapsed = SteadyClock::now() - start_;
    if (elapsed >= yield_from_ && elapsed - yield_from_ < yield_for_) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(kSleep);
    }
  }

 private:
  static constexpr std::chrono::microseconds kSleep{20};
  const SteadyClock::time_point start_ = SteadyClock::now();
  const SteadyClock::duration yield_from_;
  const SteadyClock::duration yield_for_;
};

// What a non-blocking NCCL call answered and where it was made: ncclInProgress means it has not
// finished yet, and the communicator's asynchronous error tells when it has.
struct NcclIssued {
  ncclResult_t result;
  VendorCallSite site;
};

#define FD_NCCL_ISSUE(expr) \
  ::forecastd::NcclIssued { (expr), FD_VENDOR_CALL_SITE(expr) }

absl::Status ValidateOptions(const NcclCommunicatorOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: size must be >= 1, not ", options.size));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: rank ", options.rank,
                                                   " is not in [0, ", options.size, ")"));
  }
  if (options.unique_id.size() != sizeof(ncclUniqueId)) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: unique_id must be the ", sizeof(ncclUniqueId),
                     " bytes NewNcclUniqueId returns, not ", options.unique_id.size(), " bytes"));
  }
  if (options.device < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL communicator: device must be >= 0, not ", options.device));
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL communicator: timeout must be > 0, not ",
                                                   absl::FormatDuration(options.timeout)));
  }
  return absl::OkStatus();
}

// One rank's end of an initialised NCCL communicator.
//
// Every NCCL call on comm_ is made under mu_ and returns at once (the communicator is
// non-blocking), so Abort() from another thread waits at most for one such call, never for a
// collective. The driving thread releases mu_ between polls. Abort frees the communicator and
// sets comm_ to nullptr, which every later call reads as "aborted".
class NcclCommunicator final : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, const NcclCommunicatorOptions& options)
      : device_(options.device),
        rank_(options.rank),
        size_(options.size),
        timeout_(options.timeout),
        comm_(comm) {}

  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  ~NcclCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  absl::Status AllReduceScaledSum(float* data, int64_t count, float scale, void* stream) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Broadcast(float* data, int64_t count, int root, void* stream) override
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Wait(void* stream) override ABSL_LOCKS_EXCLUDED(mu_);
  void Abort() override ABSL_LOCKS_EXCLUDED(mu_);
  void SetTimeout(absl::Duration timeout) override { timeout_ = timeout; }

 private:
  // Checks what every collective needs: device memory (a stream), a count >= 0 and data for it.
  absl::Status CheckBuffer(const char* what, const float* data, int64_t count,
                           const void* stream) const;
  // Makes `call` on the communicator (UNAVAILABLE once aborted) and, while NCCL answers
  // ncclInProgress, polls until it has finished, up to `deadline`. Any failure aborts the group.
  absl::Status Issue(absl::FunctionRef<NcclIssued(ncclComm_t)> call,
                     SteadyClock::time_point deadline) ABSL_LOCKS_EXCLUDED(mu_);
  // OK while the group stands, UNAVAILABLE once aborted.
  absl::Status CheckNotAborted() const ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status AbortedError() const;
  // Aborts the group and returns `status` with a note that it was.
  absl::Status AbortWith(const absl::Status& status) ABSL_LOCKS_EXCLUDED(mu_);
  std::string Name() const { return absl::StrCat("rank ", rank_, " of ", size_); }

  // Constant after construction.
  const int device_;
  const int rank_;
  const int size_;
  absl::Duration timeout_;  // the rank's thread changes it between collectives
  // How long the last Wait that ended with the stream drained took (the rank's thread's).
  SteadyClock::duration last_wait_ = SteadyClock::duration::zero();

  mutable absl::Mutex mu_;
  ncclComm_t comm_ ABSL_GUARDED_BY(mu_);  // nullptr once aborted
};

NcclCommunicator::~NcclCommunicator() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  const ScopedCudaDevice scoped(device_);
  // A healthy communicator is finalised (its queued work flushed, within the timeout) and then
  // destroyed; one with an error, or whose work does not finish in time, is aborted.
  ncclResult_t async = ncclInternalError;
  if (scoped.status().ok() && ncclCommGetAsyncError(comm_, &async) == ncclSuccess &&
      async == ncclSuccess) {
    const SteadyClock::time_point deadline = DeadlineAfter(timeout_);
    ncclResult_t result = ncclCommFinalize(comm_);
    PollPacer pacer;
    while (result == ncclInProgress && !Expired(deadline)) {
      pacer.Pause();
      if (ncclCommGetAsyncError(comm_, &result) != ncclSuccess) result = ncclInternalError;
    }
    if (result == ncclSuccess) result = ncclCommDestroy(comm_);
    if (result == ncclSuccess) {
      comm_ = nullptr;
      return;
    }
    spdlog::warn("NCCL communicator (cuda:{}, {}): finalising it failed ({}); aborting it", device_,
                 Name(),
                 result == ncclInProgress ? "its work did not finish within the timeout"
                                          : ncclGetErrorString(result));
  }
  if (const ncclResult_t result = ncclCommAbort(comm_); result != ncclSuccess) {
    spdlog::warn("NCCL communicator (cuda:{}, {}): ncclCommAbort failed: {}", device_, Name(),
                 ncclGetErrorString(result));
  }
  comm_ = nullptr;
}

absl::Status NcclCommunicator::AllReduceScaledSum(float* data, int64_t count, float scale,
                                                  void* stream) {
  RETURN_IF_ERROR(CheckBuffer("AllReduceScaledSum", data, count, stream));
  if (count == 0) return CheckNotAborted();
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const SteadyClock::time_point deadline = DeadlineAfter(timeout_);
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const auto n = static_cast<size_t>(count);
  if (scale == 1.0f) {
    return Issue(
        [&](ncclComm_t comm) {
          return FD_NCCL_ISSUE(ncclAllReduce(data, data, n, ncclFloat, ncclSum, comm, cuda_stream));
        },
        deadline);
  }
  // The scale is folded into the reduction (each rank's data is multiplied by its own scale as
  // it enters the sum), so the buffer is read and written once; the operator holds the value
  // (host immediate) and may be destroyed once the all-reduce has been issued.
  float scale_value = scale;
  ncclRedOp_t op = ncclSum;
  RETURN_IF_ERROR(Issue(
      [&](ncclComm_t comm) {
        return FD_NCCL_ISSUE(
            ncclRedOpCreatePreMulSum(&op, &scale_value, ncclFloat, ncclScalarHostImmediate, comm));
      },
      deadline));
  RETURN_IF_ERROR(Issue(
      [&](ncclComm_t comm) {
        return FD_NCCL_ISSUE(ncclAllReduce(data, data, n, ncclFloat, op, comm, cuda_stream));
      },
      deadline));
  return Issue([&](ncclComm_t comm) { return FD_NCCL_ISSUE(ncclRedOpDestroy(op, comm)); },
               deadline);
}

absl::Status NcclCommunicator::Broadcast(float* data, int64_t count, int root, void* stream) {
  RETURN_IF_ERROR(CheckBuffer("Broadcast", data, count, stream));
  if (root < 0 || root >= size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL Broadcast: root ", root, " is not in [0, ", size_, ")"));
  }
  if (count == 0) return CheckNotAborted();
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const auto n = static_cast<size_t>(count);
  return Issue(
      [&](ncclComm_t comm) {
        return FD_NCCL_ISSUE(ncclBroadcast(data, data, n, ncclFloat, root, comm, cuda_stream));
      },
      DeadlineAfter(timeout_));
}

absl::Status NcclCommunicator::Wait(void* stream) {
  if (stream == nullptr) return CheckNotAborted();
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const auto cuda_stream = static_cast<cudaStream_t>(stream);
  const SteadyClock::time_point start = SteadyClock::now();
  const SteadyClock::time_point deadline = DeadlineAfter(timeout_);
  // Sleeps through the first 4/5 of the last wait's length, then yields for up to 50 ms.
  PollPacer pacer(last_wait_ * 4 / 5, std::chrono::milliseconds(50));
  for (;;) {
    const cudaError_t query = cudaStreamQuery(cuda_stream);
    if (query == cudaSuccess) {
      last_wait_ = SteadyClock::now() - start;
      // An abort (here or from another thread) ends the collectives early with partial sums, so
      // a stream that drained after one has nothing usable on it.
      return CheckNotAborted();
    }
    if (query != cudaErrorNotReady) {
      return AbortWith(CudaStatus(query, FD_VENDOR_CALL_SITE(cudaStreamQuery(cuda_stream))));
    }
    ncclResult_t async = ncclSuccess;
    ncclResult_t got = ncclSuccess;
    {
      absl::MutexLock lock(&mu_);
      if (comm_ == nullptr) return AbortedError();
      got = ncclCommGetAsyncError(comm_, &async);
    }
    if (got != ncclSuccess) {
      return AbortWith(NcclStatus(got, FD_VENDOR_CALL_SITE(ncclCommGetAsyncError(comm_, &async))));
    }
    if (async != ncclSuccess && async != ncclInProgress) {
      // A peer failed or went away (a remote or system error, seen by NCCL's proxy).
      const absl::Status status =
          NcclStatus(async, FD_VENDOR_CALL_SITE(ncclCommGetAsyncError(comm_, &async)));
      return AbortWith(absl::UnavailableError(status.message()));
    }
    if (Expired(deadline)) {
      return AbortWith(absl::DeadlineExceededError(
          absl::StrCat("the collectives queued on the stream did not complete within ",
                       absl::FormatDuration(timeout_), "; a rank did not take part in time")));
    }
    pacer.Pause();
  }
}

void NcclCommunicator::Abort() {
  absl::MutexLock lock(&mu_);
  if (comm_ == nullptr) return;
  const ScopedCudaDevice scoped(device_);
  // ncclCommAbort tells the kernels still running to quit, then frees the communicator; its
  // failure leaves nothing else to do but say so.
  if (const ncclResult_t result = ncclCommAbort(comm_); result != ncclSuccess) {
    spdlog::warn("NCCL communicator (cuda:{}, {}): ncclCommAbort failed: {}", device_, Name(),
                 ncclGetErrorString(result));
  }
  comm_ = nullptr;
}

absl::Status NcclCommunicator::CheckBuffer(const char* what, const float* data, int64_t count,
                                           const void* stream) const {
  if (stream == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "NCCL ", what, ": the buffer must be device memory ordered on a CUDA stream (got none)"));
  }
  if (count < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NCCL ", what, ": count must be >= 0, not ", count));
  }
  if (count > 0 && data == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("NCCL ", what, ": data is null"));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::Issue(absl::FunctionRef<NcclIssued(ncclComm_t)> call,
                                     SteadyClock::time_point deadline) {
  NcclIssued issued{ncclSuccess, {}};
  {
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return AbortedError();
    issued = call(comm_);
  }
  if (issued.result != ncclSuccess && issued.result != ncclInProgress) {
    // The call itself was refused; the other ranks would wait for this one, so end the group.
    return AbortWith(NcclStatus(issued.result, issued.site));
  }
  PollPacer pacer;
  while (issued.result == ncclInProgress) {
    if (Expired(deadline)) {
      return AbortWith(absl::DeadlineExceededError(
          absl::StrCat("`", issued.site.expression, "` did not finish within ",
                       absl::FormatDuration(timeout_), "; a rank did not take part in time")));
    }
    pacer.Pause();
    absl::MutexLock lock(&mu_);
    if (comm_ == nullptr) return AbortedError();
    if (ncclCommGetAsyncError(comm_, &issued.result) != ncclSuccess) {
      issued.result = ncclInternalError;
    }
  }
  if (issued.result != ncclSuccess) {
    const absl::Status status = NcclStatus(issued.result, issued.site);
    return AbortWith(absl::UnavailableError(status.message()));
  }
  return absl::OkStatus();
}

absl::Status NcclCommunicator::CheckNotAborted() const {
  absl::MutexLock lock(&mu_);
  return comm_ == nullptr ? AbortedError() : absl::OkStatus();
}

absl::Status NcclCommunicator::AbortedError() const {
  return absl::UnavailableError(absl::StrCat("NCCL communicator (", Name(), ") has been aborted"));
}

absl::Status NcclCommunicator::AbortWith(const absl::Status& status) {
  Abort();
  return WithContext(status, absl::StrCat("NCCL communicator (", Name(), ") aborted"));
}

}  // namespace

absl::StatusOr<std::string> NewNcclUniqueId() {
  ncclUniqueId id;
  NCCL_RETURN_IF_ERROR(ncclGetUniqueId(&id));
  return std::string(id.internal, sizeof(id.internal));
}

absl::StatusOr<std::unique_ptr<Communicator>> CreateNcclCommunicator(
    const NcclCommunicatorOptions& options) {
  // Everything that needs no GPU is checked first.
  RETURN_IF_ERROR(ValidateOptions(options));
  const ScopedCudaDevice scoped(options.device);
  RETURN_IF_ERROR(scoped.status());
  ncclUniqueId id;
  std::memcpy(id.internal, options.unique_id.data(), sizeof(id.internal));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;

  const SteadyClock::time_point deadline = DeadlineAfter(options.timeout);
  ncclComm_t comm = nullptr;
  NcclIssued init =
      FD_NCCL_ISSUE(ncclCommInitRankConfig(&comm, options.size, id, options.rank, &config));
  PollPacer pacer;
  while (init.result == ncclInProgress) {
    if (Expired(deadline)) {
      // Aborting also stops the initialisation still waiting for the missing ranks.
      (void)ncclCommAbort(comm);
      return absl::DeadlineExceededError(absl::StrCat(
          "NCCL communicator (rank ", options.rank, " of ", options.size, ", cuda:", options.device,
          "): not every rank joined within ", absl::FormatDuration(options.timeout)));
    }
    pacer.Pause();
    if (ncclCommGetAsyncError(comm, &init.result) != ncclSuccess) init.result = ncclInternalError;
  }
  if (init.result != ncclSuccess) {
    const absl::Status status = NcclStatus(init.result, init.site);
    if (comm != nullptr) (void)ncclCommAbort(comm);
    return status;
  }
  return std::unique_ptr<Communicator>(std::make_unique<NcclCommunicator>(comm, options));
}

}  // namespace forecastd

#undef FD_NCCL_ISSUE
