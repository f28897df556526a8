// Sinusoidal positional encoding for the CUDA backend, added to a (B, T, D) activation,
// mirroring kernels/ref (positional_encoding.h) with device pointers and a trailing stream.
// Launchers only; the kernels live in positional_encoding.cu. Thread-safe: each call works on
// the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_POSITIONAL_ENCODING_H_
#define FORECASTD_KERNELS_CUDA_POSITIONAL_ENCODING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out (B, T, D) = inp (B, T, D) + pe (T, D), pe[t, 2i] = sin(t * exp(-ln(10000) * 2i / D)),
// pe[t, 2i + 1] = the cosine; the table is computed in double and rounded to float, and the
// sum taken in float, as the reference does. For D <= 1000 the frequencies come from the
// host's libm, so the angles are the reference's bit for bit and only the device's double
// sin/cos (within 2 ulp of glibc's) could round an entry to the neighbouring float; above
// that the device computes the frequencies too. out may alias inp.
absl::Status PositionalEncodingForward(float* out, const float* inp, int64_t B, int64_t T,
                                       int64_t D, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_POSITIONAL_ENCODING_H_
