#include "kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace forecastd::ref {
namespace {

// One query's attention weights over the keys s in [0, S), in double: w[s] = softmax_s(q . k_s
// * scale), with key s at k + s * k_stride. AttentionLastQueryBackward, which recomputes the
// weights, calls this too, so it sees exactly the forward's.
void SoftmaxWeights(double* w, const float* q, const float* k, int64_t k_stride, int64_t S,
                    int64_t hs, double scale) {
  double max = -INFINITY;
  for (int64_t s = 0; s < S; ++s) {
    const float* k_s = k + s * k_stride;
    double dot = 0.0;
    for (int64_t i = 0; i < hs; ++i) {
      dot += static_cast<double>(q[i]) * static_cast<double>(k_s[i]);
    }
    w[s] = dot * scale;
    max = std::max(max, w[s]);
  }
  double sum = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    w[s] = std::exp(w[s] - max);
    sum += w[s];
  }
  for (int64_t s = 0; s < S; ++s) {
    w[s] /= sum;
  }
}

}  // namespace

void AttentionForward(float* out, float* att, const float* qkv, const float* dropout_mask,
                      int64_t B, int64_t T, int64_t D, int64_t NH, bool causal) {
  const int64_t hs = D / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> w(T);  // one row of attention weights
  std::vector<double> acc(hs);
  for (int64_t b = 0; b < B; ++b) {
    const float* qkv_b = qkv + b * T * 3 * D;
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* q = qkv_b + t * 3 * D + 0 * D + h * hs;
        const int64_t S = causal ? t + 1 : T;  // keys this query may see: s in [0, S)
        SoftmaxWeights(w.data(), q, qkv_b + 1 * D + h * hs, 3 * D, S, hs, scale);

        if (att != nullptr) {
          float* att_row = att + ((b * NH + h) * T + t) * T;
          for (int64_t s = 0; s < T; ++s) {
            att_row[s] = s < S ? static_cast<float>(w[s]) : 0.0f;
          }
        }

        if (dropout_mask != nullptr) {
          const float* mask_row = dropout_mask + ((b * NH + h) * T + t) * T;
          for (int64_t s = 0; s < S; ++s) w[s] *= static_cast<double>(mask_row[s]);
        }
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t s = 0; s < S; ++s) {
          const float* v = qkv_b + s * 3 * D + 2 * D + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            acc[i] += w[s] * static_cast<double>(v[i]);
          }
        }
        float* out_t = out + (b * T + t) * D + h * hs;
        for (int64_t i = 0; i < hs; ++i) {
          out_t[i] = static_cast<float>(acc[i]);
        }
      }
    }
  }
}

void AttentionLastQueryForward(float* out, const float* q, const float* kv, int64_t B, int64_t T,
                               int64_t D, int64_t NH) {
  const int64_t hs = D / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> w(T);
  std::vector<double> acc(hs);
  for (int64_t b = 0; b < B; ++b) {
    const float* kv_b = kv + b * T * 2 * D;
    for (int64_t h = 0; h < NH; ++h) {
      SoftmaxWeights(w.data(), q + b * D + h * hs, kv_b + h * hs, 2 * D, T, hs, scale);
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t s = 0; s < T; ++s) {
        const float* v = kv_b + s * 2 * D + D + h * hs;
        for (int64_t i = 0; i < hs; ++i) acc[i] += w[s] * static_cast<double>(v[i]);
      }
      for (int64_t i = 0; i < hs; ++i) out[b * D + h * hs + i] = static_cast<float>(acc[i]);
    }
  }
}

// Both backward passes work one (batch, head, query) row at a time. With w = att[t, :],
// pre[s] = q . k_s * scale and m the dropout mask's row (1 without one):
//   dv_s += w[s] m[s] dout_t
//   dw[s] = (dout_t . v_s) m[s]
//   dpre[s] = w[s] (dw[s] - sum_s' w[s'] dw[s'])   (softmax backward)
//   dq += scale sum_s dpre[s] k_s                  dk_s += scale dpre[s] q
// Sums are kept in double and rounded once at the end.

void AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                       const float* dropout_mask, int64_t B, int64_t T, int64_t D, int64_t NH) {
  const int64_t hs = D / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> acc(T * 3 * D);  // dqkv of one batch row
  std::vector<double> dw(T);
  for (int64_t b = 0; b < B; ++b) {
    const float* qkv_b = qkv + b * T * 3 * D;
    std::fill(acc.begin(), acc.end(), 0.0);
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* att_row = att + ((b * NH + h) * T + t) * T;
        const float* mask_row =
            dropout_mask != nullptr ? dropout_mask + ((b * NH + h) * T + t) * T : nullptr;
        const float* dout_t = dout + (b * T + t) * D + h * hs;
        const float* q = qkv_b + t * 3 * D + 0 * D + h * hs;
        double* dq = acc.data() + t * 3 * D + 0 * D + h * hs;

        double w_dot_dw = 0.0;
        for (int64_t s = 0; s < T; ++s) {
          const float* v = qkv_b + s * 3 * D + 2 * D + h * hs;
          double* dv = acc.data() + s * 3 * D + 2 * D + h * hs;
          const double m = mask_row != nullptr ? static_cast<double>(mask_row[s]) : 1.0;
          const double w_m = static_cast<double>(att_row[s]) * m;
          double dot = 0.0;
          for (int64_t i = 0; i < hs; ++i) {
            dot += static_cast<double>(dout_t[i]) * static_cast<double>(v[i]);
            dv[i] += w_m * static_cast<double>(dout_t[i]);
          }
          dot *= m;
          dw[s] = dot;
          w_dot_dw += static_cast<double>(att_row[s]) * dot;
        }
        // Masked entries have weight 0, so they contribute nothing below.
        for (int64_t s = 0; s < T; ++s) {
          const double dpre = static_cast<double>(att_row[s]) * (dw[s] - w_dot_dw) * scale;
          const float* k = qkv_b + s * 3 * D + 1 * D + h * hs;
          double* dk = acc.data() + s * 3 * D + 1 * D + h * hs;
          for (int64_t i = 0; i < hs; ++i) {
            dq[i] += dpre * static_cast<double>(k[i]);
            dk[i] += dpre * static_cast<double>(q[i]);
          }
        }
      }
    }
    float* dqkv_b = dqkv + b * T * 3 * D;
    for (int64_t e = 0; e < T * 3 * D; ++e) dqkv_b[e] = static_cast<float>(acc[e]);
  }
}

void AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                const float* kv, int64_t B, int64_t T, int64_t D, int64_t NH) {
  const int64_t hs = D / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<double> w(T), dw(T);
  std::vector<double> dq_acc(hs);
  std::vector<double> dkv_acc(T * 2 * D);  // dkv of one batch row
  for (int64_t b = 0; b < B; ++b) {
    const float* kv_b = kv + b * T * 2 * D;
    std::fill(dkv_acc.begin(), dkv_acc.end(), 0.0);
    for (int64_t h = 0; h < NH; ++h) {
      const float* q_bh = q + b * D + h * hs;
      const float* dout_bh = dout + b * D + h * hs;
      SoftmaxWeights(w.data(), q_bh, kv_b + h * hs, 2 * D, T, hs, scale);

      double w_dot_dw = 0.0;
      for (int64_t s = 0; s < T; ++s) {
        const float* v = kv_b + s * 2 * D + D + h * hs;
        double* dv = dkv_acc.data() + s * 2 * D + D + h * hs;
        double dot = 0.0;
        for (int64_t i = 0; i < hs; ++i) {
          dot += static_cast<double>(dout_bh[i]) * static_cast<double>(v[i]);
          dv[i] += w[s] * static_cast<double>(dout_bh[i]);
        }
        dw[s] = dot;
        w_dot_dw += w[s] * dot;
      }
      std::fill(dq_acc.begin(), dq_acc.end(), 0.0);
      for (int64_t s = 0; s < T; ++s) {
        const double dpre = w[s] * (dw[s] - w_dot_dw) * scale;
        const float* k = kv_b + s * 2 * D + h * hs;
        double* dk = dkv_acc.data() + s * 2 * D + h * hs;
        for (int64_t i = 0; i < hs; ++i) {
          dq_acc[i] += dpre * static_cast<double>(k[i]);
          dk[i] += dpre * static_cast<double>(q_bh[i]);
        }
      }
      for (int64_t i = 0; i < hs; ++i) dq[b * D + h * hs + i] = static_cast<float>(dq_acc[i]);
    }
    float* dkv_b = dkv + b * T * 2 * D;
    for (int64_t e = 0; e < T * 2 * D; ++e) dkv_b[e] = static_cast<float>(dkv_acc[e]);
  }
}

}  // namespace forecastd::ref
