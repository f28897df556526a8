#include "kernels/cuda/fill.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// Grid-stride loop so one launch shape covers any n.
__global__ void FillKernel(float* out, float value, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = value;
  }
}

}  // namespace

// --- launchers

absl::Status FillLaunch(float* out, float value, int64_t n, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("FillLaunch: n must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("FillLaunch: out is null");
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  FillKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, value, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
