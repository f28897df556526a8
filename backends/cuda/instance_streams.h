// The CUDA streams of one model instance, each with its own cuBLAS, cuBLASLt and cuDNN handles
// bound to it, a device workspace (also given to cuBLAS) and two pinned host staging buffers
// (inputs in, outputs out) that grow on demand. A serving model instance (CudaModelInstance),
// the GPU training engine and gpu_bench each make one with a single stream and hold its
// StreamLease for their lifetime, binding a CudaBackend to it; GPU tests share one with several
// streams, a lease per test backend. Thread-safe; a StreamLease is used by one thread at a time.
//
// Returning a lease does not synchronise its stream: the next holder's work is queued behind
// the previous holder's on the same stream, so it is ordered after it anyway.
#ifndef FORECASTD_BACKENDS_CUDA_INSTANCE_STREAMS_H_
#define FORECASTD_BACKENDS_CUDA_INSTANCE_STREAMS_H_

#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_allocator.h"

namespace forecastd {

// What device work needs to run on one stream: borrowed handles, valid while the lease (or
// whoever else created them) lives. All of them belong to `device`.
struct CudaStreamContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t cublas = nullptr;  // cublasSetStream(stream) and our workspace applied
  cublasLtHandle_t cublas_lt = nullptr;
  cudnnHandle_t cudnn = nullptr;  // cudnnSetStream(stream) applied
  // Scratch device memory for work on `stream` only (cuBLAS uses it too; the stream orders
  // them), at least workspace_bytes long.
  void* workspace = nullptr;
  int64_t workspace_bytes = 0;
};

class InstanceStreams;

// Exclusive use of one of the streams, RAII-style: the lease has the stream and everything
// attached to it to itself until it is destroyed, which gives the stream back. Move-only; the
// InstanceStreams must outlive it.
class StreamLease {
 public:
  enum class Staging { kInput, kOutput };

  StreamLease(StreamLease&& other) noexcept;
  StreamLease& operator=(StreamLease&& other) noexcept;
  StreamLease(const StreamLease&) = delete;
  StreamLease& operator=(const StreamLease&) = delete;
  ~StreamLease();

  const CudaStreamContext& context() const;
  cudaStream_t stream() const { return context().stream; }
  int device() const { return context().device; }
  // Which of the streams this is, in [0, num_streams).
  int index() const { return index_; }

  // Pinned host memory of at least `bytes` for asynchronous copies on this stream. Growing it
  // synchronises the stream first (the old buffer may still be read by queued copies), so a
  // caller sizes it at warm-up; the pointer is valid until the next call that grows it.
  absl::StatusOr<void*> HostStaging(Staging which, int64_t bytes);

  // Waits for everything queued on the stream so far.
  absl::Status Synchronize();

 private:
  friend class InstanceStreams;
  StreamLease(InstanceStreams* owner, int index) : owner_(owner), index_(index) {}

  InstanceStreams* owner_ = nullptr;  // nullptr once moved from
  int index_ = -1;
};

class InstanceStreams {
 public:
  struct Options {
    // The CUDA ordinal; must match the allocator's.
    int device = 0;
    // Streams, and so leases that can be held at once: 1 for a model instance or a training
    // engine; several only where one object serves concurrent users (GPU tests). Must be >= 1.
    int num_streams = 1;
    // Device workspace per stream, from the allocator: cuBLAS's workspace (NVIDIA recommends
    // 32 MiB on Hopper for its best kernels) and the CUDA backend's cuDNN workspace whenever
    // it fits (a larger one is the backend's own). Must be >= 0.
    int64_t workspace_bytes = int64_t{32} << 20;
    // Initial size of each of the two pinned staging buffers per stream; they grow on demand.
    // Must be >= 0.
    int64_t staging_bytes = int64_t{1} << 20;
  };

  // Creates every stream and handle up front; fails (and frees what it made) if any fails.
  // `allocator` must be for options.device and outlive this object.
  static absl::StatusOr<std::unique_ptr<InstanceStreams>> Create(const Options& options,
                                                                 CudaAllocator* allocator);
  // Every lease must have been returned. Synchronises each stream, then destroys it.
  ~InstanceStreams();

  InstanceStreams(const InstanceStreams&) = delete;
  InstanceStreams& operator=(const InstanceStreams&) = delete;

  // Blocks until a stream is free.
  StreamLease Lease();
  // A free stream, or nullopt at once when all are leased.
  std::optional<StreamLease> TryLease();

  int device() const { return options_.device; }
  int streams() const { return static_cast<int>(slots_.size()); }
  // Streams leased now (for the stream-occupancy gauge).
  int leased() const;

 private:
  friend class StreamLease;

  struct PinnedBuffer {
    void* data = nullptr;
    int64_t bytes = 0;
  };
  // One stream and what is attached to it. Created in Create(); the fields below `context`
  // are touched only by the holder of the slot's lease.
  struct Slot {
    CudaStreamContext context;
    DeviceBuffer workspace;
    PinnedBuffer staging[2];
  };

  InstanceStreams(const Options& options, CudaAllocator* allocator)
      : options_(options), allocator_(allocator) {}

  absl::Status CreateSlot(Slot& slot);
  void DestroySlot(Slot& slot);
  void Return(int index);
  bool HasFreeLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return !free_.empty(); }
  absl::StatusOr<void*> GrowStaging(int index, StreamLease::Staging which, int64_t bytes);

  // Constant after Create().
  const Options options_;
  CudaAllocator* const allocator_;
  std::vector<std::unique_ptr<Slot>> slots_;

  mutable absl::Mutex mu_;
  std::vector<int> free_ ABSL_GUARDED_BY(mu_);  // indices of unleased slots
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_INSTANCE_STREAMS_H_
