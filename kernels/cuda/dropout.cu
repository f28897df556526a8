#include "kernels/cuda/dropout.h"

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

constexpr uint64_t kPcgMultiplier = 6364136223846793005ull;
// Consecutive draws per thread: one jump-ahead is amortised over this many outputs.
constexpr int64_t kDrawsPerThread = 16;

// --- kernels

// The state `steps` draws after `state` (Brown, "Random Number Generation with Arbitrary
// Strides", 1994): the LCG's affine map raised to the power `steps` by squaring.
__device__ uint64_t PcgAdvance(uint64_t state, uint64_t increment, uint64_t steps) {
  uint64_t acc_mult = 1, acc_plus = 0;
  uint64_t cur_mult = kPcgMultiplier, cur_plus = increment;
  while (steps > 0) {
    if (steps & 1u) {
      acc_mult *= cur_mult;
      acc_plus = acc_plus * cur_mult + cur_plus;
    }
    cur_plus = (cur_mult + 1) * cur_plus;
    cur_mult *= cur_mult;
    steps >>= 1;
  }
  return acc_mult * state + acc_plus;
}

__device__ uint32_t PcgOutput(uint64_t old) {
  const auto xorshifted = static_cast<uint32_t>(((old >> 18) ^ old) >> 27);
  const auto rot = static_cast<uint32_t>(old >> 59);
  return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
}

__global__ void DropoutMaskKernel(float* mask, int64_t n, float p, float scale, uint64_t state,
                                  uint64_t increment) {
  const int64_t first =
      (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kDrawsPerThread;
  if (first >= n) return;
  uint64_t s = PcgAdvance(state, increment, static_cast<uint64_t>(first));
  const int64_t last = min(first + kDrawsPerThread, n);
  for (int64_t i = first; i < last; ++i) {
    const uint64_t old = s;
    s = old * kPcgMultiplier + increment;
    const float u = static_cast<float>(PcgOutput(old) >> 8) * 0x1.0p-24f;
    mask[i] = u < p ? 0.0f : scale;
  }
}

__global__ void MultiplyKernel(float* out, const float* inp, const float* mask, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = inp[i] * mask[i];
  }
}

}  // namespace

// --- launchers

absl::Status DropoutMaskLaunch(float* mask, int64_t n, float p, float scale, uint64_t state,
                               uint64_t increment, cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("DropoutMaskLaunch: n must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (mask == nullptr) return absl::InvalidArgumentError("DropoutMaskLaunch: mask is null");
  if ((increment & 1u) == 0) {
    return absl::InvalidArgumentError("DropoutMaskLaunch: a PCG increment is odd");
  }
  constexpr int kThreads = 256;
  const int64_t threads = (n + kDrawsPerThread - 1) / kDrawsPerThread;
  const int64_t blocks = (threads + kThreads - 1) / kThreads;
  if (blocks > 0x7FFFFFFF) return absl::InvalidArgumentError("DropoutMaskLaunch: n too large");
  DropoutMaskKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(mask, n, p, scale,
                                                                            state, increment);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status MultiplyLaunch(float* out, const float* inp, const float* mask, int64_t n,
                            cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("MultiplyLaunch: n must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || inp == nullptr || mask == nullptr) {
    return absl::InvalidArgumentError("MultiplyLaunch: null pointer");
  }
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((n + kThreads - 1) / kThreads, 65535);
  MultiplyKernel<<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(out, inp, mask, n);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
