#include "backends/cuda/cuda_backend.h"

#include <cuda_runtime_api.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/library_status.h"
#include "kernels/cuda/activation.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/normalization.h"
#include "kernels/cuda/positional_encoding.h"
#include "kernels/cuda/softmax.h"

namespace forecastd {

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
  if (options.persistent_max_batch < 0 || options.persistent_max_batch_16 < 0) {
    return absl::InvalidArgumentError(
        "CudaBackend: persistent_max_batch and persistent_max_batch_16 must be >= 0");
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

absl::StatusOr<float*> CudaBackend::ScratchFloatsLocked(Scratch which, int64_t n) {
  ASSIGN_OR_RETURN(void* data, ScratchLocked(which, n * static_cast<int64_t>(sizeof(float))));
  return static_cast<float*>(data);
}

absl::StatusOr<void*> CudaBackend::WorkspaceLocked(int64_t bytes) {
  if (bytes <= context_.workspace_bytes) return context_.workspace;
  return ScratchLocked(kWorkspace, bytes);
}

// --- LSTM / GRU (the work is in cuda_recurrent.cc)

absl::Status CudaBackend::LstmLayer(float* out, float* h_n, float* c_n, const float* inp,
                                    const float* h_0, const float* c_0,
                                    const RecurrentDirectionWeights* weights,
                                    const RecurrentDims& dims) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecurrentForwardLocked(RecurrentCell::kLstm, out, h_n, c_n, inp, h_0, c_0, weights, dims,
                                  /*num_layers=*/1);
  });
}

absl::Status CudaBackend::GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                                   const RecurrentDirectionWeights* weights,
                                   const RecurrentDims& dims) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
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
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (PersistentStack(dims, num_layers)) {
      return PersistentStackLocked(cell, out, /*out_last=*/nullptr, inp, weights, dims, num_layers);
    }
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
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecurrentTrainingForwardLocked(cell, out, inp, weights, dims, num_layers, *saved);
  });
}

absl::Status CudaBackend::LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                            const float* dout, const float* inp, const float* h_0,
                                            const float* c_0,
                                            const RecurrentDirectionWeights* weights,
                                            const RecurrentDims& dims) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecurrentBackwardLocked(RecurrentCell::kLstm, dinp, dweights, dout, inp, h_0, c_0,
                                   weights, dims, /*num_layers=*/1, /*saved=*/nullptr);
  });
}

absl::Status CudaBackend::GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                           const float* dout, const float* inp, const float* h_0,
                                           const RecurrentDirectionWeights* weights,
                                           const RecurrentDims& dims) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecurrentBackwardLocked(RecurrentCell::kGru, dinp, dweights, dout, inp, h_0,
                                   /*c_0=*/nullptr, weights, dims, /*num_layers=*/1,
                                   /*saved=*/nullptr);
  });
}

absl::Status CudaBackend::RecurrentStackBackward(
    RecurrentCell cell, float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
    float* /*scratch*/, const float* inp, const RecurrentDirectionWeights* weights,
    const RecurrentDims& dims, int num_layers, RecurrentSaved* saved) {
  if (num_layers < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackBackward: num_layers is ", num_layers, "; it must be >= 1"));
  }
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return RecurrentBackwardLocked(cell, dinp, dweights, dout, inp, /*h_0=*/nullptr,
                                   /*c_0=*/nullptr, weights, dims, num_layers, saved);
  });
}

// --- the rest: our kernels (kernels/cuda/), which check their own arguments

absl::Status CudaBackend::LayerNorm(float* out, float* mean, float* rstd, const float* inp,
                                    const float* gamma, const float* beta, int64_t N, int64_t C,
                                    float eps) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::LayerNormForward(out, mean, rstd, inp, gamma, beta, N, C, eps, context_.stream);
  });
}

absl::Status CudaBackend::Gelu(float* out, const float* inp, int64_t n, GeluForm form) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::GeluForward(out, inp, n, form, context_.stream);
  });
}

absl::Status CudaBackend::Relu(float* out, const float* inp, int64_t n) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::ReluForward(out, inp, n, context_.stream);
  });
}

absl::Status CudaBackend::Softmax(float* out, const float* inp, int64_t R, int64_t C) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::SoftmaxForward(out, inp, R, C, context_.stream);
  });
}

absl::Status CudaBackend::AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B,
                                             int64_t T, int64_t D, int64_t NH) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::AttentionLastQueryForward(out, q, kv, B, T, D, NH, context_.stream);
  });
}

absl::Status CudaBackend::Residual(float* out, const float* a, const float* b, int64_t n) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::ResidualForward(out, a, b, n, context_.stream);
  });
}

absl::Status CudaBackend::PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                             int64_t D) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::PositionalEncodingForward(out, inp, B, T, D, context_.stream);
  });
}

absl::Status CudaBackend::LayerNormBackward(float* dinp, float* dgamma, float* dbeta,
                                            const float* dout, const float* inp, const float* gamma,
                                            int64_t N, int64_t C, float eps) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::LayerNormBackward(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps,
                                   context_.stream);
  });
}

absl::Status CudaBackend::GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                                       GeluForm form) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::GeluBackward(dinp, dout, inp, n, form, context_.stream);
  });
}

absl::Status CudaBackend::ReluBackward(float* dinp, const float* dout, const float* inp,
                                       int64_t n) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::ReluBackward(dinp, dout, inp, n, context_.stream);
  });
}

absl::Status CudaBackend::SoftmaxBackward(float* dinp, const float* dout, const float* out,
                                          int64_t R, int64_t C) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::SoftmaxBackward(dinp, dout, out, R, C, context_.stream);
  });
}

absl::Status CudaBackend::AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                     const float* q, const float* kv, int64_t B,
                                                     int64_t T, int64_t D, int64_t NH) {
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return cuda::AttentionLastQueryBackward(dq, dkv, dout, q, kv, B, T, D, NH, context_.stream);
  });
}

}  // namespace forecastd
