// Row-wise fp32 kernels of the oneDNN backend's training and serving paths on AVX2 + FMA, for
// the small tensors of forecasting models ((B*T) x C with C in the hundreds), where a oneDNN 2.6
// primitive costs more than the arithmetic: layer normalisation forward and backward, the bias
// gradient's column sums, and the residual add. Each matches its kernels/ref counterpart (fp32
// accumulation in vectors of 8, the statistics in two passes); rows are shared out over the
// calling thread's OpenMP threads. Used by DnnlBackend only, where HasAvx2Fma(). Stateless;
// thread-safe.
#ifndef FORECASTD_BACKENDS_CPU_ROWS_AVX2_H_
#define FORECASTD_BACKENDS_CPU_ROWS_AVX2_H_

#include <cstdint>

namespace forecastd::cpu {

// ref::LayerNormForward: out (N, C); mean, rstd (N) or nullptr.
void LayerNormRows(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                   const float* beta, int64_t N, int64_t C, float eps);

// ref::LayerNormBackward: the statistics recomputed from inp; dinp (N, C), dgamma, dbeta (C),
// each written, or nullptr.
void LayerNormBackwardRows(float* dinp, float* dgamma, float* dbeta, const float* dout,
                           const float* inp, const float* gamma, int64_t N, int64_t C, float eps);

// sums[c] = sum over n of x[n, c], x (N, C): a Linear's bias gradient.
void ColumnSums(float* sums, const float* x, int64_t N, int64_t C);

// out[i] = a[i] + b[i]; out may be a or b.
void AddRows(float* out, const float* a, const float* b, int64_t n);

}  // namespace forecastd::cpu

#endif  // FORECASTD_BACKENDS_CPU_ROWS_AVX2_H_
