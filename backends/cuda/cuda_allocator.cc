#include "backends/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_devices.h"
#include "kernels/cuda/cuda_status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

// --- DeviceBuffer

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : allocator_(std::exchange(other.allocator_, nullptr)),
      data_(std::exchange(other.data_, nullptr)),
      size_bytes_(std::exchange(other.size_bytes_, 0)),
      block_bytes_(std::exchange(other.block_bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    Reset();
    allocator_ = std::exchange(other.allocator_, nullptr);
    data_ = std::exchange(other.data_, nullptr);
    size_bytes_ = std::exchange(other.size_bytes_, 0);
    block_bytes_ = std::exchange(other.block_bytes_, 0);
  }
  return *this;
}

void DeviceBuffer::Reset() {
  if (data_ != nullptr) allocator_->Free(data_, block_bytes_);
  allocator_ = nullptr;
  data_ = nullptr;
  size_bytes_ = 0;
  block_bytes_ = 0;
}

// --- CudaAllocator

namespace {

int64_t RoundUp(int64_t bytes, int64_t multiple) {
  return (bytes + multiple - 1) / multiple * multiple;
}

std::string MiB(int64_t bytes) {
  return absl::StrCat(bytes, " B (", static_cast<double>(bytes) / (1 << 20), " MiB)");
}

}  // namespace

int64_t CudaAllocator::BlockBytes(int64_t bytes) {
  return bytes < kSmallLimitBytes ? RoundUp(bytes, kSmallRoundBytes)
                                  : RoundUp(bytes, kLargeRoundBytes);
}

absl::StatusOr<std::unique_ptr<CudaAllocator>> CudaAllocator::Create(const Options& options) {
  if (options.limit_bytes < 0) {
    return absl::InvalidArgumentError("CudaAllocator: limit_bytes must be >= 0");
  }
  int count = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDeviceCount(&count));
  if (options.device < 0 || options.device >= count) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaAllocator: no CUDA device ", options.device, " (", count, " present)"));
  }
  return std::unique_ptr<CudaAllocator>(new CudaAllocator(options));
}

CudaAllocator::~CudaAllocator() {
  absl::MutexLock lock(&mu_);
  if (stats_.buffers_in_use != 0) {
    // Their memory stays allocated (freeing it under a live owner would be worse); a bug of
    // the owner, said once.
    spdlog::error("CudaAllocator(cuda:{}) destroyed with {} buffers ({} bytes) still in use",
                  options_.device, stats_.buffers_in_use, stats_.bytes_in_use);
  }
  const absl::Status status = ReleaseCachedLocked();
  if (!status.ok()) spdlog::warn("CudaAllocator: {}", status.ToString());
}

absl::StatusOr<DeviceBuffer> CudaAllocator::Allocate(int64_t bytes) {
  if (bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaAllocator::Allocate: negative size ", bytes));
  }
  if (bytes == 0) return DeviceBuffer();
  const int64_t block_bytes = BlockBytes(bytes);
  absl::MutexLock lock(&mu_);
  void* data = nullptr;
  auto it = free_.find(block_bytes);
  if (it != free_.end() && !it->second.empty()) {
    data = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= block_bytes;
    ++stats_.cache_hits;
  } else {
    ASSIGN_OR_RETURN(data, MallocLocked(bytes, block_bytes));
  }
  ++stats_.allocations;
  ++stats_.buffers_in_use;
  stats_.bytes_in_use += block_bytes;
  stats_.peak_bytes_in_use = std::max(stats_.peak_bytes_in_use, stats_.bytes_in_use);
  return DeviceBuffer(this, data, bytes, block_bytes);
}

absl::StatusOr<void*> CudaAllocator::MallocLocked(int64_t bytes, int64_t block_bytes) {
  const ScopedCudaDevice scoped(options_.device);
  RETURN_IF_ERROR(scoped.status());
  const auto over_limit = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return options_.limit_bytes > 0 &&
           stats_.bytes_in_use + stats_.bytes_cached + block_bytes > options_.limit_bytes;
  };
  if (over_limit()) {
    RETURN_IF_ERROR(ReleaseCachedLocked());
    if (over_limit()) {
      return OutOfMemory(bytes, block_bytes,
                         absl::ResourceExhaustedError(absl::StrCat("over the allocator's limit of ",
                                                                   MiB(options_.limit_bytes))));
    }
  }
  for (int attempt = 0;; ++attempt) {
    void* data = nullptr;
    const cudaError_t error = cudaMalloc(&data, static_cast<size_t>(block_bytes));
    if (error == cudaSuccess) {
      ++stats_.cuda_malloc_calls;
      return data;
    }
    // cudaMalloc's failure is not sticky, but it is the thread's last error: clear it so the
    // next kernel launcher's cudaGetLastError() does not report it as its own.
    cudaGetLastError();
    const absl::Status status = CudaStatus(error, FD_VENDOR_CALL_SITE(cudaMalloc));
    if (error != cudaErrorMemoryAllocation) return status;
    if (attempt == 1 || stats_.bytes_cached == 0) return OutOfMemory(bytes, block_bytes, status);
    ++stats_.oom_retries;
    spdlog::warn(
        "CudaAllocator(cuda:{}): cudaMalloc of {} failed; releasing {} cached bytes and "
        "retrying once",
        options_.device, block_bytes, stats_.bytes_cached);
    RETURN_IF_ERROR(ReleaseCachedLocked());
  }
}

absl::Status CudaAllocator::OutOfMemory(int64_t bytes, int64_t block_bytes,
                                        const absl::Status& cause) const {
  size_t free_bytes = 0, total_bytes = 0;
  std::string device_memory = "unknown";
  if (cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess) {
    device_memory = absl::StrCat(MiB(static_cast<int64_t>(free_bytes)), " free of ",
                                 MiB(static_cast<int64_t>(total_bytes)));
  } else {
    cudaGetLastError();
  }
  return absl::ResourceExhaustedError(absl::StrCat(
      "out of GPU memory on cuda:", options_.device, ": cannot allocate ", MiB(block_bytes),
      " (size class of a request of ", bytes, " B); this allocator holds ",
      MiB(stats_.bytes_in_use), " in use and ", MiB(stats_.bytes_cached),
      " cached; device: ", device_memory, "; ", cause.message()));
}

void CudaAllocator::Free(void* data, int64_t block_bytes) {
  absl::MutexLock lock(&mu_);
  free_[block_bytes].push_back(data);
  --stats_.buffers_in_use;
  stats_.bytes_in_use -= block_bytes;
  stats_.bytes_cached += block_bytes;
}

absl::Status CudaAllocator::ReleaseCached() {
  absl::MutexLock lock(&mu_);
  return ReleaseCachedLocked();
}

absl::Status CudaAllocator::ReleaseCachedLocked() {
  if (stats_.bytes_cached == 0) return absl::OkStatus();
  const ScopedCudaDevice scoped(options_.device);
  RETURN_IF_ERROR(scoped.status());
  absl::Status first;
  for (auto& [block_bytes, blocks] : free_) {
    for (void* data : blocks) {
      const cudaError_t error = cudaFree(data);
      ++stats_.cuda_free_calls;
      stats_.bytes_cached -= block_bytes;
      if (error != cudaSuccess) {
        cudaGetLastError();
        first.Update(CudaStatus(error, FD_VENDOR_CALL_SITE(cudaFree)));
      }
    }
  }
  free_.clear();
  return first;
}

CudaAllocator::Stats CudaAllocator::stats() const {
  absl::MutexLock lock(&mu_);
  return stats_;
}

}  // namespace forecastd
