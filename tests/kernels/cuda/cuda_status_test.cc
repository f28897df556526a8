// Runs without a GPU: the CUDA runtime names and describes its error codes without a device.
#include "kernels/cuda/cuda_status.h"

#include <string>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status Wrapped(cudaError_t error) {
  CUDA_RETURN_IF_ERROR(error);
  return absl::OkStatus();
}

TEST_CASE("CUDA runtime errors become Status with name, message and call site", "[unit][cuda]") {
  REQUIRE(Wrapped(cudaSuccess).ok());

  const absl::Status oom = Wrapped(cudaErrorMemoryAllocation);
  REQUIRE(oom.code() == absl::StatusCode::kResourceExhausted);
  const std::string m(oom.message());
  CAPTURE(m);
  REQUIRE(m.find("CUDA error cudaErrorMemoryAllocation: out of memory") == 0);
  REQUIRE(m.find("`error`") != std::string::npos);
  REQUIRE(m.find("tests/kernels/cuda/cuda_status_test.cc:") != std::string::npos);

  REQUIRE(Wrapped(cudaErrorNoDevice).code() == absl::StatusCode::kUnavailable);
  REQUIRE(Wrapped(cudaErrorInvalidValue).code() == absl::StatusCode::kInternal);
}

}  // namespace
}  // namespace forecastd
