// Needs a GPU: the layer-norm CUDA kernels (kernels/cuda/normalization.h) against kernels/ref
// on seeded random inputs: one row, rows narrower and wider than a warp and not multiples of
// 32, many rows (the column sums' long loop), every combination of wanted gradients, and the
// reproducibility of dgamma and dbeta.
#include "kernels/cuda/normalization.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ref/normalization.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

constexpr float kEps = 1e-5f;
// The kernels keep the statistics and row sums in float where the reference uses double;
// values are O(1) (xhat * gamma + beta, or rstd times O(1) terms) and may cancel to near 0,
// so the error is bounded relative to the terms, a few 1e-7: absolute 1e-5 plus relative 1e-5.
constexpr double kRowAtol = 1e-5;
constexpr double kRtol = 1e-5;
// dgamma and dbeta are float sums over N rows of O(1) terms: their rounding error grows like
// sqrt(N) times a few ulp of the partial sums, so the absolute term scales with sqrt(N).
double ColumnAtol(int64_t N) {
  return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(N, 1)));
}

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 7}, {3, 1}, {5, 33}, {64, 768}, {300, 100}, {4100, 40}, {2, 1000}};

struct Inputs {
  std::vector<float> inp, gamma, beta, dout;
};

Inputs MakeInputs(int64_t N, int64_t C) {
  std::mt19937 rng(static_cast<unsigned>(N * 131 + C));
  Inputs in;
  in.inp = RandomVector(rng, N * C, -0.5f, 1.5f);  // a non-zero mean
  in.gamma = RandomVector(rng, C, 0.5f, 1.5f);
  in.beta = RandomVector(rng, C, -0.5f, 0.5f);
  in.dout = RandomVector(rng, N * C);
  return in;
}

TEST_CASE("LayerNormForward matches the reference, with and without statistics", "[gpu]") {
  for (const auto& [N, C] : kShapes) {
    CAPTURE(N, C);
    const Inputs in = MakeInputs(N, C);
    std::vector<float> out(N * C), mean(N), rstd(N);
    ref::LayerNormForward(out.data(), mean.data(), rstd.data(), in.inp.data(), in.gamma.data(),
                          in.beta.data(), N, C, kEps);

    DeviceArray d_inp(in.inp), d_gamma(in.gamma), d_beta(in.beta);
    DeviceArray d_out(NanVector(N * C)), d_mean(NanVector(N)), d_rstd(NanVector(N));
    REQUIRE_OK(cuda::LayerNormForward(d_out.get(), d_mean.get(), d_rstd.get(), d_inp.get(),
                                      d_gamma.get(), d_beta.get(), N, C, kEps, nullptr));
    ExpectNear("out", d_out.Download(), out, {N, C}, kRowAtol, kRtol);
    ExpectNear("mean", d_mean.Download(), mean, {N}, 1e-6, kRtol);
    ExpectNear("rstd", d_rstd.Download(), rstd, {N}, 1e-6, kRtol);

    DeviceArray d_out2(NanVector(N * C));
    REQUIRE_OK(cuda::LayerNormForward(d_out2.get(), nullptr, nullptr, d_inp.get(), d_gamma.get(),
                                      d_beta.get(), N, C, kEps, nullptr));
    ExpectNear("out without statistics", d_out2.Download(), out, {N, C}, kRowAtol, kRtol);
  }
}

TEST_CASE("LayerNormBackward matches the reference for every set of wanted gradients", "[gpu]") {
  for (const auto& [N, C] : kShapes) {
    const Inputs in = MakeInputs(N, C);
    std::vector<float> dinp(N * C), dgamma(C), dbeta(C);
    ref::LayerNormBackward(dinp.data(), dgamma.data(), dbeta.data(), in.dout.data(), in.inp.data(),
                           in.gamma.data(), N, C, kEps);
    DeviceArray d_inp(in.inp), d_gamma(in.gamma), d_dout(in.dout);

    for (int wanted = 1; wanted < 8; ++wanted) {  // bits: dinp, dgamma, dbeta
      const bool want_dinp = wanted & 1, want_dgamma = wanted & 2, want_dbeta = wanted & 4;
      CAPTURE(N, C, want_dinp, want_dgamma, want_dbeta);
      DeviceArray d_dinp(NanVector(N * C)), d_dgamma(NanVector(C)), d_dbeta(NanVector(C));
      REQUIRE_OK(cuda::LayerNormBackward(want_dinp ? d_dinp.get() : nullptr,
                                         want_dgamma ? d_dgamma.get() : nullptr,
                                         want_dbeta ? d_dbeta.get() : nullptr, d_dout.get(),
                                         d_inp.get(), d_gamma.get(), N, C, kEps, nullptr));
      const std::vector<float> got_dinp = d_dinp.Download();
      const std::vector<float> got_dgamma = d_dgamma.Download();
      const std::vector<float> got_dbeta = d_dbeta.Download();
      if (want_dinp) {
        ExpectNear("dinp", got_dinp, dinp, {N, C}, kRowAtol, kRtol);
      } else {
        CHECK(std::isnan(got_dinp[0]));  // nothing written through a null pointer
      }
      if (want_dgamma) {
        ExpectNear("dgamma", got_dgamma, dgamma, {C}, ColumnAtol(N), kRtol);
      } else {
        CHECK(std::isnan(got_dgamma[0]));
      }
      if (want_dbeta) {
        ExpectNear("dbeta", got_dbeta, dbeta, {C}, ColumnAtol(N), kRtol);
      } else {
        CHECK(std::isnan(got_dbeta[0]));
      }
    }
  }
}

TEST_CASE("LayerNormBackward's parameter gradients are bit-for-bit reproducible", "[gpu]") {
  constexpr int64_t N = 4100, C = 200;
  const Inputs in = MakeInputs(N, C);
  DeviceArray d_inp(in.inp), d_gamma(in.gamma), d_dout(in.dout);
  std::vector<float> first_dgamma, first_dbeta;
  for (int run = 0; run < 3; ++run) {
    DeviceArray d_dgamma(NanVector(C)), d_dbeta(NanVector(C));
    REQUIRE_OK(cuda::LayerNormBackward(nullptr, d_dgamma.get(), d_dbeta.get(), d_dout.get(),
                                       d_inp.get(), d_gamma.get(), N, C, kEps, nullptr));
    const std::vector<float> dgamma = d_dgamma.Download(), dbeta = d_dbeta.Download();
    if (run == 0) {
      first_dgamma = dgamma;
      first_dbeta = dbeta;
    } else {
      CHECK(std::memcmp(dgamma.data(), first_dgamma.data(), C * sizeof(float)) == 0);
      CHECK(std::memcmp(dbeta.data(), first_dbeta.data(), C * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("LayerNormBackward over zero rows writes zero parameter gradients", "[gpu]") {
  constexpr int64_t C = 45;
  DeviceArray d_gamma(std::vector<float>(C, 1.0f));
  DeviceArray d_dgamma(NanVector(C)), d_dbeta(NanVector(C));
  REQUIRE_OK(cuda::LayerNormBackward(nullptr, d_dgamma.get(), d_dbeta.get(), nullptr, nullptr,
                                     d_gamma.get(), 0, C, kEps, nullptr));
  for (float g : d_dgamma.Download()) CHECK(g == 0.0f);
  for (float b : d_dbeta.Download()) CHECK(b == 0.0f);
}

TEST_CASE("Layer-norm launchers reject bad shapes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(8, 1.0f));
  CHECK(cuda::LayerNormForward(d.get(), nullptr, nullptr, d.get(), d.get(), d.get(), 2, 0, kEps,
                               nullptr)
            .code() == kInvalid);
  CHECK(cuda::LayerNormForward(d.get(), nullptr, nullptr, d.get(), nullptr, d.get(), 2, 4, kEps,
                               nullptr)
            .code() == kInvalid);
  CHECK(cuda::LayerNormBackward(d.get(), nullptr, nullptr, d.get(), d.get(), d.get(), -1, 4, kEps,
                                nullptr)
            .code() == kInvalid);
  CHECK(cuda::LayerNormBackward(d.get(), d.get(), nullptr, nullptr, d.get(), d.get(), 2, 4, kEps,
                                nullptr)
            .code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
