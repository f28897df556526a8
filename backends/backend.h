// The op set the models are written against. Ops are coarse (a whole LSTM layer, a whole
// attention core) so each backend can use its best primitive. Every op has the semantics and
// shapes of its reference in kernels/ref/ (see those headers for the exact formulas). Two
// questions a caller may ask of a backend, answered apart:
//   SupportsOp(Op): does the backend run this op on its own primitive? Every op in Op runs on
//     every backend; one a backend does not support natively runs on the reference loops
//     (a partial backend falls back, op by op).
//   HasFastPath(FastPath): does the backend have this optional composite op of its own? Without
//     it the op runs as the default composition of the ops above (Backend's own
//     implementation, backend.cc), or, for RecurrentStackLast and RecurrentStep, the caller
//     composes it.
// Saved training state is a value the caller owns: a forward-for-training op (LinearForTraining,
// Attention with `att`, RecurrentStackForTraining) fills memory the model's training tape
// allocated, of the size the backend states (LinearSavedFloats, AttentionSavedFloats,
// RecurrentSavedFloats), and the matching backward takes it back as an argument. A backend keeps
// nothing between the two calls and matches nothing by address.
// Pointers are memory of the backend's device. Implementations are thread-safe: ops may run
// concurrently on different buffers.
#ifndef FORECASTD_BACKENDS_BACKEND_H_
#define FORECASTD_BACKENDS_BACKEND_H_

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/ref/activation.h"
#include "kernels/ref/recurrent.h"

namespace forecastd {

enum class Op {
  kLinear,
  kLstmLayer,
  kGruLayer,
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
};

// Optional composite ops. Each is one call a backend may run as a single primitive of its own;
// without it the call still works (the default composition in backend.cc), except where noted.
enum class FastPath {
  // RecurrentStack as one primitive (cuDNN pipelines consecutive layers); without it, one
  // LstmLayer / GruLayer call per layer.
  kRecurrentStack,
  // RecurrentStackLast at all: only the last time step of the stack's output (a forecast's head
  // input). Without it RecurrentStackLast returns UNIMPLEMENTED and the caller runs
  // RecurrentStack and takes the last step itself.
  kRecurrentStackLast,
  // RecurrentStackForTraining and RecurrentStackBackward as one primitive pair, the backward
  // reading what the forward saved instead of recomputing the layers. Without it the backward
  // recomputes the layers and runs LstmLayerBackward / GruLayerBackward layer by layer, so a
  // caller does better keeping each layer's input and calling the layer backwards itself.
  kRecurrentStackBackward,
  // RecurrentStep at all: one time step of a stack of layers for streams whose states live in a
  // slab, reading and writing the states in place. Without it RecurrentStep returns
  // UNIMPLEMENTED and the caller gathers the states, runs LstmLayer / GruLayer for T = 1 and
  // scatters them back itself (the data movement is not a Backend op).
  kRecurrentStep,
  // RecurrentStepForecast at all: RecurrentStep with a forecast's standardising, head and
  // de-standardising in the same primitive, for the sizes RecurrentStepForecastFits accepts.
  // Without it the caller composes them around RecurrentStep.
  kRecurrentStepForecast,
};

using ref::GeluForm;
using ref::RecurrentDims;
using ref::RecurrentDirectionGrads;
using ref::RecurrentDirectionWeights;

enum class RecurrentCell { kLstm, kGru };

// The forecast RecurrentStepForecast computes around one step: layer 0 reads
// (x - x_mean) / x_std per feature (both nullptr: x as it is); y (B, outputs) is the head's
// Linear of the top layer's h' (head_weight (outputs, H), head_bias (outputs)), then, unless
// y_mean and y_std are nullptr, output o is y * y_std[f] + y_mean[f] with f the feature of
// target (o % (K * Q)) / Q, K = target_features.size() and Q = quantiles: outputs are laid out
// (P, K, Q), as Forecaster's.
struct RecurrentStepForecastSpec {
  const float* x_mean = nullptr;
  const float* x_std = nullptr;
  const float* head_weight = nullptr;
  const float* head_bias = nullptr;
  int64_t outputs = 0;
  const float* y_mean = nullptr;
  const float* y_std = nullptr;
  absl::Span<const int> target_features;
  int64_t quantiles = 1;
};

// What RecurrentStackForTraining saves for the RecurrentStackBackward of the same stack. The
// caller (the model's training tape) owns it and its memory, and passes it to both calls.
struct RecurrentSaved {
  // RecurrentSavedFloats floats of the backend's memory (cuDNN's reserve space on the CUDA
  // backend), allocated by the caller; nullptr when that is 0.
  float* state = nullptr;
  int64_t state_floats = 0;
  // Set by the forward: its output (B, T, ND*H), which the caller keeps unchanged, as it keeps
  // inp and the weights, until the backward; and whether `state` was filled. The backward
  // reads both when `filled` (and then clears it: the state serves one backward), and
  // recomputes the forward otherwise.
  const float* out = nullptr;
  bool filled = false;
};

class Backend {
 public:
  virtual ~Backend() = default;

  virtual absl::string_view name() const = 0;
  // How its products compute, for operators ("fp32 on avx2", "bf16 on avx512_core_amx").
  virtual std::string compute() const { return "fp32"; }
  // The batch rows from which this backend's recurrent time loop computes a row at about its
  // lowest cost (its kernels' tile of rows); 1 where more rows cost about as much each.
  virtual int64_t recurrent_row_tile() const { return 1; }
  // True when `op` runs on this backend's own primitive rather than the reference.
  virtual bool SupportsOp(Op op) const = 0;
  // True when the backend runs `path` as its own primitive; false by default (the default
  // composition runs).
  virtual bool HasFastPath(FastPath path) const;

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
  // backend with HasFastPath(kRecurrentStack) runs the stack as one primitive (cuDNN then
  // overlaps consecutive layers' time steps).
  virtual absl::Status RecurrentStack(RecurrentCell cell, float* out, float* scratch,
                                      const float* inp, const RecurrentDirectionWeights* weights,
                                      const RecurrentDims& dims, int num_layers);

  // RecurrentStack's out[:, T-1, :] alone: last (B, ND*H), the top layer's output at the last
  // time step (both directions side by side), T >= 1; `scratch` (B*T*ND*H floats of the
  // backend's memory) may hold the whole output on the way. Only where
  // HasFastPath(kRecurrentStackLast): the default returns UNIMPLEMENTED. A backend may then run
  // the stack in the layout it runs fastest (cuDNN's sequence-major one) without rearranging the
  // whole output.
  virtual absl::Status RecurrentStackLast(RecurrentCell cell, float* last, float* scratch,
                                          const float* inp,
                                          const RecurrentDirectionWeights* weights,
                                          const RecurrentDims& dims, int num_layers);

  // One time step of `num_layers` (>= 1) stacked unidirectional LSTM or GRU layers for dims.B
  // streams (dims.T = 1, dims.ND = 1), each stream's states read from and written back to a
  // slab in place. Stream b's state is the S = num_layers * SL floats at slab[slots[b] * S]
  // (SL = 2H for an LSTM, H for a GRU): layer l's h at [l * SL, + H), then for an LSTM its c at
  // [l * SL + H, + H). Slots are distinct, int32 of the slab's memory; other rows of the slab
  // stay untouched. inp (B, dims.I) feeds layer 0 (weights[0]); layer l > 0 reads layer l-1's
  // new h (weights[l], input width H). out (B, H) receives the top layer's new h; `scratch`
  // (B*H floats) may hold the layers in between, nullptr when num_layers is 1. The result is
  // what gathering the states, running LstmLayer / GruLayer for T = 1 from them and scattering
  // the final states back gives. Only where HasFastPath(kRecurrentStep): the default returns
  // UNIMPLEMENTED.
  virtual absl::Status RecurrentStep(RecurrentCell cell, float* out, float* scratch, float* slab,
                                     const int32_t* slots, const float* inp,
                                     const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims, int num_layers);
  // RecurrentStep's step followed by the forecast of `spec` from the top layer's h', as one
  // primitive: y (B, spec.outputs) from the raw ticks x (B, dims.I); slab, slots and weights as
  // RecurrentStep's. The backend's own kernels read x and slots and write y, so on a GPU they
  // may be pinned host memory the device reaches (no copies around the step). Only where
  // HasFastPath(kRecurrentStepForecast) and RecurrentStepForecastFits(dims, num_layers, spec):
  // otherwise the default of the one returns false and of the other UNIMPLEMENTED.
  virtual bool RecurrentStepForecastFits(const RecurrentDims& dims, int num_layers,
                                         const RecurrentStepForecastSpec& spec) const;
  virtual absl::Status RecurrentStepForecast(RecurrentCell cell, float* y, float* slab,
                                             const int32_t* slots, const float* x,
                                             const RecurrentDirectionWeights* weights,
                                             const RecurrentDims& dims, int num_layers,
                                             const RecurrentStepForecastSpec& spec);

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
  // `saved` is what LinearForTraining filled for the same inp and weight, or nullptr.
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
  // Linear for a training step: a backend may fill `saved` (LinearSavedFloats floats; nullptr
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
  // How many floats RecurrentSaved::state must hold for a stack of these sizes: 0 by default
  // (nothing saved). The CUDA backend may build and cache the cuDNN plan of the shape to answer.
  virtual absl::StatusOr<int64_t> RecurrentSavedFloats(RecurrentCell cell,
                                                       const RecurrentDims& dims, int num_layers);
  // RecurrentStack for a training step. With `saved` (nullptr: nothing is saved; its state
  // RecurrentSavedFloats floats), a backend with HasFastPath(kRecurrentStackBackward) fills
  // saved->state, where RecurrentSavedFloats is not 0 for the cell and sizes, with what the
  // RecurrentStackBackward of the same cell, inp, weights and dims needs besides `out`, and sets
  // saved->out and saved->filled. The default calls RecurrentStack and leaves saved->filled
  // false.
  virtual absl::Status RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                                 const float* inp,
                                                 const RecurrentDirectionWeights* weights,
                                                 const RecurrentDims& dims, int num_layers,
                                                 RecurrentSaved* saved);

  // The backward of a stack of `num_layers` recurrent layers without dropout between them
  // (RecurrentStack's training pair): given dout (B, T, ND*H) = d(loss)/d(top layer's output)
  // and the stack's input inp (B, T, dims.I), writes dinp (B, T, dims.I; nullptr: not needed)
  // and the weight gradients dweights[l * ND + d] (entries may be nullptr), as the layer
  // backward ops do. `saved` is what RecurrentStackForTraining filled for the same stack, or
  // nullptr; when it is not filled the layers' outputs are recomputed from inp. A filled state
  // serves one backward, which may overwrite it (cuDNN's backward writes into its reserve
  // space): the backward that reads it sets saved->filled to false, so a second one recomputes.
  // `scratch` holds (num_layers + 1) * B * T * ND * H floats of the backend's memory. The default
  // recomputes with LstmLayer / GruLayer and runs the layer backward ops top down; a backend with
  // HasFastPath(kRecurrentStackBackward) runs the stack as one primitive.
  virtual absl::Status RecurrentStackBackward(RecurrentCell cell, float* dinp,
                                              const RecurrentDirectionGrads* dweights,
                                              const float* dout, float* scratch, const float* inp,
                                              const RecurrentDirectionWeights* weights,
                                              const RecurrentDims& dims, int num_layers,
                                              RecurrentSaved* saved);
  virtual absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                  const float* q, const float* kv, int64_t B,
                                                  int64_t T, int64_t D, int64_t NH) = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_BACKEND_H_
