// Needs a GPU: the row-wise softmax CUDA kernels (kernels/cuda/softmax.h) against kernels/ref
// on seeded random inputs, for rows shorter and longer than a warp and not multiples of 32,
// one row and many, and in place.
#include "kernels/cuda/softmax.h"

#include <cstdint>
#include <random>
#include <utility>
#include <vector>

#include "kernels/ref/activation.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// Forward: float expf (2 ulp) of arguments up to 8 in size, and float row sums, where the
// reference works in double: relative error a few 1e-7.
constexpr double kForwardAtol = 1e-8;
constexpr double kForwardRtol = 1e-5;
// Backward: out * (dout - dot) cancels where dout is close to the row's dot, so the error is
// relative to out * |dout| (at most 1), not to the result: an absolute 1e-6.
constexpr double kBackwardAtol = 1e-6;
constexpr double kBackwardRtol = 1e-5;

const std::vector<std::pair<int64_t, int64_t>> kShapes = {
    {1, 1}, {1, 7}, {3, 33}, {64, 512}, {1000, 100}, {5, 2049}, {9, 32}};

TEST_CASE("SoftmaxForward and SoftmaxBackward match the reference", "[gpu]") {
  for (const auto& [R, C] : kShapes) {
    CAPTURE(R, C);
    std::mt19937 rng(static_cast<unsigned>(R * 7919 + C));
    const std::vector<float> inp = RandomVector(rng, R * C, -4.0f, 4.0f);
    const std::vector<float> dout = RandomVector(rng, R * C);
    std::vector<float> want(inp.size()), dwant(inp.size());
    ref::SoftmaxForward(want.data(), inp.data(), R, C);
    ref::SoftmaxBackward(dwant.data(), dout.data(), want.data(), R, C);

    DeviceArray d_inp(inp), d_out(NanVector(R * C));
    REQUIRE_OK(cuda::SoftmaxForward(d_out.get(), d_inp.get(), R, C, nullptr));
    ExpectNear("softmax", d_out.Download(), want, {R, C}, kForwardAtol, kForwardRtol);

    // The backward pass from the reference's output, so it is tested on its own.
    DeviceArray d_y(want), d_dout(dout), d_dinp(NanVector(R * C));
    REQUIRE_OK(cuda::SoftmaxBackward(d_dinp.get(), d_dout.get(), d_y.get(), R, C, nullptr));
    ExpectNear("dinp", d_dinp.Download(), dwant, {R, C}, kBackwardAtol, kBackwardRtol);

    // In place: out aliases inp, dinp aliases dout.
    DeviceArray d_x(inp), d_dx(dout);
    REQUIRE_OK(cuda::SoftmaxForward(d_x.get(), d_x.get(), R, C, nullptr));
    REQUIRE_OK(cuda::SoftmaxBackward(d_dx.get(), d_dx.get(), d_y.get(), R, C, nullptr));
    ExpectNear("softmax in place", d_x.Download(), want, {R, C}, kForwardAtol, kForwardRtol);
    ExpectNear("dinp in place", d_dx.Download(), dwant, {R, C}, kBackwardAtol, kBackwardRtol);
  }
}

TEST_CASE("Softmax launchers reject bad shapes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  CHECK(cuda::SoftmaxForward(d.get(), d.get(), -1, 4, nullptr).code() == kInvalid);
  CHECK(cuda::SoftmaxForward(nullptr, d.get(), 1, 4, nullptr).code() == kInvalid);
  CHECK(cuda::SoftmaxBackward(d.get(), d.get(), nullptr, 2, 2, nullptr).code() == kInvalid);
  CHECK(cuda::SoftmaxForward(nullptr, nullptr, 0, 4, nullptr).ok());
}

}  // namespace
}  // namespace forecastd
