// The host optimiser's AVX2 loops against kernels/ref/optimizer. Runs only on a CPU with AVX2:
// elsewhere main() says so and exits with 77, which ctest reports as skipped.
// Catch2 first, with its runner: this binary has a main() of its own (below).
#include "tests/testing/catch_session.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "engine/train/optimizer_avx2.h"
#include "kernels/ref/optimizer.h"
#include "tests/backends/op_test_util.h"

namespace forecastd {
namespace {

// n uniform draws from [lo, hi) of a generator seeded with `seed`.
std::vector<float> Random(int64_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 gen(seed);
  return op_test::Uniform(gen, n, lo, hi);
}

bool BitsEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("AdamUpdateAvx2 is the reference's update bit for bit", "[unit][train]") {
  const bool decoupled = GENERATE(false, true);
  // Lengths around the four-element vectors and a long one; offsets 0-3 into the arrays.
  for (const int64_t n :
       {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{16}, int64_t{1001}}) {
    for (int64_t offset = 0; offset < 4; ++offset) {
      CAPTURE(decoupled, n, offset);
      ref::AdamHyper hyper;
      hyper.lr = 3e-3f;
      hyper.beta1 = 0.85f;
      hyper.beta2 = 0.995f;
      hyper.eps = 1e-7f;
      hyper.weight_decay = 0.02f;
      hyper.decoupled_weight_decay = decoupled;
      const auto seed = static_cast<uint32_t>(n * 4 + offset);
      std::vector<float> p_ref = Random(n + offset, seed, -2.0f, 2.0f);
      std::vector<float> m_ref(p_ref.size(), 0.0f), v_ref(p_ref.size(), 0.0f);
      std::vector<float> p = p_ref, m = m_ref, v = v_ref;
      // Five steps, each with new gradients (some zero, some tiny), so m and v are non-trivial.
      for (int64_t t = 1; t <= 5; ++t) {
        std::vector<float> g =
            Random(n + offset, seed + 1000 * static_cast<uint32_t>(t), -1.0f, 1.0f);
        g[static_cast<size_t>(offset)] = 0.0f;
        if (n > 1) g[static_cast<size_t>(offset + 1)] = 1e-30f;
        ref::AdamUpdate(p_ref.data() + offset, m_ref.data() + offset, v_ref.data() + offset,
                        g.data() + offset, n, t, hyper);
        AdamUpdateAvx2(p.data() + offset, m.data() + offset, v.data() + offset, g.data() + offset,
                       n, t, hyper);
        REQUIRE(BitsEqual(p, p_ref));
        REQUIRE(BitsEqual(m, m_ref));
        REQUIRE(BitsEqual(v, v_ref));
      }
    }
  }
}

TEST_CASE("GradSquaredSumAvx2 is the squared reference norm up to rounding", "[unit][train]") {
  for (const int64_t n :
       {int64_t{0}, int64_t{1}, int64_t{15}, int64_t{16}, int64_t{17}, int64_t{100003}}) {
    CAPTURE(n);
    const std::vector<float> g = Random(n, static_cast<uint32_t>(n) + 7, -3.0f, 3.0f);
    const double want = ref::GradNorm(g.data(), n);
    const double got = std::sqrt(GradSquaredSumAvx2(g.data(), n));
    REQUIRE(std::abs(got - want) <= 1e-12 * std::max(want, 1.0));
  }
}

}  // namespace
}  // namespace forecastd

int main(int argc, char* argv[]) {
  return forecastd::RunTestsWhere(
      forecastd::HasAvx2(), "this CPU has no AVX2; the AVX2 optimiser loops run only where it has.",
      argc, argv);
}
