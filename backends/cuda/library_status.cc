#include "backends/cuda/library_status.h"

#include <string>

namespace forecastd {

absl::Status CublasStatus(cublasStatus_t status, const VendorCallSite& site) {
  if (status == CUBLAS_STATUS_SUCCESS) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (status == CUBLAS_STATUS_ALLOC_FAILED) code = absl::StatusCode::kResourceExhausted;
  if (status == CUBLAS_STATUS_NOT_SUPPORTED || status == CUBLAS_STATUS_ARCH_MISMATCH) {
    code = absl::StatusCode::kUnimplemented;
  }
  return VendorError(code, "cuBLAS", cublasGetStatusName(status), cublasGetStatusString(status),
                     site);
}

absl::Status CudnnStatus(cudnnStatus_t status, const VendorCallSite& site) {
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  // cuDNN 9 groups its codes by thousands: 2xxx bad parameter, 3xxx not supported,
  // 4xxx internal (4003/4004 are allocation failures), 5xxx execution failed.
  const int value = static_cast<int>(status);
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (value / 1000 == 3) code = absl::StatusCode::kUnimplemented;
  if (status == CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED ||
      status == CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED) {
    code = absl::StatusCode::kResourceExhausted;
  }
  // The last error string says which parameter was wrong; it is empty when cuDNN has none.
  char detail[512] = {0};
  cudnnGetLastErrorString(detail, sizeof(detail));
  std::string message = cudnnGetErrorString(status);
  if (detail[0] != '\0') message += std::string(" (") + detail + ")";
  return VendorError(code, "cuDNN", cudnnGetErrorString(status), message, site);
}

namespace {
const char* NcclResultName(ncclResult_t result) {
  switch (result) {
    case ncclSuccess:
      return "ncclSuccess";
    case ncclUnhandledCudaError:
      return "ncclUnhandledCudaError";
    case ncclSystemError:
      return "ncclSystemError";
    case ncclInternalError:
      return "ncclInternalError";
    case ncclInvalidArgument:
      return "ncclInvalidArgument";
    case ncclInvalidUsage:
      return "ncclInvalidUsage";
    case ncclRemoteError:
      return "ncclRemoteError";
    case ncclInProgress:
      return "ncclInProgress";
    default:
      return "ncclUnknownResult";
  }
}
}  // namespace

absl::Status NcclStatus(ncclResult_t result, const VendorCallSite& site) {
  if (result == ncclSuccess) return absl::OkStatus();
  // A peer that failed or went away is a condition to retry elsewhere, not our bug.
  const absl::StatusCode code =
      result == ncclRemoteError ? absl::StatusCode::kUnavailable : absl::StatusCode::kInternal;
  // NCCL's last error says what failed (which peer, which socket, which CUDA call); it is one
  // process-wide string, so it may describe another thread's failure, and is only a hint.
  std::string message = ncclGetErrorString(result);
  if (const char* detail = ncclGetLastError(nullptr); detail != nullptr && detail[0] != '\0') {
    message += std::string(" (last NCCL error: ") + detail + ")";
  }
  return VendorError(code, "NCCL", NcclResultName(result), message, site);
}

}  // namespace forecastd
