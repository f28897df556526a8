// The oneDNN CPU backend: the Backend ops on oneDNN primitives (matmul, lstm_forward,
// lbr_gru_forward, layer_normalization_forward, softmax_forward, eltwise, binary), built once
// per op and shape on one CPU engine and kept in a bounded cache. On CPUs with AVX2 and FMA the
// LSTM and GRU layers run as a oneDNN matmul for the input projection plus our own time loop
// (recurrent_avx2.h), which beats lstm_forward at the small batches forecasting serves.
// The backward passes (dnnl_backward.cc, dnnl_recurrent_backward.cc) use the matching backward
// primitives. PositionalEncoding adds a table kept in the same cache (one per shape) and
// AttentionLastQuery is our own loops; AttentionLastQueryBackward, and any shape oneDNN rejects
// (logged once at debug level), run on the reference kernels instead. The model code calls it
// through Backend; tests also read its cache statistics. Thread-safe: ops may run concurrently on
// different buffers; each call uses its own stream and scratchpad.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_BACKEND_H_
#define FORECASTD_BACKENDS_CPU_DNNL_BACKEND_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "backends/backend.h"
#include "backends/cpu/dnnl_primitive_cache.h"
#include "backends/reference_backend.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace forecastd {

namespace cpu {
struct LstmBackwardArgs;  // recurrent_avx2.h
}  // namespace cpu

class DnnlBackend final : public Backend {
 public:
  struct Options {
    // The most cache entries kept: one per op and shape (a recurrent layer with its weight
    // reorders, or an attention core, is one entry; so is a shape oneDNN rejected). Beyond it
    // the least recently used is dropped and rebuilt when next needed. A model needs about one
    // per layer kind and flag combination per batch size it sees. Must be > 0.
    size_t primitive_cache_capacity = 1024;
    // How the forward's matrix products round their fp32 operands (they accumulate in fp32
    // either way). kFp32: not at all, within a few ulp of the reference. kBf16: to bfloat16
    // (8 significant bits; about 1e-2 relative after a layer), on oneDNN's bf16 kernels, which
    // need AVX512-BF16 or AMX (CpuRunsBf16; Create refuses kBf16 without them). Under kBf16:
    // Linear is a bf16 matmul; the LSTM and GRU layers run oneDNN's lstm_forward /
    // lbr_gru_forward on bf16 inputs, weights, outputs and h (c and the biases fp32), instead
    // of the AVX2 time loop, and the tick streams' step takes the same layers (HasFastPath is
    // false); the attention core's two products take bf16 operands (its softmax is fp32).
    // Normalisation, activations, residuals, AttentionLastQuery's loops and every backward op
    // stay fp32.
    enum class Math { kFp32, kBf16 };
    Math math = Math::kFp32;
  };

  static absl::StatusOr<std::unique_ptr<DnnlBackend>> Create(const Options& options);

  // oneDNN's name for the instruction set it dispatches to on this CPU ("avx2",
  // "avx512_core", "avx512_core_bf16", "avx512_core_amx", ...).
  static std::string CpuIsa();
  // Whether oneDNN runs bf16 products natively here (AVX512-BF16 or AMX).
  static bool CpuRunsBf16();
  // How this backend computes, for operators: "fp32 on avx2", "bf16 on avx512_core_amx".
  std::string compute() const override;
  // 4 where the fp32 time loops of recurrent_avx2.h run (AVX2 and FMA): they compute four rows
  // a tile, at 0.35-0.8 of one row's time each (recorded in bench/RESULTS.md); else 1.
  int64_t recurrent_row_tile() const override;

  // How many threads the calls made from the calling thread may fan out to (OpenMP's
  // per-thread setting, which oneDNN follows too); at least 1. A server with one worker
  // thread per core gives each worker 1, so that workers never compete for cores.
  static void SetThreadsForCallingThread(int threads);
  static int ThreadsForCallingThread();

  absl::string_view name() const override { return "onednn"; }
  bool SupportsOp(Op op) const override;
  // Three FastPaths on a CPU with AVX2 and FMA (backends/cpu/recurrent_avx2.h):
  // kRecurrentStep and kRecurrentStepForecast (the tick streams' one step straight from the
  // slab, and the same with the forecast's standardising, head and de-standardising in the same
  // pass over each tile of streams), and kRecurrentStackBackward: an LSTM stack's training
  // forward keeps every layer's gates, states and output (RecurrentSaved), which its backward
  // walks back without running any layer again (a GRU stack's keeps its lower layers' outputs
  // for the layer backwards). Otherwise a recurrent stack runs layer by layer, each layer on its
  // oneDNN primitive, and training keeps each layer's input for the layer backwards.
  bool HasFastPath(FastPath path) const override;
  // A unidirectional stack of a few rows runs as one wavefront over the layers where the
  // calling thread has 2 * num_layers threads or more, OpenMP's or lent (recurrent_avx2.h's
  // RunStackWavefront); otherwise, as the default, layer by layer.
  absl::Status RecurrentStack(RecurrentCell cell, float* out, float* scratch, const float* inp,
                              const RecurrentDirectionWeights* weights, const RecurrentDims& dims,
                              int num_layers) override;
  absl::StatusOr<int64_t> RecurrentSavedFloats(RecurrentCell cell, const RecurrentDims& dims,
                                               int num_layers) override;
  absl::Status RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                         const float* inp, const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims, int num_layers,
                                         RecurrentSaved* saved) override;
  absl::Status RecurrentStackBackward(RecurrentCell cell, float* dinp,
                                      const RecurrentDirectionGrads* dweights, const float* dout,
                                      float* scratch, const float* inp,
                                      const RecurrentDirectionWeights* weights,
                                      const RecurrentDims& dims, int num_layers,
                                      RecurrentSaved* saved) override;
  absl::Status RecurrentStep(RecurrentCell cell, float* out, float* scratch, float* slab,
                             const int32_t* slots, const float* inp,
                             const RecurrentDirectionWeights* weights, const RecurrentDims& dims,
                             int num_layers) override;
  bool RecurrentStepForecastFits(const RecurrentDims& dims, int num_layers,
                                 const RecurrentStepForecastSpec& spec) const override;
  absl::Status RecurrentStepForecast(RecurrentCell cell, float* y, float* slab,
                                     const int32_t* slots, const float* x,
                                     const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims, int num_layers,
                                     const RecurrentStepForecastSpec& spec) override;

  // Weights of Linear, LstmLayer and GruLayer are read on every call: the recurrent layers
  // copy them into oneDNN's layout each time (work about 1/(B*T) of the layer's own), so
  // weights may change between calls with no invalidation.
  absl::Status Linear(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int64_t IN, int64_t OUT) override;
  absl::Status LstmLayer(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                         const float* c_0, const RecurrentDirectionWeights* weights,
                         const RecurrentDims& dims) override;
  absl::Status GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                        const RecurrentDirectionWeights* weights,
                        const RecurrentDims& dims) override;
  absl::Status LayerNorm(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                         const float* beta, int64_t N, int64_t C, float eps) override;
  absl::Status Gelu(float* out, const float* inp, int64_t n, GeluForm form) override;
  absl::Status Relu(float* out, const float* inp, int64_t n) override;
  absl::Status Softmax(float* out, const float* inp, int64_t R, int64_t C) override;
  absl::Status Attention(float* out, float* att, const float* qkv, const float* dropout_mask,
                         int64_t B, int64_t T, int64_t D, int64_t NH, bool causal) override;
  absl::Status AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B, int64_t T,
                                  int64_t D, int64_t NH) override;
  absl::Status Residual(float* out, const float* a, const float* b, int64_t n) override;
  absl::Status PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                  int64_t D) override;

  absl::Status LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* saved, const float* weight, int64_t N,
                              int64_t IN, int64_t OUT) override;
  absl::Status LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                 const float* dout, const float* inp, const float* h_0,
                                 const float* c_0, const RecurrentDirectionWeights* weights,
                                 const RecurrentDims& dims) override;
  absl::Status GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                const float* dout, const float* inp, const float* h_0,
                                const RecurrentDirectionWeights* weights,
                                const RecurrentDims& dims) override;
  absl::Status LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                                 const float* inp, const float* gamma, int64_t N, int64_t C,
                                 float eps) override;
  absl::Status GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                            GeluForm form) override;
  absl::Status ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n) override;
  absl::Status SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R,
                               int64_t C) override;
  absl::Status AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                 const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                 int64_t NH, bool causal) override;
  absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                          const float* kv, int64_t B, int64_t T, int64_t D,
                                          int64_t NH) override;

  DnnlPrimitiveCache::Stats cache_stats() const { return cache_.stats(); }
  // Calls of an op that SupportsOp reports native which ran on the reference all the same,
  // because oneDNN rejected the shape. Empty tensors, which need no primitive, do not count.
  int64_t fallback_calls() const { return fallback_calls_.load(std::memory_order_relaxed); }

 private:
  // Keys of the primitive cache begin with one of these; each fixes the entry's type.
  enum class PrimitiveKind : int64_t {
    kLinear,
    kLstm,
    kGru,
    kLayerNorm,
    kEltwise,
    kSoftmax,
    kBinaryAdd,
    kAttention,
    kLinearBackward,
    kLstmBackward,
    kGruBackward,
    kLayerNormBackward,
    kEltwiseBackward,
    kAttentionBackward,
    kLinearBf16,
    kAttentionBf16,
    kPositionalTable,  // not a primitive: PositionalEncoding's table, std::vector<float>
  };

  DnnlBackend(dnnl::engine engine, const Options& options);

  // Linear under Math::kBf16.
  absl::Status LinearBf16(float* out, const float* inp, const float* weight, const float* bias,
                          int64_t N, int64_t IN, int64_t OUT);

  bool bf16() const { return math_ == Options::Math::kBf16; }

  // Run the op on oneDNN and return true, or return false when oneDNN rejects the shape (or it
  // is empty) and the caller must run the reference. dnnl_recurrent.cc holds the first.
  absl::StatusOr<bool> TryRecurrentLayer(PrimitiveKind kind, float* out, float* h_n, float* c_n,
                                         const float* inp, const float* h_0, const float* c_0,
                                         const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims);
  // The layer as one input-projection matmul per direction, then the time loop of
  // recurrent_avx2.h; for CPUs with AVX2 and FMA.
  absl::Status ProjectedRecurrentLayer(PrimitiveKind kind, float* out, float* h_n, float* c_n,
                                       const float* inp, const float* h_0, const float* c_0,
                                       const RecurrentDirectionWeights* weights,
                                       const RecurrentDims& dims);
  // LstmLayerBackward the same way: per direction the input projection as one matmul, the
  // forward again and the walk back through time in recurrent_avx2.h (LstmBackwardThroughTime),
  // then the weight and input gradients as matmuls over all steps at once.
  absl::Status ProjectedLstmBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                     const float* dout, const float* inp, const float* h_0,
                                     const float* c_0, const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims);
  // Its pieces. gx (N, 4H) = x (N, I) W_ih^T + b_ih + b_hh.
  absl::Status LstmProjection(float* gx, const float* x, const RecurrentDirectionWeights& w,
                              int64_t N, int64_t I, int64_t H);
  // After the walk back of a layer's ND directions (args: their dG and h_prev): dx (N, I;
  // nullptr: not wanted) = the sum over directions of dG W_ih (dx_scratch, N * I floats, holds
  // the second's), and each direction's gradients (grads may be nullptr, its entries too):
  // dW_ih = dG^T x, dW_hh = dG^T h_prev, db_ih = db_hh = the sum of dG.
  absl::Status LstmLayerGradients(float* dx, float* dx_scratch,
                                  const RecurrentDirectionGrads* grads,
                                  const cpu::LstmBackwardArgs* args,
                                  const RecurrentDirectionWeights* weights, const float* x,
                                  int64_t ND, int64_t I);
  // Whether a stack's training pair runs as the fast path (an LSTM's on the AVX2 time loops).
  bool StackedTraining(const RecurrentDims& dims) const;
  absl::StatusOr<bool> TryEltwise(float* out, const float* inp, int64_t n,
                                  dnnl::algorithm algorithm);
  // The backward counterparts; kind is kLstmBackward or kGruBackward. The first is in
  // dnnl_recurrent_backward.cc.
  absl::StatusOr<bool> TryRecurrentLayerBackward(PrimitiveKind kind, float* dinp,
                                                 const RecurrentDirectionGrads* dweights,
                                                 const float* dout, const float* inp,
                                                 const float* h_0, const float* c_0,
                                                 const RecurrentDirectionWeights* weights,
                                                 const RecurrentDims& dims);
  absl::StatusOr<bool> TryEltwiseBackward(float* dinp, const float* dout, const float* inp,
                                          int64_t n, dnnl::algorithm algorithm);
  void CountFallback() { fallback_calls_.fetch_add(1, std::memory_order_relaxed); }

  // Constant after construction.
  const dnnl::engine engine_;
  const Options::Math math_;
  ReferenceBackend reference_;

  // Own synchronisation.
  DnnlPrimitiveCache cache_;
  std::atomic<int64_t> fallback_calls_{0};
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CPU_DNNL_BACKEND_H_
