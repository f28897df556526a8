// DiscoverCudaDevices and GpuBuildInfo (backends/device.h) and OpenCudaIpcMemory
// (backends/device_memory.h) for a build without CUDA: there are no GPUs to list, no GPU
// libraries, and no device memory to open.
#include "backends/device.h"
#include "backends/device_memory.h"

namespace forecastd {

absl::StatusOr<std::vector<Device>> DiscoverCudaDevices() { return std::vector<Device>(); }

std::string GpuBuildInfo() { return "CPU only"; }

absl::StatusOr<std::unique_ptr<DeviceMemoryRegion>> OpenCudaIpcMemory(absl::string_view raw_handle,
                                                                      int /*device*/,
                                                                      int64_t byte_size) {
  if (absl::Status status = CheckCudaIpcArguments(raw_handle, byte_size); !status.ok()) {
    return status;
  }
  return absl::FailedPreconditionError(
      "this forecastd was built without CUDA: CUDA shared memory is not available");
}

}  // namespace forecastd
