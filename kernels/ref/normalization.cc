#include "kernels/ref/normalization.h"

#include <cmath>
#include <vector>

namespace forecastd::ref {
namespace {

// A row's mean and 1 / sqrt(var + eps), var biased as nn.LayerNorm's. Two passes in double: the
// one-pass E[x^2] - E[x]^2 form cancels badly when |mean| >> std. The backward recomputes them
// here, so it sees exactly the forward's statistics.
struct RowStats {
  double mean;
  double rstd;
};

RowStats StatsOf(const float* x, int64_t C, float eps) {
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
  v /= static_cast<double>(C);
  return RowStats{.mean = m, .rstd = 1.0 / std::sqrt(v + static_cast<double>(eps))};
}

}  // namespace

void LayerNormForward(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                      const float* beta, int64_t N, int64_t C, float eps) {
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    float* out_n = out + n * C;
    const auto [m, s] = StatsOf(x, C, eps);
    for (int64_t c = 0; c < C; ++c) {
      out_n[c] = static_cast<float>((x[c] - m) * s * gamma[c] + beta[c]);
    }
    if (mean != nullptr) mean[n] = static_cast<float>(m);
    if (rstd != nullptr) rstd[n] = static_cast<float>(s);
  }
}

// With xhat = (x - mean) * rstd and dxhat = dout * gamma, the mean and variance terms give
//   dinp = rstd * (dxhat - mean_c(dxhat) - xhat * mean_c(dxhat * xhat)).
void LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                       const float* inp, const float* gamma, int64_t N, int64_t C, float eps) {
  std::vector<double> dgamma_acc(C, 0.0), dbeta_acc(C, 0.0), xhat(C);
  for (int64_t n = 0; n < N; ++n) {
    const float* x = inp + n * C;
    const float* dout_n = dout + n * C;
    const auto [m, s] = StatsOf(x, C, eps);

    double mean_dxhat = 0.0, mean_dxhat_xhat = 0.0;
    for (int64_t c = 0; c < C; ++c) {
      xhat[c] = (x[c] - m) * s;
      const double dxhat = static_cast<double>(dout_n[c]) * gamma[c];
      mean_dxhat += dxhat;
      mean_dxhat_xhat += dxhat * xhat[c];
      dgamma_acc[c] += static_cast<double>(dout_n[c]) * xhat[c];
      dbeta_acc[c] += dout_n[c];
    }
    mean_dxhat /= static_cast<double>(C);
    mean_dxhat_xhat /= static_cast<double>(C);
    if (dinp != nullptr) {
      float* dinp_n = dinp + n * C;
      for (int64_t c = 0; c < C; ++c) {
        const double dxhat = static_cast<double>(dout_n[c]) * gamma[c];
        dinp_n[c] = static_cast<float>(s * (dxhat - mean_dxhat - xhat[c] * mean_dxhat_xhat));
      }
    }
  }
  for (int64_t c = 0; c < C; ++c) {
    if (dgamma != nullptr) dgamma[c] = static_cast<float>(dgamma_acc[c]);
    if (dbeta != nullptr) dbeta[c] = static_cast<float>(dbeta_acc[c]);
  }
}

}  // namespace forecastd::ref
