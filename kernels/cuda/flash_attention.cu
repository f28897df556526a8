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
// already the A fragment of the weights for the second product. Fragments come out of shared
// memory through ldmatrix (four 8 x 8 matrices per instruction; .trans transposes them).
//
// Every kernel works on one (batch, head): the rows it owns (queries, or keys in the backward's
// key kernel) are staged once and kept as A fragments, and the rows it streams (keys and values,
// or queries and output gradients) come in tiles of kTile through two shared buffers, the next
// tile's cp.async copies in flight while the current one is multiplied.

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kTile = 64;  // streamed rows per tile
constexpr int kPad = 8;    // 16-bit elements added to each shared row: conflict-free ldmatrix

template <typename H>
struct Type16;
template <>
struct Type16<__nv_bfloat16> {
  static __device__ __forceinline__ uint32_t Pack(float lo, float hi) {
    const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<const uint32_t*>(&v);
  }
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
  static __device__ __forceinline__ void Mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0,
                                             uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
        "{%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
  }
};

__device__ __forceinline__ uint32_t SharedAddress(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory without passing through registers; zeros when !valid
// (src is then not read).
__device__ __forceinline__ void CopyAsync16(void* dst, const void* src, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(SharedAddress(dst)),
               "l"(src), "r"(valid ? 16 : 0));
}
// The same for one float.
__device__ __forceinline__ void CopyAsync4(float* dst, const float* src, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(SharedAddress(dst)), "l"(src),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void CommitCopies() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N committed groups of this thread's copies are still in flight.
template <int N>
__device__ __forceinline__ void WaitCopies() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// ldmatrix .x4: lane l gives the shared address of row l % 8 of matrix l / 8; each lane gets
// one register per matrix.
__device__ __forceinline__ void LoadMatrices(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}
__device__ __forceinline__ void LoadMatricesTransposed(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(SharedAddress(row)));
}

// `rows` rows of HS 16-bit values, HS apart from `src` (a head-major operand), into shared rows
// HS + kPad apart, asynchronously; rows at or past `valid` are zeros.
template <typename H, int HS>
__device__ __forceinline__ void LoadRows(H* dst, const H* src, int rows, int valid) {
  constexpr int kChunks = HS / 8;  // 16-byte chunks per row
  for (int i = threadIdx.x; i < rows * kChunks; i += kThreads) {
    const int r = i / kChunks, c = (i % kChunks) * 8;
    const bool in = r < valid;
    CopyAsync16(dst + r * (HS + kPad) + c, src + (in ? r : 0) * HS + c, in);
  }
}

// Rows row0..row0+kTile-1 of two head-major operands (of T rows each) into the shared tiles
// dst[0] and dst[1], asynchronously.
template <typename H, int HS>
__device__ __forceinline__ void LoadTilePair(H (&dst)[2][kTile * (HS + kPad)], const H* a,
                                             const H* b, int row0, int T) {
  LoadRows<H, HS>(dst[0], a + static_cast<int64_t>(row0) * HS, kTile, T - row0);
  LoadRows<H, HS>(dst[1], b + static_cast<int64_t>(row0) * HS, kTile, T - row0);
}

// Iteration t (of n) of a double-buffered stream: once no thread reads the buffer that tile
// t + 1 goes to, starts that tile's copies (load(t + 1)), then waits for tile t's.
template <typename Load>
__device__ __forceinline__ void AdvanceStream(int t, int n, const Load& load) {
  __syncthreads();
  if (t + 1 < n) {
    load(t + 1);
    CommitCopies();
    WaitCopies<1>();
  } else {
    WaitCopies<0>();
  }
  __syncthreads();
}

// The A fragments (HS / 16 k-steps) of M blocks of 16 shared rows from `rows` on.
template <typename H, int HS, int M>
__device__ __forceinline__ void RowFragments(uint32_t (&f)[M][HS / 16][4], const H* rows) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      LoadMatrices(f[m][kk], rows + (m * 16 + lane % 16) * (HS + kPad) + kk * 16 + lane / 16 * 8);
    }
  }
}

// acc[m][j] (16 x 8, j < N) = row block m (A fragments `a`) dotted with rows 8j..8j+7 of the
// shared `tile`: the product with the tile transposed (scores, their gradient).
template <typename H, int HS, int M, int N>
__device__ __forceinline__ void RowProducts(float (&acc)[M][N][4],
                                            const uint32_t (&a)[M][HS / 16][4], const H* tile) {
  static_assert(N % 2 == 0, "row groups come in pairs");
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int j = 0; j < N; ++j) acc[m][j][0] = acc[m][j][1] = acc[m][j][2] = acc[m][j][3] = 0.0f;
  }
#pragma unroll
  for (int j = 0; j < N; j += 2) {
#pragma unroll
    for (int kk = 0; kk < HS / 16; ++kk) {
      // Matrices: rows 8j.. and 8j+8.., each at columns 16kk and 16kk + 8.
      uint32_t b[4];
      LoadMatrices(b, tile + (8 * j + lane % 8 + lane / 16 * 8) * (HS + kPad) + kk * 16 +
                          (lane / 8) % 2 * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        Type16<H>::Mma(acc[m][j], a[m][kk], b[0], b[1]);
        Type16<H>::Mma(acc[m][j + 1], a[m][kk], b[2], b[3]);
      }
    }
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

// out[m] (16 x HS) += p[m] (16 x 8N, accumulator tiles, rounded to H) @ the first 8N rows of the
// shared `tile` (weights times values, and the gradients that share its form).
template <typename H, int HS, int M, int N>
__device__ __forceinline__ void AccumulateProducts(float (&out)[M][HS / 8][4],
                                                   const float (&p)[M][N][4], const H* tile) {
  const int lane = threadIdx.x % 32;
#pragma unroll
  for (int kk = 0; kk < N / 2; ++kk) {
    uint32_t a[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) AccumulatorFragment<H>(a[m], p[m], kk);
#pragma unroll
    for (int n = 0; n < HS / 8; n += 2) {
      // Transposed matrices: rows 16kk.. and 16kk+8.. at columns 8n, then at 8n + 8.
      uint32_t b[4];
      LoadMatricesTransposed(b, tile + (16 * kk + lane % 8 + (lane / 8) % 2 * 8) * (HS + kPad) +
                                    8 * n + lane / 16 * 8);
#pragma unroll
      for (int m = 0; m < M; ++m) {
        Type16<H>::Mma(out[m][n], a[m], b[0], b[1]);
        Type16<H>::Mma(out[m][n + 1], a[m], b[2], b[3]);
      }
    }
  }
}

// qkv (B, T, 3D) fp32 into three head-major planes of 16-bit values, q, k, v, each
// (B, NH, T, hs): one thread per 4 consecutive values.
template <typename H>
__global__ void SplitHeadsKernel(H* planes, const float* qkv, int64_t quads, int T, int D, int hs,
                                 int NH) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i >= quads) return;
  const int64_t e = 4 * i, D3 = 3 * static_cast<int64_t>(D);
  const int64_t row = e / D3;  // b * T + t
  const int col = static_cast<int>(e % D3);
  const int part = col / D, h = (col % D) / hs, d = col % hs;
  const int64_t b = row / T, t = row % T;
  const int64_t plane = static_cast<int64_t>(quads) * 4 / 3;
  const float4 v = *reinterpret_cast<const float4*>(qkv + e);
  H* dst = planes + part * plane + ((b * NH + h) * T + t) * hs + d;
  const uint2 packed = make_uint2(Type16<H>::Pack(v.x, v.y), Type16<H>::Pack(v.z, v.w));
  *reinterpret_cast<uint2*>(dst) = packed;
}

// The forward: block (x = block of kWarps * 16 * M queries, y = b * NH + h); warp w owns queries
// 16Mw..16Mw+16M-1 (M blocks of 16). Writes out (B, T, D), and out_copy and lse when not null.
template <typename H, int HS, int M>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(float* out, float* out_copy, float* lse, const H* planes, int64_t plane,
                       int T, int D, int NH, bool causal, float scale_log2) {
  constexpr int kStride = HS + kPad, kBlockQ = kWarps * 16 * M;
  static_assert(kBlockQ <= 2 * kTile, "the query rows are staged in one stage's two tiles");
  __shared__ __align__(16) H tiles[2][2][kTile * kStride];  // [stage][keys, values]
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const H* q = planes + bh * T * HS;
  const H* k = q + plane;
  const H* v = k + plane;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  const int last_query = min(T, q0 + kBlockQ) - 1;
  const int tiles_n = ((causal ? last_query + 1 : T) + kTile - 1) / kTile;
  H* const q_s = &tiles[1][0][0];  // stage 1 holds the queries until tile 1 loads
  LoadRows<H, HS>(q_s, q + static_cast<int64_t>(q0) * HS, kBlockQ, T - q0);
  LoadTilePair<H, HS>(tiles[0], k, v, 0, T);
  CommitCopies();
  WaitCopies<0>();
  __syncthreads();
  uint32_t qf[M][HS / 16][4];
  RowFragments<H, HS, M>(qf, q_s + warp * 16 * M * kStride);

  float o[M][HS / 8][4] = {};
  float row_max[M][2], row_sum[M][2];  // row_sum: this thread's share; the quad's at the end
  int rows[M][2];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    for (int r = 0; r < 2; ++r) {
      row_max[m][r] = -INFINITY;
      row_sum[m][r] = 0.0f;
      rows[m][r] = q0 + warp * 16 * M + m * 16 + g + 8 * r;
    }
  }
  const int warp_first = q0 + warp * 16 * M;
  for (int t = 0; t < tiles_n; ++t) {
    const int stage = t & 1, k0 = t * kTile;
    // Tile 1 overwrites the staged queries.
    AdvanceStream(t, tiles_n,
                  [&](int next) { LoadTilePair<H, HS>(tiles[next & 1], k, v, next * kTile, T); });
    float s[M][kTile / 8][4];
    RowProducts<H, HS, M>(s, qf, tiles[stage][0]);
    // Scaled to base 2, masked where the tile runs past T or (causal) past a query, and the
    // tile's maximum per row over the quad that shares the row.
    const bool masked = k0 + kTile > T || (causal && k0 + kTile - 1 > warp_first);
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float tile_max[2] = {row_max[m][0], row_max[m][1]};
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          float x = s[m][j][e] * scale_log2;
          if (masked) {
            const int key = k0 + j * 8 + 2 * c + (e & 1);
            if (key >= T || (causal && key > rows[m][e >> 1])) x = -INFINITY;
          }
          s[m][j][e] = x;
          tile_max[e >> 1] = fmaxf(tile_max[e >> 1], x);
        }
      }
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 1));
        tile_max[r] = fmaxf(tile_max[r], __shfl_xor_sync(0xffffffffu, tile_max[r], 2));
        // Every row sees key 0 in the first tile, so the maximum is finite from there on.
        const float correction = exp2f(row_max[m][r] - tile_max[r]);
        row_max[m][r] = tile_max[r];
        row_sum[m][r] *= correction;
#pragma unroll
        for (int n = 0; n < HS / 8; ++n) {
          o[m][n][2 * r] *= correction;
          o[m][n][2 * r + 1] *= correction;
        }
      }
#pragma unroll
      for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          s[m][j][e] = exp2f(s[m][j][e] - row_max[m][e >> 1]);
          row_sum[m][e >> 1] += s[m][j][e];
        }
      }
    }
    AccumulateProducts<H, HS, M>(o, s, tiles[stage][1]);
  }
#pragma unroll
  for (int m = 0; m < M; ++m) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float sum = row_sum[m][r];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int row = rows[m][r];
      if (row >= T) continue;
      // The backward pass recomputes each weight as exp2(score * scale_log2 - lse).
      if (lse != nullptr && c == 0) lse[bh * T + row] = row_max[m][r] + log2f(sum);
      const float inv = 1.0f / sum;
      const int64_t at = (b * T + row) * D + h * HS + 2 * c;
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        const float2 value = make_float2(o[m][n][2 * r] * inv, o[m][n][2 * r + 1] * inv);
        *reinterpret_cast<float2*>(out + at + n * 8) = value;
        if (out_copy != nullptr) *reinterpret_cast<float2*>(out_copy + at + n * 8) = value;
      }
    }
  }
}

// --- the backward pass (FlashAttention-2's, split in two kernels so that every gradient
// element has one writer and a fixed summation order: no atomics, reproducible results).
// P = exp2(s * scale_log2 - lse) recomputes the forward's weights from its row statistics,
// dP = dO V^T, dS = P (dP - rowdot) with rowdot = sum(dO o O) per query; then
// dV = P^T dO, dK = scale dS^T Q (FlashKeyKernel, one block per 64 keys) and
// dQ = scale dS K (FlashQueryKernel, one block per 64 queries).

// dO into its head-major 16-bit plane (B, NH, T, hs), and rowdot[bh * T + t] = dout_t . out_t
// over head h's hs dimensions (fp32); one warp per (b, h, t), each lane two dimensions.
template <typename H>
__global__ void __launch_bounds__(kThreads)
    PrepareBackwardKernel(H* do16, float* rowdot, const float* dout, const float* out, int64_t rows,
                          int T, int D, int NH, int hs) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * kWarps + threadIdx.x / 32;
  if (r >= rows) return;
  const int lane = threadIdx.x % 32;
  const int t = static_cast<int>(r % T);
  const int64_t bh = r / T;
  const int64_t offset = ((bh / NH) * T + t) * D + (bh % NH) * hs;
  float sum = 0.0f;
  for (int i = 2 * lane; i < hs; i += 64) {
    const float2 dy = *reinterpret_cast<const float2*>(dout + offset + i);
    const float2 y = *reinterpret_cast<const float2*>(out + offset + i);
    sum += dy.x * y.x + dy.y * y.y;
    *reinterpret_cast<uint32_t*>(do16 + r * hs + i) = Type16<H>::Pack(dy.x, dy.y);
  }
#pragma unroll
  for (int o = 16; o > 0; o /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (lane == 0) rowdot[r] = sum;
}

// Block (x = block of kTile keys, y = b * NH + h); warp w owns keys 16w..16w+15 and accumulates
// their dK and dV over every query tile that sees them, with S^T = K Q^T and dP^T = V dO^T
// computed key-major so that P^T and dS^T are A fragments for dV = P^T dO and dK = dS^T Q.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashKeyKernel(float* dqkv, const H* planes, const H* do16, const float* lse,
                   const float* rowdot, int64_t plane, int T, int D, int NH, bool causal,
                   float scale_log2, float scale) {
  constexpr int kStride = HS + kPad;
  static_assert(kWarps * 16 == kTile, "one key block per query tile");
  __shared__ __align__(16) H tiles[2][2][kTile * kStride];  // [stage][queries, output grads]
  __shared__ __align__(16) float stats[2][2][kTile];        // [stage][lse, rowdot]
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int k0 = static_cast<int>(blockIdx.x) * kTile;
  const H* q = planes + bh * T * HS;
  const H* dy = do16 + bh * T * HS;
  const float* lse_bh = lse + bh * T;
  const float* rowdot_bh = rowdot + bh * T;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  // Causal: queries before this key block see none of its keys.
  const int first = causal ? k0 / kTile : 0, tiles_n = (T + kTile - 1) / kTile;
  const auto load = [&](int stage, int t) {
    const int q0 = t * kTile;
    LoadTilePair<H, HS>(tiles[stage], q, dy, q0, T);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool in = q0 + i < T;
      CopyAsync4(&stats[stage][0][i], lse_bh + (in ? q0 + i : 0), in);
      CopyAsync4(&stats[stage][1][i], rowdot_bh + (in ? q0 + i : 0), in);
    }
  };
  // This block's K and V rows, staged in stage 1 until query tile first + 1 loads.
  LoadTilePair<H, HS>(tiles[1], q + plane, q + 2 * plane, k0, T);
  load(0, first);
  CommitCopies();
  WaitCopies<0>();
  __syncthreads();
  uint32_t kf[1][HS / 16][4], vf[1][HS / 16][4];
  RowFragments<H, HS, 1>(kf, tiles[1][0] + warp * 16 * kStride);
  RowFragments<H, HS, 1>(vf, tiles[1][1] + warp * 16 * kStride);

  float dk[1][HS / 8][4] = {}, dv[1][HS / 8][4] = {};
  const int keys[2] = {k0 + warp * 16 + g, k0 + warp * 16 + g + 8};
  for (int t = first; t < tiles_n; ++t) {
    const int stage = (t - first) & 1, q0 = t * kTile;
    // Tile first + 1 overwrites the staged K and V.
    AdvanceStream(t, tiles_n, [&](int next) { load((next - first) & 1, next); });

    float st[1][kTile / 8][4], dpt[1][kTile / 8][4];
    RowProducts<H, HS, 1>(st, kf, tiles[stage][0]);
    RowProducts<H, HS, 1>(dpt, vf, tiles[stage][1]);
    const float* lse_s = stats[stage][0];
    const float* rowdot_s = stats[stage][1];
    const bool masked = q0 + kTile > T || k0 + kTile > T || (causal && q0 < k0 + kTile - 1);
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int qi = j * 8 + 2 * c + (e & 1);
        bool seen = true;
        if (masked) {
          const int query = q0 + qi, key = keys[e >> 1];
          seen = query < T && key < T && !(causal && key > query);
        }
        const float p = seen ? exp2f(st[0][j][e] * scale_log2 - lse_s[qi]) : 0.0f;
        st[0][j][e] = p;
        dpt[0][j][e] = seen ? p * (dpt[0][j][e] - rowdot_s[qi]) : 0.0f;
      }
    }
    AccumulateProducts<H, HS, 1>(dv, st, tiles[stage][1]);
    AccumulateProducts<H, HS, 1>(dk, dpt, tiles[stage][0]);
  }
  const int64_t D3 = 3 * static_cast<int64_t>(D);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (keys[r] >= T) continue;
    float* dk_row = dqkv + (b * T + keys[r]) * D3 + D + h * HS + 2 * c;
    float* dv_row = dk_row + D;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<float2*>(dk_row + n * 8) =
          make_float2(dk[0][n][2 * r] * scale, dk[0][n][2 * r + 1] * scale);
      *reinterpret_cast<float2*>(dv_row + n * 8) =
          make_float2(dv[0][n][2 * r], dv[0][n][2 * r + 1]);
    }
  }
}

// Block (x = block of kTile queries, y = b * NH + h), laid out as the forward: warp w owns
// queries 16w..16w+15 and sums dQ over the key tiles they see.
// Three blocks per SM (at most 168 registers a thread) measured faster on an H100 than the
// two the compiler's unconstrained 200-odd registers allow.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads, 3)
    FlashQueryKernel(float* dqkv, const H* planes, const H* do16, const float* lse,
                     const float* rowdot, int64_t plane, int T, int D, int NH, bool causal,
                     float scale_log2, float scale) {
  constexpr int kStride = HS + kPad;
  static_assert(kWarps * 16 == kTile, "one query block per key tile");
  __shared__ __align__(16) H tiles[2][2][kTile * kStride];  // [stage][keys, values]
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int q0 = static_cast<int>(blockIdx.x) * kTile;
  const H* q = planes + bh * T * HS;
  const H* k = q + plane;
  const H* v = k + plane;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  const int tiles_n = ((causal ? min(T, q0 + kTile) : T) + kTile - 1) / kTile;
  // This block's Q and dO rows, staged in stage 1 until key tile 1 loads.
  LoadTilePair<H, HS>(tiles[1], q, do16 + bh * T * HS, q0, T);
  LoadTilePair<H, HS>(tiles[0], k, v, 0, T);
  CommitCopies();
  WaitCopies<0>();
  __syncthreads();
  uint32_t qf[1][HS / 16][4], dof[1][HS / 16][4];
  RowFragments<H, HS, 1>(qf, tiles[1][0] + warp * 16 * kStride);
  RowFragments<H, HS, 1>(dof, tiles[1][1] + warp * 16 * kStride);

  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  float row_lse[2], row_dot[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_lse[r] = rows[r] < T ? lse[bh * T + rows[r]] : 0.0f;
    row_dot[r] = rows[r] < T ? rowdot[bh * T + rows[r]] : 0.0f;
  }
  float dq[1][HS / 8][4] = {};
  for (int t = 0; t < tiles_n; ++t) {
    const int stage = t & 1, k0 = t * kTile;
    AdvanceStream(t, tiles_n,
                  [&](int next) { LoadTilePair<H, HS>(tiles[next & 1], k, v, next * kTile, T); });
    float s[1][kTile / 8][4], dp[1][kTile / 8][4];
    RowProducts<H, HS, 1>(s, qf, tiles[stage][0]);
    RowProducts<H, HS, 1>(dp, dof, tiles[stage][1]);
    const bool masked = k0 + kTile > T || q0 + kTile > T || (causal && k0 + kTile - 1 > q0);
#pragma unroll
    for (int j = 0; j < kTile / 8; ++j) {
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        bool seen = true;
        if (masked) {
          const int key = k0 + j * 8 + 2 * c + (e & 1), row = rows[e >> 1];
          seen = key < T && row < T && !(causal && key > row);
        }
        const float p = seen ? exp2f(s[0][j][e] * scale_log2 - row_lse[e >> 1]) : 0.0f;
        s[0][j][e] = seen ? p * (dp[0][j][e] - row_dot[e >> 1]) : 0.0f;
      }
    }
    AccumulateProducts<H, HS, 1>(dq, s, tiles[stage][0]);
  }
  const int64_t D3 = 3 * static_cast<int64_t>(D);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= T) continue;
    float* dq_row = dqkv + (b * T + rows[r]) * D3 + h * HS + 2 * c;
#pragma unroll
    for (int n = 0; n < HS / 8; ++n) {
      *reinterpret_cast<float2*>(dq_row + n * 8) =
          make_float2(dq[0][n][2 * r] * scale, dq[0][n][2 * r + 1] * scale);
    }
  }
}

// Queries per forward block: 32 per warp (two blocks of 16 share each key and value fragment)
// once there are enough of them; 16 for short windows, where a 128-query block would be mostly
// padding.
constexpr int kForwardRowBlocks = 2;

template <typename H>
absl::Status SplitHeads(H* planes, const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH,
                        cudaStream_t stream) {
  const int64_t quads = B * T * 3 * D / 4;
  constexpr int kBlock = 256;
  SplitHeadsKernel<H><<<static_cast<unsigned>((quads + kBlock - 1) / kBlock), kBlock, 0, stream>>>(
      planes, qkv, quads, static_cast<int>(T), static_cast<int>(D), static_cast<int>(D / NH),
      static_cast<int>(NH));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

double Scale(int hs) { return 1.0 / std::sqrt(static_cast<double>(hs)); }

template <typename H, int HS, int M>
absl::Status LaunchForward(float* out, float* out_copy, float* lse, const H* planes, int64_t B,
                           int64_t T, int64_t D, int64_t NH, bool causal, cudaStream_t stream) {
  constexpr int kBlockQ = kWarps * 16 * M;
  const dim3 grid(static_cast<unsigned>((T + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(B * NH));
  const float scale_log2 = static_cast<float>(Scale(HS) / std::log(2.0));
  FlashForwardKernel<H, HS, M><<<grid, kThreads, 0, stream>>>(
      out, out_copy, lse, planes, B * T * D, static_cast<int>(T), static_cast<int>(D),
      static_cast<int>(NH), causal, scale_log2);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename H, int HS>
absl::Status ForwardHs(float* out, float* out_copy, float* lse, const H* planes, int64_t B,
                       int64_t T, int64_t D, int64_t NH, bool causal, cudaStream_t stream) {
  if (T > kWarps * 16) {
    return LaunchForward<H, HS, kForwardRowBlocks>(out, out_copy, lse, planes, B, T, D, NH, causal,
                                                   stream);
  }
  return LaunchForward<H, HS, 1>(out, out_copy, lse, planes, B, T, D, NH, causal, stream);
}

template <typename H>
absl::Status Forward(float* out, float* out_copy, float* lse, void* operands, const float* qkv,
                     int64_t B, int64_t T, int64_t D, int64_t NH, bool causal,
                     cudaStream_t stream) {
  H* planes = static_cast<H*>(operands);
  RETURN_IF_ERROR(SplitHeads(planes, qkv, B, T, D, NH, stream));
  switch (D / NH) {
    case 16:
      return ForwardHs<H, 16>(out, out_copy, lse, planes, B, T, D, NH, causal, stream);
    case 32:
      return ForwardHs<H, 32>(out, out_copy, lse, planes, B, T, D, NH, causal, stream);
    default:
      return ForwardHs<H, 64>(out, out_copy, lse, planes, B, T, D, NH, causal, stream);
  }
}

template <typename H, int HS>
absl::Status LaunchBackward(float* dqkv, H* do16, float* rowdot, const float* dout, const H* planes,
                            const float* out, const float* lse, int64_t B, int64_t T, int64_t D,
                            int64_t NH, bool causal, cudaStream_t stream) {
  const int64_t rows = B * NH * T;
  PrepareBackwardKernel<H>
      <<<static_cast<unsigned>((rows + kWarps - 1) / kWarps), kThreads, 0, stream>>>(
          do16, rowdot, dout, out, rows, static_cast<int>(T), static_cast<int>(D),
          static_cast<int>(NH), HS);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  const double scale = Scale(HS);
  const float scale_log2 = static_cast<float>(scale / std::log(2.0));
  const dim3 grid(static_cast<unsigned>((T + kTile - 1) / kTile), static_cast<unsigned>(B * NH));
  const int64_t plane = B * T * D;
  FlashKeyKernel<H, HS><<<grid, kThreads, 0, stream>>>(
      dqkv, planes, do16, lse, rowdot, plane, static_cast<int>(T), static_cast<int>(D),
      static_cast<int>(NH), causal, scale_log2, static_cast<float>(scale));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  FlashQueryKernel<H, HS><<<grid, kThreads, 0, stream>>>(
      dqkv, planes, do16, lse, rowdot, plane, static_cast<int>(T), static_cast<int>(D),
      static_cast<int>(NH), causal, scale_log2, static_cast<float>(scale));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename H>
absl::Status Backward(float* dqkv, void* dout16, float* rowdot, const float* dout,
                      const void* operands, const float* out, const float* lse, int64_t B,
                      int64_t T, int64_t D, int64_t NH, bool causal, cudaStream_t stream) {
  const H* planes = static_cast<const H*>(operands);
  H* do16 = static_cast<H*>(dout16);
  switch (D / NH) {
    case 16:
      return LaunchBackward<H, 16>(dqkv, do16, rowdot, dout, planes, out, lse, B, T, D, NH, causal,
                                   stream);
    case 32:
      return LaunchBackward<H, 32>(dqkv, do16, rowdot, dout, planes, out, lse, B, T, D, NH, causal,
                                   stream);
    default:
      return LaunchBackward<H, 64>(dqkv, do16, rowdot, dout, planes, out, lse, B, T, D, NH, causal,
                                   stream);
  }
}

bool Aligned(const void* p, uintptr_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// qkv: the fp32 input (forward) or the 16-bit operands (backward); both 16-byte aligned.
absl::Status CheckFlash(const char* name, const float* out, const void* qkv, int64_t B, int64_t T,
                        int64_t D, int64_t NH) {
  if (B < 0 || T <= 0 || T > INT_MAX / 2 || 3 * D > INT_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": bad sizes B=", B, " T=", T, " D=", D));
  }
  if (out == nullptr || qkv == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(name, ": null pointer"));
  if (!FlashAttentionSupports(out, static_cast<const float*>(qkv), B, D, NH)) {
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
  return Aligned(qkv, 16) && Aligned(out, 8);
}

int64_t FlashOperandBytes(int64_t B, int64_t T, int64_t D) { return B * T * 3 * D * 2; }

absl::Status FlashAttentionInference(float* out, void* operands, const float* qkv, int64_t B,
                                     int64_t T, int64_t D, int64_t NH, bool causal, Storage16 type,
                                     cudaStream_t stream) {
  return FlashAttentionForward(out, nullptr, nullptr, operands, qkv, B, T, D, NH, causal, type,
                               stream);
}

absl::Status FlashAttentionForward(float* out, float* out_copy, float* lse, void* operands,
                                   const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH,
                                   bool causal, Storage16 type, cudaStream_t stream) {
  if (B == 0 && T > 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFlash("FlashAttentionForward", out, qkv, B, T, D, NH));
  if (operands == nullptr || !Aligned(operands, 16) ||
      (out_copy != nullptr && !Aligned(out_copy, 8))) {
    return absl::InvalidArgumentError(
        "FlashAttentionForward: null or misaligned operands (16-byte) or out_copy (8-byte)");
  }
  if (type == Storage16::kBf16) {
    return Forward<__nv_bfloat16>(out, out_copy, lse, operands, qkv, B, T, D, NH, causal, stream);
  }
  return Forward<__half>(out, out_copy, lse, operands, qkv, B, T, D, NH, causal, stream);
}

absl::Status FlashAttentionBackward(float* dqkv, void* dout16, float* rowdot, const float* dout,
                                    const void* operands, const float* out, const float* lse,
                                    int64_t B, int64_t T, int64_t D, int64_t NH, bool causal,
                                    Storage16 type, cudaStream_t stream) {
  if (B == 0 && T > 0) return absl::OkStatus();
  RETURN_IF_ERROR(CheckFlash("FlashAttentionBackward", out, operands, B, T, D, NH));
  if (dqkv == nullptr || dout16 == nullptr || rowdot == nullptr || dout == nullptr ||
      lse == nullptr || !Aligned(dqkv, 8) || !Aligned(dout, 8) || !Aligned(dout16, 16)) {
    return absl::InvalidArgumentError(
        "FlashAttentionBackward: null or misaligned pointer (dqkv and dout 8-byte, dout16 "
        "16-byte)");
  }
  if (type == Storage16::kBf16) {
    return Backward<__nv_bfloat16>(dqkv, dout16, rowdot, dout, operands, out, lse, B, T, D, NH,
                                   causal, stream);
  }
  return Backward<__half>(dqkv, dout16, rowdot, dout, operands, out, lse, B, T, D, NH, causal,
                          stream);
}

}  // namespace forecastd::cuda
