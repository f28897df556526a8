// Runs without a GPU: cuBLAS, cuDNN and NCCL describe their codes without a device.
#include "backends/cuda/library_status.h"

#include <string>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status Cublas(cublasStatus_t s) {
  CUBLAS_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}
absl::Status Cudnn(cudnnStatus_t s) {
  CUDNN_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}
absl::Status Nccl(ncclResult_t s) {
  NCCL_RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

TEST_CASE("cuBLAS statuses are wrapped with their names", "[unit][cuda]") {
  REQUIRE(Cublas(CUBLAS_STATUS_SUCCESS).ok());
  const absl::Status s = Cublas(CUBLAS_STATUS_ALLOC_FAILED);
  REQUIRE(s.code() == absl::StatusCode::kResourceExhausted);
  CAPTURE(s.message());
  REQUIRE(std::string(s.message()).find("cuBLAS error CUBLAS_STATUS_ALLOC_FAILED") == 0);
  REQUIRE(Cublas(CUBLAS_STATUS_NOT_SUPPORTED).code() == absl::StatusCode::kUnimplemented);
  REQUIRE(Cublas(CUBLAS_STATUS_INVALID_VALUE).code() == absl::StatusCode::kInternal);
}

TEST_CASE("cuDNN statuses are wrapped with their names", "[unit][cuda]") {
  REQUIRE(Cudnn(CUDNN_STATUS_SUCCESS).ok());
  const absl::Status s = Cudnn(CUDNN_STATUS_BAD_PARAM);
  REQUIRE(s.code() == absl::StatusCode::kInternal);
  CAPTURE(s.message());
  REQUIRE(std::string(s.message()).find("cuDNN error CUDNN_STATUS_BAD_PARAM") == 0);
  REQUIRE(Cudnn(CUDNN_STATUS_NOT_SUPPORTED).code() == absl::StatusCode::kUnimplemented);
  REQUIRE(Cudnn(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED).code() ==
          absl::StatusCode::kResourceExhausted);
}

TEST_CASE("NCCL results are wrapped with their names", "[unit][cuda]") {
  REQUIRE(Nccl(ncclSuccess).ok());
  const absl::Status s = Nccl(ncclInvalidArgument);
  REQUIRE(s.code() == absl::StatusCode::kInternal);
  CAPTURE(s.message());
  REQUIRE(std::string(s.message()).find("NCCL error ncclInvalidArgument: ") == 0);
  REQUIRE(std::string(s.message()).find("`s`") != std::string::npos);
  REQUIRE(Nccl(ncclRemoteError).code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace forecastd
