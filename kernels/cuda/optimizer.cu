#include "kernels/cuda/optimizer.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// The updates follow the reference expression by expression in double. Products go through
// __dmul_rn, which the compiler never fuses into an FMA, so every step rounds exactly as the
// host's does and the stored floats match the reference bit for bit.

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ __forceinline__ double Mul(double a, double b) { return __dmul_rn(a, b); }

struct SgdArgs {
  double lr;
  double momentum;
  double one_minus_dampening;
  double weight_decay;
  bool use_momentum;
  bool nesterov;
  bool first_step;
};

// One element of an SGD step: param, velocity (when momentum is used) and grad at i.
struct SgdElement {
  SgdArgs a;
  __device__ __forceinline__ void operator()(float& param, float& velocity, float grad) const {
    const double p = param;
    double g = static_cast<double>(grad) + Mul(a.weight_decay, p);
    if (a.use_momentum) {
      const double buf_new =
          a.first_step ? g : Mul(a.momentum, velocity) + Mul(a.one_minus_dampening, g);
      const float buf = static_cast<float>(buf_new);
      velocity = buf;
      g = a.nesterov ? g + Mul(a.momentum, buf) : static_cast<double>(buf);
    }
    param = static_cast<float>(p - Mul(a.lr, g));
  }
};

struct AdamArgs {
  double beta1, one_minus_beta1;
  double beta2, one_minus_beta2;
  double eps;
  double weight_decay;
  double decay_factor;  // 1 - lr * weight_decay, for AdamW
  bool decoupled;
  double step_size;              // lr / (1 - beta1^t)
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

// One element of an Adam(W) step: param, m, v and grad at i.
struct AdamElement {
  AdamArgs a;
  __device__ __forceinline__ void operator()(float& param, float& m, float& v, float grad) const {
    double p = param;
    double g = grad;
    if (a.decoupled) {
      p = Mul(p, a.decay_factor);
    } else {
      g = g + Mul(a.weight_decay, p);
    }
    const float m_new = static_cast<float>(Mul(a.beta1, m) + Mul(a.one_minus_beta1, g));
    const float v_new = static_cast<float>(Mul(a.beta2, v) + Mul(Mul(a.one_minus_beta2, g), g));
    m = m_new;
    v = v_new;
    const double denom = sqrt(static_cast<double>(v_new)) / a.bias_correction2_sqrt + a.eps;
    param = static_cast<float>(p - Mul(a.step_size, m_new) / denom);
  }
};

// An update is memory-bound: every element reads and writes up to three arrays and reads the
// gradient. The arrays of one call share their alignment (ranges of one arena), so after a
// head of at most three elements they are read and written as float4, four elements a thread;
// the head and the tail (n - head not a multiple of 4) go one element at a time. Each element's
// arithmetic is the same either way.
//   kStates: the arrays beside param updated with it (0: plain SGD, 1: momentum, 2: Adam's m, v)
template <int kStates, typename Element>
__global__ void UpdateKernel(Element element, float* param, float* s0, float* s1, const float* grad,
                             int64_t n, int64_t head) {
  const int64_t quads = (n - head) / 4;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const auto one = [&](int64_t i) {
    float unused = 0.0f;
    float& a = kStates >= 1 ? s0[i] : unused;
    if constexpr (kStates == 2) {
      element(param[i], a, s1[i], grad[i]);
    } else {
      element(param[i], a, grad[i]);
    }
  };
  for (int64_t q = tid; q < quads; q += stride) {
    const int64_t i = head + 4 * q;
    float4 p = *reinterpret_cast<const float4*>(param + i);
    const float4 g = *reinterpret_cast<const float4*>(grad + i);
    float4 a = kStates >= 1 ? *reinterpret_cast<const float4*>(s0 + i) : float4{};
    float4 b = kStates == 2 ? *reinterpret_cast<const float4*>(s1 + i) : float4{};
    if constexpr (kStates == 2) {
      element(p.x, a.x, b.x, g.x);
      element(p.y, a.y, b.y, g.y);
      element(p.z, a.z, b.z, g.z);
      element(p.w, a.w, b.w, g.w);
      *reinterpret_cast<float4*>(s1 + i) = b;
    } else {
      element(p.x, a.x, g.x);
      element(p.y, a.y, g.y);
      element(p.z, a.z, g.z);
      element(p.w, a.w, g.w);
    }
    *reinterpret_cast<float4*>(param + i) = p;
    if (kStates >= 1) *reinterpret_cast<float4*>(s0 + i) = a;
  }
  // The head (all of n where the arrays' alignments differ) and the tail (at most 3 elements).
  for (int64_t i = tid; i < head; i += stride) one(i);
  const int64_t tail_from = head + 4 * quads;
  if (tid < n - tail_from) one(tail_from + tid);
}

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

// The block's sum of squares: to partials[blockIdx.x], or, when partials is null (a one-block
// grid), rounded straight into out[0].
__global__ void __launch_bounds__(kThreads)
    SumSquaresKernel(double* partials, float* out, const float* grad, int64_t n) {
  double sum = 0.0;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    const double g = grad[i];
    sum += g * g;
  }
  const double block_sum = BlockSum(sum);
  if (threadIdx.x == 0) {
    if (partials != nullptr) {
      partials[blockIdx.x] = block_sum;
    } else {
      out[0] = static_cast<float>(block_sum);
    }
  }
}

__global__ void __launch_bounds__(kThreads)
    FinalizeSumKernel(float* out, const double* partials, int count) {
  double sum = 0.0;
  for (int i = threadIdx.x; i < count; i += blockDim.x) sum += partials[i];
  const double total = BlockSum(sum);
  if (threadIdx.x == 0) out[0] = static_cast<float>(total);
}

// Every thread derives the scale from *norm_sq (one cached load) in float as PyTorch holds
// the coefficient; nothing is written when it is 1.
__global__ void ScaleByClipKernel(float* grad, int64_t n, const float* norm_sq, double max_norm) {
  const double norm = sqrt(static_cast<double>(*norm_sq));
  const float scale = static_cast<float>(fmin(1.0, max_norm / (norm + 1e-6)));
  if (!(scale < 1.0f)) return;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += stride) {
    grad[i] *= scale;
  }
}

}  // namespace

// --- launchers

namespace {

unsigned ElementwiseBlocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, 65535));
}

// UpdateKernel's head: the elements before param + head is 16-byte aligned, or n when the
// arrays (the non-null ones) are not aligned alike and go one element at a time.
int64_t UpdateHead(int64_t n, const float* param, const float* s0, const float* s1,
                   const float* grad) {
  constexpr uintptr_t kVector = 16;
  const uintptr_t offset = reinterpret_cast<uintptr_t>(param) % kVector;
  for (const float* array : {s0, s1, grad}) {
    if (array != nullptr && reinterpret_cast<uintptr_t>(array) % kVector != offset) return n;
  }
  if (offset % sizeof(float) != 0) return n;
  return std::min<int64_t>(n, static_cast<int64_t>((kVector - offset) % kVector / sizeof(float)));
}

template <int kStates, typename Element>
absl::Status LaunchUpdate(const Element& element, float* param, float* s0, float* s1,
                          const float* grad, int64_t n, cudaStream_t stream) {
  const int64_t head = UpdateHead(n, param, s0, s1, grad);
  const int64_t threads = std::max<int64_t>({(n - head) / 4, head, 1});
  UpdateKernel<kStates>
      <<<ElementwiseBlocks(threads), kThreads, 0, stream>>>(element, param, s0, s1, grad, n, head);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status CheckSize(const char* name, int64_t n) {
  if (n < 0) return absl::InvalidArgumentError(absl::StrCat(name, ": n must be >= 0, got ", n));
  return absl::OkStatus();
}

}  // namespace

absl::Status SgdUpdate(float* param, float* velocity, const float* grad, int64_t n,
                       const ref::SgdHyper& hyper, bool first_step, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize("SgdUpdate", n));
  if (n == 0) return absl::OkStatus();
  const bool use_momentum = hyper.momentum != 0.0f;
  if (param == nullptr || grad == nullptr || (use_momentum && velocity == nullptr)) {
    return absl::InvalidArgumentError("SgdUpdate: null pointer");
  }
  const SgdArgs args{hyper.lr,           hyper.momentum, 1.0 - static_cast<double>(hyper.dampening),
                     hyper.weight_decay, use_momentum,   hyper.nesterov,
                     first_step};
  if (use_momentum) {
    return LaunchUpdate<1>(SgdElement{args}, param, velocity, nullptr, grad, n, stream);
  }
  return LaunchUpdate<0>(SgdElement{args}, param, nullptr, nullptr, grad, n, stream);
}

absl::Status AdamUpdate(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                        const ref::AdamHyper& hyper, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize("AdamUpdate", n));
  if (t < 1) {
    return absl::InvalidArgumentError(absl::StrCat("AdamUpdate: step t must be >= 1, got ", t));
  }
  if (n == 0) return absl::OkStatus();
  if (param == nullptr || m == nullptr || v == nullptr || grad == nullptr) {
    return absl::InvalidArgumentError("AdamUpdate: null pointer");
  }
  // The step-wide constants, computed on the host exactly as the reference computes them.
  const double lr = hyper.lr;
  const double beta1 = hyper.beta1;
  const double beta2 = hyper.beta2;
  const double wd = hyper.weight_decay;
  const AdamArgs args{beta1,
                      1.0 - beta1,
                      beta2,
                      1.0 - beta2,
                      hyper.eps,
                      wd,
                      1.0 - lr * wd,
                      hyper.decoupled_weight_decay,
                      lr / (1.0 - std::pow(beta1, static_cast<double>(t))),
                      std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)))};
  return LaunchUpdate<2>(AdamElement{args}, param, m, v, grad, n, stream);
}

absl::Status GradNormSquared(float* out, const float* grad, int64_t n, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize("GradNormSquared", n));
  if (out == nullptr || (n > 0 && grad == nullptr)) {
    return absl::InvalidArgumentError("GradNormSquared: null pointer");
  }
  // At least 16 elements a thread before a second block is worth its partial; the grid
  // depends on n alone, so the order of the sum does too. n == 0 writes 0.
  constexpr int64_t kElementsPerBlock = 16 * kThreads;
  constexpr int64_t kMaxBlocks = 1024;
  const int blocks = static_cast<int>(std::max<int64_t>(
      1, std::min<int64_t>((n + kElementsPerBlock - 1) / kElementsPerBlock, kMaxBlocks)));
  if (blocks == 1) {
    SumSquaresKernel<<<1, kThreads, 0, stream>>>(nullptr, out, grad, n);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  double* partials = nullptr;
  CUDA_RETURN_IF_ERROR(cudaMallocAsync(reinterpret_cast<void**>(&partials),
                                       static_cast<size_t>(blocks) * sizeof(double), stream));
  SumSquaresKernel<<<blocks, kThreads, 0, stream>>>(partials, out, grad, n);
  cudaError_t launched = cudaGetLastError();
  if (launched == cudaSuccess) {
    FinalizeSumKernel<<<1, kThreads, 0, stream>>>(out, partials, blocks);
    launched = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(partials, stream);
  CUDA_RETURN_IF_ERROR(launched);
  CUDA_RETURN_IF_ERROR(freed);
  return absl::OkStatus();
}

absl::Status ScaleByClip(float* grad, int64_t n, const float* norm_sq, float max_norm,
                         cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSize("ScaleByClip", n));
  if (n == 0) return absl::OkStatus();
  if (grad == nullptr || norm_sq == nullptr) {
    return absl::InvalidArgumentError("ScaleByClip: null pointer");
  }
  ScaleByClipKernel<<<ElementwiseBlocks(n), kThreads, 0, stream>>>(grad, n, norm_sq, max_norm);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
