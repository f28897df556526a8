#include "kernels/ref/normalization.h"

#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

TEST_CASE("LayerNormForward uses the biased variance, as nn.LayerNorm") {
  const std::vector<float> inp = {1, 2, 3, 4};
  const std::vector<float> gamma(4, 1.0f), beta(4, 0.0f);
  std::vector<float> out(4);
  float mean = 0, rstd = 0;
  LayerNormForward(out.data(), &mean, &rstd, inp.data(), gamma.data(), beta.data(), 1, 4, 0.0f);
  // mean 2.5; biased variance (2.25 + 0.25 + 0.25 + 2.25) / 4 = 1.25 (unbiased would be 5/3).
  REQUIRE(mean == Approx(2.5));
  REQUIRE(rstd == Approx(1.0 / std::sqrt(1.25)));
  REQUIRE(out[0] == Approx(-1.5 / std::sqrt(1.25)));
  REQUIRE(out[1] == Approx(-0.5 / std::sqrt(1.25)));
  REQUIRE(out[2] == Approx(0.5 / std::sqrt(1.25)));
  REQUIRE(out[3] == Approx(1.5 / std::sqrt(1.25)));
}

TEST_CASE("LayerNormForward applies eps inside the root, then gamma and beta per column") {
  const std::vector<float> inp = {1, 3,  //
                                  -2, -2};
  const std::vector<float> gamma = {2.0f, 0.5f}, beta = {0.1f, -0.1f};
  std::vector<float> out(4), mean(2), rstd(2);
  const float eps = 0.25f;
  LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), gamma.data(), beta.data(), 2,
                   2, eps);
  // Row 0: mean 2, variance 1.
  const double s = 1.0 / std::sqrt(1.0 + 0.25);
  REQUIRE(mean[0] == Approx(2.0));
  REQUIRE(rstd[0] == Approx(s));
  REQUIRE(out[0] == Approx(-1.0 * s * 2.0 + 0.1));
  REQUIRE(out[1] == Approx(1.0 * s * 0.5 - 0.1));
  // Row 1 is constant: variance 0, so the output is beta and rstd is 1/sqrt(eps).
  REQUIRE(mean[1] == Approx(-2.0));
  REQUIRE(rstd[1] == Approx(2.0));
  REQUIRE(out[2] == Approx(0.1));
  REQUIRE(out[3] == Approx(-0.1));
}

TEST_CASE("LayerNormForward rows have mean 0 and variance 1 before gamma and beta") {
  constexpr int64_t N = 5, C = 64;
  std::mt19937 rng(1234);
  std::uniform_real_distribution<float> dist(-3.0f, 3.0f);
  std::vector<float> inp(N * C);
  for (int64_t n = 0; n < N; ++n) {
    // A large per-row offset as well, which a one-pass variance would lose to cancellation.
    for (int64_t c = 0; c < C; ++c) inp[n * C + c] = 1000.0f * n + dist(rng);
  }
  const std::vector<float> gamma(C, 1.0f), beta(C, 0.0f);
  std::vector<float> out(N * C);
  LayerNormForward(out.data(), nullptr, nullptr, inp.data(), gamma.data(), beta.data(), N, C,
                   1e-5f);
  for (int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < C; ++c) m += out[n * C + c];
    m /= C;
    for (int64_t c = 0; c < C; ++c) v += (out[n * C + c] - m) * (out[n * C + c] - m);
    v /= C;
    CAPTURE(n);
    REQUIRE(std::abs(m) < 1e-5);
    REQUIRE(v == Approx(1.0).epsilon(1e-4));
  }
}

TEST_CASE("LayerNormForward saves statistics that reproduce its output") {
  constexpr int64_t N = 3, C = 7;
  std::mt19937 rng(99);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> inp(N * C), gamma(C), beta(C);
  for (float& x : inp) x = dist(rng);
  for (float& x : gamma) x = dist(rng);
  for (float& x : beta) x = dist(rng);
  std::vector<float> out(N * C), mean(N), rstd(N), out_no_stats(N * C);
  LayerNormForward(out.data(), mean.data(), rstd.data(), inp.data(), gamma.data(), beta.data(), N,
                   C, 1e-5f);
  LayerNormForward(out_no_stats.data(), nullptr, nullptr, inp.data(), gamma.data(), beta.data(), N,
                   C, 1e-5f);
  REQUIRE(out == out_no_stats);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      CAPTURE(n, c);
      const double expected = (inp[n * C + c] - mean[n]) * rstd[n] * gamma[c] + beta[c];
      REQUIRE(out[n * C + c] == Approx(expected).epsilon(1e-5).margin(1e-6));
    }
  }
}

}  // namespace
}  // namespace forecastd::ref
