#include "backends/cuda/cublas_gemm.h"

#include <climits>

#include "absl/strings/str_cat.h"
#include "backends/cuda/library_status.h"
#include "kernels/base/status.h"

namespace forecastd {

absl::Status RunGemm(cublasHandle_t handle, const GemmBatch& g, CudaBackend::Options::Math math) {
  for (const int64_t v : {g.M, g.N, g.K, g.lda, g.ldb, g.ldc, g.batch}) {
    if (v < 0 || v > INT_MAX) {
      return absl::InvalidArgumentError(
          absl::StrCat("CudaBackend: GEMM dimension ", v, " outside cuBLAS's int range"));
    }
  }
  const float beta = 0.0f;
  // CUBLAS_COMPUTE_32F keeps fp32 multiplies and accumulation whatever the handle's math mode;
  // the fast variants let cuBLAS round the inputs for tensor cores and accumulate in fp32.
  using Math = CudaBackend::Options::Math;
  const cublasComputeType_t compute = math == Math::kTf32   ? CUBLAS_COMPUTE_32F_FAST_TF32
                                      : math == Math::kBf16 ? CUBLAS_COMPUTE_32F_FAST_16BF
                                      : math == Math::kFp16 ? CUBLAS_COMPUTE_32F_FAST_16F
                                                            : CUBLAS_COMPUTE_32F;
  const int m = static_cast<int>(g.M), n = static_cast<int>(g.N), k = static_cast<int>(g.K);
  const int lda = static_cast<int>(g.lda), ldb = static_cast<int>(g.ldb);
  const int ldc = static_cast<int>(g.ldc);
  if (g.batch == 1) {
    CUBLAS_RETURN_IF_ERROR(cublasGemmEx(handle, g.op_a, g.op_b, m, n, k, &g.alpha, g.A, CUDA_R_32F,
                                        lda, g.B, CUDA_R_32F, ldb, &beta, g.C, CUDA_R_32F, ldc,
                                        compute, CUBLAS_GEMM_DEFAULT));
    return absl::OkStatus();
  }
  CUBLAS_RETURN_IF_ERROR(cublasGemmStridedBatchedEx(
      handle, g.op_a, g.op_b, m, n, k, &g.alpha, g.A, CUDA_R_32F, lda, g.stride_a, g.B, CUDA_R_32F,
      ldb, g.stride_b, &beta, g.C, CUDA_R_32F, ldc, g.stride_c, static_cast<int>(g.batch), compute,
      CUBLAS_GEMM_DEFAULT));
  return absl::OkStatus();
}

}  // namespace forecastd
