#include "kernels/cuda/cuda_status.h"

namespace forecastd {

absl::Status CudaStatus(cudaError_t error, const VendorCallSite& site) {
  if (error == cudaSuccess) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  switch (error) {
    case cudaErrorMemoryAllocation:
      code = absl::StatusCode::kResourceExhausted;
      break;
    case cudaErrorNoDevice:
    case cudaErrorInsufficientDriver:
    case cudaErrorDevicesUnavailable:
      code = absl::StatusCode::kUnavailable;
      break;
    default:
      break;
  }
  return VendorError(code, "CUDA", cudaGetErrorName(error), cudaGetErrorString(error), site);
}

}  // namespace forecastd
