// Needs a GPU: runs the fill kernel on the device and reads the result back.
#include "kernels/cuda/fill.h"

#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status FillAndRead(int64_t n, float value, std::vector<float>* host) {
  float* device = nullptr;
  // One extra guard element checks that the kernel writes nothing past n.
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&device), static_cast<size_t>(n + 1) * sizeof(float)));
  CUDA_RETURN_IF_ERROR(cudaMemset(device, 0, static_cast<size_t>(n + 1) * sizeof(float)));
  RETURN_IF_ERROR(cuda::FillLaunch(device, value, n, /*stream=*/nullptr));
  host->assign(static_cast<size_t>(n + 1), -1.0f);
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host->data(), device, host->size() * sizeof(float), cudaMemcpyDeviceToHost));
  CUDA_RETURN_IF_ERROR(cudaFree(device));
  return absl::OkStatus();
}

TEST_CASE("FillLaunch writes every element and nothing past the end", "[gpu]") {
  // Sizes around block and grid boundaries, and one past the grid-stride limit.
  for (int64_t n : std::vector<int64_t>{1, 255, 256, 257, 1000003, 65535LL * 256 + 17}) {
    CAPTURE(n);
    std::vector<float> host;
    const absl::Status s = FillAndRead(n, 3.25f, &host);
    INFO(s.ToString());
    REQUIRE(s.ok());
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; ++i) wrong += host[static_cast<size_t>(i)] != 3.25f;
    REQUIRE(wrong == 0);
    REQUIRE(host.back() == 0.0f);
  }
}

TEST_CASE("FillLaunch rejects bad arguments without launching", "[gpu]") {
  REQUIRE(cuda::FillLaunch(nullptr, 1.0f, 4, nullptr).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::FillLaunch(nullptr, 1.0f, -1, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::FillLaunch(nullptr, 1.0f, 0, nullptr).ok());
}

}  // namespace
}  // namespace forecastd
