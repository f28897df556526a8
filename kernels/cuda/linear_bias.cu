#include "kernels/cuda/linear_bias.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// Templated on the storage type for bf16 later; float math.

constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

// Grid-stride over the (N, OUT) elements.
template <typename T>
__global__ void AddBiasKernel(T* out, const T* bias, int64_t total, int64_t OUT) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += stride) {
    out[e] = static_cast<T>(static_cast<float>(out[e]) + static_cast<float>(bias[e % OUT]));
  }
}

// Column sums, deterministic without atomics: one block owns a tile of kTileCols columns over
// all N rows. Lane l of warp w reads column l % kTileCols of rows w * kRowGroups + l / kTileCols
// + k * kRowsPerStep, so each load instruction of a warp covers kRowGroups full 32-byte sectors;
// the partial sums then meet in a fixed order (shuffles within the warp, then warps in index
// order through shared memory).
constexpr int kTileCols = 8;
constexpr int kRowGroups = kWarp / kTileCols;  // rows a warp reads at once
constexpr int kColWarps = 16;
constexpr int kRowsPerStep = kColWarps * kRowGroups;

template <typename T>
__global__ void __launch_bounds__(kColWarps* kWarp)
    BiasGradKernel(float* dbias, const T* dout, int64_t N, int64_t OUT) {
  __shared__ float part[kColWarps][kTileCols];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t o = static_cast<int64_t>(blockIdx.x) * kTileCols + lane % kTileCols;
  float sum = 0.0f;
  if (o < OUT) {
#pragma unroll 4
    for (int64_t n = warp * kRowGroups + lane / kTileCols; n < N; n += kRowsPerStep) {
      sum += static_cast<float>(dout[n * OUT + o]);
    }
  }
  // Lanes l, l + 8, l + 16, l + 24 share a column: fold them onto lanes 0..7.
#pragma unroll
  for (int offset = kWarp / 2; offset >= kTileCols; offset /= 2) {
    sum += __shfl_down_sync(kFullMask, sum, offset);
  }
  if (lane < kTileCols) part[warp][lane] = sum;
  __syncthreads();
  if (threadIdx.x < kTileCols) {
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
    if (col < OUT) {
      float total = 0.0f;
      for (int w = 0; w < kColWarps; ++w) total += part[w][threadIdx.x];
      dbias[col] = total;
    }
  }
}

}  // namespace

// --- launchers

namespace {

absl::Status CheckShape(const char* name, int64_t N, int64_t OUT) {
  if (N < 0 || OUT <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need N >= 0 and OUT > 0, got N=", N, " OUT=", OUT));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status AddBias(float* out, const float* bias, int64_t N, int64_t OUT, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("AddBias", N, OUT));
  if (N == 0) return absl::OkStatus();
  if (out == nullptr || bias == nullptr) {
    return absl::InvalidArgumentError("AddBias: null pointer");
  }
  constexpr int kThreads = 256;
  const int64_t total = N * OUT;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((total + kThreads - 1) / kThreads, 65535));
  AddBiasKernel<<<blocks, kThreads, 0, stream>>>(out, bias, total, OUT);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status BiasGrad(float* dbias, const float* dout, int64_t N, int64_t OUT,
                      cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("BiasGrad", N, OUT));
  if (dbias == nullptr || (N > 0 && dout == nullptr)) {
    return absl::InvalidArgumentError("BiasGrad: null pointer");
  }
  // With N == 0 the kernel still runs and writes zeros, as the reference does.
  const unsigned tiles = static_cast<unsigned>((OUT + kTileCols - 1) / kTileCols);
  BiasGradKernel<<<tiles, kColWarps * kWarp, 0, stream>>>(dbias, dout, N, OUT);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
