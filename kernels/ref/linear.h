// Reference (naive, fp32) fully connected layer with PyTorch's nn.Linear layout.
// The oracle every backend's Linear is tested against. Stateless; thread-safe.
#ifndef FORECASTD_KERNELS_REF_LINEAR_H_
#define FORECASTD_KERNELS_REF_LINEAR_H_

#include <cstdint>

namespace forecastd::ref {

// out[n, o] = sum_i inp[n, i] * weight[o, i] + bias[o]
//   out    (N, OUT)
//   inp    (N, IN)
//   weight (OUT, IN)   as nn.Linear.weight
//   bias   (OUT) or nullptr for none
void LinearForward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                   int64_t IN, int64_t OUT);

// Gradients of LinearForward given dout = dLoss/dout (N, OUT). Every gradient is written, not
// accumulated; pass nullptr for one that is not wanted.
//   dinp    (N, IN)     = dout @ weight
//   dweight (OUT, IN)   = dout^T @ inp
//   dbias   (OUT)       = sum_n dout[n, :]
void LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int64_t N, int64_t IN, int64_t OUT);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_LINEAR_H_
