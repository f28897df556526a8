// DiscoverCudaDevices and GpuBuildInfo (backends/device.h) for a build without CUDA: there are no
// GPUs to list and no GPU libraries.
#include "backends/device.h"

namespace forecastd {

absl::StatusOr<std::vector<Device>> DiscoverCudaDevices() { return std::vector<Device>(); }

std::string GpuBuildInfo() { return "CPU only"; }

}  // namespace forecastd
