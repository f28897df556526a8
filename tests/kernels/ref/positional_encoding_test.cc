#include "kernels/ref/positional_encoding.h"

#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

TEST_CASE("PositionalEncodingTable row t=0 is [0, 1, 0, 1, ...]") {
  constexpr int64_t T = 3, D = 8;
  std::vector<float> pe(T * D, -99.0f);
  PositionalEncodingTable(pe.data(), T, D);
  for (int64_t c = 0; c < D; ++c) {
    CAPTURE(c);
    REQUIRE(pe[c] == (c % 2 == 0 ? 0.0f : 1.0f));
  }
}

TEST_CASE("PositionalEncodingTable matches values computed by hand") {
  constexpr int64_t T = 4, D = 4;
  std::vector<float> pe(T * D);
  PositionalEncodingTable(pe.data(), T, D);
  // Columns 0, 1 have frequency 1; columns 2, 3 have 10000^(-2/4) = 0.01.
  REQUIRE(pe[1 * D + 0] == Approx(std::sin(1.0)));
  REQUIRE(pe[1 * D + 1] == Approx(std::cos(1.0)));
  REQUIRE(pe[1 * D + 2] == Approx(std::sin(0.01)));
  REQUIRE(pe[1 * D + 3] == Approx(std::cos(0.01)));
  REQUIRE(pe[3 * D + 0] == Approx(std::sin(3.0)));
  REQUIRE(pe[3 * D + 1] == Approx(std::cos(3.0)));
  REQUIRE(pe[3 * D + 2] == Approx(std::sin(0.03)));
  REQUIRE(pe[3 * D + 3] == Approx(std::cos(0.03)));
}

TEST_CASE("PositionalEncodingTable with odd D ends in a sine column") {
  constexpr int64_t T = 6, D = 5;
  std::vector<float> pe(T * D);
  PositionalEncodingTable(pe.data(), T, D);
  const double freq4 = std::pow(10000.0, -4.0 / 5.0);
  for (int64_t t = 0; t < T; ++t) {
    CAPTURE(t);
    REQUIRE(pe[t * D + 4] == Approx(std::sin(t * freq4)).margin(1e-7));
    // Each (sin, cos) pair lies on the unit circle.
    for (int64_t i = 0; i + 1 < D; i += 2) {
      const double s = pe[t * D + i], c = pe[t * D + i + 1];
      REQUIRE(s * s + c * c == Approx(1.0).epsilon(1e-6));
    }
  }
}

TEST_CASE("PositionalEncodingForward adds the table to every batch row, also in place") {
  constexpr int64_t B = 3, T = 5, D = 6;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> inp(B * T * D);
  for (float& x : inp) x = dist(rng);
  std::vector<float> pe(T * D);
  PositionalEncodingTable(pe.data(), T, D);

  std::vector<float> out(B * T * D);
  PositionalEncodingForward(out.data(), inp.data(), B, T, D);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t tc = 0; tc < T * D; ++tc) {
      CAPTURE(b, tc);
      REQUIRE(out[b * T * D + tc] == inp[b * T * D + tc] + pe[tc]);
    }
  }
  std::vector<float> in_place = inp;
  PositionalEncodingForward(in_place.data(), in_place.data(), B, T, D);
  REQUIRE(in_place == out);
}

}  // namespace
}  // namespace forecastd::ref
