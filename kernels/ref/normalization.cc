#include "kernels/ref/normalization.h"

#include <cmath>

namespace forecastd::ref {

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                      const float* beta, int64_t N, int64_t C, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* out_n = out + n * C;
    // Two passes in double: the one-pass E[x^2] - E[x]^2 form cancels badly when |mean| >> std.
    double m = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      m += x[c];
    }
    m /= static_cast<double>(C);
    double v = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      const double xm = x[c] - m;
      v += xm * xm;
    }
    v /= static_cast<double>(C);  // biased, as nn.LayerNorm
    const double s = 1.0 / std::sqrt(v + static_cast<double>(eps));
    for (int64_t c = 0; c < C; ++c) {
      out_n[c] = static_cast<float>((x[c] - m) * s * gamma[c] + beta[c]);
    }
    if (mean != nullptr) mean[n] = static_cast<float>(m);
    if (rstd != nullptr) rstd[n] = static_cast<float>(s);
  }
}

}  // namespace forecastd::ref
