#include "engine/random.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

#if FORECASTD_CATCH_V3
using Catch::Approx;
#endif

// ---------------------------------------------------------------------------------------------
// Random

TEST_CASE("Random is the reference PCG32", "[unit][random]") {
  // pcg32_srandom_r(&rng, 42, 54) in pcg-random.org's pcg32-demo.
  Random rng(42, 54);
  for (uint32_t want :
       {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu}) {
    CHECK(rng.NextU32() == want);
  }
  // SplitMix64's first output for seed 1234567 in the reference splitmix64.c.
  CHECK(SplitMix64(1234567) == 6457827717110365317ull);
  // Uniforms are exact functions of the pinned integers.
  Random u(42, 54);
  CHECK(u.UniformFloat() == static_cast<float>(0xa15c02b7u >> 8) / 16777216.0f);
  CHECK(u.NextU64() == ((uint64_t{0x7b47f409u} << 32) | 0xba1d3330u));
}

TEST_CASE("Random is deterministic per seed and stream", "[unit][random]") {
  Random a(9), b(9), c(10), d(9, 1);
  bool differ_seed = false, differ_stream = false;
  for (int i = 0; i < 16; ++i) {
    const uint32_t x = a.NextU32();
    CHECK(x == b.NextU32());
    differ_seed |= x != c.NextU32();
    differ_stream |= x != d.NextU32();
  }
  CHECK(differ_seed);
  CHECK(differ_stream);
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(1, SeedPurpose::kShuffle, 1));
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(1, SeedPurpose::kWeightInit, 0));
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(2, SeedPurpose::kShuffle, 0));
}

TEST_CASE("Random::UniformInt stays below its bound, evenly", "[unit][random]") {
  Random rng(3);
  CHECK(rng.UniformInt(0) == 0);
  for (uint64_t bound : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{0xFFFFFFFF},
                         uint64_t{1} << 32, (uint64_t{1} << 40) + 3, ~uint64_t{0}}) {
    for (int i = 0; i < 1000; ++i) CHECK(rng.UniformInt(bound) < bound);
  }
  constexpr int kDraws = 60000;
  int count[6] = {};
  for (int i = 0; i < kDraws; ++i) ++count[rng.UniformInt(6)];
  for (int c : count) CHECK(c == Approx(kDraws / 6).epsilon(0.05));
  // A large bound reaches its upper half too.
  uint64_t top = 0;
  for (int i = 0; i < 100; ++i) top = std::max(top, rng.UniformInt((uint64_t{1} << 40) + 3));
  CHECK(top > (uint64_t{1} << 39));
}

TEST_CASE("Random uniform and normal draws have the right moments", "[unit][random]") {
  constexpr int kDraws = 200000;
  Random rng(2024);
  double sum = 0, sum2 = 0;
  float lo = 1e9f, hi = -1e9f;
  for (int i = 0; i < kDraws; ++i) {
    const float v = rng.Uniform(-2.0f, 6.0f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  const double mean = sum / kDraws, var = sum2 / kDraws - mean * mean;
  CHECK(lo >= -2.0f);
  CHECK(hi < 6.0f);
  CHECK(mean == Approx(2.0).margin(0.02));
  CHECK(var == Approx(64.0 / 12.0).epsilon(0.01));
  // A range too narrow for 2^24 steps still stays half-open.
  for (int i = 0; i < 1000; ++i) CHECK(rng.Uniform(1.0f, std::nextafter(1.0f, 2.0f)) == 1.0f);

  sum = sum2 = 0;
  int within_one = 0;
  for (int i = 0; i < kDraws; ++i) {
    const float v = rng.Normal(3.0f, 2.0f);
    sum += v;
    sum2 += static_cast<double>(v) * v;
    within_one += std::fabs(v - 3.0f) < 2.0f;
  }
  const double nmean = sum / kDraws, nvar = sum2 / kDraws - nmean * nmean;
  CHECK(nmean == Approx(3.0).margin(0.02));
  CHECK(nvar == Approx(4.0).epsilon(0.02));
  CHECK(static_cast<double>(within_one) / kDraws == Approx(0.6827).margin(0.005));
}

TEST_CASE("Random::Normal is Box-Muller over the pinned stream", "[unit][random]") {
  Random rng(42, 54);
  const uint64_t a = (uint64_t{0xa15c02b7u} << 32) | 0x7b47f409u;
  const uint64_t b = (uint64_t{0xba1d3330u} << 32) | 0x83d2f293u;
  const double u1 = 1.0 - static_cast<double>(a >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double two_pi = 6.283185307179586476925286766559;
  CHECK(rng.Normal(0.0f, 1.0f) == static_cast<float>(r * std::cos(two_pi * u2)));
  CHECK(rng.Normal(1.0f, 2.0f) == static_cast<float>(1.0 + 2.0 * r * std::sin(two_pi * u2)));
}

}  // namespace
}  // namespace forecastd
