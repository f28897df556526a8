// Row-wise softmax of the CUDA backend, forward and backward, mirroring kernels/ref
// (activation.h) with device pointers and a trailing stream. Launchers only; the kernels live
// in softmax.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_SOFTMAX_H_
#define FORECASTD_KERNELS_CUDA_SOFTMAX_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out[r, c] = exp(inp[r, c] - max_r) / sum_c' exp(inp[r, c'] - max_r)
//   out (R, C), inp (R, C); out may alias inp.
absl::Status SoftmaxForward(float* out, const float* inp, int64_t R, int64_t C,
                            cudaStream_t stream);

// dinp[r, c] = out[r, c] * (dout[r, c] - sum_c' dout[r, c'] * out[r, c'])
//   dinp, dout, out (R, C); written, not accumulated; dinp may alias dout.
absl::Status SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R, int64_t C,
                             cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_SOFTMAX_H_
