// Multi-head self-attention for inference on tensor cores, for the reduced-precision math
// modes (bf16, fp16): one fused kernel in the manner of FlashAttention-2 (Dao, 2023) that never
// writes the (T, T) scores: each block takes 64 queries of one (batch, head), streams the
// head's keys and values through shared memory in tiles of 64, computes the scores and the
// weighted sum with mma.sync on 16-bit operands (fp32 accumulation), and keeps an online
// softmax (running maximum and sum per query) in registers. q, k, v and out stay fp32 in
// memory; operands are rounded to the 16-bit type as they are loaded, and the weights once more
// before the second product, so results carry that type's rounding (about 1e-3 relative for
// bf16). Launchers only; the kernel lives in flash_attention.cu. Thread-safe: each call works
// on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_FLASH_ATTENTION_H_
#define FORECASTD_KERNELS_CUDA_FLASH_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/cuda/convert.h"

namespace forecastd::cuda {

// Whether FlashAttentionInference takes these sizes and pointers: head size hs = D / NH of 16,
// 32 or 64 (the three tiles then fit the 48 KB of static shared memory), B * NH <= 65535, qkv
// 16-byte and out 8-byte aligned.
bool FlashAttentionSupports(const float* out, const float* qkv, int64_t B, int64_t D, int64_t NH);

// As ref::AttentionForward without saved weights or dropout, in `type` arithmetic:
//   out (B, T, D), qkv (B, T, 3*D)
absl::Status FlashAttentionInference(float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                                     int64_t NH, bool causal, Storage16 type, cudaStream_t stream);

// The training forward: FlashAttentionInference that also writes lse (B, NH, T), each query's
// log2 of its softmax denominator plus its largest scaled score (in the kernel's base-2 units),
// from which FlashAttentionBackward recomputes the weights.
absl::Status FlashAttentionForward(float* out, float* lse, const float* qkv, int64_t B, int64_t T,
                                   int64_t D, int64_t NH, bool causal, Storage16 type,
                                   cudaStream_t stream);

// The backward of FlashAttentionForward (FlashAttention-2's, in two kernels: one block per 64
// keys sums their dK and dV over the queries, one per 64 queries sums their dQ over the keys, so
// that every element has one writer and a fixed order of summation: reproducible, no atomics).
//   dqkv (B, T, 3D): written, not accumulated; dout, out (B, T, D); lse (B, NH, T) as the
//   forward wrote it; rowdot: B*NH*T floats of scratch (dout . out per query and head).
// dqkv 8-byte and dout 16-byte aligned, as FlashAttentionSupports asks of out and qkv.
absl::Status FlashAttentionBackward(float* dqkv, float* rowdot, const float* dout, const float* qkv,
                                    const float* out, const float* lse, int64_t B, int64_t T,
                                    int64_t D, int64_t NH, bool causal, Storage16 type,
                                    cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_FLASH_ATTENTION_H_
