#include "kernels/ref/activation.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace forecastd::ref {

void GeluForward(float* out, const float* inp, int64_t n, GeluForm form) {
  constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    double y;
    if (form == GeluForm::kErf) {
      y = x * 0.5 * (1.0 + std::erf(x * kInvSqrt2));
    } else {
      y = 0.5 * x * (1.0 + std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x)));
    }
    out[i] = static_cast<float>(y);
  }
}

void ReluForward(float* out, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = std::max(inp[i], 0.0f);
  }
}

void ResidualForward(float* out, const float* a, const float* b, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    out[i] = a[i] + b[i];
  }
}

void SoftmaxForward(float* out, const float* inp, int64_t R, int64_t C) {
  for (int64_t r = 0; r < R; ++r) {
    const float* inp_r = inp + r * C;
    float* out_r = out + r * C;
    float max = -INFINITY;
    for (int64_t c = 0; c < C; ++c) {
      max = std::max(max, inp_r[c]);
    }
    double sum = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      sum += std::exp(static_cast<double>(inp_r[c]) - max);
    }
    // Each element is read before it is written, so out may alias inp.
    for (int64_t c = 0; c < C; ++c) {
      out_r[c] = static_cast<float>(std::exp(static_cast<double>(inp_r[c]) - max) / sum);
    }
  }
}

}  // namespace forecastd::ref
