#include "kernels/cuda/window_scaling.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kWarp = 32;
constexpr unsigned kFullMask = 0xffffffffu;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// --- kernels

// Butterfly sum: every lane ends with the same total, added in the same order on every run.
__device__ __forceinline__ float WarpSum(float x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  return x;
}

// Grid-stride over the B*F outputs, one thread per (b, f) walking t in the reference's order;
// adjacent threads read adjacent features. __dmul_rn keeps e * e from fusing into the sum.
__global__ void WindowStatsKernel(float* center, float* scale, const float* x, int64_t B, int64_t T,
                                  int64_t F, ref::WindowStatistic statistic, float eps) {
  const int64_t n = B * F;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const float* w = x + (i / F) * T * F + i % F;
    if (statistic == ref::WindowStatistic::kLastValue) {
      center[i] = w[(T - 1) * F];
      scale[i] = 1.0f;
      continue;
    }
    double sum = 0.0;
    for (int64_t t = 0; t < T; ++t) sum += static_cast<double>(w[t * F]);
    const float mean = __double2float_rn(__ddiv_rn(sum, static_cast<double>(T)));
    double squares = 0.0;
    for (int64_t t = 0; t < T; ++t) {
      const double e = static_cast<double>(w[t * F]) - static_cast<double>(mean);
      squares = __dadd_rn(squares, __dmul_rn(e, e));
    }
    const float var = __double2float_rn(__ddiv_rn(squares, static_cast<double>(T)));
    center[i] = mean;
    scale[i] = __fsqrt_rn(__fadd_rn(var, eps));
  }
}

// Grid-stride over the B*T*F elements. Each element is read before it is written (xw may be x).
__global__ void ScaleWindowsKernel(float* xw, float* z, const float* x, const float* center,
                                   const float* scale, const float* gamma, const float* beta,
                                   int64_t n, int64_t T, int64_t F) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t f = i % F;
    const int64_t bf = (i / (T * F)) * F + f;
    const float zi = __fdiv_rn(__fsub_rn(x[i], center[bf]), scale[bf]);
    if (z != nullptr) z[i] = zi;
    xw[i] = gamma != nullptr ? __fadd_rn(__fmul_rn(zi, gamma[f]), beta[f]) : zi;
  }
}

// Grid-stride over the B*J*W selected elements.
__global__ void UnscaleTargetKernel(float* out, float* v_out, const float* d, const float* last,
                                    int64_t last_stride, const float* center, const float* scale,
                                    int64_t stats_stride, const float* gamma, const float* beta,
                                    float eps2, int64_t n, int64_t J, int64_t C, int64_t c0,
                                    int64_t W) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t bj = i / W;
    const int64_t b = bj / J;
    const int64_t at = bj * C + c0 + i % W;
    const float shift = last != nullptr ? last[b * last_stride] : 0.0f;
    const float a = __fadd_rn(d[at], shift);
    const float v =
        gamma != nullptr ? __fdiv_rn(__fsub_rn(a, beta[0]), __fadd_rn(gamma[0], eps2)) : a;
    if (v_out != nullptr) v_out[at] = v;
    const float s = scale != nullptr ? scale[b * stats_stride] : 1.0f;
    const float m = center != nullptr ? center[b * stats_stride] : 0.0f;
    out[at] = __fadd_rn(__fmul_rn(v, s), m);
  }
}

// UnscaleTargetBackward's rows: one warp per row b (grid-stride over rows), lane l owning the
// row's elements l, l + 32, ... in (j, c) order. Writes dd and, when dlast is not null, adds
// the row's sum to dlast[b * last_stride].
constexpr int kRowsPerBlock = 8;

__global__ void UnscaleTargetBackwardRowKernel(float* dd, float* dlast, int64_t last_stride,
                                               const float* dout, const float* scale,
                                               int64_t stats_stride, const float* gamma, float eps2,
                                               int64_t B, int64_t J, int64_t C, int64_t c0,
                                               int64_t W) {
  const int lane = threadIdx.x % kWarp;
  const float divisor = gamma != nullptr ? __fadd_rn(gamma[0], eps2) : 1.0f;
  const int64_t row_elements = J * W;
  const int64_t row_stride = static_cast<int64_t>(gridDim.x) * kRowsPerBlock;
  // b is the same for the whole warp, so every lane reaches the shuffles together.
  for (int64_t b = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp; b < B;
       b += row_stride) {
    const float s = scale != nullptr ? scale[b * stats_stride] : 1.0f;
    float row = 0.0f;
    for (int64_t k = lane; k < row_elements; k += kWarp) {
      const int64_t at = (b * J + k / W) * C + c0 + k % W;
      const float g = __fmul_rn(dout[at], s);
      const float da = gamma != nullptr ? __fdiv_rn(g, divisor) : g;
      dd[at] = da;
      row += da;
    }
    if (dlast != nullptr) {
      row = WarpSum(row);
      if (lane == 0) dlast[b * last_stride] += row;
    }
  }
}

// UnscaleTargetBackward's parameter gradients: one block over all B*J*W elements of dd (the
// row kernel's da) and v, thread k summing elements k, k + kSumThreads, ... in order; the
// warps' totals then meet in warp-index order. A single block keeps the sum one pass without
// scratch for per-block partials.
constexpr int kSumThreads = 1024;

__global__ void __launch_bounds__(kSumThreads)
    UnscaleTargetParamGradKernel(float* dgamma, float* dbeta, const float* dd, const float* v,
                                 int64_t n, int64_t C, int64_t c0, int64_t W) {
  __shared__ float dav_part[kSumThreads / kWarp];
  __shared__ float da_part[kSumThreads / kWarp];
  float dav = 0.0f, da_sum = 0.0f;
  for (int64_t k = threadIdx.x; k < n; k += kSumThreads) {
    const int64_t at = (k / W) * C + c0 + k % W;
    const float da = dd[at];
    dav += da * v[at];
    da_sum += da;
  }
  dav = WarpSum(dav);
  da_sum = WarpSum(da_sum);
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  if (lane == 0) {
    dav_part[warp] = dav;
    da_part[warp] = da_sum;
  }
  __syncthreads();
  if (warp == 0) {
    dav = WarpSum(dav_part[lane]);  // kSumThreads / kWarp == kWarp partials
    da_sum = WarpSum(da_part[lane]);
    if (lane == 0) {
      dgamma[0] -= dav;
      dbeta[0] -= da_sum;
    }
  }
}

// ScaleWindowsBackward's column sums, as LayerNormParamGradKernel (normalization.cu): one block
// owns a tile of kTileCols columns over all R rows. Lane l of warp w reads column l % kTileCols
// of rows w * kRowGroups + l / kTileCols + k * kRowsPerStep, so each load instruction covers
// kRowGroups full 32-byte sectors; the partial sums meet in a fixed order (shuffles within the
// warp, then warps in index order through shared memory).
constexpr int kTileCols = 8;
constexpr int kRowGroups = kWarp / kTileCols;
constexpr int kColWarps = 16;
constexpr int kRowsPerStep = kColWarps * kRowGroups;

__global__ void __launch_bounds__(kColWarps* kWarp)
    ScaleWindowsBackwardKernel(float* dgamma, float* dbeta, const float* dxw, const float* z,
                               int64_t R, int64_t F) {
  __shared__ float dgamma_part[kColWarps][kTileCols];
  __shared__ float dbeta_part[kColWarps][kTileCols];
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int64_t f = static_cast<int64_t>(blockIdx.x) * kTileCols + lane % kTileCols;
  float g = 0.0f, s = 0.0f;
  if (f < F) {
#pragma unroll 4
    for (int64_t r = warp * kRowGroups + lane / kTileCols; r < R; r += kRowsPerStep) {
      const float dy = dxw[r * F + f];
      g += dy * z[r * F + f];
      s += dy;
    }
  }
  // Lanes l, l + 8, l + 16, l + 24 share a column: fold them onto lanes 0..7.
#pragma unroll
  for (int offset = kWarp / 2; offset >= kTileCols; offset /= 2) {
    g += __shfl_down_sync(kFullMask, g, offset);
    s += __shfl_down_sync(kFullMask, s, offset);
  }
  if (lane < kTileCols) {
    dgamma_part[warp][lane] = g;
    dbeta_part[warp][lane] = s;
  }
  __syncthreads();
  if (threadIdx.x < kTileCols) {
    const int64_t col = static_cast<int64_t>(blockIdx.x) * kTileCols + threadIdx.x;
    if (col < F) {
      float g_total = 0.0f, s_total = 0.0f;
      for (int w = 0; w < kColWarps; ++w) {
        g_total += dgamma_part[w][threadIdx.x];
        s_total += dbeta_part[w][threadIdx.x];
      }
      dgamma[col] += g_total;
      dbeta[col] += s_total;
    }
  }
}

}  // namespace

// --- launchers

namespace {

// One target's columns [c0, c0 + W) of (B, J, C) rows, and the strides of its per-row values.
absl::Status CheckTargetShape(const char* name, int64_t B, int64_t J, int64_t C, int64_t c0,
                              int64_t W, int64_t last_stride, int64_t stats_stride) {
  if (B < 0 || J < 0 || W < 0 || c0 < 0 || c0 + W > C) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need B, J, W >= 0 and columns [c0, c0 + W) inside C, got B=", B,
                     " J=", J, " C=", C, " c0=", c0, " W=", W));
  }
  if (last_stride < 0 || stats_stride < 0) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": strides must be >= 0, got last_stride=",
                                                   last_stride, " stats_stride=", stats_stride));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status WindowStatsLaunch(float* center, float* scale, const float* x, int64_t B, int64_t T,
                               int64_t F, ref::WindowStatistic statistic, float eps,
                               cudaStream_t stream) {
  if (B < 0 || T < 0 || F < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("WindowStatsLaunch: need B, T, F >= 0, got B=", B, " T=", T, " F=", F));
  }
  if (statistic != ref::WindowStatistic::kMeanStd &&
      statistic != ref::WindowStatistic::kLastValue) {
    return absl::InvalidArgumentError("WindowStatsLaunch: unknown statistic");
  }
  const int64_t n = B * F;
  if (n == 0) return absl::OkStatus();
  // A window of no steps has no statistics (and no last value to read).
  if (T == 0) return absl::InvalidArgumentError("WindowStatsLaunch: T must be > 0");
  if (center == nullptr || scale == nullptr || x == nullptr) {
    return absl::InvalidArgumentError("WindowStatsLaunch: null pointer");
  }
  WindowStatsKernel<<<Blocks(n), kThreads, 0, stream>>>(center, scale, x, B, T, F, statistic, eps);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ScaleWindowsLaunch(float* xw, float* z, const float* x, const float* center,
                                const float* scale, const float* gamma, const float* beta,
                                int64_t B, int64_t T, int64_t F, cudaStream_t stream) {
  if (B < 0 || T < 0 || F < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaleWindowsLaunch: need B, T, F >= 0, got B=", B, " T=", T, " F=", F));
  }
  const int64_t n = B * T * F;
  if (n == 0) return absl::OkStatus();
  if (xw == nullptr || x == nullptr || center == nullptr || scale == nullptr ||
      (gamma != nullptr && beta == nullptr)) {
    return absl::InvalidArgumentError("ScaleWindowsLaunch: null pointer");
  }
  ScaleWindowsKernel<<<Blocks(n), kThreads, 0, stream>>>(xw, z, x, center, scale, gamma, beta, n, T,
                                                         F);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status UnscaleTargetLaunch(float* out, float* v_out, const float* d, const float* last,
                                 int64_t last_stride, const float* center, const float* scale,
                                 int64_t stats_stride, const float* gamma, const float* beta,
                                 float eps2, int64_t B, int64_t J, int64_t C, int64_t c0, int64_t W,
                                 cudaStream_t stream) {
  RETURN_IF_ERROR(
      CheckTargetShape("UnscaleTargetLaunch", B, J, C, c0, W, last_stride, stats_stride));
  const int64_t n = B * J * W;
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || d == nullptr || (gamma != nullptr && beta == nullptr)) {
    return absl::InvalidArgumentError("UnscaleTargetLaunch: null pointer");
  }
  UnscaleTargetKernel<<<Blocks(n), kThreads, 0, stream>>>(out, v_out, d, last, last_stride, center,
                                                          scale, stats_stride, gamma, beta, eps2, n,
                                                          J, C, c0, W);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status UnscaleTargetBackwardLaunch(float* dd, float* dgamma, float* dbeta, float* dlast,
                                         int64_t last_stride, const float* dout, const float* v,
                                         const float* scale, int64_t stats_stride,
                                         const float* gamma, float eps2, int64_t B, int64_t J,
                                         int64_t C, int64_t c0, int64_t W, cudaStream_t stream) {
  RETURN_IF_ERROR(
      CheckTargetShape("UnscaleTargetBackwardLaunch", B, J, C, c0, W, last_stride, stats_stride));
  const int64_t n = B * J * W;
  if (n == 0) return absl::OkStatus();
  if (dd == nullptr || dout == nullptr ||
      (gamma != nullptr && (dgamma == nullptr || dbeta == nullptr || v == nullptr))) {
    return absl::InvalidArgumentError("UnscaleTargetBackwardLaunch: null pointer");
  }
  const unsigned row_blocks =
      static_cast<unsigned>(std::min<int64_t>((B + kRowsPerBlock - 1) / kRowsPerBlock, 65535));
  UnscaleTargetBackwardRowKernel<<<row_blocks, kRowsPerBlock * kWarp, 0, stream>>>(
      dd, dlast, last_stride, dout, scale, stats_stride, gamma, eps2, B, J, C, c0, W);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  if (gamma != nullptr) {
    UnscaleTargetParamGradKernel<<<1, kSumThreads, 0, stream>>>(dgamma, dbeta, dd, v, n, C, c0, W);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
  }
  return absl::OkStatus();
}

absl::Status ScaleWindowsBackwardLaunch(float* dgamma, float* dbeta, const float* dxw,
                                        const float* z, int64_t R, int64_t F, cudaStream_t stream) {
  if (R < 0 || F < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScaleWindowsBackwardLaunch: need R, F >= 0, got R=", R, " F=", F));
  }
  // Over no rows the sums are zero: nothing to add.
  if (R == 0 || F == 0) return absl::OkStatus();
  if (dgamma == nullptr || dbeta == nullptr || dxw == nullptr || z == nullptr) {
    return absl::InvalidArgumentError("ScaleWindowsBackwardLaunch: null pointer");
  }
  const unsigned tiles = static_cast<unsigned>((F + kTileCols - 1) / kTileCols);
  ScaleWindowsBackwardKernel<<<tiles, kColWarps * kWarp, 0, stream>>>(dgamma, dbeta, dxw, z, R, F);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
