#include "kernels/cuda/normalization.h"

#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// Row kernels: one warp per row, lane l owning columns l, l + 32, ...; the statistics take
// two passes (mean, then the variance around it) as the reference does, since E[x^2] - E[x]^2
// cancels badly when |mean| >> std. Templated on the storage type for bf16 later; float math.

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps per block in the row kernels
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

struct RowStats {
  float mean;
  float rstd;
};

// Every lane gets the statistics of row x (C elements).
template <typename T>
__device__ RowStats WarpRowStats(const T* x, int64_t C, float eps, int lane) {
  float sum = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) sum += static_cast<float>(x[c]);
  const float mean = WarpSum(sum) / static_cast<float>(C);
  float sq = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xm = static_cast<float>(x[c]) - mean;
    sq += xm * xm;
  }
  const float var = WarpSum(sq) / static_cast<float>(C);
  return {mean, 1.0f / sqrtf(var + eps)};
}

template <typename T>
__global__ void LayerNormForwardKernel(T* out, float* mean, float* rstd, const T* inp,
                                       const T* gamma, const T* beta, int64_t N, int64_t C,
                                       float eps) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (n >= N) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarp;
  const T* x = inp + n * C;
  T* y = out + n * C;
  const RowStats s = WarpRowStats(x, C, eps, lane);
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (static_cast<float>(x[c]) - s.mean) * s.rstd;
    y[c] = static_cast<T>(xhat * static_cast<float>(gamma[c]) + static_cast<float>(beta[c]));
  }
  if (lane == 0) {
    if (mean != nullptr) mean[n] = s.mean;
    if (rstd != nullptr) rstd[n] = s.rstd;
  }
}

// The row part of the backward pass: the statistics (saved to mean/rstd when those are not
// null, for LayerNormParamGradKernel) and, when dinp is not null,
//   dinp = rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat)),  dxhat = dout * gamma.
template <typename T>
__global__ void LayerNormBackwardRowKernel(T* dinp, float* mean, float* rstd, const T* dout,
                                           const T* inp, const T* gamma, int64_t N, int64_t C,
                                           float eps) {
  const int64_t n = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (n >= N) return;
  const int lane = threadIdx.x % kWarp;
  const T* x = inp + n * C;
  const RowStats s = WarpRowStats(x, C, eps, lane);
  if (lane == 0) {
    if (mean != nullptr) mean[n] = s.mean;
    if (rstd != nullptr) rstd[n] = s.rstd;
  }
  if (dinp == nullptr) return;

  const T* dy = dout + n * C;
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (static_cast<float>(x[c]) - s.mean) * s.rstd;
    const float dxhat = static_cast<float>(dy[c]) * static_cast<float>(gamma[c]);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  const float mean_dxhat = WarpSum(sum_dxhat) / static_cast<float>(C);
  const float mean_dxhat_xhat = WarpSum(sum_dxhat_xhat) / static_cast<float>(C);
  T* dx = dinp + n * C;
  for (int64_t c = lane; c < C; c += kWarp) {
    const float xhat = (static_cast<float>(x[c]) - s.mean) * s.rstd;
    const float dxhat = static_cast<float>(dy[c]) * static_cast<float>(gamma[c]);
    dx[c] = static_cast<T>(s.rstd * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat));
  }
}

// Column sums for dgamma and dbeta, deterministic without atomics: one block owns a tile of
// kTileCols columns over all N rows. Lane l of warp w reads column l % kTileCols of rows
// w * kRowGroups + l / kTileCols + k * kRowsPerStep, so each load instruction of a warp covers
// kRowGroups full 32-byte sectors; the partial sums then meet in a fixed order (shuffles within
// the warp, then warps in index order through shared memory).
constexpr int kTileCols = 8;
constexpr int kRowGroups = kWarp / kTileCols;  // rows a warp reads at once
constexpr int kColWarps = 16;
constexpr int kRowsPerStep = kColWarps * kRowGroups;

template <typename T>
__global__ void __launch_bounds__(kColWarps* kWarp)
    LayerNormParamGradKernel(float* dgamma, float* dbeta, const T* dout, const T* inp,
                             const float* mean, const float* rstd, int64_t N, int64_t C) {
  __shared__ float dgamma_part[kColWarps][kTileCols];
  __shared__ float dbeta_part[kColWarps][kTileCols];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kTileCols + lane % kTileCols;
  float dg = 0.0f, db = 0.0f;
  if (c < C) {
#pragma unroll 4
    for (int64_t n = warp * kRowGroups + lane / kTileCols; n < N; n += kRowsPerStep) {
      const float dy = static_cast<float>(dout[n * C + c]);
      const float xhat = (static_cast<float>(inp[n * C + c]) - mean[n]) * rstd[n];
      dg += dy * xhat;
      db += dy;
    }
  }
  // Lanes l, l + 8, l + 16, l + 24 share a column: fold them onto lanes 0..7.
#pragma unroll
  for (int offset = kWarp / 2; offset >= kTileCols; offset /= 2) {
    dg += __shfl_down_sync(kFullMask, dg, offset);
    db += __shfl_down_sync(kFullMask, db, offset);
  }
  if (lane < kTileCols) {
    dgamma_part[warp][lane] = dg;
    dbeta_part[warp][lane] = db;
  }
  __syncthreads();
  if (threadIdx.x < kTileCols) {
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
    if (col < C) {
      float g = 0.0f, b = 0.0f;
      for (int w = 0; w < kColWarps; ++w) {
        g += dgamma_part[w][threadIdx.x];
        b += dbeta_part[w][threadIdx.x];
      }
      if (dgamma != nullptr) dgamma[col] = g;
      if (dbeta != nullptr) dbeta[col] = b;
    }
  }
}

}  // namespace

// --- launchers

namespace {

absl::Status CheckShape(const char* name, int64_t N, int64_t C, float eps) {
  if (N < 0 || C <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need N >= 0 and C > 0, got N=", N, " C=", C));
  }
  if (!(eps >= 0.0f)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": eps must be >= 0, got ", eps));
  }
  return absl::OkStatus();
}

unsigned RowBlocks(int64_t N) {
  return static_cast<unsigned>((N + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* gamma, const float* beta, int64_t N, int64_t C,
                              float eps, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("LayerNormForward", N, C, eps));
  if (N == 0) return absl::OkStatus();
  if (out == nullptr || inp == nullptr || gamma == nullptr || beta == nullptr) {
    return absl::InvalidArgumentError("LayerNormForward: null pointer");
  }
  LayerNormForwardKernel<<<RowBlocks(N), kRowsPerBlock * kWarp, 0, stream>>>(
      out, mean, rstd, inp, gamma, beta, N, C, eps);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                               const float* inp, const float* gamma, int64_t N, int64_t C,
                               float eps, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("LayerNormBackward", N, C, eps));
  const bool param_grads = dgamma != nullptr || dbeta != nullptr;
  if (N > 0 && (dout == nullptr || inp == nullptr || gamma == nullptr)) {
    return absl::InvalidArgumentError("LayerNormBackward: null input pointer");
  }
  if (!param_grads) {
    if (dinp == nullptr || N == 0) return absl::OkStatus();
    LayerNormBackwardRowKernel<<<RowBlocks(N), kRowsPerBlock * kWarp, 0, stream>>>(
        dinp, nullptr, nullptr, dout, inp, gamma, N, C, eps);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }

  // The parameter gradients need every row's statistics: the row kernel leaves them in
  // stream-ordered scratch for the column kernel. With N == 0 the sums are zero and no row
  // is read.
  float* stats = nullptr;
  if (N > 0) {
    CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&stats),
                                         static_cast<size_t>(2 * N) * sizeof(float), stream));
    LayerNormBackwardRowKernel<<<RowBlocks(N), kRowsPerBlock * kWarp, 0, stream>>>(
        dinp, stats, stats + N, dout, inp, gamma, N, C, eps);
  }
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    const unsigned tiles = static_cast<unsigned>((C + kTileCols - 1) / kTileCols);
    LayerNormParamGradKernel<<<tiles, kColWarps * kWarp, 0, stream>>>(
        dgamma, dbeta, dout, inp, stats, N > 0 ? stats + N : nullptr, N, C);
    launched = cudaGetLastError();
  }
  const cudaError_t freed = stats != nullptr ? cudaFreeAsync(stats, stream) : cudaSuccess;
  CUDA_RETURN_IF_ERROR(launched);
  CUDA_RETURN_IF_ERROR(freed);
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
