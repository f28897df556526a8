// The input standardisation and forecast de-standardisation of Forecaster::Forward on device
// memory (DataOps' Standardize / Destandardize for a GPU caller), rounding each step as
// the host loops do (no contraction into FMAs, IEEE division), so the CUDA results equal the
// host's bit for bit. Launchers only; the kernels live in normalize.cu. Thread-safe: each call
// works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_NORMALIZE_H_
#define FORECASTD_KERNELS_CUDA_NORMALIZE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out[r, f] = (inp[r, f] - mean[f]) / std[f].
//   out (R, F), inp (R, F), mean (F), std (F)
absl::Status StandardizeLaunch(float* out, const float* inp, const float* mean, const float* std,
                               int64_t R, int64_t F, cudaStream_t stream);

// out[r, c] = y[r, c] * std[0] + mean[0] for r < R and c in [c0, c0 + W); the other columns of
// out are left alone (one target's columns; call once per target).
//   out (R, C), y (R, C), mean (1), std (1); 0 <= c0, c0 + W <= C
absl::Status DestandardizeLaunch(float* out, const float* y, const float* mean, const float* std,
                                 int64_t R, int64_t C, int64_t c0, int64_t W, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_NORMALIZE_H_
