#include "kernels/ref/finite.h"

#include <cstdint>
#include <limits>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

TEST_CASE("ref::NonFiniteRows flags rows with a NaN or an infinity and only those", "[unit]") {
  constexpr float kNan = std::numeric_limits<float>::quiet_NaN();
  constexpr float kInf = std::numeric_limits<float>::infinity();
  constexpr float kMax = std::numeric_limits<float>::max();
  constexpr float kTiny = std::numeric_limits<float>::denorm_min();
  // (5, 3): finite extremes, a NaN last, +inf first, -inf in the middle, zeros.
  const std::vector<float> x = {kMax, -kMax, kTiny, 1, 2, kNan, kInf, 0, 0, 0, -kInf, 0, 0, 0, 0};
  std::vector<uint8_t> flags(5, 9);
  ref::NonFiniteRows(flags.data(), x.data(), 5, 3);
  REQUIRE(flags == std::vector<uint8_t>{0, 1, 1, 1, 0});
  std::vector<uint8_t> empty_rows(2, 9);
  ref::NonFiniteRows(empty_rows.data(), x.data(), 2, 0);
  REQUIRE(empty_rows == std::vector<uint8_t>{0, 0});
}

}  // namespace
}  // namespace forecastd
