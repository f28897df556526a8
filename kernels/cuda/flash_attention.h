// Multi-head self-attention on tensor cores, for the reduced-precision math modes (bf16,
// fp16), in the manner of FlashAttention-2 (Dao, 2023): the (T, T) scores are never written.
// q, k and v are first rounded to the 16-bit type into head-major planes (`operands`, which the
// training backward reuses); each block of the forward then takes 64 or 128 queries of one
// (batch, head), streams the head's keys and values through shared memory in tiles of 64 (the
// next tile's asynchronous copy overlapping the current one's products), computes the scores and
// the weighted sum with mma.sync (fp32 accumulation), and keeps an online softmax (running
// maximum and sum per query) in registers. out and the gradients are fp32; the weights are
// rounded once more before the second product, so results carry the 16-bit type's rounding
// (about 1e-3 relative for bf16). Launchers only; the kernels live in flash_attention.cu.
// Thread-safe: each call works on the stream it is given.
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

// Bytes of the 16-bit copies of q, k and v (B*T*3*D values) the kernels work from.
int64_t FlashOperandBytes(int64_t B, int64_t T, int64_t D);

// As ref::AttentionForward without saved weights or dropout, in `type` arithmetic:
//   out (B, T, D), qkv (B, T, 3*D); operands: FlashOperandBytes of 16-byte aligned scratch.
absl::Status FlashAttentionInference(float* out, void* operands, const float* qkv, int64_t B,
                                     int64_t T, int64_t D, int64_t NH, bool causal, Storage16 type,
                                     cudaStream_t stream);

// The training forward: FlashAttentionInference that also writes lse (B, NH, T), each query's
// log2 of its softmax denominator plus its largest scaled score (in the kernel's base-2 units),
// from which FlashAttentionBackward recomputes the weights, and out_copy (B, T, D; 8-byte
// aligned) when not null, a second copy of out. `operands` keeps what the backward reads.
absl::Status FlashAttentionForward(float* out, float* out_copy, float* lse, void* operands,
                                   const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH,
                                   bool causal, Storage16 type, cudaStream_t stream);

// The backward of FlashAttentionForward (FlashAttention-2's, in two kernels: one block per 64
// keys sums their dK and dV over the queries, one per 64 queries sums their dQ over the keys, so
// that every element has one writer and a fixed order of summation: reproducible, no atomics).
//   dqkv (B, T, 3D): written, not accumulated; dout, out (B, T, D) fp32; operands and lse as the
//   forward left them; dout16 (FlashOperandBytes / 3 bytes, 16-byte aligned) and rowdot
//   (B*NH*T floats): scratch.
// dqkv, dout and out 8-byte aligned.
absl::Status FlashAttentionBackward(float* dqkv, void* dout16, float* rowdot, const float* dout,
                                    const void* operands, const float* out, const float* lse,
                                    int64_t B, int64_t T, int64_t D, int64_t NH, bool causal,
                                    Storage16 type, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_FLASH_ATTENTION_H_
