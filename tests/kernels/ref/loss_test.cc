#include "kernels/ref/loss.h"

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Every element's value and gradient in the hand-computed tests: pred - target is
// {0.5, -1, 0, 2}, which puts one element on each side of the Huber threshold, one on it and
// one at the kink of MAE.
const std::vector<float> kPred = {1.0f, -0.5f, 2.0f, 0.25f};
const std::vector<float> kTarget = {0.5f, 0.5f, 2.0f, -1.75f};

void RequireGrad(const std::vector<float>& dpred, const std::vector<double>& expected) {
  REQUIRE(dpred.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(i, dpred[i], expected[i]);
    REQUIRE(dpred[i] == Approx(expected[i]).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("MSE loss and gradient match hand-computed values") {
  std::vector<float> dpred(4, std::numeric_limits<float>::quiet_NaN());
  const double loss =
      LossForwardBackward(dpred.data(), kPred.data(), kTarget.data(), 4, {.kind = LossKind::kMse});
  REQUIRE(loss == Approx((0.25 + 1.0 + 0.0 + 4.0) / 4));
  RequireGrad(dpred, {2 * 0.5 / 4, 2 * -1.0 / 4, 0.0, 2 * 2.0 / 4});
}

TEST_CASE("MAE loss and gradient match hand-computed values, gradient 0 at a tie") {
  std::vector<float> dpred(4, std::numeric_limits<float>::quiet_NaN());
  const double loss =
      LossForwardBackward(dpred.data(), kPred.data(), kTarget.data(), 4, {.kind = LossKind::kMae});
  REQUIRE(loss == Approx((0.5 + 1.0 + 0.0 + 2.0) / 4));
  RequireGrad(dpred, {0.25, -0.25, 0.0, 0.25});
}

TEST_CASE("Huber loss and gradient match hand-computed values") {
  std::vector<float> dpred(4, std::numeric_limits<float>::quiet_NaN());
  SECTION("delta 1: |e| = 1 sits on the threshold") {
    const double loss = LossForwardBackward(dpred.data(), kPred.data(), kTarget.data(), 4,
                                            {.kind = LossKind::kHuber, .huber_delta = 1.0f});
    // 0.5 * 0.5^2, 1 * (1 - 0.5), 0, 1 * (2 - 0.5)
    REQUIRE(loss == Approx((0.125 + 0.5 + 0.0 + 1.5) / 4));
    RequireGrad(dpred, {0.5 / 4, -1.0 / 4, 0.0, 1.0 / 4});
  }
  SECTION("delta 0.25: every non-zero error is in the linear part") {
    const double loss = LossForwardBackward(dpred.data(), kPred.data(), kTarget.data(), 4,
                                            {.kind = LossKind::kHuber, .huber_delta = 0.25f});
    REQUIRE(loss == Approx(0.25 * ((0.5 - 0.125) + (1.0 - 0.125) + 0.0 + (2.0 - 0.125)) / 4));
    RequireGrad(dpred, {0.25 / 4, -0.25 / 4, 0.0, 0.25 / 4});
  }
  SECTION("delta 3: every error is in the quadratic part, half the MSE") {
    const double loss = LossForwardBackward(dpred.data(), kPred.data(), kTarget.data(), 4,
                                            {.kind = LossKind::kHuber, .huber_delta = 3.0f});
    REQUIRE(loss == Approx(0.5 * (0.25 + 1.0 + 0.0 + 4.0) / 4));
    RequireGrad(dpred, {0.5 / 4, -1.0 / 4, 0.0, 2.0 / 4});
  }
}

TEST_CASE("Quantile loss with Q=3 matches hand-computed values, ties split as torch.maximum") {
  const std::vector<float> tau = {0.1f, 0.5f, 0.9f};
  const std::vector<float> target = {1.0f, -2.0f};
  const std::vector<float> pred = {0.0f,  1.0f,  3.0f,    // y - pred = 1, 0 (tie), -2
                                   -2.0f, -1.0f, -4.0f};  // y - pred = 0 (tie), -1, 2
  std::vector<float> dpred(6, std::numeric_limits<float>::quiet_NaN());
  const double loss =
      LossForwardBackward(dpred.data(), pred.data(), target.data(), 2,
                          {.kind = LossKind::kQuantile, .quantiles = tau.data(), .Q = 3});
  // max(tau d, (tau - 1) d) for d = y - pred, each tau read as the float it is stored in.
  const double t0 = tau[0], t1 = tau[1], t2 = tau[2];
  const double expected = (t0 * 1 + 0.0 + (t2 - 1) * -2  //
                           + 0.0 + (t1 - 1) * -1 + t2 * 2) /
                          6;
  REQUIRE(loss == Approx(expected).epsilon(1e-12));
  REQUIRE(loss == Approx(2.6 / 6));
  // -tau where y > pred, 1 - tau where y < pred, 0.5 - tau at a tie; over N * Q = 6.
  RequireGrad(dpred, {-t0 / 6, (0.5 - t1) / 6, (1 - t2) / 6,  //
                      (0.5 - t0) / 6, (1 - t1) / 6, -t2 / 6});
}

// d(mean loss)/d(pred) against central differences on random inputs kept clear of the kinks
// (e = 0, and |e| = delta for Huber). The loss is a double sum of float inputs, so the
// difference quotient is exact to about 1e-12 for these piecewise quadratics; the tolerance
// only has to absorb dpred's rounding to float (relative 6e-8).
void CheckLossGradient(const LossSpec& spec, int64_t N, int64_t per_row) {
  std::mt19937 rng(static_cast<uint32_t>(spec.kind) + 20);
  std::vector<float> pred = RandomVector(rng, N * per_row);
  const std::vector<float> target = RandomVector(rng, N);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t q = 0; q < per_row; ++q) {
      float& p = pred[n * per_row + q];
      const float e = p - target[n];
      if (std::abs(e) < 0.05f) p += 0.1f;
      if (std::abs(std::abs(p - target[n]) - spec.huber_delta) < 0.05f) p += 0.1f;
    }
  }
  std::vector<float> dpred(N * per_row, std::numeric_limits<float>::quiet_NaN());
  LossForwardBackward(dpred.data(), pred.data(), target.data(), N, spec);

  constexpr float kEps = 1e-3f;
  std::vector<float> scratch(N * per_row);
  for (size_t i = 0; i < pred.size(); ++i) {
    const float p0 = pred[i];
    const float p_plus = p0 + kEps, p_minus = p0 - kEps;
    pred[i] = p_plus;
    const double l_plus = LossForwardBackward(scratch.data(), pred.data(), target.data(), N, spec);
    pred[i] = p_minus;
    const double l_minus = LossForwardBackward(scratch.data(), pred.data(), target.data(), N, spec);
    pred[i] = p0;
    const double fd = (l_plus - l_minus) / (static_cast<double>(p_plus) - p_minus);
    CAPTURE(i, pred[i], target[i / per_row], dpred[i], fd);
    REQUIRE(std::abs(fd - dpred[i]) <= 1e-7 + 1e-6 * std::abs(fd));
  }
}

TEST_CASE("Each loss's gradient matches finite differences") {
  const std::vector<float> tau = {0.1f, 0.5f, 0.9f};
  SECTION("MSE") { CheckLossGradient({.kind = LossKind::kMse}, 16, 1); }
  SECTION("MAE") { CheckLossGradient({.kind = LossKind::kMae}, 16, 1); }
  SECTION("Huber") { CheckLossGradient({.kind = LossKind::kHuber, .huber_delta = 0.7f}, 16, 1); }
  SECTION("Quantile, Q=3") {
    CheckLossGradient({.kind = LossKind::kQuantile, .quantiles = tau.data(), .Q = 3}, 8, 3);
  }
}

}  // namespace
}  // namespace forecastd::ref
