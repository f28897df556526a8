#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

__device__ __forceinline__ void Store(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }
__device__ __forceinline__ void Store(__half* p, float x) { *p = __float2half(x); }
__device__ __forceinline__ float Load(const __nv_bfloat16* p) { return __bfloat162float(*p); }
__device__ __forceinline__ float Load(const __half* p) { return __half2float(*p); }

// Grid-stride loops so one launch shape covers any n.
template <typename H>
__global__ void To16Kernel(H* out, const float* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    Store(out + i, in[i]);
  }
}

template <typename H>
__global__ void From16Kernel(float* out, const H* in, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    out[i] = Load(in + i);
  }
}

constexpr int kThreads = 256;

unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

}  // namespace

// --- launchers

absl::Status ConvertTo16(void* out, const float* in, int64_t n, Storage16 type,
                         cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("ConvertTo16: n must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || in == nullptr) {
    return absl::InvalidArgumentError("ConvertTo16: null pointer");
  }
  if (type == Storage16::kBf16) {
    To16Kernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), in, n);
  } else {
    To16Kernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__half*>(out), in, n);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ConvertFrom16(float* out, const void* in, int64_t n, Storage16 type,
                           cudaStream_t stream) {
  if (n < 0) return absl::InvalidArgumentError("ConvertFrom16: n must be >= 0");
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || in == nullptr) {
    return absl::InvalidArgumentError("ConvertFrom16: null pointer");
  }
  if (type == Storage16::kBf16) {
    From16Kernel<<<Blocks(n), kThreads, 0, stream>>>(out, static_cast<const __nv_bfloat16*>(in), n);
  } else {
    From16Kernel<<<Blocks(n), kThreads, 0, stream>>>(out, static_cast<const __half*>(in), n);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
