// Scaled-dot-product multi-head self-attention for the CUDA backend over a packed q/k/v
// tensor (the core of nn.MultiheadAttention between its in- and out-projections, which are
// cuBLAS GEMMs in the backend), forward and backward, plus the last-query-only variant the
// transformer's last encoder layer uses. Each launcher mirrors kernels/ref (attention.h) with
// device pointers and a trailing stream; gradients are written, never accumulated.
// Launchers only; the kernels live in attention.cu. Thread-safe: each call works on the
// stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_ATTENTION_H_
#define FORECASTD_KERNELS_CUDA_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// As ref::AttentionForward; D must be a multiple of NH (head size hs = D / NH).
//   out (B, T, D)
//   att (B, NH, T, T): the weights before dropout, masked entries 0, or nullptr
//   qkv (B, T, 3*D)
//   dropout_mask (B, NH, T, T): 0 or 1/(1-p) multipliers of the weights, or nullptr
absl::Status AttentionForward(float* out, float* att, const float* qkv, const float* dropout_mask,
                              int64_t B, int64_t T, int64_t D, int64_t NH, bool causal,
                              cudaStream_t stream);

// As ref::AttentionBackward, from the forward's saved att and its dropout_mask (or nullptr).
//   dqkv (B, T, 3*D): written, not accumulated; every sum is taken in a fixed order (no
//   atomics), so the result is reproducible. Borrows B*NH*T floats of stream-ordered scratch
//   (cudaMallocAsync).
absl::Status AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                               const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                               int64_t NH, cudaStream_t stream);

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
