#include "backends/cpu/rows_avx2.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

// Only the functions marked FD_AVX2 use AVX2 / FMA (as in recurrent_avx2.cc).
#define FD_AVX2 __attribute__((target("avx2,fma")))

namespace forecastd::cpu {
namespace {

// Rows a thread takes at least: below that a parallel region costs more than it saves.
constexpr int64_t kMinFloatsPerThread = 16384;

int ThreadsFor(int64_t floats) {
  return static_cast<int>(
      std::max<int64_t>(1, std::min<int64_t>(omp_get_max_threads(), floats / kMinFloatsPerThread)));
}

FD_AVX2 inline float Sum8(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The row's mean and 1 / sqrt(biased variance + eps), in two passes.
FD_AVX2 inline void RowStats(const float* x, int64_t C, float eps, float* mean, float* rstd) {
  __m256 acc = _mm256_setzero_ps();
  int64_t c = 0;
  for (; c + 8 <= C; c += 8) acc = _mm256_add_ps(acc, _mm256_loadu_ps(x + c));
  float sum = Sum8(acc);
  for (; c < C; ++c) sum += x[c];
  const float m = sum / static_cast<float>(C);
  const __m256 mv = _mm256_set1_ps(m);
  acc = _mm256_setzero_ps();
  for (c = 0; c + 8 <= C; c += 8) {
    const __m256 d = _mm256_sub_ps(_mm256_loadu_ps(x + c), mv);
    acc = _mm256_fmadd_ps(d, d, acc);
  }
  float sq = Sum8(acc);
  for (; c < C; ++c) sq += (x[c] - m) * (x[c] - m);
  *mean = m;
  *rstd = static_cast<float>(
      1.0 / std::sqrt(static_cast<double>(sq) / static_cast<double>(C) + static_cast<double>(eps)));
}

FD_AVX2 void LayerNormRange(float* out, float* mean, float* rstd, const float* inp,
                            const float* gamma, const float* beta, int64_t n0, int64_t n1,
                            int64_t C, float eps) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    float* y = out + n * C;
    float m = 0.0f, s = 0.0f;
    RowStats(x, C, eps, &m, &s);
    if (mean != nullptr) mean[n] = m;
    if (rstd != nullptr) rstd[n] = s;
    const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
    int64_t c = 0;
    for (; c + 8 <= C; c += 8) {
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), mv), sv);
      _mm256_storeu_ps(
          y + c, _mm256_fmadd_ps(xhat, _mm256_loadu_ps(gamma + c), _mm256_loadu_ps(beta + c)));
    }
    for (; c < C; ++c) y[c] = (x[c] - m) * s * gamma[c] + beta[c];
  }
}

// Rows [n0, n1): dinp, and this range's sums of dout * xhat and dout into dgamma_part and
// dbeta_part (C each, overwritten).
FD_AVX2 void LayerNormBackwardRange(float* dinp, float* dgamma_part, float* dbeta_part,
                                    const float* dout, const float* inp, const float* gamma,
                                    int64_t n0, int64_t n1, int64_t C, float eps) {
  std::fill(dgamma_part, dgamma_part + C, 0.0f);
  std::fill(dbeta_part, dbeta_part + C, 0.0f);
  for (int64_t n = n0; n < n1; ++n) {
    const float* x = inp + n * C;
    const float* dy = dout + n * C;
    float m = 0.0f, s = 0.0f;
    RowStats(x, C, eps, &m, &s);
    const __m256 mv = _mm256_set1_ps(m), sv = _mm256_set1_ps(s);
    // The row's means of dxhat = dy * gamma and of dxhat * xhat; the parameter gradients.
    __m256 a = _mm256_setzero_ps(), b = _mm256_setzero_ps();
    int64_t c = 0;
    for (; c + 8 <= C; c += 8) {
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), mv), sv);
      const __m256 dyv = _mm256_loadu_ps(dy + c);
      const __m256 dxhat = _mm256_mul_ps(dyv, _mm256_loadu_ps(gamma + c));
      a = _mm256_add_ps(a, dxhat);
      b = _mm256_fmadd_ps(dxhat, xhat, b);
      _mm256_storeu_ps(dgamma_part + c,
                       _mm256_fmadd_ps(dyv, xhat, _mm256_loadu_ps(dgamma_part + c)));
      _mm256_storeu_ps(dbeta_part + c, _mm256_add_ps(dyv, _mm256_loadu_ps(dbeta_part + c)));
    }
    float sa = Sum8(a), sb = Sum8(b);
    for (; c < C; ++c) {
      const float xhat = (x[c] - m) * s, dxhat = dy[c] * gamma[c];
      sa += dxhat;
      sb += dxhat * xhat;
      dgamma_part[c] += dy[c] * xhat;
      dbeta_part[c] += dy[c];
    }
    if (dinp == nullptr) continue;
    const float mean_a = sa / static_cast<float>(C), mean_b = sb / static_cast<float>(C);
    const __m256 av = _mm256_set1_ps(mean_a), bv = _mm256_set1_ps(mean_b);
    float* dx = dinp + n * C;
    for (c = 0; c + 8 <= C; c += 8) {
      const __m256 xhat = _mm256_mul_ps(_mm256_sub_ps(_mm256_loadu_ps(x + c), mv), sv);
      const __m256 dxhat = _mm256_mul_ps(_mm256_loadu_ps(dy + c), _mm256_loadu_ps(gamma + c));
      // s * (dxhat - mean_a - xhat * mean_b)
      const __m256 t = _mm256_fnmadd_ps(xhat, bv, _mm256_sub_ps(dxhat, av));
      _mm256_storeu_ps(dx + c, _mm256_mul_ps(sv, t));
    }
    for (; c < C; ++c) {
      const float xhat = (x[c] - m) * s;
      dx[c] = s * (dy[c] * gamma[c] - mean_a - xhat * mean_b);
    }
  }
}

FD_AVX2 void ColumnSumsRange(float* sums, const float* x, int64_t n0, int64_t n1, int64_t C) {
  std::fill(sums, sums + C, 0.0f);
  for (int64_t n = n0; n < n1; ++n) {
    const float* row = x + n * C;
    int64_t c = 0;
    for (; c + 8 <= C; c += 8) {
      _mm256_storeu_ps(sums + c,
                       _mm256_add_ps(_mm256_loadu_ps(sums + c), _mm256_loadu_ps(row + c)));
    }
    for (; c < C; ++c) sums[c] += row[c];
  }
}

FD_AVX2 void AddRange(float* out, const float* a, const float* b, int64_t i0, int64_t i1) {
  int64_t i = i0;
  for (; i + 8 <= i1; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i)));
  }
  for (; i < i1; ++i) out[i] = a[i] + b[i];
}

// Runs body(t, m) on m threads, m = ThreadsFor(floats) (one: on the calling thread).
template <typename Body>
void OnThreads(int64_t floats, const Body& body) {
  const int threads = ThreadsFor(floats);
  if (threads == 1) return body(0, 1);
#pragma omp parallel num_threads(threads)
  body(omp_get_thread_num(), omp_get_num_threads());
}

// Sums each thread's partial (C floats apart in `parts`, `m` of them) into out.
void SumParts(float* out, const std::vector<float>& parts, int m, int64_t C) {
  for (int64_t c = 0; c < C; ++c) {
    float sum = 0.0f;
    for (int t = 0; t < m; ++t) sum += parts[static_cast<size_t>(t * C + c)];
    out[c] = sum;
  }
}

}  // namespace

void LayerNormRows(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                   const float* beta, int64_t N, int64_t C, float eps) {
  OnThreads(N * C, [&](int t, int m) {
    LayerNormRange(out, mean, rstd, inp, gamma, beta, N * t / m, N * (t + 1) / m, C, eps);
  });
}

void LayerNormBackwardRows(float* dinp, float* dgamma, float* dbeta, const float* dout,
                           const float* inp, const float* gamma, int64_t N, int64_t C, float eps) {
  const int threads = ThreadsFor(N * C);
  std::vector<float> gamma_parts(static_cast<size_t>(threads * C)),
      beta_parts(static_cast<size_t>(threads * C));
  int used = 1;
  OnThreads(N * C, [&](int t, int m) {
    if (t == 0) used = m;
    LayerNormBackwardRange(dinp, gamma_parts.data() + t * C, beta_parts.data() + t * C, dout, inp,
                           gamma, N * t / m, N * (t + 1) / m, C, eps);
  });
  if (dgamma != nullptr) SumParts(dgamma, gamma_parts, used, C);
  if (dbeta != nullptr) SumParts(dbeta, beta_parts, used, C);
}

void ColumnSums(float* sums, const float* x, int64_t N, int64_t C) {
  const int threads = ThreadsFor(N * C);
  std::vector<float> parts(static_cast<size_t>(threads * C));
  int used = 1;
  OnThreads(N * C, [&](int t, int m) {
    if (t == 0) used = m;
    ColumnSumsRange(parts.data() + t * C, x, N * t / m, N * (t + 1) / m, C);
  });
  SumParts(sums, parts, used, C);
}

void AddRows(float* out, const float* a, const float* b, int64_t n) {
  OnThreads(n, [&](int t, int m) { AddRange(out, a, b, n * t / m, n * (t + 1) / m); });
}

}  // namespace forecastd::cpu
