// The CUDA backend's cuBLAS GEMMs over fp32 tensors: one product or a strided batch of them
// (RunGemm), and products with a bias added, or its gradient taken, in cuBLASLt's epilogue
// (LtBiasGemms), with the
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
#include "absl/status/statusor.h"
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

// What cuBLASLt's epilogue does with a linear layer's bias vector:
//   kBias:         D = op_a(A) @ op_b(B) + bias, the bias (M floats) added to every column;
//   kBiasGradient: D = op_a(A) @ op_b(B), and the vector (N floats) receives the column sums of
//                  op_b(B) (K x N): a weight gradient's product also yields the bias gradient.
enum class LtEpilogue { kBias, kBiasGradient };

// Products with a bias in cuBLASLt's epilogue instead of a separate pass over D or over the
// output gradient. One operation descriptor, layouts and algorithm per shape, epilogue, math
// mode and pointer alignment, kept (at most kMaxPlans; then all are dropped and rebuilt on
// demand). Thread-compatible; borrows the context's cuBLAS / cuBLASLt handles, stream and
// workspace, which must outlive it.
class LtBiasGemms {
 public:
  static constexpr size_t kMaxPlans = 256;

  explicit LtBiasGemms(const CudaStreamContext& context);
  ~LtBiasGemms();
  LtBiasGemms(const LtBiasGemms&) = delete;
  LtBiasGemms& operator=(const LtBiasGemms&) = delete;

  // Queues the product with `epilogue` on `vector` and returns true, or returns false having
  // queued nothing when cuBLASLt has no fused algorithm for it. `gemm.batch` must be 1, its
  // alpha 1 and D dense (ldc == M).
  absl::StatusOr<bool> TryRun(const GemmBatch& gemm, LtEpilogue epilogue, float* vector,
                              CudaBackend::Options::Math math);
  // kBias, falling back to RunGemm plus our bias kernel, so it fails only on a real error.
  absl::Status Run(const GemmBatch& gemm, const float* bias, CudaBackend::Options::Math math);

  int64_t fused_calls() const { return fused_calls_; }        // epilogue bias
  int64_t fallback_calls() const { return fallback_calls_; }  // GEMM, then our bias kernel
  int64_t fused_gradient_calls() const { return fused_gradient_calls_; }  // epilogue gradient

 private:
  struct Plan;  // null algorithm: no fused kernel for this key
  // op_a, op_b, M, N, K, lda, ldb, ldc, math, alignment of A, B, C and the vector, ab_type,
  // epilogue
  using Key = std::array<int64_t, 15>;

  const CudaStreamContext context_;
  std::map<Key, std::unique_ptr<Plan>> plans_;
  int64_t fused_calls_ = 0;
  int64_t fallback_calls_ = 0;
  int64_t fused_gradient_calls_ = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_
