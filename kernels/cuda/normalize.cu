#include "kernels/cuda/normalize.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// --- kernels

// Grid-stride over the R*F elements; mean and std are tiny and stay in L1.
__global__ void StandardizeKernel(float* out, const float* inp, const float* mean, const float* std,
                                  int64_t n, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t f = i % F;
    out[i] = __fdiv_rn(__fsub_rn(inp[i], mean[f]), std[f]);
  }
}

// Grid-stride over the R*W selected elements.
__global__ void DestandardizeKernel(float* out, const float* y, const float* mean, const float* std,
                                    int64_t n, int64_t C, int64_t c0, int64_t W) {
  const float m = *mean, s = *std;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t at = (i / W) * C + c0 + i % W;
    out[at] = __fadd_rn(__fmul_rn(y[at], s), m);
  }
}

}  // namespace

// --- launchers

absl::Status StandardizeLaunch(float* out, const float* inp, const float* mean, const float* std,
                               int64_t R, int64_t F, cudaStream_t stream) {
  if (R < 0 || F <= 0) return absl::InvalidArgumentError("StandardizeLaunch: need R >= 0, F > 0");
  const int64_t n = R * F;
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || inp == nullptr || mean == nullptr || std == nullptr) {
    return absl::InvalidArgumentError("StandardizeLaunch: null pointer");
  }
  StandardizeKernel<<<Blocks(n), kThreads, 0, stream>>>(out, inp, mean, std, n, F);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status DestandardizeLaunch(float* out, const float* y, const float* mean, const float* std,
                                 int64_t R, int64_t C, int64_t c0, int64_t W, cudaStream_t stream) {
  if (R < 0 || W <= 0 || c0 < 0 || c0 + W > C) {
    return absl::InvalidArgumentError(
        "DestandardizeLaunch: need R >= 0, W > 0 and columns [c0, c0 + W) inside C");
  }
  const int64_t n = R * W;
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || y == nullptr || mean == nullptr || std == nullptr) {
    return absl::InvalidArgumentError("DestandardizeLaunch: null pointer");
  }
  DestandardizeKernel<<<Blocks(n), kThreads, 0, stream>>>(out, y, mean, std, n, C, c0, W);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
