// Wraps CUDA runtime error codes into absl::Status, once for the whole project.
// Used by the .cu launchers in kernels/cuda/ and by backends/cuda/. Stateless, thread-safe.
#ifndef FORECASTD_KERNELS_CUDA_CUDA_STATUS_H_
#define FORECASTD_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include "kernels/base/status.h"

namespace forecastd {

// OK for cudaSuccess; otherwise RESOURCE_EXHAUSTED for allocation failures, UNAVAILABLE when
// no usable device or driver is present, and INTERNAL for the rest (a misuse of CUDA is our
// bug, never the caller's bad input).
absl::Status CudaStatus(cudaError_t error, const VendorCallSite& site);

}  // namespace forecastd

// Evaluates a CUDA runtime call and returns its wrapped error from the enclosing function.
#define CUDA_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::forecastd::CudaStatus((expr), FD_VENDOR_CALL_SITE(expr)))

#endif  // FORECASTD_KERNELS_CUDA_CUDA_STATUS_H_
