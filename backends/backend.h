// The op set the models are written against. Ops are coarse (a whole LSTM layer, a whole
// attention core) so each backend can use its best primitive. Every op has the semantics and
// shapes of its reference in kernels/ref/ (see those headers for the exact formulas); a
// backend that cannot run an op or a shape natively falls back to the reference, and
// SupportsOp says which ops are native. Pointers are memory of the backend's device.
// Implementations are thread-safe: ops may run concurrently on different buffers.
#ifndef FORECASTD_BACKENDS_BACKEND_H_
#define FORECASTD_BACKENDS_BACKEND_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/ref/activation.h"
#include "kernels/ref/recurrent.h"

namespace forecastd {

enum class Op {
  kLinear,
  kLstmLayer,
  kGruLayer,
  // A stack of recurrent layers as one primitive (RecurrentStack); without it the stack runs
  // as LstmLayer / GruLayer calls, one per layer.
  kRecurrentStack,
  // RecurrentStackLast: only the last time step of the stack's output (a forecast's head input).
  kRecurrentStackLast,
  kLayerNorm,
  kGelu,
  kRelu,
  kSoftmax,
  kAttention,
  kAttentionLastQuery,
  kResidual,
  kPositionalEncoding,
  // Backward passes (training).
  kLinearBackward,
  kLstmLayerBackward,
  kGruLayerBackward,
  kLayerNormBackward,
  kGeluBackward,
  kReluBackward,
  kSoftmaxBackward,
  kAttentionBackward,
  kAttentionLastQueryBackward,
  // RecurrentStackBackward as one primitive; without it training keeps each layer's output
  // and runs LstmLayerBackward / GruLayerBackward layer by layer.
  kRecurrentStackBackward,
};

using ref::GeluForm;
using ref::RecurrentDims;
using ref::RecurrentDirectionGrads;
using ref::RecurrentDirectionWeights;

enum class RecurrentCell { kLstm, kGru };

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  // True when `op` runs on this backend's own primitive rather than the reference.
  virtual bool SupportsOp(Op op) const = 0;

  // out (N, OUT) = inp (N, IN) @ weight (OUT, IN)^T + bias (OUT, or nullptr)
  virtual absl::Status Linear(float* out, const float* inp, const float* weight, const float* bias,
                              int64_t N, int64_t IN, int64_t OUT) = 0;

  // One LSTM / GRU layer, both directions when dims.ND == 2; see kernels/ref/recurrent.h.
  virtual absl::Status LstmLayer(float* out, float* h_n, float* c_n, const float* inp,
                                 const float* h_0, const float* c_0,
                                 const RecurrentDirectionWeights* weights,
                                 const RecurrentDims& dims) = 0;
  virtual absl::Status GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                                const RecurrentDirectionWeights* weights,
                                const RecurrentDims& dims) = 0;
  // The inference forward of `num_layers` (>= 1) stacked LSTM or GRU layers with zero initial
  // states, as nn.LSTM / nn.GRU with num_layers in eval mode: out (B, T, ND*H) is the top
  // layer's output. weights[l * ND + d] holds layer l's direction d; layer 0 reads dims.I
  // features, the others ND*H. `scratch` (B, T, ND*H) may hold the layers in between; it may
  // be nullptr when num_layers is 1. The default runs LstmLayer / GruLayer once per layer; a
  // backend that SupportsOp(kRecurrentStack) runs the stack as one primitive (cuDNN then
  // overlaps consecutive layers' time steps).
  virtual absl::Status RecurrentStack(RecurrentCell cell, float* out, float* scratch,
                                      const float* inp, const RecurrentDirectionWeights* weights,
                                      const RecurrentDims& dims, int num_layers);

  // RecurrentStack's out[:, T-1, :] alone: last (B, ND*H), the top layer's output at the last
  // time step (both directions side by side), T >= 1; `scratch` (B*T*ND*H floats of the
  // backend's memory) may hold the whole output on the way. Only where
  // SupportsOp(kRecurrentStackLast): the default returns UNIMPLEMENTED. A backend may then run
  // the stack in the layout it runs fastest (cuDNN's sequence-major one) without rearranging the
  // whole output.
  virtual absl::Status RecurrentStackLast(RecurrentCell cell, float* last, float* scratch,
                                          const float* inp,
                                          const RecurrentDirectionWeights* weights,
                                          const RecurrentDims& dims, int num_layers);

  // out (N, C) = LayerNorm(inp (N, C)) * gamma + beta; mean/rstd (N) or nullptr.
  virtual absl::Status LayerNorm(float* out, float* mean, float* rstd, const float* inp,
                                 const float* gamma, const float* beta, int64_t N, int64_t C,
                                 float eps) = 0;

  virtual absl::Status Gelu(float* out, const float* inp, int64_t n, GeluForm form) = 0;
  virtual absl::Status Relu(float* out, const float* inp, int64_t n) = 0;
  // Row-wise softmax of (R, C).
  virtual absl::Status Softmax(float* out, const float* inp, int64_t R, int64_t C) = 0;
  // out (B, T, D) from packed qkv (B, T, 3D); att (AttentionSavedFloats floats; by default
  // (B, NH, T, T), the weights before dropout) or nullptr; dropout_mask (B, NH, T, T) multiplies
  // the weights before they meet V (training's attention dropout: 0 or 1/(1-p) each), or nullptr
  // for none. See ref::AttentionForward.
  virtual absl::Status Attention(float* out, float* att, const float* qkv,
                                 const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                 int64_t NH, bool causal) = 0;
  // out (B, D): the attention of the last position's queries q (B, D) over keys and values
  // kv (B, T, 2D); see ref::AttentionLastQueryForward.
  virtual absl::Status AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B,
                                          int64_t T, int64_t D, int64_t NH) = 0;
  virtual absl::Status Residual(float* out, const float* a, const float* b, int64_t n) = 0;
  // out (B, T, D) = inp + sinusoidal table (T, D).
  virtual absl::Status PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                          int64_t D) = 0;

  // Backward passes, one per forward op that has parameters or a non-identity derivative;
  // semantics of their kernels/ref counterparts (`...Backward`). Every gradient is written,
  // never accumulated, and a nullptr gradient is not computed. The residual add and the
  // positional encoding pass their gradient through unchanged and have none.
  // `saved` is what LinearForTraining kept for the same inp and weight, or nullptr.
  virtual absl::Status LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                                      const float* inp, const float* saved, const float* weight,
                                      int64_t N, int64_t IN, int64_t OUT) = 0;
  // Recompute the layer's forward from its input, so callers keep only `inp`.
  virtual absl::Status LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                         const float* dout, const float* inp, const float* h_0,
                                         const float* c_0, const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims) = 0;
  virtual absl::Status GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                        const float* dout, const float* inp, const float* h_0,
                                        const RecurrentDirectionWeights* weights,
                                        const RecurrentDims& dims) = 0;
  virtual absl::Status LayerNormBackward(float* dinp, float* dgamma, float* dbeta,
                                         const float* dout, const float* inp, const float* gamma,
                                         int64_t N, int64_t C, float eps) = 0;
  virtual absl::Status GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                                    GeluForm form) = 0;
  virtual absl::Status ReluBackward(float* dinp, const float* dout, const float* inp,
                                    int64_t n) = 0;
  virtual absl::Status SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R,
                                       int64_t C) = 0;
  // `att` is what Attention saved for the same qkv, and dropout_mask and causal the ones it
  // was given.
  virtual absl::Status AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                                         const float* att, const float* dropout_mask, int64_t B,
                                         int64_t T, int64_t D, int64_t NH, bool causal) = 0;
  // Linear for a training step: a backend may keep in `saved` (LinearSavedFloats floats; nullptr
  // when that is 0) what the LinearBackward of the same inp and weight needs, such as inp rounded
  // to 16 bits where its products take 16-bit operands, so the backward does not round it again.
  // inp and weight must then stay unchanged until that backward. The default calls Linear.
  virtual absl::Status LinearForTraining(float* out, float* saved, const float* inp,
                                         const float* weight, const float* bias, int64_t N,
                                         int64_t IN, int64_t OUT);
  // 0 by default: nothing kept.
  virtual int64_t LinearSavedFloats(int64_t N, int64_t IN, int64_t OUT) const;
  // How many floats Attention's `att` must hold for AttentionBackward at these sizes, with or
  // without a dropout mask: B*NH*T*T, the weights (the default). A backend whose backward
  // recomputes the weights may keep less; its `att` is then its own state, not the weights.
  virtual int64_t AttentionSavedFloats(int64_t B, int64_t T, int64_t D, int64_t NH,
                                       bool dropout) const;
  // RecurrentStack for a training step: a backend may keep what the RecurrentStackBackward of
  // the same cell, inp, weights and dims needs (cuDNN's reserve space, and `out`), so that the
  // backward does not recompute the layers. inp, out and the weights must then stay unchanged
  // until that backward; any other recurrent call in between drops what was kept (the backward
  // then recomputes, as it always may). The default calls RecurrentStack.
  virtual absl::Status RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                                 const float* inp,
                                                 const RecurrentDirectionWeights* weights,
                                                 const RecurrentDims& dims, int num_layers);

  // The backward of a stack of `num_layers` recurrent layers without dropout between them
  // (RecurrentStack's training pair): given dout (B, T, ND*H) = d(loss)/d(top layer's output)
  // and the stack's input inp (B, T, dims.I), writes dinp (B, T, dims.I; nullptr: not needed)
  // and the weight gradients dweights[l * ND + d] (entries may be nullptr), as the layer
  // backward ops do. The layers' outputs are recomputed from inp, so a training forward keeps
  // only the stack's input. `scratch` holds (num_layers + 1) * B * T * ND * H floats of the
  // backend's memory. The default recomputes with LstmLayer / GruLayer and runs the layer
  // backward ops top down; a backend that SupportsOp(kRecurrentStackBackward) runs the stack
  // as one primitive.
  virtual absl::Status RecurrentStackBackward(RecurrentCell cell, float* dinp,
                                              const RecurrentDirectionGrads* dweights,
                                              const float* dout, float* scratch, const float* inp,
                                              const RecurrentDirectionWeights* weights,
                                              const RecurrentDims& dims, int num_layers);
  virtual absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                  const float* q, const float* kv, int64_t B,
                                                  int64_t T, int64_t D, int64_t NH) = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_BACKEND_H_
