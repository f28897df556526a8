// Needs a GPU: fp32 <-> bf16 / fp16 conversions (kernels/cuda/convert.h), on the vectorised
// path (n a multiple of 4, aligned) and the scalar one: a round trip is within half a unit in
// the last place of the 16-bit type, values the type holds exactly come back exactly, and
// nothing past n is written.
#include "kernels/cuda/convert.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::RandomVector;

TEST_CASE("ConvertTo16 and ConvertFrom16 round to nearest and round-trip exact values", "[gpu]") {
  struct Type {
    cuda::Storage16 type;
    const char* name;
    double half_ulp;  // relative
  };
  for (const Type t : {Type{cuda::Storage16::kBf16, "bf16", std::ldexp(1.0, -8)},
                       Type{cuda::Storage16::kFp16, "fp16", std::ldexp(1.0, -11)}}) {
    for (const int64_t n : {int64_t{1024}, int64_t{1001}, int64_t{3}}) {
      CAPTURE(t.name, n);
      std::mt19937 rng(static_cast<unsigned>(n));
      std::vector<float> x = RandomVector(rng, n, -8.0f, 8.0f);
      x[0] = 0.5f;  // exact in both types
      if (n > 1) x[1] = -3.0f;
      // 16-bit storage: n halves are n/2 floats' worth of bytes (rounded up).
      DeviceArray d_in(x), d_16(std::vector<float>((n + 1) / 2, 0.0f)),
          d_back(std::vector<float>(n, NAN));
      REQUIRE_OK(cuda::ConvertTo16(d_16.get(), d_in.get(), n, t.type, nullptr));
      REQUIRE_OK(cuda::ConvertFrom16(d_back.get(), d_16.get(), n, t.type, nullptr));
      const std::vector<float> back = d_back.Download();
      d_16.Download();  // checks the guard past the 16-bit values
      int64_t off = 0;
      for (int64_t i = 0; i < n; ++i) {
        off += !(std::abs(back[i] - x[i]) <= t.half_ulp * std::abs(x[i]));
      }
      CHECK(off == 0);
      CHECK(back[0] == 0.5f);
      if (n > 1) CHECK(back[1] == -3.0f);
    }
  }
  CHECK(cuda::ConvertTo16(nullptr, nullptr, 4, cuda::Storage16::kBf16, nullptr).code() ==
        absl::StatusCode::kInvalidArgument);
}

// fp16 saturates finite values beyond its range instead of making them infinite; bf16 holds them
// (its range is fp32's); NaN and infinities pass through both.
TEST_CASE("ConvertTo16 saturates fp16 and keeps NaN and infinities", "[gpu]") {
  const std::vector<float> x = {1e6f, -7e4f, 65504.0f, NAN, INFINITY, -INFINITY, 1e30f, 2.0f};
  for (const cuda::Storage16 type : {cuda::Storage16::kFp16, cuda::Storage16::kBf16}) {
    const bool fp16 = type == cuda::Storage16::kFp16;
    CAPTURE(fp16);
    DeviceArray d_in(x), d_16(std::vector<float>(x.size() / 2, 0.0f)),
        d_back(std::vector<float>(x.size(), 0.0f));
    REQUIRE_OK(cuda::ConvertTo16(d_16.get(), d_in.get(), 8, type, nullptr));
    REQUIRE_OK(cuda::ConvertFrom16(d_back.get(), d_16.get(), 8, type, nullptr));
    const std::vector<float> back = d_back.Download();
    CHECK(back[0] == (fp16 ? 65504.0f : 999424.0f));   // bf16's nearest to 1e6
    CHECK(back[1] == (fp16 ? -65504.0f : -70144.0f));  // bf16's nearest to -7e4
    CHECK(back[2] == (fp16 ? 65504.0f : 65536.0f));    // bf16's nearest to 65504
    CHECK(std::isnan(back[3]));
    CHECK(back[4] == INFINITY);
    CHECK(back[5] == -INFINITY);
    CHECK(back[6] == (fp16 ? 65504.0f : back[6]));
    CHECK(std::isfinite(back[6]));
    CHECK(back[7] == 2.0f);
  }
}

}  // namespace
}  // namespace forecastd
