// Scaled-dot-product multi-head self-attention kernels for the CUDA backend over a packed
// q/k/v tensor (the core of nn.MultiheadAttention between its in- and out-projections): the
// streaming inference kernel for short windows, the softmax steps around the backend's
// attention GEMMs (backends/cuda/cuda_attention.cc) forward and backward, and the last-query
// variant the transformer's last encoder layer uses. Launchers mirror kernels/ref
// (attention.h) with device pointers and a trailing stream; gradients are written, never
// accumulated.
// Launchers only; the kernels live in attention.cu. Thread-safe: each call works on the
// stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_ATTENTION_H_
#define FORECASTD_KERNELS_CUDA_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// As ref::AttentionForward without saved weights or dropout (inference), where
// AttentionInferenceSupports(B, D, NH): head sizes 8, 16, 32, 64. D must be a multiple of NH.
// Its cost grows with T^2 on CUDA cores: the backend switches to GEMMs for long windows.
//   out (B, T, D), qkv (B, T, 3*D)
bool AttentionInferenceSupports(int64_t B, int64_t D, int64_t NH);
absl::Status AttentionInference(float* out, const float* qkv, int64_t B, int64_t T, int64_t D,
                                int64_t NH, bool causal, cudaStream_t stream);

// The softmax step of attention over scores the caller computed (scale included), in place:
// row r of att (rows, T) is query t = r % T of its (batch, head); the keys it sees (s <= t when
// causal, all otherwise) get softmax weights, the others 0 (ref::AttentionForward's att).
absl::Status AttentionSoftmax(float* att, int64_t rows, int64_t T, bool causal,
                              cudaStream_t stream);

// The softmax step's backward, in place: dw (rows, T) holds dout_t . v_s on entry (the gradient
// of the weights after dropout) and the gradient of the scaled scores q_t . k_s on return:
//   dw'[s] = dw[s] * mask[s] (mask nullptr: 1),  rowdot = sum_s att[s] dw'[s],
//   dw[s] <- att[s] (dw'[s] - rowdot) scale
// att (rows, T): the weights AttentionSoftmax wrote; mask (rows, T) or nullptr.
absl::Status AttentionSoftmaxBackward(float* dw, const float* att, const float* mask, int64_t rows,
                                      int64_t T, float scale, cudaStream_t stream);

// As ref::AttentionLastQueryForward: attention of position T-1's query over every key.
//   out (B, D), q (B, D), kv (B, T, 2*D)
absl::Status AttentionLastQueryForward(float* out, const float* q, const float* kv, int64_t B,
                                       int64_t T, int64_t D, int64_t NH, cudaStream_t stream);

// As ref::AttentionLastQueryBackward; the weights are recomputed.
//   dq (B, D), dkv (B, T, 2*D): written, not accumulated
absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                        const float* kv, int64_t B, int64_t T, int64_t D,
                                        int64_t NH, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_ATTENTION_H_
