// The bias half of nn.Linear for the CUDA backend (the GEMMs are cuBLAS calls in the backend):
// adding the bias to each output row, and the bias gradient as a column sum. Mirrors the bias
// terms of kernels/ref (linear.h) with device pointers and a trailing stream. Launchers only;
// the kernels live in linear_bias.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_LINEAR_BIAS_H_
#define FORECASTD_KERNELS_CUDA_LINEAR_BIAS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out[n, o] += bias[o]
//   out (N, OUT), bias (OUT)
absl::Status AddBias(float* out, const float* bias, int64_t N, int64_t OUT, cudaStream_t stream);

// dbias[o] = sum_n dout[n, o], written, not accumulated; the sum is taken in a fixed order (no
// atomics), so it is bit-for-bit reproducible.
//   dbias (OUT), dout (N, OUT)
absl::Status BiasGrad(float* dbias, const float* dout, int64_t N, int64_t OUT, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_LINEAR_BIAS_H_
