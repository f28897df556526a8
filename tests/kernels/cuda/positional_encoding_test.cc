// Needs a GPU: the positional-encoding CUDA kernel (kernels/cuda/positional_encoding.h) against
// kernels/ref, bit for bit: both compute the table in double and round it to float, and add in
// float (for D up to 1000). Odd D, one position, and long sequences (large angles) included.
#include "kernels/cuda/positional_encoding.h"

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ref/positional_encoding.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectEqual;
using testing::NanVector;
using testing::RandomVector;

struct Shape {
  int64_t B, T, D;
};

TEST_CASE("PositionalEncodingForward matches the reference bit for bit", "[gpu]") {
  for (const Shape& s :
       std::vector<Shape>{{1, 1, 1}, {2, 7, 5}, {3, 512, 768}, {1, 2048, 64}, {4, 96, 33}}) {
    CAPTURE(s.B, s.T, s.D);
    std::mt19937 rng(static_cast<unsigned>(s.B * 7 + s.T * 3 + s.D));
    const int64_t n = s.B * s.T * s.D;
    const std::vector<float> inp = RandomVector(rng, n);
    std::vector<float> want(n);
    ref::PositionalEncodingForward(want.data(), inp.data(), s.B, s.T, s.D);

    DeviceArray d_inp(inp), d_out(NanVector(n));
    REQUIRE_OK(cuda::PositionalEncodingForward(d_out.get(), d_inp.get(), s.B, s.T, s.D, nullptr));
    ExpectEqual("out", d_out.Download(), want, {s.B, s.T, s.D});

    // The table alone (zero input), and in place.
    std::vector<float> table(s.T * s.D);
    ref::PositionalEncodingTable(table.data(), s.T, s.D);
    DeviceArray d_zero(std::vector<float>(s.T * s.D, 0.0f));
    REQUIRE_OK(cuda::PositionalEncodingForward(d_zero.get(), d_zero.get(), 1, s.T, s.D, nullptr));
    ExpectEqual("table", d_zero.Download(), table, {s.T, s.D});
  }
}

TEST_CASE("PositionalEncodingForward for D > 1000 is within one float ulp", "[gpu]") {
  // Above D = 1000 the frequencies come from the device's double exp (1 ulp from glibc's), and
  // t times a frequency one double ulp off can round sin/cos to the neighbouring float.
  constexpr int64_t B = 2, T = 300, D = 1030;
  std::mt19937 rng(11);
  const std::vector<float> inp = RandomVector(rng, B * T * D);
  std::vector<float> want(B * T * D);
  ref::PositionalEncodingForward(want.data(), inp.data(), B, T, D);
  DeviceArray d_inp(inp), d_out(NanVector(B * T * D));
  REQUIRE_OK(cuda::PositionalEncodingForward(d_out.get(), d_inp.get(), B, T, D, nullptr));
  // |out| < 2 + 1, where a float ulp is at most 2.4e-7.
  testing::ExpectNear("out", d_out.Download(), want, {B, T, D}, 2.4e-7, 0.0);
}

TEST_CASE("PositionalEncodingForward rejects bad sizes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  CHECK(cuda::PositionalEncodingForward(d.get(), d.get(), 1, -2, 2, nullptr).code() == kInvalid);
  CHECK(cuda::PositionalEncodingForward(nullptr, d.get(), 1, 2, 2, nullptr).code() == kInvalid);
  CHECK(cuda::PositionalEncodingForward(nullptr, nullptr, 0, 2, 2, nullptr).ok());
}

}  // namespace
}  // namespace forecastd
