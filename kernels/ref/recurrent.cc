#include "kernels/ref/recurrent.h"

#include <cmath>
#include <vector>

namespace forecastd::ref {
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// pre[r] = sum_i w[r, i] * x[i] + bias[r] for r in [0, R), accumulated in double.
void MatVecBias(double* pre, const float* w, const float* x, const float* bias, int64_t R,
                int64_t I) {
  for (int64_t r = 0; r < R; ++r) {
    const float* w_r = w + r * I;
    double acc = bias[r];
    for (int64_t i = 0; i < I; ++i) {
      acc += static_cast<double>(w_r[i]) * static_cast<double>(x[i]);
    }
    pre[r] = acc;
  }
}

// Time index of step `step` for direction d: forward for d = 0, reversed for d = 1.
int64_t TimeAt(int64_t step, int64_t d, int64_t T) { return d == 0 ? step : T - 1 - step; }

}  // namespace

void LstmLayerForward(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                      const float* c_0, const RecurrentDirectionWeights* weights,
                      const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  constexpr int64_t G = 4;
  // The states are kept in float between steps, as PyTorch keeps them.
  std::vector<float> h(H), c(H);
  std::vector<double> gx(G * H), gh(G * H);
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& wd = weights[d];
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;  // offset of (d, b, :) in h_0, c_0, h_n, c_n
      for (int64_t j = 0; j < H; ++j) {
        h[j] = h_0 != nullptr ? h_0[state + j] : 0.0f;
        c[j] = c_0 != nullptr ? c_0[state + j] : 0.0f;
      }
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        MatVecBias(gx.data(), wd.w_ih, inp + (b * T + t) * I, wd.b_ih, G * H, I);
        MatVecBias(gh.data(), wd.w_hh, h.data(), wd.b_hh, G * H, H);
        float* out_t = out + (b * T + t) * ND * H + d * H;
        for (int64_t j = 0; j < H; ++j) {
          const double i_gate = Sigmoid(gx[0 * H + j] + gh[0 * H + j]);
          const double f_gate = Sigmoid(gx[1 * H + j] + gh[1 * H + j]);
          const double g_gate = std::tanh(gx[2 * H + j] + gh[2 * H + j]);
          const double o_gate = Sigmoid(gx[3 * H + j] + gh[3 * H + j]);
          const double c_new = f_gate * c[j] + i_gate * g_gate;
          c[j] = static_cast<float>(c_new);
          h[j] = static_cast<float>(o_gate * std::tanh(c_new));
          out_t[j] = h[j];
        }
      }
      for (int64_t j = 0; j < H; ++j) {
        if (h_n != nullptr) h_n[state + j] = h[j];
        if (c_n != nullptr) c_n[state + j] = c[j];
      }
    }
  }
}

void GruLayerForward(float* out, float* h_n, const float* inp, const float* h_0,
                     const RecurrentDirectionWeights* weights, const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  constexpr int64_t G = 3;
  std::vector<float> h(H);
  std::vector<double> gx(G * H), gh(G * H);
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& wd = weights[d];
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;
      for (int64_t j = 0; j < H; ++j) {
        h[j] = h_0 != nullptr ? h_0[state + j] : 0.0f;
      }
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        MatVecBias(gx.data(), wd.w_ih, inp + (b * T + t) * I, wd.b_ih, G * H, I);
        // gh includes b_hh, so the n row below is (W_hn h + b_hn), which r scales.
        MatVecBias(gh.data(), wd.w_hh, h.data(), wd.b_hh, G * H, H);
        float* out_t = out + (b * T + t) * ND * H + d * H;
        for (int64_t j = 0; j < H; ++j) {
          const double r_gate = Sigmoid(gx[0 * H + j] + gh[0 * H + j]);
          const double z_gate = Sigmoid(gx[1 * H + j] + gh[1 * H + j]);
          const double n_gate = std::tanh(gx[2 * H + j] + r_gate * gh[2 * H + j]);
          h[j] = static_cast<float>((1.0 - z_gate) * n_gate + z_gate * h[j]);
          out_t[j] = h[j];
        }
      }
      if (h_n != nullptr) {
        for (int64_t j = 0; j < H; ++j) {
          h_n[state + j] = h[j];
        }
      }
    }
  }
}

}  // namespace forecastd::ref
