#include "kernels/cuda/loss.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

// The block's sum of x, valid in thread 0; every thread must call it. The order of additions
// depends only on blockDim, so the result is reproducible.
__device__ double BlockSum(double x) {
  __shared__ double warp_sums[kThreads / kWarp];
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) x += __shfl_xor_sync(kFullMask, x, offset);
  const int warp = threadIdx.x / kWarp;
  if (threadIdx.x % kWarp == 0) warp_sums[warp] = x;
  __syncthreads();
  double total = 0.0;
  if (threadIdx.x == 0) {
    for (int w = 0; w < kThreads / kWarp; ++w) total += warp_sums[w];
  }
  return total;
}

__device__ __forceinline__ double Sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); }

struct LossArgs {
  ref::LossKind kind;
  double huber_delta;
  const float* quantiles;  // device, (Q)
  int64_t Q;               // 1 unless kQuantile
  double inv_count;
};

// Writes dpred for its elements and the block's loss sum: to partials[blockIdx.x], or, when
// partials is null (a one-block grid), the mean straight into loss[0].
__global__ void __launch_bounds__(kThreads)
    LossKernel(float* dpred, double* partials, float* loss, const float* pred, const float* target,
               int64_t count, LossArgs args) {
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < count;
       e += stride) {
    double term, grad;
    if (args.kind == ref::LossKind::kQuantile) {
      const int64_t n = e / args.Q;
      const double tau = args.quantiles[e - n * args.Q];
      const double diff = static_cast<double>(target[n]) - static_cast<double>(pred[e]);
      term = fmax(tau * diff, (tau - 1.0) * diff);
      grad = 0.5 - tau;  // the tie, split as torch.maximum splits it
      if (diff > 0.0) grad = -tau;
      if (diff < 0.0) grad = 1.0 - tau;
    } else {
      const double err = static_cast<double>(pred[e]) - static_cast<double>(target[e]);
      switch (args.kind) {
        case ref::LossKind::kMse:
          term = err * err;
          grad = 2.0 * err;
          break;
        case ref::LossKind::kMae:
          term = fabs(err);
          grad = Sign(err);
          break;
        default:  // kHuber; the linear branch takes |e| == delta, as PyTorch's forward does
          if (fabs(err) < args.huber_delta) {
            term = 0.5 * err * err;
            grad = err;
          } else {
            term = args.huber_delta * (fabs(err) - 0.5 * args.huber_delta);
            grad = args.huber_delta * Sign(err);
          }
          break;
      }
    }
    sum += term;
    dpred[e] = static_cast<float>(grad * args.inv_count);
  }
  const double block_sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    if (partials != nullptr) {
      partials[blockIdx.x] = block_sum;
    } else {
      loss[0] = static_cast<float>(block_sum * args.inv_count);
    }
  }
}

// One block: loss[0] = (sum of the partials, in a fixed order) * inv_count.
__global__ void __launch_bounds__(kThreads)
    FinalizeKernel(float* loss, const double* partials, int count, double inv_count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  const double total = BlockSum(sum);
  if (threadIdx.x == 0) loss[0] = static_cast<float>(total * inv_count);
}

}  // namespace

// --- launchers

absl::Status LossForwardBackward(float* dpred, float* loss, const float* pred, const float* target,
                                 int64_t N, const ref::LossSpec& spec, cudaStream_t stream) {
  const bool quantile = spec.kind == ref::LossKind::kQuantile;
  if (N <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("LossForwardBackward: N must be > 0, got ", N));
  }
  if (quantile && (spec.Q <= 0 || spec.quantiles == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "LossForwardBackward: the quantile loss needs Q > 0 quantiles, got Q=", spec.Q));
  }
  if (spec.kind == ref::LossKind::kHuber && !(spec.huber_delta > 0.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("LossForwardBackward: huber_delta must be > 0, got ", spec.huber_delta));
  }
  if (dpred == nullptr || loss == nullptr || pred == nullptr || target == nullptr) {
    return absl::InvalidArgumentError("LossForwardBackward: null pointer");
  }
  const int64_t Q = quantile ? spec.Q : 1;
  const int64_t count = N * Q;
  const LossArgs args{spec.kind, static_cast<double>(spec.huber_delta),
                      quantile ? spec.quantiles : nullptr, Q, 1.0 / static_cast<double>(count)};

  // At least 16 elements a thread before a second block is worth its partial; the grid
  // depends on count alone, so the order of the sum does too.
  constexpr int64_t kElementsPerBlock = 16 * kThreads;
  constexpr int64_t kMaxBlocks = 1024;
  const int blocks = static_cast<int>(
      std::min<int64_t>((count + kElementsPerBlock - 1) / kElementsPerBlock, kMaxBlocks));
  if (blocks == 1) {
    LossKernel<<<1, kThreads, 0, stream>>>(dpred, nullptr, loss, pred, target, count, args);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  double* partials = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&partials),
                                       static_cast<size_t>(blocks) * sizeof(double), stream));
  LossKernel<<<blocks, kThreads, 0, stream>>>(dpred, partials, loss, pred, target, count, args);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    FinalizeKernel<<<1, kThreads, 0, stream>>>(loss, partials, blocks, args.inv_count);
    launched = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(partials, stream);
  CUDA_RETURN_IF_ERROR(launched);
  CUDA_RETURN_IF_ERROR(freed);
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
