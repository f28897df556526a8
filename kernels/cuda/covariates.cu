#include "kernels/cuda/covariates.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

__global__ void BlockCopyKernel(float* out, const float* inp, float fill, ref::Block3 n,
                                ref::Strides3 o, ref::Strides3 in) {
  const int64_t total = n.n0 * n.n1 * n.n2;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t i2 = i % n.n2, rest = i / n.n2;
    const int64_t i1 = rest % n.n1, i0 = rest / n.n1;
    out[i0 * o.s0 + i1 * o.s1 + i2 * o.s2] =
        inp != nullptr ? inp[i0 * in.s0 + i1 * in.s1 + i2 * in.s2] : fill;
  }
}

__global__ void GatherSeriesKernel(float* out, const float* table, const float* index,
                                   int64_t index_stride, int64_t B, int64_t W, int64_t S) {
  const int64_t total = B * W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total;
       i += step) {
    const int64_t b = i / W, w = i - b * W;
    int64_t s = static_cast<int64_t>(index[b * index_stride]);
    s = s < 0 ? 0 : (s >= S ? S - 1 : s);
    out[i] = table[s * W + w];
  }
}

}  // namespace

absl::Status BlockCopyLaunch(float* out, const float* inp, float fill, const ref::Block3& n,
                             const ref::Strides3& o, const ref::Strides3& in, cudaStream_t stream) {
  if (n.n0 < 0 || n.n1 < 0 || n.n2 < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("BlockCopyLaunch: bad extents ", n.n0, "x", n.n1, "x", n.n2));
  }
  const int64_t total = n.n0 * n.n1 * n.n2;
  if (total == 0) return absl::OkStatus();
  if (out == nullptr) return absl::InvalidArgumentError("BlockCopyLaunch: null output");
  BlockCopyKernel<<<Blocks(total), kThreads, 0, stream>>>(out, inp, fill, n, o, in);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status GatherSeriesLaunch(float* out, const float* table, const float* index,
                                int64_t index_stride, int64_t B, int64_t W, int64_t S,
                                cudaStream_t stream) {
  if (B < 0 || W < 0 || (B > 0 && W > 0 && S <= 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("GatherSeriesLaunch: bad sizes B=", B, " W=", W, " S=", S));
  }
  if (B == 0 || W == 0) return absl::OkStatus();
  if (out == nullptr || table == nullptr || index == nullptr) {
    return absl::InvalidArgumentError("GatherSeriesLaunch: null pointer");
  }
  GatherSeriesKernel<<<Blocks(B * W), kThreads, 0, stream>>>(out, table, index, index_stride, B, W,
                                                             S);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
