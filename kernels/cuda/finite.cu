#include "kernels/cuda/finite.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// One block per row (grid-stride over rows); the block's threads stride over the columns and
// agree with one __syncthreads_or. isfinite is false for NaN and both infinities; fast-math
// flags do not reach it here (the bits decide).
__global__ void NonFiniteRowsKernel(uint8_t* flags, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const float* row = x + r * cols;
    int bad = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const unsigned bits = __float_as_uint(row[c]);
      bad |= (bits & 0x7f800000u) == 0x7f800000u;
    }
    bad = __syncthreads_or(bad);
    if (threadIdx.x == 0) flags[r] = bad != 0 ? 1 : 0;
  }
}

}  // namespace

// --- launchers

absl::Status NonFiniteRowsLaunch(uint8_t* flags, const float* x, int64_t rows, int64_t cols,
                                 cudaStream_t stream) {
  if (rows < 0 || cols < 0) {
    return absl::InvalidArgumentError("NonFiniteRowsLaunch: rows and cols must be >= 0");
  }
  if (rows == 0) return absl::OkStatus();
  if (flags == nullptr || (cols > 0 && x == nullptr)) {
    return absl::InvalidArgumentError("NonFiniteRowsLaunch: null buffer");
  }
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>(rows, 65535);
  NonFiniteRowsKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(flags, x, rows, cols);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
