// The CUDA backend's cuBLAS GEMMs over fp32 tensors: one product or a strided batch of them
// (RunGemm), and products with the bias added in cuBLASLt's epilogue (LtBiasGemms), with the
// backend's math mode deciding how cuBLAS may round the inputs for tensor cores (accumulation
// and storage stay fp32). Used by cuda_backend.cc (Linear) and cuda_attention.cc.
// Thread-compatible: calls on one handle must not overlap.
#ifndef FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_
#define FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_

#include <cublas_v2.h>

#include <array>
#include <cstdint>
#include <map>
#include <memory>

#include "absl/status/status.h"
#include "backends/cuda/cuda_backend.h"

namespace forecastd {

// C_i (M x N, column-major) = alpha * op_a(A_i) (M x K) @ op_b(B_i) (K x N) for i < batch, where
// X_i = X + i * stride_x (elements). Strides are ignored when batch is 1. A and B are fp32, or
// both of a 16-bit type (ab_type CUDA_R_16BF / CUDA_R_16F: rounded already, so the product runs
// on 16-bit tensor cores with fp32 accumulation whatever the math mode); C is fp32.
struct GemmBatch {
  cublasOperation_t op_a = CUBLAS_OP_N;
  cublasOperation_t op_b = CUBLAS_OP_N;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  cudaDataType_t ab_type = CUDA_R_32F;
  const void* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const void* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

// Queues the product on the handle's stream. INVALID_ARGUMENT when a size is beyond cuBLAS's
// int range; cuBLAS's own errors wrapped (library_status.h).
absl::Status RunGemm(cublasHandle_t handle, const GemmBatch& gemm, CudaBackend::Options::Math math);

// D = op_a(A) @ op_b(B) + bias, the bias (M floats) added to every column of D in cuBLASLt's
// epilogue instead of a separate pass over D. One operation descriptor, layouts and algorithm
// per shape, math mode and pointer alignment, kept (at most kMaxPlans; then all are dropped and
// rebuilt on demand). A shape cuBLASLt has no fused algorithm for falls back to RunGemm plus our
// bias kernel, so Run fails only on a real error. Thread-compatible; borrows the context's
// cuBLAS / cuBLASLt handles, stream and workspace, which must outlive it.
class LtBiasGemms {
 public:
  static constexpr size_t kMaxPlans = 256;

  explicit LtBiasGemms(const CudaStreamContext& context);
  ~LtBiasGemms();
  LtBiasGemms(const LtBiasGemms&) = delete;
  LtBiasGemms& operator=(const LtBiasGemms&) = delete;

  // `gemm.batch` must be 1, its alpha 1 and D dense (ldc == M).
  absl::Status Run(const GemmBatch& gemm, const float* bias, CudaBackend::Options::Math math);

  int64_t fused_calls() const { return fused_calls_; }        // epilogue bias
  int64_t fallback_calls() const { return fallback_calls_; }  // GEMM, then our bias kernel

 private:
  struct Plan;  // null algorithm: no fused kernel for this key
  // op_a, op_b, M, N, K, lda, ldb, ldc, math, alignment of A, B, C and bias, ab_type
  using Key = std::array<int64_t, 14>;

  const CudaStreamContext context_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  int64_t fused_calls_ = 0;
  int64_t fallback_calls_ = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_
