// Wraps cuBLAS, cuDNN and NCCL error codes into absl::Status, one function per library.
// Used by backends/cuda/ only. Stateless, thread-safe.
#ifndef FORECASTD_BACKENDS_CUDA_LIBRARY_STATUS_H_
#define FORECASTD_BACKENDS_CUDA_LIBRARY_STATUS_H_

#include <cublas_v2.h>
#include <cudnn.h>
#include <nccl.h>

#include "kernels/base/status.h"

namespace forecastd {

// Each returns OK on success, RESOURCE_EXHAUSTED for allocation failures, UNIMPLEMENTED for
// what the library does not support, and INTERNAL otherwise.
absl::Status CublasStatus(cublasStatus_t status, const VendorCallSite& site);
absl::Status CudnnStatus(cudnnStatus_t status, const VendorCallSite& site);
absl::Status NcclStatus(ncclResult_t result, const VendorCallSite& site);

}  // namespace forecastd

#define CUBLAS_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::forecastd::CublasStatus((expr), FD_VENDOR_CALL_SITE(expr)))
#define CUDNN_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::forecastd::CudnnStatus((expr), FD_VENDOR_CALL_SITE(expr)))
#define NCCL_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::forecastd::NcclStatus((expr), FD_VENDOR_CALL_SITE(expr)))

#endif  // FORECASTD_BACKENDS_CUDA_LIBRARY_STATUS_H_
