// Needs a GPU: the bias kernels of the CUDA Linear (kernels/cuda/linear_bias.h): AddBias
// exactly against the float sum, BiasGrad against ref::LinearBackward's dbias over one row,
// odd widths, and many rows, plus its bit-for-bit reproducibility.
#include "kernels/cuda/linear_bias.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ref/linear.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectEqual;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {{1, 1},      {3, 7},     {100, 33},
                                                          {4096, 768}, {70000, 3}, {1, 1000}};

TEST_CASE("AddBias adds the bias to every row", "[gpu]") {
  for (const auto& [N, OUT] : kShapes) {
    CAPTURE(N, OUT);
    std::mt19937 rng(static_cast<unsigned>(N + OUT));
    const std::vector<float> out = RandomVector(rng, N * OUT);
    const std::vector<float> bias = RandomVector(rng, OUT);
    std::vector<float> want = out;
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t o = 0; o < OUT; ++o) want[n * OUT + o] += bias[o];
    }
    DeviceArray d_out(out), d_bias(bias);
    REQUIRE_OK(cuda::AddBias(d_out.get(), d_bias.get(), N, OUT, nullptr));
    ExpectEqual("out", d_out.Download(), want, {N, OUT});
  }
}

TEST_CASE("BiasGrad matches the reference's dbias and is reproducible", "[gpu]") {
  for (const auto& [N, OUT] : kShapes) {
    CAPTURE(N, OUT);
    std::mt19937 rng(static_cast<unsigned>(3 * N + OUT));
    const std::vector<float> dout = RandomVector(rng, N * OUT);
    std::vector<float> want(OUT);
    ref::LinearBackward(nullptr, nullptr, want.data(), dout.data(), nullptr, nullptr, N, 1, OUT);

    DeviceArray d_dout(dout), d_dbias(NanVector(OUT));
    REQUIRE_OK(cuda::BiasGrad(d_dbias.get(), d_dout.get(), N, OUT, nullptr));
    const std::vector<float> got = d_dbias.Download();
    // Float sums over N rows of O(1) terms: the rounding error grows like sqrt(N) times a few
    // ulp of the partial sums (the reference sums in double).
    ExpectNear("dbias", got, want, {OUT}, 1e-5 * std::sqrt(static_cast<double>(N)), 1e-5);

    REQUIRE_OK(cuda::BiasGrad(d_dbias.get(), d_dout.get(), N, OUT, nullptr));
    const std::vector<float> again = d_dbias.Download();
    CHECK(std::memcmp(got.data(), again.data(), OUT * sizeof(float)) == 0);
  }
}

TEST_CASE("BiasGrad over zero rows writes zeros", "[gpu]") {
  DeviceArray d_dbias(NanVector(13));
  REQUIRE_OK(cuda::BiasGrad(d_dbias.get(), nullptr, 0, 13, nullptr));
  for (float x : d_dbias.Download()) CHECK(x == 0.0f);
}

TEST_CASE("Bias launchers reject bad shapes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  CHECK(cuda::AddBias(d.get(), d.get(), 2, 0, nullptr).code() == kInvalid);
  CHECK(cuda::AddBias(d.get(), nullptr, 2, 2, nullptr).code() == kInvalid);
  CHECK(cuda::BiasGrad(d.get(), d.get(), -1, 4, nullptr).code() == kInvalid);
  CHECK(cuda::BiasGrad(nullptr, d.get(), 1, 4, nullptr).code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
