#include "kernels/ref/activation.h"

#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_CASE("GeluForward matches known values of both forms") {
  const std::vector<float> inp = {0.0f, 1.0f, -1.0f, 2.0f, -0.5f, 3.0f};
  // x * Phi(x), and the tanh approximation, evaluated in double precision.
  const std::vector<double> erf_form = {0.0,
                                        0.8413447460685429,
                                        -0.15865525393145707,
                                        1.9544997361036416,
                                        -0.15426876936299344,
                                        2.99595030590511};
  const std::vector<double> tanh_form = {0.0,
                                         0.8411919906082768,
                                         -0.15880800939172324,
                                         1.954597694087775,
                                         -0.15428599017485606,
                                         2.996362607918227};
  std::vector<float> out(inp.size());
  GeluForward(out.data(), inp.data(), inp.size(), GeluForm::kErf);
  REQUIRE(out[0] == 0.0f);
  for (size_t i = 1; i < inp.size(); ++i) {
    CAPTURE(inp[i]);
    REQUIRE(out[i] == Approx(erf_form[i]).epsilon(1e-6));
  }
  GeluForward(out.data(), inp.data(), inp.size(), GeluForm::kTanh);
  REQUIRE(out[0] == 0.0f);
  for (size_t i = 1; i < inp.size(); ++i) {
    CAPTURE(inp[i]);
    REQUIRE(out[i] == Approx(tanh_form[i]).epsilon(1e-6));
  }
}

TEST_CASE("GeluForward tanh form is within 1e-3 of the erf form on [-3, 3]") {
  std::vector<float> inp;
  for (int k = -300; k <= 300; ++k) inp.push_back(k / 100.0f);
  std::vector<float> by_erf(inp.size()), by_tanh(inp.size());
  GeluForward(by_erf.data(), inp.data(), inp.size(), GeluForm::kErf);
  GeluForward(by_tanh.data(), inp.data(), inp.size(), GeluForm::kTanh);
  bool any_differs = false;
  for (size_t i = 0; i < inp.size(); ++i) {
    CAPTURE(inp[i]);
    REQUIRE(std::abs(by_erf[i] - by_tanh[i]) < 1e-3f);
    any_differs |= by_erf[i] != by_tanh[i];
  }
  REQUIRE(any_differs);  // the form argument is honoured
}

TEST_CASE("GeluForward works in place") {
  std::mt19937 rng(17);
  for (GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
    std::vector<float> x = RandomVector(rng, 33, -4.0f, 4.0f);
    std::vector<float> expected(x.size());
    GeluForward(expected.data(), x.data(), x.size(), form);
    GeluForward(x.data(), x.data(), x.size(), form);
    REQUIRE(x == expected);
  }
}

TEST_CASE("ReluForward clamps negatives to zero, also in place") {
  std::vector<float> x = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f, -1e-30f};
  ReluForward(x.data(), x.data(), x.size());
  REQUIRE(x == std::vector<float>{0.0f, 0.0f, 0.0f, 0.5f, 3.0f, 0.0f});
}

TEST_CASE("ResidualForward adds, with out aliasing either input") {
  const std::vector<float> a = {1.0f, -2.0f, 0.25f}, b = {0.5f, 2.0f, -1.0f};
  const std::vector<float> sum = {1.5f, 0.0f, -0.75f};
  std::vector<float> out(3);
  ResidualForward(out.data(), a.data(), b.data(), 3);
  REQUIRE(out == sum);
  std::vector<float> a_copy = a;
  ResidualForward(a_copy.data(), a_copy.data(), b.data(), 3);
  REQUIRE(a_copy == sum);
  std::vector<float> b_copy = b;
  ResidualForward(b_copy.data(), a.data(), b_copy.data(), 3);
  REQUIRE(b_copy == sum);
}

TEST_CASE("SoftmaxForward matches a row computed by hand") {
  // exp of the inputs is 1, 2, 3, so the softmax is 1/6, 2/6, 3/6.
  const std::vector<float> inp = {0.0f, std::log(2.0f), std::log(3.0f)};
  std::vector<float> out(3);
  SoftmaxForward(out.data(), inp.data(), 1, 3);
  REQUIRE(out[0] == Approx(1.0 / 6));
  REQUIRE(out[1] == Approx(2.0 / 6));
  REQUIRE(out[2] == Approx(3.0 / 6));
}

TEST_CASE("SoftmaxForward rows sum to 1 and ignore a constant shift") {
  constexpr int64_t R = 4, C = 9;
  std::mt19937 rng(23);
  const std::vector<float> inp = RandomVector(rng, R * C, -5.0f, 5.0f);
  std::vector<float> shifted = inp;
  for (int64_t r = 0; r < R; ++r) {
    for (int64_t c = 0; c < C; ++c) shifted[r * C + c] += 100.0f * (r + 1);
  }
  std::vector<float> out(R * C), out_shifted(R * C);
  SoftmaxForward(out.data(), inp.data(), R, C);
  SoftmaxForward(out_shifted.data(), shifted.data(), R, C);
  for (int64_t r = 0; r < R; ++r) {
    double sum = 0;
    for (int64_t c = 0; c < C; ++c) {
      CAPTURE(r, c);
      REQUIRE(out[r * C + c] > 0.0f);
      // Adding 100..400 in float moves the inputs by up to ~1.5e-5, hence the margin.
      REQUIRE(out_shifted[r * C + c] == Approx(out[r * C + c]).epsilon(1e-4));
      sum += out[r * C + c];
    }
    CAPTURE(r);
    REQUIRE(sum == Approx(1.0).epsilon(1e-6));
  }
}

TEST_CASE("SoftmaxForward is stable for large inputs and works in place") {
  std::vector<float> x = {1000.0f, 1001.0f, -1000.0f, 88.0f, 89.0f, 89.0f};
  SoftmaxForward(x.data(), x.data(), 2, 3);
  const double e = std::exp(1.0);
  REQUIRE(x[0] == Approx(1.0 / (1.0 + e)));
  REQUIRE(x[1] == Approx(e / (1.0 + e)));
  REQUIRE(x[2] == 0.0f);
  REQUIRE(x[3] == Approx(1.0 / (1.0 + 2.0 * e)));
  REQUIRE(x[4] == Approx(e / (1.0 + 2.0 * e)));
  REQUIRE(x[5] == x[4]);
}

}  // namespace
}  // namespace forecastd::ref
