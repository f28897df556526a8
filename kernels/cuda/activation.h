// Element-wise ops of the CUDA backend: GELU (erf and tanh forms), ReLU, the residual add, and
// the in-place scale and multiply the dropout masks use. Each launcher mirrors its kernels/ref
// counterpart (activation.h) with device pointers and a trailing stream; gradients are
// written, never accumulated. Launchers only; the kernels live in activation.cu.
// Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_ACTIVATION_H_
#define FORECASTD_KERNELS_CUDA_ACTIVATION_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/activation.h"

namespace forecastd::cuda {

// out[i] = gelu(inp[i]) for i in [0, n); out may alias inp.
absl::Status GeluForward(float* out, const float* inp, int64_t n, ref::GeluForm form,
                         cudaStream_t stream);

// dinp[i] = dout[i] * gelu'(inp[i]); dinp may alias dout.
absl::Status GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                          ref::GeluForm form, cudaStream_t stream);

// out[i] = max(inp[i], 0); out may alias inp.
absl::Status ReluForward(float* out, const float* inp, int64_t n, cudaStream_t stream);

// dinp[i] = inp[i] > 0 ? dout[i] : 0; dinp may alias dout.
absl::Status ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                          cudaStream_t stream);

// out[i] = a[i] + b[i]; out may alias a or b.
absl::Status ResidualForward(float* out, const float* a, const float* b, int64_t n,
                             cudaStream_t stream);

// x[i] *= factor, in place.
absl::Status Scale(float* x, int64_t n, float factor, cudaStream_t stream);

// out[i] = a[i] * b[i] (a dropout mask applied to an activation or its gradient); out may
// alias a or b.
absl::Status MultiplyInto(float* out, const float* a, const float* b, int64_t n,
                          cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_ACTIVATION_H_
