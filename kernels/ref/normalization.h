// Reference (naive, fp32) layer normalisation over the last dimension, as nn.LayerNorm.
// Thread-safe.
#ifndef FORECASTD_KERNELS_REF_NORMALIZATION_H_
#define FORECASTD_KERNELS_REF_NORMALIZATION_H_

#include <cstdint>

namespace forecastd::ref {

// out[n, c] = (inp[n, c] - mean_n) / sqrt(var_n + eps) * gamma[c] + beta[c]
// with the biased variance, as PyTorch computes it.
//   out (N, C), inp (N, C), gamma (C), beta (C)
//   mean (N), rstd (N): the statistics, saved for the backward pass, or nullptr
void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                      const float* beta, int64_t N, int64_t C, float eps);

// Gradients of LayerNormForward given dout (N, C); the statistics are recomputed from inp.
// Written, not accumulated; nullptr for one that is not wanted.
//   dinp (N, C), dgamma (C), dbeta (C)
void LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                       const float* inp, const float* gamma, int64_t N, int64_t C, float eps);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_NORMALIZATION_H_
