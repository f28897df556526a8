#include "backends/cuda/cuda_devices.h"

#include <cuda_runtime_api.h>
#include <cudnn_version.h>
#include <nccl.h>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd {

// Declared in backends/device.h, as GpuBuildInfo below (the CPU-only build links
// backends/no_cuda_devices.cc instead).
std::string GpuBuildInfo() {
  return absl::StrCat("CUDA ", CUDART_VERSION / 1000, ".", CUDART_VERSION % 1000 / 10, ", cuDNN ",
                      CUDNN_MAJOR, ".", CUDNN_MINOR, ".", CUDNN_PATCHLEVEL, ", NCCL ", NCCL_MAJOR,
                      ".", NCCL_MINOR, ".", NCCL_PATCH);
}

// Declared in backends/device.h.
absl::StatusOr<std::vector<Device>> DiscoverCudaDevices() {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error == cudaErrorNoDevice || error == cudaErrorInsufficientDriver) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    return std::vector<Device>{};
  }
  CUDA_RETURN_IF_ERROR(error);
  std::vector<Device> devices;
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, i));
    Device device;
    device.kind = DeviceKind::kCuda;
    device.index = i;
    device.name = prop.name;
    device.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
    device.compute_capability = prop.major * 10 + prop.minor;
    devices.push_back(device);
  }
  return devices;
}

namespace {
absl::Status SetDevice(int device) {
  CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  return absl::OkStatus();
}
}  // namespace

ScopedCudaDevice::ScopedCudaDevice(int device) {
  int current = -1;
  if (cudaGetDevice(&current) != cudaSuccess) {
    cudaGetLastError();
    current = -1;
  }
  if (current == device) return;
  status_ = SetDevice(device);
  if (status_.ok()) {
    previous_ = current;
  } else {
    cudaGetLastError();  // a bad ordinal is not sticky; keep it from reaching later launches
  }
}

ScopedCudaDevice::~ScopedCudaDevice() {
  if (previous_ >= 0) cudaSetDevice(previous_);
}

}  // namespace forecastd
