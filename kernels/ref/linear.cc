#include "kernels/ref/linear.h"

namespace forecastd::ref {

void LinearForward(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                   int64_t IN, int64_t OUT) {
  for (int64_t n = 0; n < N; ++n) {
    const float* inp_n = inp + n * IN;
    float* out_n = out + n * OUT;
    for (int64_t o = 0; o < OUT; ++o) {
      const float* w_o = weight + o * IN;
      // Double accumulation keeps the oracle's rounding error well below any backend's.
      double acc = bias != nullptr ? static_cast<double>(bias[o]) : 0.0;
      for (int64_t i = 0; i < IN; ++i) {
        acc += static_cast<double>(inp_n[i]) * static_cast<double>(w_o[i]);
      }
      out_n[o] = static_cast<float>(acc);
    }
  }
}

}  // namespace forecastd::ref
