#include "kernels/ref/linear.h"

#include <algorithm>
#include <vector>

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

void LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout, const float* inp,
                    const float* weight, int64_t N, int64_t IN, int64_t OUT) {
  if (dinp != nullptr) {
    std::vector<double> acc(IN);
    for (int64_t n = 0; n < N; ++n) {
      const float* dout_n = dout + n * OUT;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t o = 0; o < OUT; ++o) {
        const float* w_o = weight + o * IN;
        for (int64_t i = 0; i < IN; ++i) {
          acc[i] += static_cast<double>(dout_n[o]) * static_cast<double>(w_o[i]);
        }
      }
      for (int64_t i = 0; i < IN; ++i) dinp[n * IN + i] = static_cast<float>(acc[i]);
    }
  }
  if (dweight != nullptr) {
    for (int64_t o = 0; o < OUT; ++o) {
      for (int64_t i = 0; i < IN; ++i) {
        double acc = 0.0;
        for (int64_t n = 0; n < N; ++n) {
          acc += static_cast<double>(dout[n * OUT + o]) * static_cast<double>(inp[n * IN + i]);
        }
        dweight[o * IN + i] = static_cast<float>(acc);
      }
    }
  }
  if (dbias != nullptr) {
    for (int64_t o = 0; o < OUT; ++o) {
      double acc = 0.0;
      for (int64_t n = 0; n < N; ++n) acc += dout[n * OUT + o];
      dbias[o] = static_cast<float>(acc);
    }
  }
}

}  // namespace forecastd::ref
