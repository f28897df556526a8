// OpenCudaIpcMemory (backends/device_memory.h) on the CUDA runtime: cudaIpcOpenMemHandle, with
// the region's size checked against the allocation the handle exports, so that no copy a
// request asks for can reach past it.
#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/device_memory.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd {
namespace {

// The size of the allocation that contains `address` (the driver's cuMemGetAddressRange,
// reached through the runtime so that nothing links the driver library).
absl::StatusOr<int64_t> AllocationBytes(void* address) {
  using GetAddressRange = CUresult (*)(CUdeviceptr*, size_t*, CUdeviceptr);
  void* entry = nullptr;
  cudaDriverEntryPointQueryResult found{};
  CUDA_RETURN_IF_ERROR(cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &entry, 12000,
                                                        cudaEnableDefault, &found));
  if (found != cudaDriverEntryPointSuccess || entry == nullptr) {
    return absl::InternalError("the CUDA driver has no cuMemGetAddressRange");
  }
  CUdeviceptr base = 0;
  size_t bytes = 0;
  const CUresult result = reinterpret_cast<GetAddressRange>(entry)(
      &base, &bytes, reinterpret_cast<CUdeviceptr>(address));
  if (result != CUDA_SUCCESS) {
    return absl::InternalError(
        absl::StrCat("cuMemGetAddressRange failed (CUresult ", static_cast<int>(result), ")"));
  }
  return static_cast<int64_t>(bytes - (reinterpret_cast<CUdeviceptr>(address) - base));
}

class CudaIpcRegion final : public DeviceMemoryRegion {
 public:
  CudaIpcRegion(int device, char* data, int64_t byte_size)
      : device_(device), data_(data), byte_size_(byte_size) {}
  ~CudaIpcRegion() override {
    const ScopedCudaDevice scoped(device_);
    if (scoped.status().ok()) cudaIpcCloseMemHandle(data_);
  }
  CudaIpcRegion(const CudaIpcRegion&) = delete;
  CudaIpcRegion& operator=(const CudaIpcRegion&) = delete;

  int device() const override { return device_; }
  char* data() const override { return data_; }
  int64_t byte_size() const override { return byte_size_; }

  absl::Status CopyToHost(void* host, int64_t offset, int64_t bytes) const override {
    const ScopedCudaDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host, data_ + offset, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(int64_t offset, const void* host, int64_t bytes) const override {
    const ScopedCudaDevice scoped(device_);
    RETURN_IF_ERROR(scoped.status());
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(data_ + offset, host, static_cast<size_t>(bytes), cudaMemcpyHostToDevice));
    // From pageable memory cudaMemcpy may return before the bytes reach the device; the client
    // reads them once the reply is out, so wait for them here.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(nullptr));
    return absl::OkStatus();
  }

 private:
  const int device_;
  char* const data_;
  const int64_t byte_size_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMemoryRegion>> OpenCudaIpcMemory(absl::string_view raw_handle,
                                                                      int device,
                                                                      int64_t byte_size) {
  RETURN_IF_ERROR(CheckCudaIpcArguments(raw_handle, byte_size));
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  if (device < 0 || device >= count) {
    return absl::NotFoundError(absl::StrCat("no GPU ", device, " here (", count, " GPUs present)"));
  }
  const ScopedCudaDevice scoped(device);
  RETURN_IF_ERROR(scoped.status());
  cudaIpcMemHandle_t handle;
  static_assert(sizeof(handle) == kCudaIpcHandleBytes);
  std::memcpy(&handle, raw_handle.data(), sizeof(handle));
  void* data = nullptr;
  if (const cudaError_t error = cudaIpcOpenMemHandle(&data, handle, cudaIpcMemLazyEnablePeerAccess);
      error != cudaSuccess) {
    cudaGetLastError();  // not sticky: clear it for the thread's next call
    return absl::InvalidArgumentError(absl::StrCat(
        "cannot open the CUDA IPC handle on GPU ", device, ": ", cudaGetErrorString(error),
        " (a handle from cudaIpcGetMemHandle in another process, of memory still "
        "allocated on that GPU)"));
  }
  auto region = std::make_unique<CudaIpcRegion>(device, static_cast<char*>(data), byte_size);
  ASSIGN_OR_RETURN(const int64_t allocated, AllocationBytes(data));
  if (byte_size > allocated) {
    return absl::InvalidArgumentError(
        absl::StrCat("byte_size ", byte_size, " is beyond the ", allocated,
                     " bytes of the device allocation the handle exports"));
  }
  return region;
}

}  // namespace forecastd
