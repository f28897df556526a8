// Reference (naive, fp32) element-wise and row-wise ops: GELU (erf and tanh forms), ReLU,
// residual add, and softmax over the last dimension. Thread-safe. `out` may alias `inp`.
#ifndef FORECASTD_KERNELS_REF_ACTIVATION_H_
#define FORECASTD_KERNELS_REF_ACTIVATION_H_

#include <cstdint>

namespace forecastd::ref {

enum class GeluForm {
  kErf,   // x * 0.5 * (1 + erf(x / sqrt(2)))            nn.GELU() / F.gelu
  kTanh,  // 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))   approximate='tanh'
};

// out[i] = gelu(inp[i]) for i in [0, n)
void GeluForward(float* out, const float* inp, int64_t n, GeluForm form);

// out[i] = max(inp[i], 0)
void ReluForward(float* out, const float* inp, int64_t n);

// out[i] = a[i] + b[i]; out may alias a or b.
void ResidualForward(float* out, const float* a, const float* b, int64_t n);

// Row-wise, numerically stable (max subtracted):
//   out[r, c] = exp(inp[r, c] - max_r) / sum_c' exp(inp[r, c'] - max_r)
//   out (R, C), inp (R, C)
void SoftmaxForward(float* out, const float* inp, int64_t R, int64_t C);

// Backward passes: dinp = dout * f'(inp), written, not accumulated. `dinp` may alias `dout`.
// ReLU's derivative at 0 is 0, as PyTorch's.
void GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n, GeluForm form);
void ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n);

// Row-wise softmax backward from the forward's output:
//   dinp[r, c] = out[r, c] * (dout[r, c] - sum_c' dout[r, c'] * out[r, c'])
void SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R, int64_t C);

// The residual add passes dout to both inputs unchanged, and the positional encoding passes it
// to its input unchanged, so neither needs a backward function.

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_ACTIVATION_H_
