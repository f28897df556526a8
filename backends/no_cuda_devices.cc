// DiscoverCudaDevices (backends/device.h) for a build without CUDA: there are no GPUs to list.
#include "backends/device.h"

namespace forecastd {

absl::StatusOr<std::vector<Device>> DiscoverCudaDevices() { return std::vector<Device>(); }

}  // namespace forecastd
