// Reference (naive, fp32) scaled-dot-product multi-head self-attention over a packed
// q/k/v tensor, the core of nn.MultiheadAttention between its in- and out-projections
// (which are Linear ops). Thread-safe.
#ifndef FORECASTD_KERNELS_REF_ATTENTION_H_
#define FORECASTD_KERNELS_REF_ATTENTION_H_

#include <cstdint>

namespace forecastd::ref {

// For each batch b and head h (head size hs = D / NH):
//   q = qkv[b, t, 0*D + h*hs + :]   k = qkv[b, t, 1*D + h*hs + :]   v = qkv[b, t, 2*D + h*hs + :]
//   att[b, h, t, s] = softmax_s(q_t . k_s / sqrt(hs))   (s <= t only when `causal`)
//   out[b, t, h*hs + :] = sum_s att[b, h, t, s] m[b, h, t, s] v_s
//   out (B, T, D)
//   att (B, NH, T, T): the attention weights, saved for the backward pass, or nullptr;
//       masked entries are 0. Always the weights before dropout.
//   qkv (B, T, 3*D)    as nn.MultiheadAttention's in_proj produces it
//   dropout_mask (B, NH, T, T): m, the multipliers of nn.MultiheadAttention's dropout on the
//       weights (0 or 1/(1-p) each, drawn by the caller), or nullptr for none (m = 1)
void AttentionForward(float* out, float* att, const float* qkv, const float* dropout_mask,
                      int64_t B, int64_t T, int64_t D, int64_t NH, bool causal);

// The same attention for the last query position only (which sees every key, causal or not):
// what a forecaster's last encoder layer needs, since its head reads position T-1 alone.
//   out (B, D)        out[b, h*hs + :] = sum_s softmax_s(q_b . k_s / sqrt(hs)) v_s
//   q (B, D)          the queries of position T-1 (in_proj's first D rows)
//   kv (B, T, 2*D)    keys then values of every position (in_proj's last 2D rows)
void AttentionLastQueryForward(float* out, const float* q, const float* kv, int64_t B, int64_t T,
                               int64_t D, int64_t NH);

// Gradient of AttentionForward with respect to its packed input, given dout (B, T, D), the
// attention weights `att` (B, NH, T, T) the forward saved (masked entries 0, so the causal
// mask needs no flag here) and the forward's dropout_mask (or nullptr). With a mask, v's
// gradient sees att * m, and the weights' gradient (dout . v) * m goes through the softmax
// backward of the undropped att.
//   dqkv (B, T, 3*D): written, not accumulated
void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                       const float* dropout_mask, int64_t B, int64_t T, int64_t D, int64_t NH);

// Gradients of AttentionLastQueryForward given dout (B, D); the weights are recomputed.
//   dq (B, D), dkv (B, T, 2*D): written, not accumulated
void AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                const float* kv, int64_t B, int64_t T, int64_t D, int64_t NH);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_ATTENTION_H_
