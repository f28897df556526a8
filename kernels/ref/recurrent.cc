#include "kernels/ref/recurrent.h"

#include <algorithm>
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

// An initial state row: `init` + `offset` (H values), or zeros when there is no `init`.
void LoadState(float* state, const float* init, int64_t offset, int64_t H) {
  for (int64_t j = 0; j < H; ++j) {
    state[j] = init != nullptr ? init[offset + j] : 0.0f;
  }
}

// The cells of one direction. Step reads x_t and the state, and overwrites the state with the
// next one, rounded to float as PyTorch keeps the states between steps. The forward and the
// backward's replay both step here, so the backward differentiates exactly what the forward
// computed; the replay also asks Step to keep what the chain rule needs.

class LstmCell {
 public:
  static constexpr int64_t G = 4;

  LstmCell(const RecurrentDirectionWeights& wd, int64_t I, int64_t H)
      : wd_(wd), I_(I), H_(H), gx_(G * H), gh_(G * H) {}

  // With `gates` (G*H) and `tanh_c` (H), also keeps the gate activations i, f, g, o and tanh(c').
  void Step(const float* x_t, float* h, float* c, double* gates = nullptr,
            double* tanh_c = nullptr) {
    const int64_t H = H_;
    MatVecBias(gx_.data(), wd_.w_ih, x_t, wd_.b_ih, G * H, I_);
    MatVecBias(gh_.data(), wd_.w_hh, h, wd_.b_hh, G * H, H);
    for (int64_t j = 0; j < H; ++j) {
      const double i_gate = Sigmoid(gx_[0 * H + j] + gh_[0 * H + j]);
      const double f_gate = Sigmoid(gx_[1 * H + j] + gh_[1 * H + j]);
      const double g_gate = std::tanh(gx_[2 * H + j] + gh_[2 * H + j]);
      const double o_gate = Sigmoid(gx_[3 * H + j] + gh_[3 * H + j]);
      const double c_new = f_gate * c[j] + i_gate * g_gate;
      const double tc = std::tanh(c_new);
      if (gates != nullptr) {
        gates[0 * H + j] = i_gate;
        gates[1 * H + j] = f_gate;
        gates[2 * H + j] = g_gate;
        gates[3 * H + j] = o_gate;
        tanh_c[j] = tc;
      }
      c[j] = static_cast<float>(c_new);
      h[j] = static_cast<float>(o_gate * tc);
    }
  }

 private:
  const RecurrentDirectionWeights& wd_;
  const int64_t I_, H_;
  std::vector<double> gx_, gh_;  // W_ih x + b_ih and W_hh h + b_hh
};

class GruCell {
 public:
  static constexpr int64_t G = 3;

  GruCell(const RecurrentDirectionWeights& wd, int64_t I, int64_t H)
      : wd_(wd), I_(I), H_(H), gx_(G * H), gh_(G * H) {}

  // With `gates` (G*H) and `hn` (H), also keeps the gate activations r, z, n and W_hn h + b_hn.
  void Step(const float* x_t, float* h, double* gates = nullptr, double* hn = nullptr) {
    const int64_t H = H_;
    MatVecBias(gx_.data(), wd_.w_ih, x_t, wd_.b_ih, G * H, I_);
    // gh includes b_hh, so the n row below is (W_hn h + b_hn), which r scales.
    MatVecBias(gh_.data(), wd_.w_hh, h, wd_.b_hh, G * H, H);
    for (int64_t j = 0; j < H; ++j) {
      const double r_gate = Sigmoid(gx_[0 * H + j] + gh_[0 * H + j]);
      const double z_gate = Sigmoid(gx_[1 * H + j] + gh_[1 * H + j]);
      const double n_gate = std::tanh(gx_[2 * H + j] + r_gate * gh_[2 * H + j]);
      if (gates != nullptr) {
        gates[0 * H + j] = r_gate;
        gates[1 * H + j] = z_gate;
        gates[2 * H + j] = n_gate;
        hn[j] = gh_[2 * H + j];
      }
      h[j] = static_cast<float>((1.0 - z_gate) * n_gate + z_gate * h[j]);
    }
  }

 private:
  const RecurrentDirectionWeights& wd_;
  const int64_t I_, H_;
  std::vector<double> gx_, gh_;  // W_ih x + b_ih and W_hh h + b_hh
};

// The two gradients of pre = w x for one step, accumulated in double across steps:
//   dw[r, i] += dpre[r] * x[i]
void AddOuter(double* dw, const double* dpre, const float* x, int64_t R, int64_t I) {
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t i = 0; i < I; ++i) {
      dw[r * I + i] += dpre[r] * static_cast<double>(x[i]);
    }
  }
}

//   dx[i] += sum_r w[r, i] * dpre[r]
void AddTransposedMatVec(double* dx, const float* w, const double* dpre, int64_t R, int64_t I) {
  for (int64_t r = 0; r < R; ++r) {
    const float* w_r = w + r * I;
    for (int64_t i = 0; i < I; ++i) {
      dx[i] += static_cast<double>(w_r[i]) * dpre[r];
    }
  }
}

void AddTo(double* acc, const double* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) acc[i] += x[i];
}

void Store(float* dst, const std::vector<double>& src) {
  for (size_t i = 0; i < src.size(); ++i) dst[i] = static_cast<float>(src[i]);
}

// One direction's parameter gradients, summed in double over the batch and time before the
// single rounding to float.
struct DirectionGradAcc {
  DirectionGradAcc(int64_t GH, int64_t I, int64_t H)
      : dw_ih(GH * I), dw_hh(GH * H), db_ih(GH), db_hh(GH) {}
  void StoreTo(const RecurrentDirectionGrads& out) const {
    Store(out.dw_ih, dw_ih);
    Store(out.dw_hh, dw_hh);
    Store(out.db_ih, db_ih);
    Store(out.db_hh, db_hh);
  }
  std::vector<double> dw_ih, dw_hh, db_ih, db_hh;
};

}  // namespace

void LstmLayerForward(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                      const float* c_0, const RecurrentDirectionWeights* weights,
                      const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  std::vector<float> h(H), c(H);
  for (int64_t d = 0; d < ND; ++d) {
    LstmCell cell(weights[d], I, H);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;  // offset of (d, b, :) in h_0, c_0, h_n, c_n
      LoadState(h.data(), h_0, state, H);
      LoadState(c.data(), c_0, state, H);
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        cell.Step(inp + (b * T + t) * I, h.data(), c.data());
        std::copy(h.begin(), h.end(), out + (b * T + t) * ND * H + d * H);
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
  std::vector<float> h(H);
  for (int64_t d = 0; d < ND; ++d) {
    GruCell cell(weights[d], I, H);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;
      LoadState(h.data(), h_0, state, H);
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        cell.Step(inp + (b * T + t) * I, h.data());
        std::copy(h.begin(), h.end(), out + (b * T + t) * ND * H + d * H);
      }
      if (h_n != nullptr) {
        for (int64_t j = 0; j < H; ++j) {
          h_n[state + j] = h[j];
        }
      }
    }
  }
}

// Both backward passes replay one (direction, batch row) of the forward with the forward's exact
// arithmetic (states rounded to float between steps), keeping per step what the chain rule
// needs, then walk the steps in reverse. dinp is accumulated in double over both directions,
// since each direction contributes to every time step's input.

void LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
                       const float* inp, const float* h_0, const float* c_0,
                       const RecurrentDirectionWeights* weights, const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  constexpr int64_t G = LstmCell::G;
  std::vector<double> dinp_acc(dinp != nullptr ? B * T * I : 0);
  std::vector<float> h(H), c(H);
  // Saved per step: the states the step read, its gate activations and tanh(c').
  std::vector<float> h_prev(T * H), c_prev(T * H);
  std::vector<double> gates(T * G * H), tanh_c(T * H);
  std::vector<double> dpre(G * H), dh_next(H), dc_next(H);
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& wd = weights[d];
    LstmCell cell(wd, I, H);
    DirectionGradAcc acc(G * H, I, H);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;
      LoadState(h.data(), h_0, state, H);
      LoadState(c.data(), c_0, state, H);
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        std::copy(h.begin(), h.end(), h_prev.begin() + step * H);
        std::copy(c.begin(), c.end(), c_prev.begin() + step * H);
        cell.Step(inp + (b * T + t) * I, h.data(), c.data(), gates.data() + step * G * H,
                  tanh_c.data() + step * H);
      }

      std::fill(dh_next.begin(), dh_next.end(), 0.0);
      std::fill(dc_next.begin(), dc_next.end(), 0.0);
      for (int64_t step = T - 1; step >= 0; --step) {
        const int64_t t = TimeAt(step, d, T);
        const float* dout_t = dout + (b * T + t) * ND * H + d * H;
        const double* gates_s = gates.data() + step * G * H;
        for (int64_t j = 0; j < H; ++j) {
          const double i_gate = gates_s[0 * H + j];
          const double f_gate = gates_s[1 * H + j];
          const double g_gate = gates_s[2 * H + j];
          const double o_gate = gates_s[3 * H + j];
          const double tc = tanh_c[step * H + j];
          const double dh = dout_t[j] + dh_next[j];
          const double dc = dc_next[j] + dh * o_gate * (1.0 - tc * tc);
          dpre[0 * H + j] = dc * g_gate * i_gate * (1.0 - i_gate);
          dpre[1 * H + j] = dc * c_prev[step * H + j] * f_gate * (1.0 - f_gate);
          dpre[2 * H + j] = dc * i_gate * (1.0 - g_gate * g_gate);
          dpre[3 * H + j] = dh * tc * o_gate * (1.0 - o_gate);
          dc_next[j] = dc * f_gate;
        }
        // Both biases and both matmuls feed the same pre-activation, so share dpre.
        const float* x_t = inp + (b * T + t) * I;
        AddTo(acc.db_ih.data(), dpre.data(), G * H);
        AddTo(acc.db_hh.data(), dpre.data(), G * H);
        AddOuter(acc.dw_ih.data(), dpre.data(), x_t, G * H, I);
        AddOuter(acc.dw_hh.data(), dpre.data(), h_prev.data() + step * H, G * H, H);
        if (dinp != nullptr) {
          AddTransposedMatVec(dinp_acc.data() + (b * T + t) * I, wd.w_ih, dpre.data(), G * H, I);
        }
        std::fill(dh_next.begin(), dh_next.end(), 0.0);
        AddTransposedMatVec(dh_next.data(), wd.w_hh, dpre.data(), G * H, H);
      }
    }
    acc.StoreTo(dweights[d]);
  }
  if (dinp != nullptr) Store(dinp, dinp_acc);
}

void GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
                      const float* inp, const float* h_0, const RecurrentDirectionWeights* weights,
                      const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  constexpr int64_t G = GruCell::G;
  std::vector<double> dinp_acc(dinp != nullptr ? B * T * I : 0);
  std::vector<float> h(H);
  // Saved per step: the state the step read, its gate activations r, z, n and W_hn h + b_hn.
  std::vector<float> h_prev(T * H);
  std::vector<double> gates(T * G * H), hn(T * H);
  // The two pre-activations differ only in the n rows, where r scales the hidden side.
  std::vector<double> dgx(G * H), dgh(G * H), dh_next(H), dh_prev(H);
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& wd = weights[d];
    GruCell cell(wd, I, H);
    DirectionGradAcc acc(G * H, I, H);
    for (int64_t b = 0; b < B; ++b) {
      const int64_t state = (d * B + b) * H;
      LoadState(h.data(), h_0, state, H);
      for (int64_t step = 0; step < T; ++step) {
        const int64_t t = TimeAt(step, d, T);
        std::copy(h.begin(), h.end(), h_prev.begin() + step * H);
        cell.Step(inp + (b * T + t) * I, h.data(), gates.data() + step * G * H,
                  hn.data() + step * H);
      }

      std::fill(dh_next.begin(), dh_next.end(), 0.0);
      for (int64_t step = T - 1; step >= 0; --step) {
        const int64_t t = TimeAt(step, d, T);
        const float* dout_t = dout + (b * T + t) * ND * H + d * H;
        const double* gates_s = gates.data() + step * G * H;
        const float* h_prev_s = h_prev.data() + step * H;
        for (int64_t j = 0; j < H; ++j) {
          const double r_gate = gates_s[0 * H + j];
          const double z_gate = gates_s[1 * H + j];
          const double n_gate = gates_s[2 * H + j];
          const double dh = dout_t[j] + dh_next[j];
          const double dn_pre = dh * (1.0 - z_gate) * (1.0 - n_gate * n_gate);
          const double dz_pre = dh * (h_prev_s[j] - n_gate) * z_gate * (1.0 - z_gate);
          const double dr_pre = dn_pre * hn[step * H + j] * r_gate * (1.0 - r_gate);
          dgx[0 * H + j] = dgh[0 * H + j] = dr_pre;
          dgx[1 * H + j] = dgh[1 * H + j] = dz_pre;
          dgx[2 * H + j] = dn_pre;
          dgh[2 * H + j] = dn_pre * r_gate;
          dh_prev[j] = dh * z_gate;  // the direct path h' = ... + z * h
        }
        const float* x_t = inp + (b * T + t) * I;
        AddTo(acc.db_ih.data(), dgx.data(), G * H);
        AddTo(acc.db_hh.data(), dgh.data(), G * H);
        AddOuter(acc.dw_ih.data(), dgx.data(), x_t, G * H, I);
        AddOuter(acc.dw_hh.data(), dgh.data(), h_prev_s, G * H, H);
        if (dinp != nullptr) {
          AddTransposedMatVec(dinp_acc.data() + (b * T + t) * I, wd.w_ih, dgx.data(), G * H, I);
        }
        AddTransposedMatVec(dh_prev.data(), wd.w_hh, dgh.data(), G * H, H);
        std::swap(dh_next, dh_prev);
      }
    }
    acc.StoreTo(dweights[d]);
  }
  if (dinp != nullptr) Store(dinp, dinp_acc);
}

}  // namespace forecastd::ref
