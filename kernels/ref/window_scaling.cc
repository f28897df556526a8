#include "kernels/ref/window_scaling.h"

#include <cmath>

namespace forecastd::ref {

void WindowStats(float* center, float* scale, const float* x, int64_t B, int64_t T, int64_t F,
                 WindowStatistic statistic, float eps) {
  for (int64_t b = 0; b < B; ++b) {
    const float* w = x + b * T * F;
    for (int64_t f = 0; f < F; ++f) {
      if (statistic == WindowStatistic::kLastValue) {
        center[b * F + f] = w[(T - 1) * F + f];
        scale[b * F + f] = 1.0f;
        continue;
      }
      double sum = 0.0;
      for (int64_t t = 0; t < T; ++t) sum += static_cast<double>(w[t * F + f]);
      const auto mean = static_cast<float>(sum / static_cast<double>(T));
      double squares = 0.0;
      for (int64_t t = 0; t < T; ++t) {
        const double e = static_cast<double>(w[t * F + f]) - static_cast<double>(mean);
        squares += e * e;
      }
      const auto var = static_cast<float>(squares / static_cast<double>(T));
      center[b * F + f] = mean;
      scale[b * F + f] = std::sqrt(var + eps);
    }
  }
}

void ScaleWindows(float* xw, float* z, const float* x, const float* center, const float* scale,
                  const float* gamma, const float* beta, int64_t B, int64_t T, int64_t F) {
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t f = 0; f < F; ++f) {
        const int64_t i = (b * T + t) * F + f;
        const float zi = (x[i] - center[b * F + f]) / scale[b * F + f];
        if (z != nullptr) z[i] = zi;
        xw[i] = gamma != nullptr ? zi * gamma[f] + beta[f] : zi;
      }
    }
  }
}

void UnscaleTarget(float* out, float* v_out, const float* d, const float* last, int64_t last_stride,
                   const float* center, const float* scale, int64_t stats_stride,
                   const float* gamma, const float* beta, float eps2, int64_t B, int64_t J,
                   int64_t C, int64_t c0, int64_t W) {
  for (int64_t b = 0; b < B; ++b) {
    const float shift = last != nullptr ? last[b * last_stride] : 0.0f;
    const float s = scale != nullptr ? scale[b * stats_stride] : 1.0f;
    const float m = center != nullptr ? center[b * stats_stride] : 0.0f;
    for (int64_t j = 0; j < J; ++j) {
      for (int64_t c = c0; c < c0 + W; ++c) {
        const int64_t i = (b * J + j) * C + c;
        const float a = d[i] + shift;
        const float v = gamma != nullptr ? (a - beta[0]) / (gamma[0] + eps2) : a;
        if (v_out != nullptr) v_out[i] = v;
        out[i] = v * s + m;
      }
    }
  }
}

void UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta, float* dlast,
                           int64_t last_stride, const float* dout, const float* v,
                           const float* scale, int64_t stats_stride, const float* gamma, float eps2,
                           int64_t B, int64_t J, int64_t C, int64_t c0, int64_t W) {
  const float divisor = gamma != nullptr ? gamma[0] + eps2 : 1.0f;
  float sum_dav = 0.0f, sum_da = 0.0f;
  for (int64_t b = 0; b < B; ++b) {
    const float s = scale != nullptr ? scale[b * stats_stride] : 1.0f;
    float row = 0.0f;
    for (int64_t j = 0; j < J; ++j) {
      for (int64_t c = c0; c < c0 + W; ++c) {
        const int64_t i = (b * J + j) * C + c;
        const float da = gamma != nullptr ? dout[i] * s / divisor : dout[i] * s;
        dd[i] = da;
        row += da;
        if (gamma != nullptr) sum_dav += da * v[i];
      }
    }
    sum_da += row;
    if (dlast != nullptr) dlast[b * last_stride] += row;
  }
  if (gamma != nullptr) {
    dgamma[0] -= sum_dav;
    dbeta[0] -= sum_da;
  }
}

void ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw, const float* z, int64_t R,
                          int64_t F) {
  for (int64_t f = 0; f < F; ++f) {
    float g = 0.0f, s = 0.0f;
    for (int64_t r = 0; r < R; ++r) {
      g += dxw[r * F + f] * z[r * F + f];
      s += dxw[r * F + f];
    }
    dgamma[f] += g;
    dbeta[f] += s;
  }
}

}  // namespace forecastd::ref
