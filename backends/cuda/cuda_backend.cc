#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <initializer_list>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/library_status.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/linear_bias.h"
#include "kernels/cuda/normalization.h"
#include "kernels/cuda/positional_encoding.h"
#include "kernels/cuda/softmax.h"

namespace forecastd {
namespace {

absl::Status Zero(float* data, int64_t n, cudaStream_t stream) {
  if (data == nullptr || n <= 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemsetAsync(data, 0, static_cast<size_t>(n) * sizeof(float), stream));
  return absl::OkStatus();
}

absl::Status NonNegative(absl::string_view op, std::initializer_list<int64_t> dims) {
  for (const int64_t d : dims) {
    if (d < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaBackend::", op, ": negative dimension ", d));
    }
  }
  return absl::OkStatus();
}

}  // namespace

// --- construction

absl::Status CudaBackend::Validate(const CudaStreamContext& context, const CudaAllocator* allocator,
                                   const Options& options) {
  if (allocator == nullptr || allocator->device() != context.device) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend: needs the allocator of cuda:", context.device));
  }
  if (context.stream == nullptr || context.cublas == nullptr || context.cudnn == nullptr) {
    return absl::InvalidArgumentError(
        "CudaBackend: the stream context needs a stream and cuBLAS and cuDNN handles");
  }
  if (options.rnn_plan_capacity <= 0) {
    return absl::InvalidArgumentError("CudaBackend: rnn_plan_capacity must be > 0");
  }
  if (options.attention_scratch_bytes <= 0) {
    return absl::InvalidArgumentError("CudaBackend: attention_scratch_bytes must be > 0");
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(StreamLease lease,
                                                                 CudaAllocator* allocator,
                                                                 const Options& options) {
  const CudaStreamContext context = lease.context();
  RETURN_IF_ERROR(Validate(context, allocator, options));
  return std::unique_ptr<CudaBackend>(
      new CudaBackend(std::move(lease), context, allocator, options));
}

absl::StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::Create(const CudaStreamContext& context,
                                                                 CudaAllocator* allocator,
                                                                 const Options& options) {
  RETURN_IF_ERROR(Validate(context, allocator, options));
  return std::unique_ptr<CudaBackend>(new CudaBackend(std::nullopt, context, allocator, options));
}

CudaBackend::CudaBackend(std::optional<StreamLease> lease, const CudaStreamContext& context,
                         CudaAllocator* allocator, const Options& options)
    : lease_(std::move(lease)),
      context_(context),
      allocator_(allocator),
      options_(options),
      bias_gemms_(std::make_unique<LtBiasGemms>(context)) {}

CudaBackend::~CudaBackend() {
  absl::MutexLock lock(&mu_);
  const ScopedCudaDevice scoped(context_.device);
  // Queued work may still read the scratch and the plans' sequence lengths.
  cudaStreamSynchronize(context_.stream);
  cudaGetLastError();
  plans_.clear();
  for (DeviceBuffer& buffer : scratch_) buffer.Reset();
}

bool CudaBackend::SupportsOp(Op) const { return true; }

bool CudaBackend::HasFastPath(FastPath) const { return true; }

absl::Status CudaBackend::Run(absl::FunctionRef<absl::Status()> body) {
  absl::MutexLock lock(&mu_);
  const ScopedCudaDevice scoped(context_.device);
  RETURN_IF_ERROR(scoped.status());
  return body();
}

absl::Status CudaBackend::Synchronize() {
  const ScopedCudaDevice scoped(context_.device);
  RETURN_IF_ERROR(scoped.status());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context_.stream));
  return absl::OkStatus();
}

CudaBackend::Stats CudaBackend::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats = stats_;
  stats.rnn_plans_cached = static_cast<int64_t>(plans_.size());
  stats.scratch_bytes = 0;
  for (const DeviceBuffer& buffer : scratch_) stats.scratch_bytes += buffer.block_bytes();
  stats.fused_bias_gemms = bias_gemms_->fused_calls();
  stats.bias_kernel_gemms = bias_gemms_->fallback_calls();
  stats.fused_bias_grads = bias_gemms_->fused_gradient_calls();
  return stats;
}

// --- scratch

absl::StatusOr<void*> CudaBackend::ScratchLocked(Scratch which, int64_t bytes) {
  DeviceBuffer& buffer = scratch_[which];
  if (bytes <= buffer.block_bytes()) return buffer.data();  // the whole size class is ours
  if (!buffer.empty()) {
    // Work queued on the stream may still use the old block, and the allocator may hand it to
    // another stream at once.
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(context_.stream));
    buffer.Reset();
  }
  ASSIGN_OR_RETURN(buffer, allocator_->Allocate(bytes));
  ++stats_.scratch_grows;
  return buffer.data();
}

std::optional<cuda::Storage16> CudaBackend::Storage16() const {
  switch (options_.math) {
    case Options::Math::kBf16:
      return cuda::Storage16::kBf16;
    case Options::Math::kFp16:
      return cuda::Storage16::kFp16;
    default:
      return std::nullopt;
  }
}

absl::StatusOr<const void*> CudaBackend::Operand16Locked(Scratch which, const float* x, int64_t n) {
  ASSIGN_OR_RETURN(void* to, ScratchLocked(which, n * 2));
  RETURN_IF_ERROR(cuda::ConvertTo16(to, x, n, *Storage16(), context_.stream));
  return to;
}

bool CudaBackend::Gemm16(int64_t macs) const {
  return Storage16().has_value() && macs >= kMinGemm16Macs;
}

absl::Status CudaBackend::LinearGemmLocked(GemmBatch gemm, const void* a16, const void* b16,
                                           const float* bias, float* bias_grad) {
  const std::optional<cuda::Storage16> type = Storage16();
  const float* const b32 = static_cast<const float*>(gemm.B);
  if (Gemm16(gemm.M * gemm.N * gemm.K)) {
    if (a16 == nullptr) {
      ASSIGN_OR_RETURN(
          a16, Operand16Locked(kGemmA16, static_cast<const float*>(gemm.A), gemm.M * gemm.K));
    }
    gemm.A = a16;
    if (b16 == nullptr) {
      ASSIGN_OR_RETURN(
          b16, Operand16Locked(kGemmB16, static_cast<const float*>(gemm.B), gemm.K * gemm.N));
    }
    gemm.B = b16;
    gemm.ab_type = *type == cuda::Storage16::kBf16 ? CUDA_R_16BF : CUDA_R_16F;
  }
  // The bias in the GEMM's epilogue saves a pass over out (a few per cent of a transformer),
  // and its gradient there one over the output gradient.
  if (bias != nullptr) return bias_gemms_->Run(gemm, bias, options_.math);
  if (bias_grad != nullptr) {
    ASSIGN_OR_RETURN(const bool fused, bias_gemms_->TryRun(gemm, LtEpilogue::kBiasGradient,
                                                           bias_grad, options_.math));
    if (fused) return absl::OkStatus();
    RETURN_IF_ERROR(RunGemm(context_.cublas, gemm, options_.math));
    // op_b(B) is (K x N) with B stored transposed and dense: row-major (K, N) in fp32.
    return cuda::BiasGrad(bias_grad, b32, gemm.K, gemm.N, context_.stream);
  }
  return RunGemm(context_.cublas, gemm, options_.math);
}

absl::StatusOr<float*> CudaBackend::ScratchFloatsLocked(Scratch which, int64_t n) {
  ASSIGN_OR_RETURN(void* data, ScratchLocked(which, n * static_cast<int64_t>(sizeof(float))));
  return static_cast<float*>(data);
}

absl::StatusOr<void*> CudaBackend::WorkspaceLocked(int64_t bytes) {
  if (bytes <= context_.workspace_bytes) return context_.workspace;
  return ScratchLocked(kWorkspace, bytes);
}

// --- Linear: nn.Linear's row-major (OUT, IN) weight is cuBLAS's column-major (IN, OUT) matrix,
// and every row-major (R, C) activation a column-major (C, R) one; so out^T = W^T-as-stored
// applied to inp^T, i.e. out_cm (OUT x N) = op_T(W_cm (IN x OUT)) @ inp_cm (IN x N).

absl::Status CudaBackend::Linear(float* out, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t IN, int64_t OUT) {
  return LinearForTraining(out, /*saved=*/nullptr, inp, weight, bias, N, IN, OUT);
}

int64_t CudaBackend::LinearSavedFloats(int64_t N, int64_t IN, int64_t OUT) const {
  // inp rounded to 16 bits, two values a float.
  return N > 0 && IN > 0 && OUT > 0 && Gemm16(N * IN * OUT) ? (N * IN + 1) / 2 : 0;
}

absl::Status CudaBackend::LinearForTraining(float* out, float* saved, const float* inp,
                                            const float* weight, const float* bias, int64_t N,
                                            int64_t IN, int64_t OUT) {
  RETURN_IF_ERROR(NonNegative("Linear", {N, IN, OUT}));
  if (N == 0 || OUT == 0) return absl::OkStatus();
  // Only a product that takes 16-bit operands has anything to keep.
  if (LinearSavedFloats(N, IN, OUT) == 0) saved = nullptr;
  return Run([&]() -> absl::Status {
    if (IN == 0) {
      RETURN_IF_ERROR(Zero(out, N * OUT, context_.stream));
      if (bias == nullptr) return absl::OkStatus();
      return cuda::AddBias(out, bias, N, OUT, context_.stream);
    }
    if (saved != nullptr) {
      RETURN_IF_ERROR(cuda::ConvertTo16(saved, inp, N * IN, *Storage16(), context_.stream));
    }
    return LinearGemmLocked({.op_a = CUBLAS_OP_T,
                             .M = OUT,
                             .N = N,
                             .K = IN,
                             .A = weight,
                             .lda = IN,
                             .B = inp,
                             .ldb = IN,
                             .C = out,
                             .ldc = OUT},
                            /*a16=*/nullptr, /*b16=*/saved, bias);
  });
}

absl::Status CudaBackend::LinearBackward(float* dinp, float* dweight, float* dbias,
                                         const float* dout, const float* inp, const float* saved,
                                         const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  RETURN_IF_ERROR(NonNegative("LinearBackward", {N, IN, OUT}));
  return Run([&]() -> absl::Status {
    const cudaStream_t stream = context_.stream;
    // dout, rounded to 16 bits once when the products take 16-bit operands, serves both
    // (their multiply-adds are the same count, N * IN * OUT).
    const void* dout16 = nullptr;
    if (Gemm16(N * IN * OUT) && (dinp != nullptr || dweight != nullptr)) {
      ASSIGN_OR_RETURN(dout16, Operand16Locked(kGemmB16, dout, N * OUT));
    }
    // dinp (N, IN) = dout (N, OUT) @ W (OUT, IN):  dinp_cm (IN x N) = W_cm (IN x OUT) @ dout_cm.
    if (dinp != nullptr && N > 0 && IN > 0) {
      if (OUT == 0) {
        RETURN_IF_ERROR(Zero(dinp, N * IN, stream));
      } else {
        RETURN_IF_ERROR(LinearGemmLocked({.M = IN,
                                          .N = N,
                                          .K = OUT,
                                          .A = weight,
                                          .lda = IN,
                                          .B = dout,
                                          .ldb = OUT,
                                          .C = dinp,
                                          .ldc = IN},
                                         /*a16=*/nullptr, dout16, /*bias=*/nullptr));
      }
    }
    // dweight (OUT, IN) = dout^T @ inp:  dweight_cm (IN x OUT) = inp_cm (IN x N) @ dout_cm^T,
    // with inp as LinearForTraining rounded it when it kept it, and dbias (OUT), the column
    // sums of dout, from the same product. Rounding inp into kGemmA16 while it may still hold W
    // for the product above is safe: stream order.
    const bool weight_product = dweight != nullptr && OUT > 0 && IN > 0 && N > 0;
    if (dweight != nullptr && OUT > 0 && IN > 0) {
      if (!weight_product) {
        RETURN_IF_ERROR(Zero(dweight, OUT * IN, stream));
      } else {
        RETURN_IF_ERROR(LinearGemmLocked({.op_b = CUBLAS_OP_T,
                                          .M = IN,
                                          .N = OUT,
                                          .K = N,
                                          .A = inp,
                                          .lda = IN,
                                          .B = dout,
                                          .ldb = OUT,
                                          .C = dweight,
                                          .ldc = IN},
                                         /*a16=*/saved, dout16, /*bias=*/nullptr, dbias));
      }
    }
    if (dbias != nullptr && OUT > 0 && !weight_product) {
      if (N == 0) return Zero(dbias, OUT, stream);
      return cuda::BiasGrad(dbias, dout, N, OUT, stream);
    }
    return absl::OkStatus();
  });
}

// --- LSTM / GRU (the work is in cuda_recurrent.cc)

absl::Status CudaBackend::LstmLayer(float* out, float* h_n, float* c_n, const float* inp,
                                    const float* h_0, const float* c_0,
                                    const RecurrentDirectionWeights* weights,
                                    const RecurrentDims& dims) {
  return Run([&] {
    return RecurrentForwardLocked(RecurrentCell::kLstm, out, h_n, c_n, inp, h_0, c_0, weights, dims,
                                  /*num_layers=*/1);
  });
}

absl::Status CudaBackend::GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                                   const RecurrentDirectionWeights* weights,
                                   const RecurrentDims& dims) {
  return Run([&] {
    return RecurrentForwardLocked(RecurrentCell::kGru, out, h_n, /*c_n=*/nullptr, inp, h_0,
                                  /*c_0=*/nullptr, weights, dims, /*num_layers=*/1);
  });
}

absl::Status CudaBackend::RecurrentStack(RecurrentCell cell, float* out, float* /*scratch*/,
                                         const float* inp, const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims, int num_layers) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStack: num_layers is ", num_layers, "; it must be >= 1"));
  }
  return Run([&] {
    return RecurrentForwardLocked(cell, out, /*h_n=*/nullptr, /*c_n=*/nullptr, inp,
                                  /*h_0=*/nullptr, /*c_0=*/nullptr, weights, dims, num_layers);
  });
}

absl::Status CudaBackend::RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                                    const float* inp,
                                                    const RecurrentDirectionWeights* weights,
                                                    const RecurrentDims& dims, int num_layers,
                                                    RecurrentSaved* saved) {
  if (saved != nullptr) saved->filled = false;
  if (saved == nullptr || saved->state == nullptr) {
    return RecurrentStack(cell, out, scratch, inp, weights, dims, num_layers);
  }
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackForTraining: num_layers is ", num_layers, "; it must be >= 1"));
  }
  return Run([&] {
    return RecurrentTrainingForwardLocked(cell, out, inp, weights, dims, num_layers, *saved);
  });
}

absl::Status CudaBackend::LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                            const float* dout, const float* inp, const float* h_0,
                                            const float* c_0,
                                            const RecurrentDirectionWeights* weights,
                                            const RecurrentDims& dims) {
  return Run([&] {
    return RecurrentBackwardLocked(RecurrentCell::kLstm, dinp, dweights, dout, inp, h_0, c_0,
                                   weights, dims, /*num_layers=*/1, /*saved=*/nullptr);
  });
}

absl::Status CudaBackend::GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                           const float* dout, const float* inp, const float* h_0,
                                           const RecurrentDirectionWeights* weights,
                                           const RecurrentDims& dims) {
  return Run([&] {
    return RecurrentBackwardLocked(RecurrentCell::kGru, dinp, dweights, dout, inp, h_0,
                                   /*c_0=*/nullptr, weights, dims, /*num_layers=*/1,
                                   /*saved=*/nullptr);
  });
}

absl::Status CudaBackend::RecurrentStackBackward(
    RecurrentCell cell, float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
    float* /*scratch*/, const float* inp, const RecurrentDirectionWeights* weights,
    const RecurrentDims& dims, int num_layers, const RecurrentSaved* saved) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackBackward: num_layers is ", num_layers, "; it must be >= 1"));
  }
  return Run([&] {
    return RecurrentBackwardLocked(cell, dinp, dweights, dout, inp, /*h_0=*/nullptr,
                                   /*c_0=*/nullptr, weights, dims, num_layers, saved);
  });
}

// --- the rest: our kernels (kernels/cuda/), which check their own arguments

absl::Status CudaBackend::LayerNorm(float* out, float* mean, float* rstd, const float* inp,
                                    const float* gamma, const float* beta, int64_t N, int64_t C,
                                    float eps) {
  return Run([&] {
    return cuda::LayerNormForward(out, mean, rstd, inp, gamma, beta, N, C, eps, context_.stream);
  });
}

absl::Status CudaBackend::Gelu(float* out, const float* inp, int64_t n, GeluForm form) {
  return Run([&] { return cuda::GeluForward(out, inp, n, form, context_.stream); });
}

absl::Status CudaBackend::Relu(float* out, const float* inp, int64_t n) {
  return Run([&] { return cuda::ReluForward(out, inp, n, context_.stream); });
}

absl::Status CudaBackend::Softmax(float* out, const float* inp, int64_t R, int64_t C) {
  return Run([&] { return cuda::SoftmaxForward(out, inp, R, C, context_.stream); });
}

absl::Status CudaBackend::AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B,
                                             int64_t T, int64_t D, int64_t NH) {
  return Run(
      [&] { return cuda::AttentionLastQueryForward(out, q, kv, B, T, D, NH, context_.stream); });
}

absl::Status CudaBackend::Residual(float* out, const float* a, const float* b, int64_t n) {
  return Run([&] { return cuda::ResidualForward(out, a, b, n, context_.stream); });
}

absl::Status CudaBackend::PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                             int64_t D) {
  return Run([&] { return cuda::PositionalEncodingForward(out, inp, B, T, D, context_.stream); });
}

absl::Status CudaBackend::LayerNormBackward(float* dinp, float* dgamma, float* dbeta,
                                            const float* dout, const float* inp, const float* gamma,
                                            int64_t N, int64_t C, float eps) {
  return Run([&] {
    return cuda::LayerNormBackward(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps,
                                   context_.stream);
  });
}

absl::Status CudaBackend::GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                                       GeluForm form) {
  return Run([&] { return cuda::GeluBackward(dinp, dout, inp, n, form, context_.stream); });
}

absl::Status CudaBackend::ReluBackward(float* dinp, const float* dout, const float* inp,
                                       int64_t n) {
  return Run([&] { return cuda::ReluBackward(dinp, dout, inp, n, context_.stream); });
}

absl::Status CudaBackend::SoftmaxBackward(float* dinp, const float* dout, const float* out,
                                          int64_t R, int64_t C) {
  return Run([&] { return cuda::SoftmaxBackward(dinp, dout, out, R, C, context_.stream); });
}

absl::Status CudaBackend::AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                     const float* q, const float* kv, int64_t B,
                                                     int64_t T, int64_t D, int64_t NH) {
  return Run([&] {
    return cuda::AttentionLastQueryBackward(dq, dkv, dout, q, kv, B, T, D, NH, context_.stream);
  });
}

}  // namespace forecastd
