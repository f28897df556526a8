// The CUDA backend: the Backend ops on one GPU and one stream, one source file per concern.
// Linear runs as cuBLAS GEMMs (plus our bias kernels; cuda_linear.cc); LSTM and GRU layers,
// forward and backward, run on cuDNN's RNN API (cuda_recurrent.cc); full attention runs as cuBLAS
// batched GEMMs around our softmax kernels (cuda_attention.cc); the rest are our kernels in
// kernels/cuda/ (cuda_backend.cc, with construction and scratch). The concerns stay one class
// because they share the stream, its handles, the mutex and the scratch slots. Every pointer an op
// takes is device memory of this backend's GPU (host pointers are a programmer error the GPU
// reports as an illegal address): a model's parameter arena must be uploaded before it runs here.
//
// Ops are asynchronous: each queues its work on the stream and returns; results are ready
// once the stream has synchronised (Synchronize(), or the next blocking copy on that stream).
// A returned error is one of queuing (bad arguments, RESOURCE_EXHAUSTED when scratch memory
// cannot be had); a fault inside a kernel surfaces at the next synchronisation.
//
// Scratch (cuDNN's weight space and workspace, the reserve space and output of a recurrent
// backward that recomputes its forward, attention scores) is the backend's own, grown on demand
// from the allocator and kept; growing it synchronises the stream once. cuDNN descriptors and sizes
// are built once per layer shape and kept in a bounded cache. The first call of a shape therefore
// allocates and copies from host memory: run each shape once before capturing a CUDA graph.
//
// Thread-safe: calls from several threads are serialised by a mutex (their work is ordered on
// the one stream anyway); use one backend per stream to run concurrently.
#ifndef FORECASTD_BACKENDS_CUDA_CUDA_BACKEND_H_
#define FORECASTD_BACKENDS_CUDA_CUDA_BACKEND_H_

#include <array>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backends/backend.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/instance_streams.h"
#include "backends/cuda/resident_step.h"
#include "kernels/cuda/convert.h"

namespace forecastd {

class LtBiasGemms;  // cublas_gemm.h
struct GemmBatch;   // cublas_gemm.h
namespace cuda {
struct StepForecast;  // kernels/cuda/recurrent_step.h
}  // namespace cuda

class CudaBackend final : public Backend {
 public:
  struct Options {
    // How GEMMs round their fp32 inputs for tensor cores (accumulation is fp32 in every case):
    // kFp32 not at all (within a few ulp of the reference); kTf32 to TF32 (10-bit mantissa,
    // ~1e-3 relative); kBf16 to bfloat16 (7-bit mantissa, ~1e-2 relative); kFp16 to float16
    // (10-bit mantissa, limited range). cuDNN's recurrent layers use FMA math for kFp32 and
    // allow TF32 tensor cores otherwise; under kBf16 and kFp16 a stack without initial or
    // final states (RecurrentStack, a forecast) runs on 16-bit data in cuDNN, fp16 where it
    // takes it (its fastest recurrent kernels; inputs beyond fp16's range, |x| > 65504 after
    // standardisation, saturate to it), else bf16, converted at its edges. Attention in
    // inference under kBf16 / kFp16 runs on tensor cores (kernels/cuda/flash_attention.h).
    enum class Math { kFp32, kTf32, kBf16, kFp16 };
    Math math = Math::kFp32;
    // cuDNN's RNN algorithm for inference (LstmLayer, GruLayer, RecurrentStack). kAuto, the
    // first cuDNN accepts of: the persistent kernel (CUDNN_RNN_ALGO_PERSIST_STATIC: one kernel
    // keeps the recurrent weights on chip for all time steps) for batches of up to
    // rnn_persist_max_batch rows; its small-hidden-size variant
    // (CUDNN_RNN_ALGO_PERSIST_STATIC_SMALL_H) for H <= 192, any batch, as PyTorch chooses it;
    // the standard algorithm (a GEMM and an element-wise kernel per time step). Training (the
    // forward a backward pass recomputes, and the backward passes) runs the small-hidden-size
    // persistent kernel where H <= 192, as PyTorch's training does (the standard algorithm's
    // per-step GEMMs made an H=128 training step 3x PyTorch's on an H100), else the standard
    // algorithm; kStandard forces the standard algorithm for training as well.
    enum class RnnAlgo { kAuto, kStandard, kPersistStatic, kPersistStaticSmallH };
    RnnAlgo rnn_algo = RnnAlgo::kAuto;
    // On an H100, LSTM H=128/256, L=2, T=100: the persistent kernel takes 3.1x less time than
    // the standard algorithm at one row, 1.6x at two, the same at four and ever more beyond.
    int64_t rnn_persist_max_batch = 2;
    // The kernels of RecurrentStep (kernels/cuda/recurrent_step.h): kAuto picks by the number
    // of streams and the sizes (for few streams the whole stack in one launch of a
    // thread-block cluster, else a weight-stationary kernel per layer; a register-tiled
    // product per layer for many); kCluster, kWarp and kTiled force one (tests, benchmarks).
    enum class StepKernel { kAuto, kCluster, kWarp, kTiled };
    StepKernel step_kernel = StepKernel::kAuto;
    // Who runs an inference stack without initial or final states (RecurrentStack,
    // RecurrentStackLast: a forecast). kPersistent: our persistent kernels
    // (kernels/cuda/recurrent_sequence.h: a unidirectional stack as one wavefront launch, a
    // bidirectional one as a sweep per layer) wherever they take the sizes, cuDNN elsewhere; under
    // kBf16 / kFp16 their products take operands rounded to that type (fp32 accumulation and
    // states). kCudnn: cuDNN always (rnn_algo applies). kAuto: as kPersistent up to
    // persistent_max_batch rows under kFp32 and kTf32 math and persistent_max_batch_16 under kBf16
    // and kFp16 (cuDNN's 16-bit kernels win beyond), cuDNN otherwise. On an H100 (graph replay,
    // T=100, L=2, us, persistent / cuDNN; bench/RESULTS.md): fp32 LSTM H=128 B=1 95 / 196, B=32
    // 250 / 507, B=64 484 / 523, B=128 724 / 597; H=128 bidirectional B=1 189 / 385, B=64 876 /
    // 1,088, B=128 1,499 / 1,299; H=256 bidirectional B=1 230 / 413, B=64 1,858 / 2,622, B=128
    // 3,078 / 3,416. bf16: H=128 B=1 115 / 235, B=32 259 / 335, B=64 505 / 330; H=256
    // bidirectional B=32 972 / 1,329, B=64 1,653 / 1,392 (fp16 within 2% of bf16).
    enum class RecurrentKernel { kAuto, kCudnn, kPersistent };
    RecurrentKernel recurrent_kernel = RecurrentKernel::kAuto;
    int64_t persistent_max_batch = 64;
    int64_t persistent_max_batch_16 = 32;
    // The most recurrent-layer shapes (cell, B, T, I, H, ND) whose cuDNN descriptors and sizes
    // are kept; beyond it the least recently used is dropped (after a stream synchronisation)
    // and rebuilt when next needed. Must be > 0.
    int rnn_plan_capacity = 64;
    // Recurrent training calls (RecurrentStackForTraining's forward, RecurrentStackBackward)
    // launch kernels per time step (cuDNN's standard algorithm: a GEMM and element-wise kernels
    // each), so a step of few rows costs more CPU than GPU time. With this on, any such call
    // made a second time on the same memory (every pointer it touches, and the shape) is
    // captured as a CUDA graph and replayed from then on: one launch a call. A capture CUDA refuses
    // is not tried again for that plan; the call runs as before. Results are the same either way.
    bool rnn_training_graphs = true;
    // Attention in inference runs as one streaming kernel below this many keys (T) where its
    // head size allows (8, 16, 32, 64), and as cuBLAS batched GEMMs around a softmax kernel
    // otherwise (always in training). The kernel's cost grows with T^2 on CUDA cores, the
    // GEMMs' on the matrix units: on an H100 the GEMMs win at T=512 (bench/RESULTS.md).
    int64_t attention_gemm_min_keys = 256;
    // Scratch for the attention scores of inference and of the backward pass: they are
    // computed in chunks of batch rows of at most this many bytes (NH*T*T floats per row; at
    // least one row). Must be > 0. On an H100, transformer_large (NH=12, T=512: 12.6 MB a row)
    // at B=32 ran a forward in 32.6 ms and a training step in 116.2 ms in one chunk (512 MiB),
    // 34.7 and 123.2 ms in two (256 MiB); smaller chunks were no faster (bench/RESULTS.md).
    int64_t attention_scratch_bytes = int64_t{512} << 20;
  };

  struct Stats {
    int64_t rnn_plans_built = 0;    // cuDNN RNN plans built since creation, evicted ones included
    int64_t rnn_plans_cached = 0;   // plans held now
    int64_t scratch_bytes = 0;      // block bytes of scratch held now
    int64_t scratch_grows = 0;      // times a scratch buffer was (re)allocated
    int64_t fused_bias_gemms = 0;   // Linear calls with the bias in cuBLASLt's epilogue
    int64_t bias_kernel_gemms = 0;  // Linear calls with a bias but no fused algorithm
    int64_t fused_bias_grads = 0;   // LinearBackward calls with dbias from the epilogue
    int64_t rnn_saved_forwards_read = 0;  // recurrent backward passes that read a RecurrentSaved
                                          // forward instead of recomputing it
    int64_t rnn_training_graphs_captured = 0;   // recurrent training calls captured as graphs
    int64_t rnn_training_graph_replays = 0;     // recurrent training calls run as a replay
    int64_t rnn_training_capture_failures = 0;  // captures CUDA refused (the call ran as before)
    int64_t persistent_stacks = 0;              // inference stacks run on the persistent kernels
  };

  // Bound to the lease's stream, which it keeps until destroyed. `allocator` must be for the
  // lease's device and outlive the backend.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(StreamLease lease,
                                                             CudaAllocator* allocator,
                                                             const Options& options);
  // Bound to a stream and handles of the caller's, which must outlive the backend.
  static absl::StatusOr<std::unique_ptr<CudaBackend>> Create(const CudaStreamContext& context,
                                                             CudaAllocator* allocator,
                                                             const Options& options);
  // Synchronises the stream, then returns the scratch to the allocator.
  ~CudaBackend() override;

  absl::string_view name() const override { return "cuda"; }
  // Every op runs natively, and every FastPath is there.
  bool SupportsOp(Op op) const override;
  bool HasFastPath(FastPath path) const override;

  absl::Status Linear(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int64_t IN, int64_t OUT) override;
  // Weights are copied into cuDNN's weight space on every call (about 1/(B*T) of the layer's
  // own work), so they may change between calls with no invalidation.
  absl::Status LstmLayer(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                         const float* c_0, const RecurrentDirectionWeights* weights,
                         const RecurrentDims& dims) override;
  absl::Status GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                        const RecurrentDirectionWeights* weights,
                        const RecurrentDims& dims) override;
  // One cudnnRNNForward over all the layers (numLayers = num_layers), which pipelines them:
  // layer l + 1 starts on a time step as soon as layer l has finished it. scratch is unused.
  absl::Status RecurrentStack(RecurrentCell cell, float* out, float* scratch, const float* inp,
                              const RecurrentDirectionWeights* weights, const RecurrentDims& dims,
                              int num_layers) override;
  // One cudnnRNNForward in the packed sequence-major layout, which needs no rearrangement of x
  // and y (batch-major data costs cuDNN a pass over each); y goes to `scratch`, and the last
  // step is its final B rows.
  absl::Status RecurrentStackLast(RecurrentCell cell, float* last, float* scratch, const float* inp,
                                  const RecurrentDirectionWeights* weights,
                                  const RecurrentDims& dims, int num_layers) override;
  // One fused kernel per layer (kernels/cuda/recurrent_step.h) that reads the states from the
  // slab, runs the cell and writes them back, with no gather, scatter or cuDNN call; fp32 FMA
  // math under every Options::math. The first call at a batch size larger than any before may
  // allocate (a few ints of scratch): run it once before capturing a CUDA graph.
  absl::Status RecurrentStep(RecurrentCell cell, float* out, float* scratch, float* slab,
                             const int32_t* slots, const float* inp,
                             const RecurrentDirectionWeights* weights, const RecurrentDims& dims,
                             int num_layers) override;
  // The whole step and its forecast in one launch of the cluster kernel (up to
  // kStepClusterMaxStreams streams, as kernels/cuda/recurrent_step.h's RecurrentStepForecast
  // takes them; not when Options::step_kernel forces kWarp or kTiled). x, slots and y may be
  // pinned host memory. Allocates nothing: capturable at any time. With a ResidentStep set
  // (set_resident_step), a step it takes runs on its resident kernel instead and is finished
  // when the call returns (never while the stream is being captured).
  bool RecurrentStepForecastFits(const RecurrentDims& dims, int num_layers,
                                 const RecurrentStepForecastSpec& spec) const override;
  absl::Status RecurrentStepForecast(RecurrentCell cell, float* y, float* slab,
                                     const int32_t* slots, const float* x,
                                     const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims, int num_layers,
                                     const RecurrentStepForecastSpec& spec) override;
  // The resident step that RecurrentStepForecast offers its steps to first (not owned; it
  // outlives the calls), or nullptr (the default): each step one launch on the stream. While
  // one is set, RecurrentStepForecast's x, slots and y must be host memory.
  void set_resident_step(ResidentStep* resident);
  // Whether the last RecurrentStepForecast ran on the resident step (so it had finished when it
  // returned and queued nothing on the stream); clears it.
  bool TakeStepFinished();

  // cuDNN's reserve space of the stack's training plan (0 when B or T is 0).
  absl::StatusOr<int64_t> RecurrentSavedFloats(RecurrentCell cell, const RecurrentDims& dims,
                                               int num_layers) override;
  // With `saved`: cudnnRNNForward in training mode, its reserve space in saved->state. Without
  // (or with no state, when B or T is 0): RecurrentStack. scratch is unused.
  absl::Status RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                         const float* inp, const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims, int num_layers,
                                         RecurrentSaved* saved) override;
  // cuDNN's backward data and weights passes over the stack (pipelined across layers as the
  // forward is), reading the filled `saved` forward, or after running one in training mode
  // (CUDNN_FWD_MODE_TRAINING) into scratch of its own when there is none; scratch is unused.
  absl::Status RecurrentStackBackward(RecurrentCell cell, float* dinp,
                                      const RecurrentDirectionGrads* dweights, const float* dout,
                                      float* scratch, const float* inp,
                                      const RecurrentDirectionWeights* weights,
                                      const RecurrentDims& dims, int num_layers,
                                      RecurrentSaved* saved) override;
  absl::Status LayerNorm(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                         const float* beta, int64_t N, int64_t C, float eps) override;
  absl::Status Gelu(float* out, const float* inp, int64_t n, GeluForm form) override;
  absl::Status Relu(float* out, const float* inp, int64_t n) override;
  absl::Status Softmax(float* out, const float* inp, int64_t R, int64_t C) override;
  // Under kBf16 / kFp16, for GEMMs that take 16-bit operands (kMinGemm16Macs): inp rounded to
  // 16 bits, for the backward's weight gradient; nothing otherwise.
  absl::Status LinearForTraining(float* out, float* saved, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t IN, int64_t OUT) override;
  int64_t LinearSavedFloats(int64_t N, int64_t IN, int64_t OUT) const override;
  absl::Status Attention(float* out, float* att, const float* qkv, const float* dropout_mask,
                         int64_t B, int64_t T, int64_t D, int64_t NH, bool causal) override;
  // Under kBf16 / kFp16 without dropout, head sizes 16-64: q, k and v in 16 bits, the output
  // and each query's softmax statistics (FlashAttentionForward), not the weights; B*NH*T*T
  // floats otherwise.
  int64_t AttentionSavedFloats(int64_t B, int64_t T, int64_t D, int64_t NH,
                               bool dropout) const override;
  absl::Status AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B, int64_t T,
                                  int64_t D, int64_t NH) override;
  absl::Status Residual(float* out, const float* a, const float* b, int64_t n) override;
  absl::Status PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                  int64_t D) override;

  absl::Status LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* saved, const float* weight, int64_t N,
                              int64_t IN, int64_t OUT) override;
  // cuDNN's training forward (with its reserve space) recomputes the layer, then its backward
  // data and backward weights passes run; weight gradients are copied out of cuDNN's layout.
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

  // Waits for all work queued on the stream; returns the first error a kernel hit.
  absl::Status Synchronize();

  int device() const { return context_.device; }
  cudaStream_t stream() const { return context_.stream; }
  const Options& options() const { return options_; }
  Stats stats() const;

 private:
  // The backend's scratch buffers; several are live within one recurrent call.
  enum Scratch : int {
    kWeightSpace,        // cuDNN's packed weights
    kWeightGrads,        // cuDNN's packed weight gradients
    kRnnOutput,          // the recomputed forward's y (backward without a saved forward)
    kRnnInputGrad,       // dx when the caller wants no dinp (backward only)
    kWorkspace,          // cuDNN workspace beyond the stream's own
    kReserve,            // cuDNN reserve space (backward without a saved forward)
    kRnnInput16,         // x in 16-bit storage or time-major order (inference)
    kRnnOutput16,        // y in 16-bit storage
    kAttentionScores,    // attention scores or their gradient, one chunk of batch rows
    kAttentionProbs,     // the weights after dropout, one chunk
    kAttentionOperands,  // q, k and v in 16 bits (fused attention for inference)
    kGemmA16,            // a GEMM's first operand rounded to 16 bits (16-bit math modes)
    kGemmB16,            // its second operand
    kStepCounters,       // RecurrentStep's per-tile counters (zero between kernels)
    kSequenceProj,       // the persistent kernels' input projections (both directions)
    kSequenceLayer,      // their layers in between
    kScratchCount,
  };
  struct RnnPlan;         // cuda_recurrent.cc
  struct AttentionChunk;  // cuda_attention.cc
  struct FlashSaved;      // cuda_attention.cc
  // cell, B, T, I, H, ND, layers, inference-only, 16-bit storage wanted, time-major
  using RnnKey = std::array<int64_t, 10>;

  CudaBackend(std::optional<StreamLease> lease, const CudaStreamContext& context,
              CudaAllocator* allocator, const Options& options);
  static absl::Status Validate(const CudaStreamContext& context, const CudaAllocator* allocator,
                               const Options& options);

  // Runs `body` under the mutex with this backend's device current.
  absl::Status Run(absl::FunctionRef<absl::Status()> body);

  // The 16-bit type of kBf16 / kFp16; nullopt under kFp32 / kTf32.
  std::optional<cuda::Storage16> Storage16() const;

  // cuda_recurrent.cc. The kernels' form of `spec` in *forecast, when one launch takes these
  // sizes under this backend's options (RecurrentStepForecastFits); false otherwise.
  bool StepForecastFor(const RecurrentDims& dims, int num_layers,
                       const RecurrentStepForecastSpec& spec, cuda::StepForecast* forecast) const;

  // cuda_linear.cc.
  // Under kBf16 / kFp16, GEMMs of at least kMinGemm16Macs multiply-adds take their operands
  // rounded to 16 bits in scratch: cuBLAS runs fp32 operands on TF32 kernels even where bf16 is
  // allowed, at half the 16-bit rate (a transformer_large training step on an H100 spent 15 of
  // its 36 ms in them). Smaller GEMMs keep fp32 operands: the two extra passes would cost more.
  static constexpr int64_t kMinGemm16Macs = int64_t{1} << 28;
  // n floats of x rounded into scratch slot `which`, in the math mode's 16-bit type.
  absl::StatusOr<const void*> Operand16Locked(Scratch which, const float* x, int64_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether a GEMM of `macs` multiply-adds takes 16-bit operands (kMinGemm16Macs).
  bool Gemm16(int64_t macs) const;
  // Runs a Linear product (A and B dense fp32, A of M*K floats, B of K*N), with its operands
  // rounded to 16 bits when Gemm16 (a16, b16: A or B rounded already, or null) and `bias` (M
  // floats, or null) in the epilogue. bias_grad (N floats, or null; B then stored transposed,
  // op_b(B) a dense row-major (K, N)) receives the column sums of op_b(B), from the epilogue
  // where cuBLASLt has one.
  absl::Status LinearGemmLocked(GemmBatch gemm, const void* a16, const void* b16, const float* bias,
                                float* bias_grad = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Scratch slot `which` with at least `bytes`; growing synchronises the stream first.
  absl::StatusOr<void*> ScratchLocked(Scratch which, int64_t bytes)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // ScratchLocked for n floats.
  absl::StatusOr<float*> ScratchFloatsLocked(Scratch which, int64_t n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The stream's workspace when it is large enough, else kWorkspace scratch.
  absl::StatusOr<void*> WorkspaceLocked(int64_t bytes) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // cuda_attention.cc: attention as batched GEMMs; `att` may be null (inference: the scores
  // then live in scratch).
  absl::Status AttentionGemmLocked(float* out, float* att, const float* qkv,
                                   const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                   int64_t NH, bool causal) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether training attention of these sizes runs fused (FlashAttentionForward / Backward).
  bool FlashTraining(int64_t B, int64_t D, int64_t NH, bool dropout) const;
  // Where the fused training forward's state lies in `att`.
  static FlashSaved FlashSavedOf(int64_t B, int64_t T, int64_t D, int64_t NH);
  // The GEMM attention's sizes, with rows per chunk of scores from
  // Options::attention_scratch_bytes.
  AttentionChunk ChunkOf(int64_t B, int64_t T, int64_t D, int64_t NH) const;

  // cuda_recurrent.cc.
  // `num_layers` stacked layers (weights[l * ND + d]); h_0, c_0, h_n and c_n are then
  // (num_layers * ND, B, H).
  absl::Status RecurrentForwardLocked(RecurrentCell cell, float* out, float* h_n, float* c_n,
                                      const float* inp, const float* h_0, const float* c_0,
                                      const RecurrentDirectionWeights* weights,
                                      const RecurrentDims& dims, int num_layers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `saved`: a filled training forward of the same stack (no initial states), or nullptr.
  absl::Status RecurrentBackwardLocked(RecurrentCell cell, float* dinp,
                                       const RecurrentDirectionGrads* dweights, const float* dout,
                                       const float* inp, const float* h_0, const float* c_0,
                                       const RecurrentDirectionWeights* weights,
                                       const RecurrentDims& dims, int num_layers,
                                       RecurrentSaved* saved) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cudnnRNNForward in inference mode on `plan`'s data (x, y in its layout and data type), after
  // copying `weights` into the weight space; states as RecurrentForwardLocked takes them.
  // Whether an inference stack of these sizes without states runs on the persistent kernels
  // (Options::recurrent_kernel).
  bool PersistentStack(const RecurrentDims& dims, int num_layers) const;
  // Runs the stack on them: out_seq (B, T, ND*H) and / or out_last (B, ND*H), the top layer's
  // output at every step and at T - 1. Only where PersistentStack.
  absl::Status PersistentStackLocked(RecurrentCell cell, float* out_seq, float* out_last,
                                     const float* inp, const RecurrentDirectionWeights* weights,
                                     const RecurrentDims& dims, int num_layers)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status RnnInferenceLocked(const RnnPlan& plan, RecurrentCell cell,
                                  const RecurrentDirectionWeights* weights, const void* x, void* y,
                                  const float* h_0, float* h_n, const float* c_0, float* c_n)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // cudnnRNNForward in training mode into `out`, its reserve space into saved->state.
  absl::Status RecurrentTrainingForwardLocked(RecurrentCell cell, float* out, const float* inp,
                                              const RecurrentDirectionWeights* weights,
                                              const RecurrentDims& dims, int num_layers,
                                              RecurrentSaved& saved)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `inference`: the plan serves forward inference only, so it may use options_.rnn_algo.
  // `storage16`: 16-bit data (bf16 or fp16 by options_.math) where cuDNN accepts it; the
  // plan's data_type says what it got. `time_major`: x and y in cuDNN's packed sequence-major
  // layout (T, B, ...) rather than batch-major (which one row is anyway).
  absl::StatusOr<RnnPlan*> PlanLocked(RecurrentCell cell, const RecurrentDims& dims, int num_layers,
                                      bool inference, bool storage16, bool time_major)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::StatusOr<std::shared_ptr<RnnPlan>> BuildPlanLocked(
      RecurrentCell cell, const RecurrentDims& dims, int num_layers, cudnnRNNAlgo_t algo,
      cudnnDataType_t data_type, bool time_major) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Runs `queue`, which queues a recurrent training call of `plan` on the stream touching only
  // the memory `key` names (with its shape implied by the plan): directly the first time the
  // key is seen, as a captured CUDA graph the second time, replaying that graph afterwards
  // (Options::rnn_training_graphs).
  absl::Status RecordedTrainingCallLocked(RnnPlan& plan, std::vector<uintptr_t> key,
                                          absl::FunctionRef<absl::Status()> queue)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Copies the caller's per-direction weights into cuDNN's weight space, or (Gradients) cuDNN's
  // weight gradients out to the caller's buffers.
  absl::Status CopyWeightsInLocked(const RnnPlan& plan, const RecurrentDirectionWeights* weights,
                                   void* weight_space) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  absl::Status CopyGradientsOutLocked(const RnnPlan& plan, const float* weight_grads,
                                      const RecurrentDirectionGrads* dweights)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::optional<StreamLease> lease_;  // set when the backend owns its stream
  const CudaStreamContext context_;
  CudaAllocator* const allocator_;
  const Options options_;

  mutable absl::Mutex mu_;
  DeviceBuffer scratch_[kScratchCount] ABSL_GUARDED_BY(mu_);
  const std::unique_ptr<LtBiasGemms> bias_gemms_ ABSL_GUARDED_BY(mu_);
  std::map<RnnKey, std::shared_ptr<RnnPlan>> plans_ ABSL_GUARDED_BY(mu_);
  uint64_t plan_clock_ ABSL_GUARDED_BY(mu_) = 0;  // stamps plans' last use, for eviction
  Stats stats_ ABSL_GUARDED_BY(mu_);
  ResidentStep* resident_ ABSL_GUARDED_BY(mu_) = nullptr;
  bool step_finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUDA_BACKEND_H_
