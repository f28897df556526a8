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

// rows x HS fp32 values from `src` (row stride `stride` floats; rows at or past `valid` read as
// 0) into 16-bit shared rows, transposed (dst[c][r]) when `transpose`. float4 loads.
template <typename H, int HS>
__device__ __forceinline__ void LoadTile(H* dst, int dst_stride, const float* src, int64_t stride,
                                         int rows, int valid, bool transpose) {
  for (int i = threadIdx.x; i < rows * HS / 4; i += kThreads) {
    const int r = i / (HS / 4);
    const int c = (i % (HS / 4)) * 4;
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < valid) v = *reinterpret_cast<const float4*>(src + r * stride + c);
    const float x[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      H* at = transpose ? dst + (c + e) * dst_stride + r : dst + r * dst_stride + c + e;
      *at = Type16<H>::From(x[e]);
    }
  }
}

// Block (x = query block, y = b * NH + h); 4 warps, each owning 16 queries.
template <typename H, int HS>
__global__ void __launch_bounds__(kThreads)
    FlashAttentionKernel(float* out, const float* qkv, int T, int D, int NH, bool causal,
                         float scale_log2) {
  __shared__ __align__(16) H q_s[kBlockQ * (HS + kPad)];
  __shared__ __align__(16) H k_s[kBlockK * (HS + kPad)];
  __shared__ __align__(16) H vt_s[HS * (kBlockK + kPad)];
  constexpr int kQStride = HS + kPad, kVStride = kBlockK + kPad;
  const int64_t bh = blockIdx.y;
  const int h = static_cast<int>(bh % NH);
  const int64_t b = bh / NH;
  const int q0 = static_cast<int>(blockIdx.x) * kBlockQ;
  const int64_t D3 = 3 * static_cast<int64_t>(D);
  const float* head = qkv + b * T * D3 + h * HS;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, c = lane % 4;

  LoadTile<H, HS>(q_s, kQStride, head + q0 * D3, D3, kBlockQ, T - q0, false);
  __syncthreads();
  uint32_t qf[HS / 16][4];
  const H* q_rows = q_s + (warp * 16 + g) * kQStride;
#pragma unroll
  for (int kk = 0; kk < HS / 16; ++kk) {
    qf[kk][0] = Pair(q_rows + kk * 16 + 2 * c);
    qf[kk][1] = Pair(q_rows + 8 * kQStride + kk * 16 + 2 * c);
    qf[kk][2] = Pair(q_rows + kk * 16 + 8 + 2 * c);
    qf[kk][3] = Pair(q_rows + 8 * kQStride + kk * 16 + 8 + 2 * c);
  }

  float o[HS / 8][4] = {};
  float row_max[2] = {-INFINITY, -INFINITY};
  float row_sum[2] = {0.0f, 0.0f};  // this thread's share; the quad's sum at the end
  const int rows[2] = {q0 + warp * 16 + g, q0 + warp * 16 + g + 8};
  const int last_query = min(T, q0 + kBlockQ) - 1;
  const int key_end = causal ? last_query + 1 : T;
  for (int k0 = 0; k0 < key_end; k0 += kBlockK) {
    __syncthreads();  // the previous tile is no longer read
    LoadTile<H, HS>(k_s, kQStride, head + D + k0 * D3, D3, kBlockK, T - k0, false);
    LoadTile<H, HS>(vt_s, kVStride, head + 2 * D + k0 * D3, D3, kBlockK, T - k0, true);
    __syncthreads();

    float s[kBlockK / 8][4];
#pragma unroll
    for (int j = 0; j < kBlockK / 8; ++j) {
      s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
      const H* k_row = k_s + (j * 8 + g) * kQStride;
#pragma unroll
      for (int kk = 0; kk < HS / 16; ++kk) {
        Type16<H>::Mma(s[j], qf[kk], Pair(k_row + kk * 16 + 2 * c),
                       Pair(k_row + kk * 16 + 8 + 2 * c));
      }
    }
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
#pragma unroll
    for (int kk = 0; kk < kBlockK / 16; ++kk) {
      const uint32_t a[4] = {Type16<H>::Pack(s[2 * kk][0], s[2 * kk][1]),
                             Type16<H>::Pack(s[2 * kk][2], s[2 * kk][3]),
                             Type16<H>::Pack(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             Type16<H>::Pack(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
      for (int n = 0; n < HS / 8; ++n) {
        const H* v_row = vt_s + (n * 8 + g) * kVStride + kk * 16 + 2 * c;
        Type16<H>::Mma(o[n], a, Pair(v_row), Pair(v_row + 8));
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 1);
    row_sum[r] += __shfl_xor_sync(0xffffffffu, row_sum[r], 2);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (rows[r] >= T) continue;
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
absl::Status Launch(float* out, const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH,
                    bool causal, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>((T + kBlockQ - 1) / kBlockQ),
                  static_cast<unsigned>(B * NH));
  const float scale_log2 =
      static_cast<float>(1.0 / std::sqrt(static_cast<double>(HS)) / std::log(2.0));
  FlashAttentionKernel<H, HS><<<grid, kThreads, 0, stream>>>(
      out, qkv, static_cast<int>(T), static_cast<int>(D), static_cast<int>(NH), causal, scale_log2);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <typename H>
absl::Status LaunchFor(int64_t hs, float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                       int64_t NH, bool causal, cudaStream_t stream) {
  switch (hs) {
    case 16:
      return Launch<H, 16>(out, qkv, B, T, D, NH, causal, stream);
    case 32:
      return Launch<H, 32>(out, qkv, B, T, D, NH, causal, stream);
    default:
      return Launch<H, 64>(out, qkv, B, T, D, NH, causal, stream);
  }
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
  if (B < 0 || T <= 0 || T > INT_MAX / 2 || 3 * D > INT_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlashAttentionInference: bad sizes B=", B, " T=", T, " D=", D));
  }
  if (B == 0) return absl::OkStatus();
  if (out == nullptr || qkv == nullptr) {
    return absl::InvalidArgumentError("FlashAttentionInference: null pointer");
  }
  if (!FlashAttentionSupports(out, qkv, B, D, NH)) {
    return absl::InvalidArgumentError(
        absl::StrCat("FlashAttentionInference: unsupported B=", B, " D=", D, " NH=", NH,
                     " (head sizes 16, 32, 64; B*NH <= 65535; qkv 16-byte, out 8-byte aligned)"));
  }
  const int64_t hs = D / NH;
  if (type == Storage16::kBf16) {
    return LaunchFor<__nv_bfloat16>(hs, out, qkv, B, T, D, NH, causal, stream);
  }
  return LaunchFor<__half>(hs, out, qkv, B, T, D, NH, causal, stream);
}

}  // namespace forecastd::cuda
