#include "kernels/cuda/attention.h"

#include <climits>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// Full attention in training, and in inference over long windows, is the backend's: cuBLAS
// batched GEMMs for q.k and the weighted sums, with the softmax and its backward here
// (AttentionSoftmax*). Here too: inference over short windows (AttentionInferenceKernel, which
// streams keys and values through shared memory) and the last-query variant, one block per
// (b, h), whose weights live in shared memory: dot products over the head size hs are split
// over the lanes of a warp, one key per warp at a time; weighted sums over keys split the hs
// output dimensions over threads (and the keys over groups of threads when hs is small). Every
// sum runs in a fixed order and no two blocks write the same element, so results are
// reproducible. Kernels are templated on the storage type E for bf16 later; the math is float.

constexpr int kWarp = 32;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / kWarp;
constexpr unsigned kFullMask = 0xffffffffu;

struct SumOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct MaxOp {
  __device__ float operator()(float a, float b) const { return fmaxf(a, b); }
};

template <typename Op>
__device__ __forceinline__ float WarpReduce(float x, Op op) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2) {
    x = op(x, __shfl_xor_sync(kFullMask, x, offset));
  }
  return x;
}

// The block's reduction of x, returned to every thread; every thread must call it. The
// trailing barrier lets the next call reuse `partial`.
template <typename Op>
__device__ float BlockReduce(float x, Op op) {
  __shared__ float partial[kWarps];
  x = WarpReduce(x, op);
  if (threadIdx.x % kWarp == 0) partial[threadIdx.x / kWarp] = x;
  __syncthreads();
  float r = partial[0];
#pragma unroll
  for (int w = 1; w < kWarps; ++w) r = op(r, partial[w]);
  __syncthreads();
  return r;
}

// dots[s] = scale * (x . y_s) for s in [0, S), where x (hs) is in shared memory and
// y_s = y + s * y_stride. Warps take keys in turn; lane 0 writes. No barrier.
template <typename E>
__device__ void RowDots(float* dots, const float* x, const E* y, int64_t y_stride, int S, int hs,
                        float scale) {
  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  for (int s = warp; s < S; s += kWarps) {
    const E* ys = y + s * y_stride;
    float dot = 0.0f;
    for (int i = lane; i < hs; i += kWarp) dot += x[i] * static_cast<float>(ys[i]);
    dot = WarpReduce(dot, SumOp{});
    if (lane == 0) dots[s] = dot * scale;
  }
}

// p[0, S) <- softmax(p[0, S)), in place. Starts and ends with a barrier, so the caller's
// writes to p are visible on entry and every thread sees the weights on return.
__device__ void SoftmaxInPlace(float* p, int S) {
  __syncthreads();
  float max = -INFINITY;
  for (int s = threadIdx.x; s < S; s += kThreads) max = fmaxf(max, p[s]);
  max = BlockReduce(max, MaxOp{});
  float sum = 0.0f;
  for (int s = threadIdx.x; s < S; s += kThreads) {
    const float e = expf(p[s] - max);
    p[s] = e;
    sum += e;
  }
  const float inv_sum = 1.0f / BlockReduce(sum, SumOp{});
  for (int s = threadIdx.x; s < S; s += kThreads) p[s] *= inv_sum;
  __syncthreads();
}

// dst[i] = sum_{s < S} w[s] * y_s[i] for i in [0, hs), y_s = y + s * y_stride, w in shared
// memory (visible to all threads on entry). When hs < kThreads, kThreads / hs groups of hs
// threads take keys in turn and their partial sums (in `red`, kThreads floats of shared
// memory) are added in group order. Ends without a barrier when hs >= kThreads.
template <typename E>
__device__ void WeightedRowSum(E* dst, const float* w, const E* y, int64_t y_stride, int S, int hs,
                               float* red) {
  if (hs >= kThreads) {
    for (int i = threadIdx.x; i < hs; i += kThreads) {
      float acc = 0.0f;
      for (int s = 0; s < S; ++s) acc += w[s] * static_cast<float>(y[s * y_stride + i]);
      dst[i] = static_cast<E>(acc);
    }
    return;
  }
  const int groups = kThreads / hs;
  const int g = threadIdx.x / hs;
  const int i = threadIdx.x - g * hs;
  if (g < groups) {
    float acc = 0.0f;
    for (int s = g; s < S; s += groups) acc += w[s] * static_cast<float>(y[s * y_stride + i]);
    red[g * hs + i] = acc;
  }
  __syncthreads();
  if (threadIdx.x < hs) {
    float acc = 0.0f;
    for (int k = 0; k < groups; ++k) acc += red[k * hs + threadIdx.x];
    dst[threadIdx.x] = static_cast<E>(acc);
  }
}

// Inference (no weights saved, no dropout) for head sizes up to 64: one thread per query, a
// block of kStreamQueries queries of one (b, h). The head's keys and values stream through
// shared memory in chunks that every thread of the block reads (a broadcast), and each query
// keeps its scaled q and its output in registers with the online softmax (running maximum and
// sum, rescaled when the maximum grows), so a key is read from global memory once per block
// instead of once per query. Sums over keys run in key order per query: reproducible.
constexpr int kStreamQueries = 64;

template <int HS>
__global__ void __launch_bounds__(kStreamQueries)
    AttentionInferenceKernel(float* out, const float* qkv, int T, int D, int NH, bool causal,
                             float scale) {
  constexpr int kChunk = 4096 / HS;  // keys per chunk: 16 KiB of keys and 16 KiB of values
  __shared__ float keys[kChunk][HS];
  __shared__ float values[kChunk][HS];
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int t = static_cast<int>(blockIdx.x) * kStreamQueries + static_cast<int>(threadIdx.x);
  const int64_t D3 = 3 * static_cast<int64_t>(D);
  const float* qkv_b = qkv + b * T * D3;
  const bool active = t < T;

  float q[HS], acc[HS];
#pragma unroll
  for (int c = 0; c < HS; ++c) {
    q[c] = active ? qkv_b[t * D3 + h * HS + c] * scale : 0.0f;
    acc[c] = 0.0f;
  }
  float running_max = -INFINITY, sum = 0.0f;
  const int last_query = min(T, static_cast<int>(blockIdx.x + 1) * kStreamQueries) - 1;
  const int seen = causal ? last_query + 1 : T;  // keys any query of the block sees
  for (int s0 = 0; s0 < seen; s0 += kChunk) {
    const int n = min(kChunk, seen - s0);
    __syncthreads();  // the previous chunk is no longer read
    for (int i = threadIdx.x; i < n * HS; i += kStreamQueries) {
      const int s = i / HS, c = i % HS;
      const float* row = qkv_b + (s0 + s) * D3 + h * HS + c;
      keys[s][c] = row[D];
      values[s][c] = row[2 * D];
    }
    __syncthreads();
    if (!active) continue;
    const int end = causal ? min(n, t - s0 + 1) : n;
    for (int s = 0; s < end; ++s) {
      float x = 0.0f;
#pragma unroll
      for (int c = 0; c < HS; ++c) x = fmaf(q[c], keys[s][c], x);
      if (x > running_max) {
        const float rescale = expf(running_max - x);  // 0 for the first key
        sum *= rescale;
#pragma unroll
        for (int c = 0; c < HS; ++c) acc[c] *= rescale;
        running_max = x;
      }
      const float p = expf(x - running_max);
      sum += p;
#pragma unroll
      for (int c = 0; c < HS; ++c) acc[c] = fmaf(p, values[s][c], acc[c]);
    }
  }
  if (!active) return;
  const float inv = 1.0f / sum;
  float* out_row = out + (b * T + t) * D + h * HS;
#pragma unroll
  for (int c = 0; c < HS; ++c) out_row[c] = acc[c] * inv;
}

template <int HS>
absl::Status LaunchAttentionInference(float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                                      int64_t NH, bool causal, float scale, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((T + kStreamQueries - 1) / kStreamQueries),
                  static_cast<unsigned>(B * NH));
  AttentionInferenceKernel<HS><<<grid, kStreamQueries, 0, stream>>>(
      out, qkv, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH), causal, scale);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// The softmax around the attention GEMMs (the backend runs q.k and the weighted sums as cuBLAS
// batched GEMMs): one warp per row of the (rows, T) score matrix, row r being query t = r % T
// of its (b, h). Lane l owns columns l, l + 32, ... in every pass, so it only rewrites what it
// read itself; the passes re-read the row, which L1 holds.
constexpr int kRowsPerBlock = kThreads / kWarp;

__global__ void __launch_bounds__(kThreads)
    AttentionSoftmaxKernel(float* att, int64_t rows, int T, bool causal) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;  // whole warps leave together
  const int lane = threadIdx.x % kWarp;
  const int S = causal ? static_cast<int>(r % T) + 1 : T;  // keys this query sees
  float* p = att + r * T;
  float max = -INFINITY;
  for (int s = lane; s < S; s += kWarp) max = fmaxf(max, p[s]);
  max = WarpReduce(max, MaxOp{});
  float sum = 0.0f;
  for (int s = lane; s < S; s += kWarp) sum += expf(p[s] - max);
  const float inv_sum = 1.0f / WarpReduce(sum, SumOp{});
  for (int s = lane; s < T; s += kWarp) p[s] = s < S ? expf(p[s] - max) * inv_sum : 0.0f;
}

// dw holds (dout_t . v_s) per entry on entry and dpre on return:
//   dw'[s] = dw[s] m[s],  rowdot = sum_s att[s] dw'[s],  dpre[s] = att[s] (dw'[s] - rowdot) scale.
__global__ void __launch_bounds__(kThreads)
    AttentionSoftmaxBackwardKernel(float* dw, const float* att, const float* mask, int64_t rows,
                                   int T, float scale) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / kWarp;
  if (r >= rows) return;
  const int lane = threadIdx.x % kWarp;
  float* g = dw + r * T;
  const float* a = att + r * T;
  const float* m = mask != nullptr ? mask + r * T : nullptr;
  float partial = 0.0f;
  for (int s = lane; s < T; s += kWarp) {
    const float gs = m != nullptr ? g[s] * m[s] : g[s];
    g[s] = gs;
    partial += a[s] * gs;
  }
  const float rowdot = WarpReduce(partial, SumOp{});
  for (int s = lane; s < T; s += kWarp) g[s] = a[s] * (g[s] - rowdot) * scale;
}

// One block per (b, h). Shared memory: q (hs) | p (T) | red (kThreads).
template <typename E>
__global__ void __launch_bounds__(kThreads)
    AttentionLastQueryForwardKernel(E* out, const E* q, const E* kv, int T, int D, int NH,
                                    float scale) {
  extern __shared__ float smem[];
  const int hs = D / NH;
  float* qs = smem;
  float* p = qs + hs;
  float* red = p + T;
  const int64_t b = blockIdx.x / NH;
  const int h = static_cast<int>(blockIdx.x % NH);
  const int64_t D2 = 2 * static_cast<int64_t>(D);
  const E* kv_b = kv + b * T * D2;

  for (int i = threadIdx.x; i < hs; i += kThreads) {
    qs[i] = static_cast<float>(q[b * D + h * hs + i]);
  }
  __syncthreads();
  RowDots(p, qs, kv_b + h * hs, D2, T, hs, scale);
  SoftmaxInPlace(p, T);
  WeightedRowSum(out + b * D + h * hs, p, kv_b + D + h * hs, D2, T, hs, red);
}

// One block per (b, h): the weights w recomputed, then
//   dw[s] = dout . v_s,  dpre[s] = w[s] (dw[s] - sum_s' w[s'] dw[s']) scale,
//   dq = sum_s dpre[s] k_s,  dk_s = dpre[s] q,  dv_s = w[s] dout
// (one query, so each dk_s, dv_s is a single product: this block owns them).
// Shared memory: q (hs) | dout (hs) | w (T) | dw, then dpre (T) | red (kThreads).
template <typename E>
__global__ void __launch_bounds__(kThreads)
    AttentionLastQueryBackwardKernel(E* dq, E* dkv, const E* dout, const E* q, const E* kv, int T,
                                     int D, int NH, float scale) {
  extern __shared__ float smem[];
  const int hs = D / NH;
  float* qs = smem;
  float* dy = qs + hs;
  float* w = dy + hs;
  float* dpre = w + T;
  float* red = dpre + T;
  const int64_t b = blockIdx.x / NH;
  const int h = static_cast<int>(blockIdx.x % NH);
  const int64_t D2 = 2 * static_cast<int64_t>(D);
  const E* kv_b = kv + b * T * D2;

  for (int i = threadIdx.x; i < hs; i += kThreads) {
    qs[i] = static_cast<float>(q[b * D + h * hs + i]);
    dy[i] = static_cast<float>(dout[b * D + h * hs + i]);
  }
  __syncthreads();
  RowDots(w, qs, kv_b + h * hs, D2, T, hs, scale);
  SoftmaxInPlace(w, T);
  RowDots(dpre, dy, kv_b + D + h * hs, D2, T, hs, 1.0f);
  __syncthreads();
  float partial = 0.0f;
  for (int s = threadIdx.x; s < T; s += kThreads) partial += w[s] * dpre[s];
  const float rowdot = BlockReduce(partial, SumOp{});
  for (int s = threadIdx.x; s < T; s += kThreads) dpre[s] = w[s] * (dpre[s] - rowdot) * scale;
  __syncthreads();
  WeightedRowSum(dq + b * D + h * hs, dpre, kv_b + h * hs, D2, T, hs, red);

  E* dkv_b = dkv + b * T * D2 + h * hs;
  const int64_t entries = static_cast<int64_t>(T) * hs;
  for (int64_t e = threadIdx.x; e < entries; e += kThreads) {
    const int s = static_cast<int>(e / hs);
    const int i = static_cast<int>(e - static_cast<int64_t>(s) * hs);
    dkv_b[s * D2 + i] = static_cast<E>(dpre[s] * qs[i]);
    dkv_b[s * D2 + D + i] = static_cast<E>(w[s] * dy[i]);
  }
}

}  // namespace

// --- launchers

namespace {

constexpr size_t kDefaultSmemBytes = 48 * 1024;

absl::Status CheckShape(const char* name, int64_t B, int64_t T, int64_t D, int64_t NH) {
  if (B < 0 || T <= 0 || D <= 0 || NH <= 0 || D % NH != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need B >= 0, T > 0 and D a positive multiple of NH > 0, got B=", B,
                     " T=", T, " D=", D, " NH=", NH));
  }
  // Kernels index a row with int and launch B*NH*T blocks on one grid dimension.
  if (3 * D > INT_MAX || B * NH * T > INT_MAX || T * T > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": sizes too large, B=", B, " T=", T, " D=", D, " NH=", NH));
  }
  return absl::OkStatus();
}

// Above the default 48 KB a kernel must opt in to its dynamic shared memory.
template <typename Kernel>
absl::Status AllowSharedMemory(Kernel* kernel, size_t bytes) {
  if (bytes <= kDefaultSmemBytes) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                            static_cast<int>(bytes)));
  return absl::OkStatus();
}

float Scale(int64_t hs) { return static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs))); }

}  // namespace

bool AttentionInferenceSupports(int64_t B, int64_t D, int64_t NH) {
  if (NH <= 0 || D % NH != 0 || B * NH > 65535) return false;  // grid.y holds B * NH
  const int64_t hs = D / NH;
  return hs == 8 || hs == 16 || hs == 32 || hs == 64;
}

absl::Status AttentionInference(float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                                int64_t NH, bool causal, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("AttentionInference", B, T, D, NH));
  if (B == 0) return absl::OkStatus();
  if (out == nullptr || qkv == nullptr) {
    return absl::InvalidArgumentError("AttentionInference: null pointer");
  }
  if (!AttentionInferenceSupports(B, D, NH)) {
    return absl::InvalidArgumentError(
        absl::StrCat("AttentionInference: head size ", D / NH, " with B*NH=", B * NH,
                     " is not supported (head sizes 8, 16, 32, 64; B*NH <= 65535)"));
  }
  const int64_t hs = D / NH;
  switch (hs) {
    case 8:
      return LaunchAttentionInference<8>(out, qkv, B, T, D, NH, causal, Scale(hs), stream);
    case 16:
      return LaunchAttentionInference<16>(out, qkv, B, T, D, NH, causal, Scale(hs), stream);
    case 32:
      return LaunchAttentionInference<32>(out, qkv, B, T, D, NH, causal, Scale(hs), stream);
    default:
      return LaunchAttentionInference<64>(out, qkv, B, T, D, NH, causal, Scale(hs), stream);
  }
}

namespace {

absl::Status CheckRows(const char* name, int64_t rows, int64_t T) {
  if (rows < 0 || T <= 0 || T > INT_MAX || rows / kRowsPerBlock + 1 > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": need rows >= 0 and 0 < T <= INT_MAX, got rows=", rows, " T=", T));
  }
  return absl::OkStatus();
}

unsigned RowBlocks(int64_t rows) {
  return static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock);
}

}  // namespace

absl::Status AttentionSoftmax(float* att, int64_t rows, int64_t T, bool causal,
                              cudaStream_t stream) {
  RETURN_IF_ERROR(CheckRows("AttentionSoftmax", rows, T));
  if (rows == 0) return absl::OkStatus();
  if (att == nullptr) return absl::InvalidArgumentError("AttentionSoftmax: null pointer");
  AttentionSoftmaxKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(att, rows, static_cast<int>(T),
                                                                   causal);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AttentionSoftmaxBackward(float* dw, const float* att, const float* mask, int64_t rows,
                                      int64_t T, float scale, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckRows("AttentionSoftmaxBackward", rows, T));
  if (rows == 0) return absl::OkStatus();
  if (dw == nullptr || att == nullptr) {
    return absl::InvalidArgumentError("AttentionSoftmaxBackward: null pointer");
  }
  AttentionSoftmaxBackwardKernel<<<RowBlocks(rows), kThreads, 0, stream>>>(
      dw, att, mask, rows, static_cast<int>(T), scale);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AttentionLastQueryForward(float* out, const float* q, const float* kv, int64_t B,
                                       int64_t T, int64_t D, int64_t NH, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("AttentionLastQueryForward", B, T, D, NH));
  if (B == 0) return absl::OkStatus();
  if (out == nullptr || q == nullptr || kv == nullptr) {
    return absl::InvalidArgumentError("AttentionLastQueryForward: null pointer");
  }
  const int64_t hs = D / NH;
  const size_t smem = static_cast<size_t>(hs + T + kThreads) * sizeof(float);
  RETURN_IF_ERROR(AllowSharedMemory(AttentionLastQueryForwardKernel<float>, smem));
  AttentionLastQueryForwardKernel<<<static_cast<unsigned>(B * NH), kThreads, smem, stream>>>(
      out, q, kv, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH), Scale(hs));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                        const float* kv, int64_t B, int64_t T, int64_t D,
                                        int64_t NH, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckShape("AttentionLastQueryBackward", B, T, D, NH));
  if (B == 0) return absl::OkStatus();
  if (dq == nullptr || dkv == nullptr || dout == nullptr || q == nullptr || kv == nullptr) {
    return absl::InvalidArgumentError("AttentionLastQueryBackward: null pointer");
  }
  const int64_t hs = D / NH;
  const size_t smem = static_cast<size_t>(2 * hs + 2 * T + kThreads) * sizeof(float);
  RETURN_IF_ERROR(AllowSharedMemory(AttentionLastQueryBackwardKernel<float>, smem));
  AttentionLastQueryBackwardKernel<<<static_cast<unsigned>(B * NH), kThreads, smem, stream>>>(
      dq, dkv, dout, q, kv, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH),
      Scale(hs));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
