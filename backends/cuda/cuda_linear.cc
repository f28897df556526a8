// CudaBackend's Linear and its backward: cuBLAS / cuBLASLt GEMMs (backends/cuda/cublas_gemm.h) in
// the math mode's precision, the bias in the GEMM's epilogue where cuBLASLt has one (our
// kernels/cuda/linear_bias otherwise), and under kBf16 / kFp16 the large products' operands
// rounded to 16 bits first (kMinGemm16Macs).
#include <cuda_runtime_api.h>

#include <initializer_list>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "kernels/base/status.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/linear_bias.h"

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

// --- GEMMs

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
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
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
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
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

}  // namespace forecastd
