// Fills device buffers with a constant: the arena initialiser (zeroed gradients and
// optimiser moments, padded batch rows) for the CUDA backend. Launchers only; the kernels
// live in fill.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_FILL_H_
#define FORECASTD_KERNELS_CUDA_FILL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out[i] = value for i in [0, n). `out` is device memory of at least n floats.
absl::Status FillLaunch(float* out, float value, int64_t n, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_FILL_H_
