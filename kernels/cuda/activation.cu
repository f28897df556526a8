#include "kernels/cuda/activation.h"

#include <algorithm>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// The kernels are templated on the storage type T and compute in float, so bf16 activations
// need only new launchers.

constexpr float kInvSqrt2 = 0.707106781186547524f;
constexpr float kInvSqrt2Pi = 0.398942280401432678f;
constexpr float kSqrt2OverPi = 0.797884560802865356f;
constexpr float kGeluCubic = 0.044715f;

// Phi(x) = 0.5 erfc(-x / sqrt 2) rather than 0.5 (1 + erf(x / sqrt 2)): the same value, but
// without the cancellation of 1 + erf for negative x, so it keeps float's relative accuracy
// where the reference (in double) is tiny.
__device__ __forceinline__ float NormalCdf(float x) { return 0.5f * erfcf(-x * kInvSqrt2); }

struct GeluErfForwardOp {
  __device__ float operator()(float x) const { return x * NormalCdf(x); }
};

struct GeluErfBackwardOp {
  // d/dx x Phi(x) = Phi(x) + x phi(x)
  __device__ float operator()(float dout, float x) const {
    return dout * (NormalCdf(x) + x * kInvSqrt2Pi * expf(-0.5f * x * x));
  }
};

// 0.5 (1 + tanh(u)) = sigmoid(2u): written as a sigmoid, again to avoid cancelling 1 + tanh.
struct GeluTanhForwardOp {
  __device__ float operator()(float x) const {
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    return x / (1.0f + expf(-2.0f * u));
  }
};

struct GeluTanhBackwardOp {
  // With s = sigmoid(2u): d/dx x s = s + x * 2 s (1 - s) * u', and s (1 - s) = e s^2 for
  // e = exp(-2u), which stays accurate where s rounds to 1.
  __device__ float operator()(float dout, float x) const {
    const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
    const float e = expf(-2.0f * u);
    const float s = 1.0f / (1.0f + e);
    const float du_dx = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return dout * (s + 2.0f * x * (e * s * s) * du_dx);
  }
};

// As std::max(x, 0.0f): NaN and -0 pass through unchanged.
struct ReluForwardOp {
  __device__ float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};

struct ReluBackwardOp {
  __device__ float operator()(float dout, float x) const { return x > 0.0f ? dout : 0.0f; }
};

struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};

struct MultiplyOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};

struct ScaleOp {
  float factor;
  __device__ float operator()(float x) const { return x * factor; }
};

// kVec elements moved as one 16-byte (for float, kVec = 4) access.
template <typename T, int kVec>
struct alignas(sizeof(T) * kVec) Pack {
  T v[kVec];
};

// out[i] = op(a[i]). With kVec > 1 every pointer is 16-byte aligned (the launcher checks);
// the last n % kVec elements go one at a time. Each element is read and written by the same
// thread, so out may alias a.
template <int kVec, typename T, typename Op>
__global__ void Map1Kernel(T* out, const T* a, int64_t n, Op op) {
  using P = Pack<T, kVec>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / kVec;
  for (int64_t p = first; p < packs; p += stride) {
    const P x = reinterpret_cast<const P*>(a)[p];
    P y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) y.v[k] = static_cast<T>(op(static_cast<float>(x.v[k])));
    reinterpret_cast<P*>(out)[p] = y;
  }
  for (int64_t i = packs * kVec + first; i < n; i += stride) {
    out[i] = static_cast<T>(op(static_cast<float>(a[i])));
  }
}

// out[i] = op(a[i], b[i]); out may alias a or b.
template <int kVec, typename T, typename Op>
__global__ void Map2Kernel(T* out, const T* a, const T* b, int64_t n, Op op) {
  using P = Pack<T, kVec>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t packs = n / kVec;
  for (int64_t p = first; p < packs; p += stride) {
    const P x = reinterpret_cast<const P*>(a)[p];
    const P z = reinterpret_cast<const P*>(b)[p];
    P y;
#pragma unroll
    for (int k = 0; k < kVec; ++k) {
      y.v[k] = static_cast<T>(op(static_cast<float>(x.v[k]), static_cast<float>(z.v[k])));
    }
    reinterpret_cast<P*>(out)[p] = y;
  }
  for (int64_t i = packs * kVec + first; i < n; i += stride) {
    out[i] = static_cast<T>(op(static_cast<float>(a[i]), static_cast<float>(b[i])));
  }
}

}  // namespace

// --- launchers

namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 65535;
constexpr int kFloatVec = 4;  // 16 bytes of float

bool Aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

unsigned BlocksFor(int64_t units) {
  return static_cast<unsigned>(std::min<int64_t>((units + kThreads - 1) / kThreads, kMaxBlocks));
}

absl::Status CheckSize(const char* name, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": n must be >= 0, got ", n));
  return absl::OkStatus();
}

template <typename Op>
absl::Status LaunchMap1(const char* name, float* out, const float* a, int64_t n, Op op,
                        cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize(name, n));
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || a == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null pointer"));
  }
  if (Aligned16(out) && Aligned16(a)) {
    Map1Kernel<kFloatVec>
        <<<BlocksFor((n + kFloatVec - 1) / kFloatVec), kThreads, 0, stream>>>(out, a, n, op);
  } else {
    Map1Kernel<1><<<BlocksFor(n), kThreads, 0, stream>>>(out, a, n, op);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename Op>
absl::Status LaunchMap2(const char* name, float* out, const float* a, const float* b, int64_t n,
                        Op op, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize(name, n));
  if (n == 0) return absl::OkStatus();
  if (out == nullptr || a == nullptr || b == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null pointer"));
  }
  if (Aligned16(out) && Aligned16(a) && Aligned16(b)) {
    Map2Kernel<kFloatVec>
        <<<BlocksFor((n + kFloatVec - 1) / kFloatVec), kThreads, 0, stream>>>(out, a, b, n, op);
  } else {
    Map2Kernel<1><<<BlocksFor(n), kThreads, 0, stream>>>(out, a, b, n, op);
  }
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

absl::Status GeluForward(float* out, const float* inp, int64_t n, ref::GeluForm form,
                         cudaStream_t stream) {
  if (form == ref::GeluForm::kErf) {
    return LaunchMap1("GeluForward", out, inp, n, GeluErfForwardOp{}, stream);
  }
  return LaunchMap1("GeluForward", out, inp, n, GeluTanhForwardOp{}, stream);
}

absl::Status GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                          ref::GeluForm form, cudaStream_t stream) {
  if (form == ref::GeluForm::kErf) {
    return LaunchMap2("GeluBackward", dinp, dout, inp, n, GeluErfBackwardOp{}, stream);
  }
  return LaunchMap2("GeluBackward", dinp, dout, inp, n, GeluTanhBackwardOp{}, stream);
}

absl::Status ReluForward(float* out, const float* inp, int64_t n, cudaStream_t stream) {
  return LaunchMap1("ReluForward", out, inp, n, ReluForwardOp{}, stream);
}

absl::Status ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                          cudaStream_t stream) {
  return LaunchMap2("ReluBackward", dinp, dout, inp, n, ReluBackwardOp{}, stream);
}

absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             cudaStream_t stream) {
  return LaunchMap2("ResidualForward", out, a, b, n, AddOp{}, stream);
}

absl::Status Scale(float* x, int64_t n, float factor, cudaStream_t stream) {
  return LaunchMap1("Scale", x, x, n, ScaleOp{factor}, stream);
}

absl::Status MultiplyInto(float* out, const float* a, const float* b, int64_t n,
                          cudaStream_t stream) {
  return LaunchMap2("MultiplyInto", out, a, b, n, MultiplyOp{}, stream);
}

}  // namespace forecastd::cuda
