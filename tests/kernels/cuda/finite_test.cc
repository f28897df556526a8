// Needs a GPU: NonFiniteRowsLaunch against ref::NonFiniteRows, with NaNs and infinities planted
// at random places (first and last columns included) and rows around the grid's limit.
#include "kernels/cuda/finite.h"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/ref/finite.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

absl::Status FlagOnDevice(const std::vector<float>& x, int64_t rows, int64_t cols,
                          std::vector<uint8_t>* flags) {
  float* dx = nullptr;
  uint8_t* dflags = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&dx), x.size() * sizeof(float) + 4));
  CUDA_RETURN_IF_ERROR(
      cudaMalloc(reinterpret_cast<void**>(&dflags), static_cast<size_t>(rows) + 1));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(dx, x.data(), x.size() * sizeof(float), cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(cudaMemset(dflags, 7, static_cast<size_t>(rows) + 1));
  RETURN_IF_ERROR(cuda::NonFiniteRowsLaunch(dflags, dx, rows, cols, /*stream=*/nullptr));
  flags->assign(static_cast<size_t>(rows) + 1, 0);
  CUDA_RETURN_IF_ERROR(cudaMemcpy(flags->data(), dflags, flags->size(), cudaMemcpyDeviceToHost));
  CUDA_RETURN_IF_ERROR(cudaFree(dx));
  CUDA_RETURN_IF_ERROR(cudaFree(dflags));
  return absl::OkStatus();
}

TEST_CASE("NonFiniteRowsLaunch flags the rows the reference flags and writes nothing past them",
          "[gpu]") {
  std::mt19937 rng(11);
  const float kBad[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity()};
  struct Shape {
    int64_t rows, cols;
  };
  for (const Shape shape :
       {Shape{1, 1}, Shape{3, 20}, Shape{64, 1000}, Shape{70000, 3}, Shape{5, 0}}) {
    CAPTURE(shape.rows, shape.cols);
    std::vector<float> x = testing::RandomVector(rng, shape.rows * shape.cols, -1e30f, 1e30f);
    std::uniform_int_distribution<int64_t> row(0, shape.rows - 1);
    std::uniform_int_distribution<int64_t> col(0, std::max<int64_t>(shape.cols - 1, 0));
    for (int i = 0; i < 3 && shape.cols > 0; ++i) {
      x[static_cast<size_t>(row(rng) * shape.cols + col(rng))] = kBad[i];
    }
    if (shape.cols > 0) {
      x[static_cast<size_t>(shape.cols - 1)] = kBad[0];                 // row 0's last column
      x[static_cast<size_t>((shape.rows - 1) * shape.cols)] = kBad[1];  // the last row's first
    }
    std::vector<uint8_t> want(static_cast<size_t>(shape.rows));
    ref::NonFiniteRows(want.data(), x.data(), shape.rows, shape.cols);
    std::vector<uint8_t> got;
    const absl::Status s = FlagOnDevice(x, shape.rows, shape.cols, &got);
    INFO(s.ToString());
    REQUIRE(s.ok());
    REQUIRE(got.back() == 7);  // the guard byte
    got.pop_back();
    REQUIRE(got == want);
  }
}

}  // namespace
}  // namespace forecastd
