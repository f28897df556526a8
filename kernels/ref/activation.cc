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

void GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n, GeluForm form) {
  constexpr double kInvSqrt2 = 1.0 / std::numbers::sqrt2;
  const double kInvSqrt2Pi = 1.0 / std::sqrt(2.0 * std::numbers::pi);
  const double kSqrt2OverPi = std::sqrt(2.0 / std::numbers::pi);
  for (int64_t i = 0; i < n; ++i) {
    const double x = inp[i];
    double dy_dx;
    if (form == GeluForm::kErf) {
      // d/dx x Phi(x) = Phi(x) + x phi(x)
      dy_dx = 0.5 * (1.0 + std::erf(x * kInvSqrt2)) + x * kInvSqrt2Pi * std::exp(-0.5 * x * x);
    } else {
      const double th = std::tanh(kSqrt2OverPi * (x + 0.044715 * x * x * x));
      dy_dx = 0.5 * (1.0 + th) +
              0.5 * x * (1.0 - th * th) * kSqrt2OverPi * (1.0 + 3.0 * 0.044715 * x * x);
    }
    dinp[i] = static_cast<float>(dout[i] * dy_dx);
  }
}

void ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    dinp[i] = inp[i] > 0.0f ? dout[i] : 0.0f;
  }
}

void SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R, int64_t C) {
  for (int64_t r = 0; r < R; ++r) {
    const float* dout_r = dout + r * C;
    const float* out_r = out + r * C;
    float* dinp_r = dinp + r * C;
    double dot = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      dot += static_cast<double>(dout_r[c]) * static_cast<double>(out_r[c]);
    }
    // The whole row of dout is read into `dot` first, so dinp may alias dout.
    for (int64_t c = 0; c < C; ++c) {
      dinp_r[c] = static_cast<float>(out_r[c] * (dout_r[c] - dot));
    }
  }
}

}  // namespace forecastd::ref
