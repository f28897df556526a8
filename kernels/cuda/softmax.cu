#include "kernels/cuda/softmax.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// One warp per row; lane l owns columns l, l + 32, ... in every pass, so a lane only ever
// rewrites elements it read itself and out may alias inp (dinp may alias dout). The passes
// re-read the row, which L1 holds. Templated on the storage type for bf16 later; float math.

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps per block
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

__device__ __forceinline__ float WarpMax(float x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    x = fmaxf(x, __shfl_xor_sync(kFullMask, x, offset));
  }
  return x;
}

template <typename T>
__global__ void SoftmaxForwardKernel(T* out, const T* inp, int64_t R, int64_t C) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= R) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarp;
  const T* x = inp + r * C;
  T* y = out + r * C;

  float max = -INFINITY;
  for (int64_t c = lane; c < C; c += kWarp) max = fmaxf(max, static_cast<float>(x[c]));
  max = WarpMax(max);
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) sum += expf(static_cast<float>(x[c]) - max);
  const float inv_sum = 1.0f / WarpSum(sum);
  for (int64_t c = lane; c < C; c += kWarp) {
    y[c] = static_cast<T>(expf(static_cast<float>(x[c]) - max) * inv_sum);
  }
}

template <typename T>
__global__ void SoftmaxBackwardKernel(T* dinp, const T* dout, const T* out, int64_t R, int64_t C) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= R) return;
  const int lane = threadIdx.x % kWarp;
  const T* dy = dout + r * C;
  const T* y = out + r * C;
  T* dx = dinp + r * C;

  float dot = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    dot += static_cast<float>(dy[c]) * static_cast<float>(y[c]);
  }
  dot = WarpSum(dot);
  for (int64_t c = lane; c < C; c += kWarp) {
    dx[c] = static_cast<T>(static_cast<float>(y[c]) * (static_cast<float>(dy[c]) - dot));
  }
}

}  // namespace

// --- launchers

namespace {

absl::Status CheckShape(const char* name, int64_t R, int64_t C) {
  if (R < 0 || C < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": R and C must be >= 0, got R=", R, " C=", C));
  }
  return absl::OkStatus();
}

unsigned BlocksFor(int64_t R) {
  return static_cast<unsigned>((R + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

absl::Status SoftmaxForward(float* out, const float* inp, int64_t R, int64_t C,
                            cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("SoftmaxForward", R, C));
  if (R == 0 || C == 0) return absl::OkStatus();
  if (out == nullptr || inp == nullptr) {
    return absl::InvalidArgumentError("SoftmaxForward: null pointer");
  }
  SoftmaxForwardKernel<<<BlocksFor(R), kRowsPerBlock * kWarp, 0, stream>>>(out, inp, R, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R, int64_t C,
                             cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("SoftmaxBackward", R, C));
  if (R == 0 || C == 0) return absl::OkStatus();
  if (dinp == nullptr || dout == nullptr || out == nullptr) {
    return absl::InvalidArgumentError("SoftmaxBackward: null pointer");
  }
  SoftmaxBackwardKernel<<<BlocksFor(R), kRowsPerBlock * kWarp, 0, stream>>>(dinp, dout, out, R, C);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
