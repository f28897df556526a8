// Layer normalisation over the last dimension (nn.LayerNorm) for the CUDA backend, forward and
// backward, mirroring kernels/ref (normalization.h) with device pointers and a trailing
// stream. Launchers only; the kernels live in normalization.cu. Thread-safe: each call works
// on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_NORMALIZATION_H_
#define FORECASTD_KERNELS_CUDA_NORMALIZATION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out[n, c] = (inp[n, c] - mean_n) / sqrt(var_n + eps) * gamma[c] + beta[c], biased variance.
//   out (N, C), inp (N, C), gamma (C), beta (C)
//   mean (N), rstd (N): the statistics, or nullptr
absl::Status LayerNormForward(float* out, float* mean, float* rstd, const float* inp,
                              const float* gamma, const float* beta, int64_t N, int64_t C,
                              float eps, cudaStream_t stream);

// Gradients of LayerNormForward given dout (N, C); the statistics are recomputed from inp.
// Written, not accumulated; nullptr for one that is not wanted.
//   dinp (N, C), dgamma (C), dbeta (C)
// dgamma and dbeta are column sums over N taken in a fixed order (no atomics), so they are
// bit-for-bit reproducible. When either is wanted the call borrows 2N floats of
// stream-ordered scratch (cudaMallocAsync), returned before the work completes.
absl::Status LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                               const float* inp, const float* gamma, int64_t N, int64_t C,
                               float eps, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_NORMALIZATION_H_
