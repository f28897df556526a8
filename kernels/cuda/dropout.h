// Dropout on the device for training: inverted-dropout masks drawn from a PCG32 stream, the
// same draws engine/random.h's Random makes on the host (so a seed gives one mask on
// every device), and the elementwise product that applies a mask. Launchers only; the kernels
// live in dropout.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_DROPOUT_H_
#define FORECASTD_KERNELS_CUDA_DROPOUT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// PCG32 (XSH-RR, multiplier 6364136223846793005) with 64-bit `state` and odd `increment`: the
// i-th output u_i (i from 0) gives mask[i] = 0 when (u_i >> 8) * 2^-24 < p, else `scale`. Each
// thread jumps ahead to its first draw in O(log n) steps, so the launch is parallel and the
// result bit-identical to drawing in order.
//   mask: device (n)
absl::Status DropoutMaskLaunch(float* mask, int64_t n, float p, float scale, uint64_t state,
                               uint64_t increment, cudaStream_t stream);

// out[i] = inp[i] * mask[i] for i < n; out may be inp.
absl::Status MultiplyLaunch(float* out, const float* inp, const float* mask, int64_t n,
                            cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_DROPOUT_H_
