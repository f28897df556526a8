// A caching allocator of device memory for one GPU: model arenas, activations and the CUDA
// backend's scratch come from it, so that loading, unloading and per-call buffers do not pay
// for cudaMalloc / cudaFree (each of which may synchronise the whole device) after warm-up.
// One per GPU, shared by everything on that GPU; it must outlive its buffers. Thread-safe.
//
// Size classes: a request is rounded up to a multiple of 512 B below 1 MiB and to a multiple
// of 2 MiB from there on; a freed block goes to the free list of its exact class and serves
// the next request of that class. Blocks are never split or merged, so the cost of the
// rounding is at most 512 B per small buffer and just under 2 MiB per large one.
//
// Reuse is not stream-ordered: a block returned by a DeviceBuffer's destructor may be handed
// out at once to a request on any stream. Each buffer has one owner that works on one stream
// (an InstanceStreams lease), and the owner destroys a buffer only when no device work that uses it
// is pending: it synchronises that stream first, or the next user is known to be on the same
// stream (the CUDA backend's scratch, for example, synchronises before it gives a block back).
//
// Out of memory: a failed cudaMalloc frees every cached block and tries once more; if that
// fails too the request is RESOURCE_EXHAUSTED with the sizes involved. Nothing aborts.
#ifndef FORECASTD_BACKENDS_CUDA_CUDA_ALLOCATOR_H_
#define FORECASTD_BACKENDS_CUDA_CUDA_ALLOCATOR_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace forecastd {

class CudaAllocator;

// Device memory from a CudaAllocator, returned to it on destruction. Move-only. A
// default-constructed or zero-byte buffer holds no memory and data() is nullptr.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer() { Reset(); }
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  // The bytes asked for, and the bytes of the block that holds them (the size class).
  int64_t size_bytes() const { return size_bytes_; }
  int64_t block_bytes() const { return block_bytes_; }
  bool empty() const { return data_ == nullptr; }

  // Returns the memory to the allocator now (see the header comment about pending work).
  void Reset();

 private:
  friend class CudaAllocator;
  DeviceBuffer(CudaAllocator* allocator, void* data, int64_t size_bytes, int64_t block_bytes)
      : allocator_(allocator), data_(data), size_bytes_(size_bytes), block_bytes_(block_bytes) {}

  CudaAllocator* allocator_ = nullptr;
  void* data_ = nullptr;
  int64_t size_bytes_ = 0;
  int64_t block_bytes_ = 0;
};

class CudaAllocator {
 public:
  static constexpr int64_t kSmallRoundBytes = 512;
  static constexpr int64_t kSmallLimitBytes = int64_t{1} << 20;  // 1 MiB
  static constexpr int64_t kLargeRoundBytes = int64_t{2} << 20;  // 2 MiB

  struct Options {
    // The CUDA ordinal every block lives on.
    int device = 0;
    // The most bytes this allocator holds from the device, in use and cached together; 0 for
    // no limit but the device's own. A request beyond it first releases the cache, then is
    // RESOURCE_EXHAUSTED. Lets several tenants (or cuDNN's and cuBLAS's own allocations) share
    // a GPU predictably. Must be >= 0.
    int64_t limit_bytes = 0;
  };

  struct Stats {
    int64_t bytes_in_use = 0;       // block bytes held by live DeviceBuffers
    int64_t bytes_cached = 0;       // block bytes on the free lists
    int64_t peak_bytes_in_use = 0;  // the largest bytes_in_use so far
    int64_t buffers_in_use = 0;     // live DeviceBuffers holding memory
    int64_t allocations = 0;        // non-empty Allocate calls that succeeded
    int64_t cache_hits = 0;         // ...of which served from a free list
    int64_t cuda_malloc_calls = 0;  // successful cudaMalloc calls
    int64_t cuda_free_calls = 0;    // cudaFree calls
    int64_t oom_retries = 0;        // cudaMalloc failures answered by releasing the cache
  };

  static absl::StatusOr<std::unique_ptr<CudaAllocator>> Create(const Options& options);
  // Frees the cached blocks. Every DeviceBuffer must have been destroyed before.
  ~CudaAllocator();

  CudaAllocator(const CudaAllocator&) = delete;
  CudaAllocator& operator=(const CudaAllocator&) = delete;

  // At least `bytes` of device memory, 256-byte aligned (as cudaMalloc's). Zero bytes give an
  // empty buffer; negative ones are INVALID_ARGUMENT; RESOURCE_EXHAUSTED as described above.
  absl::StatusOr<DeviceBuffer> Allocate(int64_t bytes);

  // Frees every cached block (cudaFree synchronises the device). Returns the first error, and
  // still tries every block.
  absl::Status ReleaseCached();

  Stats stats() const;
  int device() const { return options_.device; }

  // The size class of a request: the block bytes a request of `bytes` (> 0) occupies.
  static int64_t BlockBytes(int64_t bytes);

 private:
  friend class DeviceBuffer;
  explicit CudaAllocator(const Options& options) : options_(options) {}

  // Called by DeviceBuffer::Reset: the block goes back on its free list. Never fails.
  void Free(void* data, int64_t block_bytes);
  // cudaMalloc of one block, with the one retry after releasing the cache.
  absl::StatusOr<void*> MallocLocked(int64_t bytes, int64_t block_bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status ReleaseCachedLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status OutOfMemory(int64_t bytes, int64_t block_bytes, const absl::Status& cause) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  // Free blocks by size class.
  absl::flat_hash_map<int64_t, std::vector<void*>> free_ ABSL_GUARDED_BY(mu_);
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUDA_ALLOCATOR_H_
