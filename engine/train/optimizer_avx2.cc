#include "engine/train/optimizer_avx2.h"

#include <immintrin.h>

#include <cmath>

// Only the functions marked FD_AVX2 use AVX2 (and never FMA, which would fuse the reference's
// separately rounded products and sums); the rest is built for the baseline CPU.
#define FD_AVX2 __attribute__((target("avx2")))

namespace forecastd {
namespace {

// The per-call constants, each computed as kernels/ref/optimizer.cc computes it.
struct AdamConstants {
  double beta1, one_minus_beta1, beta2, one_minus_beta2, eps, weight_decay, decay_factor;
  double step_size, bias_correction2_sqrt;
};

// The first n - n % 4 elements; the caller leaves the rest to the reference.
template <bool kDecoupled>
FD_AVX2 void AdamLoop(float* param, float* m, float* v, const float* grad, int64_t n,
                      const AdamConstants& c) {
  const __m256d beta1 = _mm256_set1_pd(c.beta1),
                one_minus_beta1 = _mm256_set1_pd(c.one_minus_beta1);
  const __m256d beta2 = _mm256_set1_pd(c.beta2),
                one_minus_beta2 = _mm256_set1_pd(c.one_minus_beta2);
  const __m256d eps = _mm256_set1_pd(c.eps), weight_decay = _mm256_set1_pd(c.weight_decay);
  const __m256d decay_factor = _mm256_set1_pd(c.decay_factor);
  const __m256d step_size = _mm256_set1_pd(c.step_size);
  const __m256d bias_correction2_sqrt = _mm256_set1_pd(c.bias_correction2_sqrt);
  for (int64_t i = 0; i + 4 <= n; i += 4) {
    __m256d p = _mm256_cvtps_pd(_mm_loadu_ps(param + i));
    __m256d g = _mm256_cvtps_pd(_mm_loadu_ps(grad + i));
    if constexpr (kDecoupled) {
      p = _mm256_mul_pd(p, decay_factor);
    } else {
      g = _mm256_add_pd(g, _mm256_mul_pd(weight_decay, p));
    }
    const __m256d m_old = _mm256_cvtps_pd(_mm_loadu_ps(m + i));
    const __m256d v_old = _mm256_cvtps_pd(_mm_loadu_ps(v + i));
    const __m128 m_new = _mm256_cvtpd_ps(
        _mm256_add_pd(_mm256_mul_pd(beta1, m_old), _mm256_mul_pd(one_minus_beta1, g)));
    const __m128 v_new = _mm256_cvtpd_ps(_mm256_add_pd(
        _mm256_mul_pd(beta2, v_old), _mm256_mul_pd(_mm256_mul_pd(one_minus_beta2, g), g)));
    _mm_storeu_ps(m + i, m_new);
    _mm_storeu_ps(v + i, v_new);
    const __m256d denom = _mm256_add_pd(
        _mm256_div_pd(_mm256_sqrt_pd(_mm256_cvtps_pd(v_new)), bias_correction2_sqrt), eps);
    const __m256d update = _mm256_div_pd(_mm256_mul_pd(step_size, _mm256_cvtps_pd(m_new)), denom);
    _mm_storeu_ps(param + i, _mm256_cvtpd_ps(_mm256_sub_pd(p, update)));
  }
}

}  // namespace

bool HasAvx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
}

void AdamUpdateAvx2(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                    const ref::AdamHyper& hyper) {
  const double lr = hyper.lr, beta1 = hyper.beta1, beta2 = hyper.beta2;
  AdamConstants c;
  c.beta1 = beta1;
  c.one_minus_beta1 = 1.0 - beta1;
  c.beta2 = beta2;
  c.one_minus_beta2 = 1.0 - beta2;
  c.eps = hyper.eps;
  c.weight_decay = hyper.weight_decay;
  c.decay_factor = 1.0 - lr * c.weight_decay;
  c.step_size = lr / (1.0 - std::pow(beta1, static_cast<double>(t)));
  c.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
  if (hyper.decoupled_weight_decay) {
    AdamLoop<true>(param, m, v, grad, n, c);
  } else {
    AdamLoop<false>(param, m, v, grad, n, c);
  }
  // Three or fewer left: the reference itself, one element at a time.
  const int64_t done = n - n % 4;
  ref::AdamUpdate(param + done, m + done, v + done, grad + done, n - done, t, hyper);
}

FD_AVX2 double GradSquaredSumAvx2(const float* grad, int64_t n) {
  // Four accumulators of four lanes, so the adds do not wait on each other.
  __m256d acc[4] = {_mm256_setzero_pd(), _mm256_setzero_pd(), _mm256_setzero_pd(),
                    _mm256_setzero_pd()};
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    for (int k = 0; k < 4; ++k) {
      const __m256d g = _mm256_cvtps_pd(_mm_loadu_ps(grad + i + 4 * k));
      acc[k] = _mm256_add_pd(acc[k], _mm256_mul_pd(g, g));
    }
  }
  const __m256d sum4 = _mm256_add_pd(_mm256_add_pd(acc[0], acc[1]), _mm256_add_pd(acc[2], acc[3]));
  alignas(32) double lanes[4];
  _mm256_store_pd(lanes, sum4);
  double sum = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
  for (; i < n; ++i) sum += static_cast<double>(grad[i]) * static_cast<double>(grad[i]);
  return sum;
}

}  // namespace forecastd
