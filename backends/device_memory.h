// Memory of a GPU that another process shares with this one: a client's CUDA shared-memory
// region (Triton's extension), which a request names in place of its tensors' data. A client
// allocates device memory, exports it as a CUDA IPC handle (cudaIpcGetMemHandle's 64 bytes)
// and registers the handle; OpenCudaIpcMemory opens it here (cudaIpcOpenMemHandle) and the
// region closes it when destroyed. CMake links one definition of OpenCudaIpcMemory: the CUDA
// runtime's in a CUDA build (backends/cuda/cuda_ipc_memory.cc), one that refuses otherwise
// (backends/no_cuda_devices.cc), so this layer never includes backends/cuda/.
// Thread-safety: a region is immutable; its methods may be called from any thread.
#ifndef FORECASTD_BACKENDS_DEVICE_MEMORY_H_
#define FORECASTD_BACKENDS_DEVICE_MEMORY_H_

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace forecastd {

class DeviceMemoryRegion {
 public:
  virtual ~DeviceMemoryRegion() = default;
  // The CUDA ordinal of the GPU whose memory this is, in this process's numbering.
  virtual int device() const = 0;
  // The region's first byte: a device address (unified addressing), never dereferenced on the
  // host.
  virtual char* data() const = 0;
  virtual int64_t byte_size() const = 0;
  // Synchronous copies between `bytes` bytes at `offset` of the region and host memory, for a
  // batch computed where the region's memory is not read directly (on the CPU). The caller
  // keeps offset and bytes inside the region.
  virtual absl::Status CopyToHost(void* host, int64_t offset, int64_t bytes) const = 0;
  virtual absl::Status CopyFromHost(int64_t offset, const void* host, int64_t bytes) const = 0;
};

// The bytes of a cudaIpcMemHandle_t.
inline constexpr int64_t kCudaIpcHandleBytes = 64;

// INVALID_ARGUMENT for a handle of another length than kCudaIpcHandleBytes or a byte size that is
// not positive: OpenCudaIpcMemory's checks of its arguments, in every build.
absl::Status CheckCudaIpcArguments(absl::string_view raw_handle, int64_t byte_size);

// Opens `raw_handle` (kCudaIpcHandleBytes bytes from another process's cudaIpcGetMemHandle) on
// GPU `device` as a region of `byte_size` bytes from the allocation's start. INVALID_ARGUMENT
// for a handle of another length, a byte size that is not positive, or a handle the driver
// refuses (one from this process, a freed allocation, another GPU); NOT_FOUND for a GPU that
// is not present; FAILED_PRECONDITION in a build without CUDA (after the argument checks).
absl::StatusOr<std::unique_ptr<DeviceMemoryRegion>> OpenCudaIpcMemory(absl::string_view raw_handle,
                                                                      int device,
                                                                      int64_t byte_size);

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_DEVICE_MEMORY_H_
