#include "kernels/ref/linear.h"

#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

TEST_CASE("LinearForward computes a 2x3 layer with bias by hand") {
  const std::vector<float> inp = {1, 2, 3,  //
                                  4, 5, 6};
  const std::vector<float> weight = {1.0f, 0.0f, -1.0f,  //
                                     0.5f, 0.5f, 0.5f};
  const std::vector<float> bias = {0.1f, -0.2f};
  std::vector<float> out(4, -99.0f);
  LinearForward(out.data(), inp.data(), weight.data(), bias.data(), /*N=*/2, /*IN=*/3, /*OUT=*/2);
  // Row n, column o is inp[n] . weight[o] + bias[o]: weight is (OUT, IN), as nn.Linear.
  REQUIRE(out[0] == Approx(1 - 3 + 0.1));
  REQUIRE(out[1] == Approx(0.5 * (1 + 2 + 3) - 0.2));
  REQUIRE(out[2] == Approx(4 - 6 + 0.1));
  REQUIRE(out[3] == Approx(0.5 * (4 + 5 + 6) - 0.2));
}

TEST_CASE("LinearForward without bias is a plain matrix product") {
  const std::vector<float> inp = {2, -1, 0.5f};
  const std::vector<float> weight = {1,     2,     3,  //
                                     -1,    0,     4,  //
                                     0,     0,     0,  //
                                     0.25f, 0.25f, 0.25f};
  std::vector<float> out(4, -99.0f);
  LinearForward(out.data(), inp.data(), weight.data(), nullptr, /*N=*/1, /*IN=*/3, /*OUT=*/4);
  REQUIRE(out[0] == Approx(2 - 2 + 1.5));
  REQUIRE(out[1] == Approx(-2 + 0 + 2));
  REQUIRE(out[2] == 0.0f);
  REQUIRE(out[3] == Approx(0.25 * 1.5));
}

TEST_CASE("LinearForward with an identity weight and bias returns inp + bias") {
  constexpr int64_t N = 3, C = 5;
  std::mt19937 rng(7);
  const std::vector<float> inp = RandomVector(rng, N * C);
  const std::vector<float> bias = RandomVector(rng, C);
  std::vector<float> weight(C * C, 0.0f);
  for (int64_t i = 0; i < C; ++i) weight[i * C + i] = 1.0f;
  std::vector<float> out(N * C);
  LinearForward(out.data(), inp.data(), weight.data(), bias.data(), N, C, C);
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t c = 0; c < C; ++c) {
      CAPTURE(n, c);
      REQUIRE(out[n * C + c] == inp[n * C + c] + bias[c]);
    }
  }
}

TEST_CASE("LinearForward treats each row independently and is linear in inp") {
  constexpr int64_t N = 4, IN = 6, OUT = 3;
  std::mt19937 rng(11);
  const std::vector<float> inp = RandomVector(rng, N * IN);
  const std::vector<float> weight = RandomVector(rng, OUT * IN);
  std::vector<float> out(N * OUT);
  LinearForward(out.data(), inp.data(), weight.data(), nullptr, N, IN, OUT);

  for (int64_t n = 0; n < N; ++n) {
    // Row n alone, and row n scaled by 2, give row n of the batched result (times 2).
    std::vector<float> row(inp.begin() + n * IN, inp.begin() + (n + 1) * IN);
    std::vector<float> row_out(OUT), twice_out(OUT);
    LinearForward(row_out.data(), row.data(), weight.data(), nullptr, 1, IN, OUT);
    for (float& x : row) x *= 2.0f;
    LinearForward(twice_out.data(), row.data(), weight.data(), nullptr, 1, IN, OUT);
    for (int64_t o = 0; o < OUT; ++o) {
      CAPTURE(n, o);
      REQUIRE(row_out[o] == out[n * OUT + o]);
      REQUIRE(twice_out[o] == Approx(2.0f * out[n * OUT + o]).epsilon(1e-6));
    }
  }
}

}  // namespace
}  // namespace forecastd::ref
