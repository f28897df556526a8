#include "kernels/cuda/convert.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cstdint>

#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

__device__ __forceinline__ void Store(__nv_bfloat16* p, float x) { *p = __float2bfloat16(x); }
// fp16 saturates: a finite value beyond its largest (65504) becomes that, not infinity, so a
// stray large input costs precision, not the whole result. NaN and infinities stay what they are.
__device__ __forceinline__ void Store(__half* p, float x) {
  constexpr float kHalfMax = 65504.0f;
  if (isfinite(x)) x = fminf(fmaxf(x, -kHalfMax), kHalfMax);
  *p = __float2half(x);
}
__device__ __forceinline__ void Store(float* p, float x) { *p = x; }
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

// Four elements a thread per step: one 16-byte load, one 8-byte store (in 16- and 8-byte
// aligned, n a multiple of 4).
template <typename H>
__global__ void To16x4Kernel(H* out, const float* in, int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4;
       i += stride) {
    const float4 v = reinterpret_cast<const float4*>(in)[i];
    H h[4];
    Store(h + 0, v.x);
    Store(h + 1, v.y);
    Store(h + 2, v.z);
    Store(h + 3, v.w);
    reinterpret_cast<uint2*>(out)[i] = *reinterpret_cast<const uint2*>(h);
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

// One thread per output element of (T, B, C), reading in (B, T, C): runs of C stay contiguous
// on both sides.
template <typename Out>
__global__ void TimeMajorKernel(Out* out, const float* in, int64_t B, int64_t T, int64_t C) {
  const int64_t n = B * T * C, stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const int64_t t = i / (B * C), b = (i / C) % B, c = i % C;
    Store(out + i, in[(b * T + t) * C + c]);
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
  const bool vector = n % 4 == 0 && reinterpret_cast<uintptr_t>(in) % 16 == 0 &&
                      reinterpret_cast<uintptr_t>(out) % 8 == 0;
  if (type == Storage16::kBf16) {
    auto* to = static_cast<__nv_bfloat16*>(out);
    if (vector) {
      To16x4Kernel<<<Blocks(n / 4), kThreads, 0, stream>>>(to, in, n / 4);
    } else {
      To16Kernel<<<Blocks(n), kThreads, 0, stream>>>(to, in, n);
    }
  } else {
    auto* to = static_cast<__half*>(out);
    if (vector) {
      To16x4Kernel<<<Blocks(n / 4), kThreads, 0, stream>>>(to, in, n / 4);
    } else {
      To16Kernel<<<Blocks(n), kThreads, 0, stream>>>(to, in, n);
    }
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status ToTimeMajor(void* out, const float* in, int64_t B, int64_t T, int64_t C,
                         std::optional<Storage16> type, cudaStream_t stream) {
  if (B < 0 || T < 0 || C < 0) return absl::InvalidArgumentError("ToTimeMajor: negative size");
  const int64_t n = B * T * C;
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || in == nullptr) {
    return absl::InvalidArgumentError("ToTimeMajor: null pointer");
  }
  if (!type.has_value()) {
    TimeMajorKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<float*>(out), in, B, T, C);
  } else if (*type == Storage16::kBf16) {
    TimeMajorKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__nv_bfloat16*>(out), in, B, T,
                                                        C);
  } else {
    TimeMajorKernel<<<Blocks(n), kThreads, 0, stream>>>(static_cast<__half*>(out), in, B, T, C);
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
