// The CUDA backend's cuBLAS GEMMs over fp32 tensors: one product or a strided batch of them,
// with the backend's math mode deciding how cuBLAS may round the inputs for tensor cores
// (accumulation and storage stay fp32). Used by cuda_backend.cc (Linear) and
// cuda_attention.cc. Thread-compatible: calls on one handle must not overlap.
#ifndef FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_
#define FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_

#include <cublas_v2.h>

#include <cstdint>

#include "absl/status/status.h"
#include "backends/cuda/cuda_backend.h"

namespace forecastd {

// C_i (M x N, column-major) = alpha * op_a(A_i) (M x K) @ op_b(B_i) (K x N) for i < batch, where
// X_i = X + i * stride_x (floats). Strides are ignored when batch is 1.
struct GemmBatch {
  cublasOperation_t op_a = CUBLAS_OP_N;
  cublasOperation_t op_b = CUBLAS_OP_N;
  int64_t M = 0, N = 0, K = 0;
  float alpha = 1.0f;
  const float* A = nullptr;
  int64_t lda = 0, stride_a = 0;
  const float* B = nullptr;
  int64_t ldb = 0, stride_b = 0;
  float* C = nullptr;
  int64_t ldc = 0, stride_c = 0;
  int64_t batch = 1;
};

// Queues the product on the handle's stream. INVALID_ARGUMENT when a size is beyond cuBLAS's
// int range; cuBLAS's own errors wrapped (library_status.h).
absl::Status RunGemm(cublasHandle_t handle, const GemmBatch& gemm, CudaBackend::Options::Math math);

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUBLAS_GEMM_H_
