#include "kernels/cuda/flash_attention.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels
//
// Fragment layouts of mma.sync.m16n8k16 (PTX ISA, "Matrix Fragments for mma.m16n8k16"), with
// g = lane / 4 and c = lane % 4: A (16 x 16, row-major) registers hold the element pairs
// (g, 2c..2c+1), (g+8, 2c..), (g, 2c+8..), (g+8, 2c+8..); B (16 x 8, column-major) holds
// (2c..2c+1, g), (2c+8.., g); the fp32 accumulator (16 x 8) holds (g, 2c), (g, 2c+1),
// (g+8, 2c), (g+8, 2c+1). The scores' accumulator of two adjacent key groups of 8 is therefore
// already the A fragment of the weights for the second product.

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kBlockQ = 16 * kWarps;  // queries per block, 16 per warp
constexpr int kBlockK = 64;           // keys per tile
constexpr int kPad = 8;  // 16-bit elements added to each shared row: conflict-free fragment reads

template <typename H>
struct Type16;
template <>
struct Type16<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ __nv_bfloat16 From(float x) { return __float2bfloat16(x); }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};
template <>
struct Type16<__half> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    const __half2 v = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
  static __device__ __forceinline__ __half From(float x) { return __float2half(x); }
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

template <typename H>
__device__ __forceinline__ uint32_t Pair(const H* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// The B fragment (k = 2c..2c+1 and 8+2c..8+2c+1, n = g) of the 16 x 8 block of a row-major
// shared tile whose rows are k and columns n, starting at `block` (row stride `stride`):
// ldmatrix.trans transposes as it loads, so no transposed copy of the tile is kept. Lanes 0-15
// address the block's 16 rows; rows are 16-byte aligned (stride and column offsets multiples
// of 8 elements).
template <typename H>
__device__ __forceinline__ void TransposedPair(uint32_t& b0, uint32_t& b1, const H* block,
                                               int stride) {
  const H* row = block + (threadIdx.x % 16) * stride;
  const auto address = static_cast<uint32_t>(__cvta_generic_to_shared(row));
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(b0), "=r"(b1)
               : "r"(address));
}

// The A fragments (HS / 16 k-steps) of the 16 shared rows starting at `rows` (row stride
// `stride`): this warp's queries, keys, values or output gradients.
template <typename H, int HS>
__device__ __forceinline__ void RowFragments(uint32_t (&f)[HS / 16][4], const H* rows, int stride) {
  const int g = (threadIdx.x % 32) / 4, c = threadIdx.x % 4;
  const H* row = rows + g * stride;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    f[kk][0] = Pair(row + kk * 16 + 2 * c);
    f[kk][1] = Pair(row + 8 * stride + kk * 16 + 2 * c);
    f[kk][2] = Pair(row + kk * 16 + 8 + 2 * c);
    f[kk][3] = Pair(row + 8 * stride + kk * 16 + 8 + 2 * c);
  }
}

// Accumulator tiles 2kk and 2kk+1 (16 x 8 each) as the A fragment of k-step kk, rounded to H.
template <typename H, int N>
__device__ __forceinline__ void AccumulatorFragment(uint32_t (&a)[4], const float (&acc)[N][4],
                                                    int kk) {
  a[0] = Type16<H>::Pack(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = Type16<H>::Pack(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = Type16<H>::Pack(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = Type16<H>::Pack(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// acc[j] (16 x 8, j < N) = this warp's 16 rows (A fragments `a`) dotted with rows 8j..8j+7 of
// the row-major shared `tile`: the product with the tile transposed (scores, their gradient).
template <typename H, int HS, int N>
__device__ __forceinline__ void RowProducts(float (&acc)[N][4], const uint32_t (&a)[HS / 16][4],
                                            const H* tile, int stride) {
  const int g = (threadIdx.x % 32) / 4, c = threadIdx.x % 4;
#pragma unroll
  for (int j = 0; j < N; ++j) {
    acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
    const H* row = tile + (j * 8 + g) * stride;
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      Type16<H>::Mma(acc[j], a[kk], Pair(row + kk * 16 + 2 * c), Pair(row + kk * 16 + 8 + 2 * c));
    }
  }
}

// out (16 x HS) += p (16 x 8N, accumulator tiles, rounded to H) @ the first 8N rows of the
// row-major shared `tile` (weights times values, and the gradients that share its form).
template <typename H, int HS, int N>
__device__ __forceinline__ void AccumulateProducts(float (&out)[HS / 8][4], const float (&p)[N][4],
                                                   const H* tile, int stride) {
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    uint32_t a[4];
    AccumulatorFragment<H>(a, p, kk);
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      uint32_t b0, b1;
      TransposedPair(b0, b1, tile + kk * 16 * stride + n * 8, stride);
      Type16<H>::Mma(out[n], a, b0, b1);
    }
  }
}

// rows x HS fp32 values from `src` (row stride `stride` floats; rows at or past `valid` read as
// 0) into 16-bit shared rows. float4 loads, 8-byte stores.
template <typename H, int HS>
__device__ __forceinline__ void LoadTile(H* dst, int dst_stride, const float* src, int64_t stride,
                                         int rows, int valid) {
  for (int i = threadIdx.x; i < rows * HS / 4; i += kThreads) {
    const int r = i / (HS / 4);
    const int c = (i % (HS / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = *reinterpret_cast<const float4*>(src + r * stride + c);
    H h[4] = {Type16<H>::From(v.x), Type16<H>::From(v.y), Type16<H>::From(v.z),
              Type16<H>::From(v.w)};
    *reinterpret_cast<uint2*>(dst + r * dst_stride + c) = *reinterpret_cast<const uint2*>(h);
  }
}

// Block (x = query block, y = b * NH + h); 4 warps, each owning 16 queries.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashAttentionKernel(float* out, float* lse, const float* qkv, int T, int D, int NH,
                         bool causal, float scale_log2) {
  __shared__ __align__(16) H q_s[kBlockQ * (HS + kPad)];
  __shared__ __align__(16) H k_s[kBlockK * (HS + kPad)];
  __shared__ __align__(16) H v_s[kBlockK * (HS + kPad)];
  constexpr int kQStride = HS + kPad;
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const int64_t D3 = 3 * static_cast<int64_t>(D);
  const float* head = qkv + b * T * D3 + h * HS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  LoadTile<H, HS>(q_s, kQStride, head + q0 * D3, D3, kBlockQ, T - q0);
  __syncthreads();
  uint32_t qf[HS / 16][4];
  RowFragments<H, HS>(qf, q_s + warp * 16 * kQStride, kQStride);

  float o[HS / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's share; the quad's sum at the end
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int last_query = min(T, q0 + kBlockQ) - 1;
  const int key_end = causal ? last_query + 1 : T;
  for (int k0 = 0; k0 < key_end; k0 += kBlockK) {
    __syncthreads();  // the previous tile is no longer read
    LoadTile<H, HS>(k_s, kQStride, head + D + k0 * D3, D3, kBlockK, T - k0);
    LoadTile<H, HS>(v_s, kQStride, head + 2 * D + k0 * D3, D3, kBlockK, T - k0);
    __syncthreads();

    float s[kBlockK / 8][4];
    RowProducts<H, HS>(s, qf, k_s, kQStride);
    // Scaled to base 2, masked (keys past T; keys after the query when causal), and the
    // tile's maximum per row over the quad that shares the row.
    float tile_max[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int j = 0; j < kBlockK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + j * 8 + 2 * c + (e & 1);
        const int row = rows[e >> 1];
        float x = s[j][e] * scale_log2;
        if (key >= T || (causal && key > row)) x = -INFINITY;
        s[j][e] = x;
        tile_max[e >> 1] = fmaxf(tile_max[e >> 1], x);
      }
    }
    float correction[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
      tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
      // Every row sees key 0 in the first tile, so the maximum is finite from there on.
      correction[r] = exp2f(row_max[r] - tile_max[r]);
      row_max[r] = tile_max[r];
      row_sum[r] *= correction[r];
    }
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      o[n][0] *= correction[0];
      o[n][1] *= correction[0];
      o[n][2] *= correction[1];
      o[n][3] *= correction[1];
    }
#pragma unroll
    for (int j = 0; j < kBlockK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        s[j][e] = exp2f(s[j][e] - row_max[e >> 1]);
        row_sum[e >> 1] += s[j][e];
      }
    }
    AccumulateProducts<H, HS>(o, s, v_s, kQStride);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= T) continue;
    // The backward pass recomputes each weight as exp2(score * scale_log2 - lse).
    if (lse != nullptr && c == 0) lse[bh * T + rows[r]] = row_max[r] + log2f(row_sum[r]);
    const float inv = 1.0f / row_sum[r];
    float* out_row = out + (b * T + rows[r]) * D + h * HS + 2 * c;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<float2*>(out_row + n * 8) =
          make_float2(o[n][2 * r] * inv, o[n][2 * r + 1] * inv);
    }
  }
}

template <typename H, int HS>
absl::Status Launch(float* out, float* lse, const float* qkv, int64_t B, int64_t T, int64_t D,
                    int64_t NH, bool causal, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((T + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(B * NH));
  const float scale_log2 =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)) / std::log(2.0));
  FlashAttentionKernel<H, HS>
      <<<grid, kThreads, 0, stream>>>(out, lse, qkv, static_cast<int>(T), static_cast<int>(D),
                                      static_cast<int>(NH), causal, scale_log2);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

// --- the backward pass (FlashAttention-2's, split in two kernels so that every gradient
// element has one writer and a fixed summation order: no atomics, reproducible results).
// P = exp2(s * scale_log2 - lse) recomputes the forward's weights from its row statistics,
// dP = dO V^T, dS = P (dP - rowdot) with rowdot = sum(dO o O) per query; then
// dV = P^T dO, dK = scale dS^T Q (FlashKeyKernel, one block per 64 keys) and
// dQ = scale dS K (FlashQueryKernel, one block per 64 queries).

// rowdot[bh * T + t] = dout_t . out_t over head h's hs dimensions; one warp per row.
__global__ void __launch_bounds__(kThreads)
    RowDotKernel(float* rowdot, const float* dout, const float* out, int64_t rows, int T, int D,
                 int NH, int hs) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = static_cast<int>(r % T);
  const int64_t bh = r / T;
  const int64_t offset = ((bh / NH) * T + t) * D + (bh % NH) * hs;
  float sum = 0.0f;
  for (int i = lane; i < hs; i += 32) sum += dout[offset + i] * out[offset + i];
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) rowdot[r] = sum;
}

// Block (x = key block, y = b * NH + h); warp w owns keys 16w..16w+15 and accumulates their
// dK and dV over every query block that sees them, with S^T = K Q^T and dP^T = V dO^T computed
// key-major so that P^T and dS^T are A fragments for dV = P^T dO and dK = dS^T Q.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashKeyKernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                   const float* rowdot, int T, int D, int NH, bool causal, float scale_log2,
                   float scale) {
  constexpr int kRowStride = HS + kPad;
  __shared__ __align__(16) H q_s[kBlockQ * kRowStride];   // Q rows: B of S^T and (trans) dK
  __shared__ __align__(16) H do_s[kBlockQ * kRowStride];  // dO rows: B of dP^T and (trans) dV
  __shared__ float lse_s[kBlockQ], rowdot_s[kBlockQ];
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int k0 = static_cast<int>(blockIdx.x) * kBlockK;
  const int64_t D3 = 3 * static_cast<int64_t>(D);
  const float* head = qkv + b * T * D3 + h * HS;
  const float* dhead = dout + b * T * D + h * HS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // This warp's K and V rows as A fragments, staged through q_s and do_s.
  LoadTile<H, HS>(q_s, kRowStride, head + D + k0 * D3, D3, kBlockK, T - k0);
  LoadTile<H, HS>(do_s, kRowStride, head + 2 * D + k0 * D3, D3, kBlockK, T - k0);
  __syncthreads();
  uint32_t kf[HS / 16][4], vf[HS / 16][4];
  RowFragments<H, HS>(kf, q_s + warp * 16 * kRowStride, kRowStride);
  RowFragments<H, HS>(vf, do_s + warp * 16 * kRowStride, kRowStride);

  float dk[HS / 8][4] = {}, dv[HS / 8][4] = {};
  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  // Causal: queries before this key block see none of its keys.
  for (int q0 = causal ? k0 : 0; q0 < T; q0 += kBlockQ) {
    __syncthreads();  // the previous block's tiles (or the K and V staging) are no longer read
    LoadTile<H, HS>(q_s, kRowStride, head + q0 * D3, D3, kBlockQ, T - q0);
    LoadTile<H, HS>(do_s, kRowStride, dhead + q0 * static_cast<int64_t>(D), D, kBlockQ, T - q0);
    for (int i = threadIdx.x; i < kBlockQ; i += kThreads) {
      const bool in = q0 + i < T;
      lse_s[i] = in ? lse[bh * T + q0 + i] : 0.0f;
      rowdot_s[i] = in ? rowdot[bh * T + q0 + i] : 0.0f;
    }
    __syncthreads();

    float st[kBlockQ / 8][4], dpt[kBlockQ / 8][4];
    RowProducts<H, HS>(st, kf, q_s, kRowStride);
    RowProducts<H, HS>(dpt, vf, do_s, kRowStride);
#pragma unroll
    for (int j = 0; j < kBlockQ / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = j * 8 + 2 * c + (e & 1);
        const int query = q0 + qi;
        const int key = keys[e >> 1];
        const bool seen = query < T && key < T && !(causal && key > query);
        const float p = seen ? exp2f(st[j][e] * scale_log2 - lse_s[qi]) : 0.0f;
        st[j][e] = p;
        dpt[j][e] = seen ? p * (dpt[j][e] - rowdot_s[qi]) : 0.0f;
      }
    }
    AccumulateProducts<H, HS>(dv, st, do_s, kRowStride);
    AccumulateProducts<H, HS>(dk, dpt, q_s, kRowStride);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= T) continue;
    float* dk_row = dqkv + (b * T + keys[r]) * D3 + D + h * HS + 2 * c;
    float* dv_row = dk_row + D;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<float2*>(dk_row + n * 8) =
          make_float2(dk[n][2 * r] * scale, dk[n][2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dv_row + n * 8) = make_float2(dv[n][2 * r], dv[n][2 * r + 1]);
    }
  }
}

// Block (x = query block, y = b * NH + h), laid out as the forward: warp w owns queries
// 16w..16w+15 and sums dQ over the key tiles they see.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashQueryKernel(float* dqkv, const float* dout, const float* qkv, const float* lse,
                     const float* rowdot, int T, int D, int NH, bool causal, float scale_log2,
                     float scale) {
  constexpr int kRowStride = HS + kPad;
  __shared__ __align__(16) H k_s[kBlockK * kRowStride];  // K rows: B of S and (trans) dQ
  __shared__ __align__(16) H v_s[kBlockK * kRowStride];  // V rows: B of dP
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const int64_t D3 = 3 * static_cast<int64_t>(D);
  const float* head = qkv + b * T * D3 + h * HS;
  const float* dhead = dout + b * T * D + h * HS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // This warp's Q and dO rows as A fragments, staged through k_s and v_s.
  LoadTile<H, HS>(k_s, kRowStride, head + q0 * D3, D3, kBlockQ, T - q0);
  LoadTile<H, HS>(v_s, kRowStride, dhead + q0 * static_cast<int64_t>(D), D, kBlockQ, T - q0);
  __syncthreads();
  uint32_t qf[HS / 16][4], dof[HS / 16][4];
  RowFragments<H, HS>(qf, k_s + warp * 16 * kRowStride, kRowStride);
  RowFragments<H, HS>(dof, v_s + warp * 16 * kRowStride, kRowStride);

  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float row_lse[2], row_dot[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = rows[r] < T ? lse[bh * T + rows[r]] : 0.0f;
    row_dot[r] = rows[r] < T ? rowdot[bh * T + rows[r]] : 0.0f;
  }
  float dq[HS / 8][4] = {};
  const int key_end = causal ? min(T, q0 + kBlockQ) : T;
  for (int k0 = 0; k0 < key_end; k0 += kBlockK) {
    __syncthreads();
    LoadTile<H, HS>(k_s, kRowStride, head + D + k0 * D3, D3, kBlockK, T - k0);
    LoadTile<H, HS>(v_s, kRowStride, head + 2 * D + k0 * D3, D3, kBlockK, T - k0);
    __syncthreads();
    float s[kBlockK / 8][4], dp[kBlockK / 8][4];
    RowProducts<H, HS>(s, qf, k_s, kRowStride);
    RowProducts<H, HS>(dp, dof, v_s, kRowStride);
#pragma unroll
    for (int j = 0; j < kBlockK / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int key = k0 + j * 8 + 2 * c + (e & 1);
        const int row = rows[e >> 1];
        const bool seen = key < T && row < T && !(causal && key > row);
        const float p = seen ? exp2f(s[j][e] * scale_log2 - row_lse[e >> 1]) : 0.0f;
        s[j][e] = seen ? p * (dp[j][e] - row_dot[e >> 1]) : 0.0f;
      }
    }
    AccumulateProducts<H, HS>(dq, s, k_s, kRowStride);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= T) continue;
    float* dq_row = dqkv + (b * T + rows[r]) * D3 + h * HS + 2 * c;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<float2*>(dq_row + n * 8) =
          make_float2(dq[n][2 * r] * scale, dq[n][2 * r + 1] * scale);
    }
  }
}

template <typename H, int HS>
absl::Status LaunchBackward(float* dqkv, float* rowdot, const float* dout, const float* qkv,
                            const float* out, const float* lse, int64_t B, int64_t T, int64_t D,
                            int64_t NH, bool causal, cudaStream_t stream) {
  const int64_t rows = B * NH * T;
  RowDotKernel<<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
      rowdot, dout, out, rows, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH), HS);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const double scale = 1.0 / std::sqrt(static_cast<double>(HS));
  const float scale_log2 = static_cast<float>(scale / std::log(2.0));
  const dim3 key_grid(static_cast<unsigned>((T + kBlockK - 1) / kBlockK),
                      static_cast<unsigned>(B * NH));
  FlashKeyKernel<H, HS><<<key_grid, kThreads, 0, stream>>>(
      dqkv, dout, qkv, lse, rowdot, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH),
      causal, scale_log2, static_cast<float>(scale));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const dim3 query_grid(static_cast<unsigned>((T + kBlockQ - 1) / kBlockQ),
                        static_cast<unsigned>(B * NH));
  FlashQueryKernel<H, HS><<<query_grid, kThreads, 0, stream>>>(
      dqkv, dout, qkv, lse, rowdot, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH),
      causal, scale_log2, static_cast<float>(scale));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename H>
absl::Status ForwardFor(int64_t hs, float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                        int64_t D, int64_t NH, bool causal, cudaStream_t stream) {
  if (hs == 16) return Launch<H, 16>(out, lse, qkv, B, T, D, NH, causal, stream);
  if (hs == 32) return Launch<H, 32>(out, lse, qkv, B, T, D, NH, causal, stream);
  return Launch<H, 64>(out, lse, qkv, B, T, D, NH, causal, stream);
}

template <typename H>
absl::Status BackwardFor(int64_t hs, float* dqkv, float* rowdot, const float* dout,
                         const float* qkv, const float* out, const float* lse, int64_t B, int64_t T,
                         int64_t D, int64_t NH, bool causal, cudaStream_t stream) {
  if (hs == 16) {
    return LaunchBackward<H, 16>(dqkv, rowdot, dout, qkv, out, lse, B, T, D, NH, causal, stream);
  }
  if (hs == 32) {
    return LaunchBackward<H, 32>(dqkv, rowdot, dout, qkv, out, lse, B, T, D, NH, causal, stream);
  }
  return LaunchBackward<H, 64>(dqkv, rowdot, dout, qkv, out, lse, B, T, D, NH, causal, stream);
}

absl::Status CheckFlash(const char* name, const float* out, const float* qkv, int64_t B, int64_t T,
                        int64_t D, int64_t NH) {
  if (B < 0 || T <= 0 || T > INT_MAX / 2 || 3 * D > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad sizes B=", B, " T=", T, " D=", D));
  }
  if (out == nullptr || qkv == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(name, ": null pointer"));
  if (!FlashAttentionSupports(out, qkv, B, D, NH)) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": unsupported B=", B, " D=", D, " NH=", NH,
                     " (head sizes 16, 32, 64; B*NH <= 65535; qkv 16-byte, out 8-byte aligned)"));
  }
  return absl::OkStatus();
}

}  // namespace

// --- launchers

bool FlashAttentionSupports(const float* out, const float* qkv, int64_t B, int64_t D, int64_t NH) {
  if (NH <= 0 || D <= 0 || D % NH != 0 || B * NH > 65535) return false;
  const int64_t hs = D / NH;
  if (hs != 16 && hs != 32 && hs != 64) return false;
  return reinterpret_cast<uintptr_t>(qkv) % 16 == 0 && reinterpret_cast<uintptr_t>(out) % 8 == 0;
}

absl::Status FlashAttentionInference(float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                                     int64_t NH, bool causal, Storage16 type, cudaStream_t stream) {
  return FlashAttentionForward(out, nullptr, qkv, B, T, D, NH, causal, type, stream);
}

absl::Status FlashAttentionForward(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                                   int64_t D, int64_t NH, bool causal, Storage16 type,
                                   cudaStream_t stream) {
  if (B == 0 && T > 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFlash("FlashAttentionForward", out, qkv, B, T, D, NH));
  if (type == Storage16::kBf16) {
    return ForwardFor<__nv_bfloat16>(D / NH, out, lse, qkv, B, T, D, NH, causal, stream);
  }
  return ForwardFor<__half>(D / NH, out, lse, qkv, B, T, D, NH, causal, stream);
}

absl::Status FlashAttentionBackward(float* dqkv, float* rowdot, const float* dout, const float* qkv,
                                    const float* out, const float* lse, int64_t B, int64_t T,
                                    int64_t D, int64_t NH, bool causal, Storage16 type,
                                    cudaStream_t stream) {
  if (B == 0 && T > 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFlash("FlashAttentionBackward", out, qkv, B, T, D, NH));
  if (dqkv == nullptr || rowdot == nullptr || dout == nullptr || lse == nullptr ||
      reinterpret_cast<uintptr_t>(dqkv) % 8 != 0 || reinterpret_cast<uintptr_t>(dout) % 16 != 0) {
    return absl::InvalidArgumentError(
        "FlashAttentionBackward: null or misaligned pointer (dqkv 8-byte, dout 16-byte)");
  }
  if (type == Storage16::kBf16) {
    return BackwardFor<__nv_bfloat16>(D / NH, dqkv, rowdot, dout, qkv, out, lse, B, T, D, NH,
                                      causal, stream);
  }
  return BackwardFor<__half>(D / NH, dqkv, rowdot, dout, qkv, out, lse, B, T, D, NH, causal,
                             stream);
}

}  // namespace forecastd::cuda
