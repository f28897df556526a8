#include "kernels/ref/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

namespace forecastd::ref {

void AttentionForward(float* out, float* att, const float* qkv, int64_t B, int64_t T, int64_t D,
                      int64_t NH, bool causal) {
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

        double max = -INFINITY;
        for (int64_t s = 0; s < S; ++s) {
          const float* k = qkv_b + s * 3 * D + 1 * D + h * hs;
          double dot = 0.0;
          for (int64_t i = 0; i < hs; ++i) {
            dot += static_cast<double>(q[i]) * static_cast<double>(k[i]);
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

        if (att != nullptr) {
          float* att_row = att + ((b * NH + h) * T + t) * T;
          for (int64_t s = 0; s < T; ++s) {
            att_row[s] = s < S ? static_cast<float>(w[s]) : 0.0f;
          }
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
      const float* q_bh = q + b * D + h * hs;
      double max = -INFINITY;
      for (int64_t s = 0; s < T; ++s) {
        const float* k = kv_b + s * 2 * D + h * hs;
        double dot = 0.0;
        for (int64_t i = 0; i < hs; ++i) {
          dot += static_cast<double>(q_bh[i]) * static_cast<double>(k[i]);
        }
        w[s] = dot * scale;
        max = std::max(max, w[s]);
      }
      double sum = 0.0;
      for (int64_t s = 0; s < T; ++s) {
        w[s] = std::exp(w[s] - max);
        sum += w[s];
      }
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t s = 0; s < T; ++s) {
        const float* v = kv_b + s * 2 * D + D + h * hs;
        for (int64_t i = 0; i < hs; ++i) acc[i] += w[s] / sum * static_cast<double>(v[i]);
      }
      for (int64_t i = 0; i < hs; ++i) out[b * D + h * hs + i] = static_cast<float>(acc[i]);
    }
  }
}

}  // namespace forecastd::ref
