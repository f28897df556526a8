// Lists the CUDA GPUs the driver reports, for DeviceRegistry. Thread-safe.
#ifndef FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_
#define FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_

#include <vector>

#include "absl/status/statusor.h"
#include "backends/device.h"

namespace forecastd {

// Every GPU with its name, memory and compute capability. A host without a driver or
// without a GPU yields an empty list, not an error; other CUDA failures are errors.
absl::StatusOr<std::vector<Device>> DiscoverCudaDevices();

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_
