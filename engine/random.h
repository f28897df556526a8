// Deterministic pseudo-random numbers for training: shuffling windows, initialising weights,
// dropout masks. Callers: engine/train (window order, weight initialisation, per-step dropout
// seeds) and engine/models (the forecasters' dropout), which is why it sits at the engine's top
// level rather than in engine/train. The algorithms are fixed here rather than taken from
// <random>, whose distributions are implementation-defined, so one seed gives one stream
// everywhere.
// `Random` is a small value type; thread-compatible (give each thread its own).
//
// Generator: PCG32 (XSH-RR, 64-bit state, 32-bit output), M. E. O'Neill, "PCG: A Family of
// Simple Fast Space-Efficient Statistically Good Algorithms for Random Number Generation"
// (2014); `Random(seed, stream)` matches the reference `pcg32_srandom_r(seed, stream)`, so
// its outputs can be checked against pcg-random.org's pcg32-demo. Seeds for separate purposes
// are derived with SplitMix64 (Steele, Lea, Flood, "Fast Splittable Pseudorandom Number
// Generators", 2014).
//
// Reproducibility: NextU32/NextU64/UniformInt are integer arithmetic and UniformFloat /
// UniformDouble are exact until one final rounding, so they are bit-identical on every
// platform and compiler. Normal goes through std::log, std::sqrt, std::cos and std::sin in
// double and rounds to float once; two C libraries agree on it unless their double results
// differ by an ulp right at a float rounding boundary (roughly 1 draw in 10^8), and one build
// is always bit-identical with itself.
#ifndef FORECASTD_ENGINE_RANDOM_H_
#define FORECASTD_ENGINE_RANDOM_H_

#include <cmath>
#include <cstdint>
#include <utility>

#include "absl/types/span.h"

namespace forecastd {

// One step of SplitMix64: a bijective mix of `x + golden gamma`. Good for turning structured
// numbers (seed, purpose, epoch) into well-spread 64-bit seeds.
inline uint64_t SplitMix64(uint64_t x) {
  uint64_t z = x + 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// What a derived seed is for, so that two uses of one TrainingConfig.seed never draw from the
// same stream. Values are part of the reproducibility contract: never renumber them.
enum class SeedPurpose : uint64_t {
  kWeightInit = 1,
  kShuffle = 2,
  kDropout = 3,
};

// The seed for `purpose`'s `index`-th use (e.g. the epoch) of a job seeded with `seed`.
inline uint64_t DeriveSeed(uint64_t seed, SeedPurpose purpose, uint64_t index) {
  return SplitMix64(SplitMix64(SplitMix64(seed) ^ static_cast<uint64_t>(purpose)) ^ index);
}

class Random {
 public:
  // pcg32_srandom_r(seed, stream): `stream` selects one of 2^63 distinct sequences.
  explicit Random(uint64_t seed, uint64_t stream = 0) : state_(0), inc_((stream << 1) | 1u) {
    NextU32();
    state_ += seed;
    NextU32();
  }

  // 32 uniformly distributed bits.
  uint32_t NextU32() {
    const uint64_t old = state_;
    state_ = old * kMultiplier + inc_;
    const auto xorshifted = static_cast<uint32_t>(((old >> 18) ^ old) >> 27);
    const auto rot = static_cast<uint32_t>(old >> 59);
    return (xorshifted >> rot) | (xorshifted << ((32u - rot) & 31u));
  }

  // 64 bits: the first draw is the high half.
  uint64_t NextU64() {
    const uint64_t hi = NextU32();
    return (hi << 32) | NextU32();
  }

  // Uniform in [0, bound), without modulo bias; 0 when bound is 0. Bounds below 2^32 use
  // Lemire's multiply-and-reject (one draw almost always); larger ones reject 64-bit draws
  // below 2^64 mod bound.
  uint64_t UniformInt(uint64_t bound) {
    if (bound == 0) return 0;
    if (bound <= 0xFFFFFFFFull) {
      const auto b = static_cast<uint32_t>(bound);
      uint64_t m = static_cast<uint64_t>(NextU32()) * b;
      if (static_cast<uint32_t>(m) < b) {
        const uint32_t threshold = (0u - b) % b;  // 2^32 mod b
        while (static_cast<uint32_t>(m) < threshold) m = static_cast<uint64_t>(NextU32()) * b;
      }
      return m >> 32;
    }
    const uint64_t threshold = (0ull - bound) % bound;  // 2^64 mod bound
    uint64_t r = NextU64();
    while (r < threshold) r = NextU64();
    return r % bound;
  }

  // The generator's state and increment, for a device that draws the same stream in parallel
  // by jumping ahead (kernels/cuda/dropout.h).
  uint64_t state() const { return state_; }
  uint64_t increment() const { return inc_; }

  // Uniform in [0, 1) on the grid k * 2^-24 (every float there is equally likely).
  float UniformFloat() { return static_cast<float>(NextU32() >> 8) * 0x1.0p-24f; }
  // Uniform in [0, 1) on the grid k * 2^-53.
  double UniformDouble() { return static_cast<double>(NextU64() >> 11) * 0x1.0p-53; }

  // Uniform in [a, b) for a < b (returns a when a >= b). Computed in double and rounded once;
  // a result that rounds up to b is replaced by the largest float below b.
  float Uniform(float a, float b) {
    if (!(a < b)) return a;
    const double u = static_cast<double>(NextU32() >> 8) * 0x1.0p-24;
    const auto r = static_cast<float>(static_cast<double>(a) +
                                      (static_cast<double>(b) - static_cast<double>(a)) * u);
    return r < b ? r : std::nextafter(b, a);
  }

  // Normal with the given mean and standard deviation, by the Box–Muller transform: each pair
  // of uniforms gives two draws; the second is returned by the next call.
  float Normal(float mean, float stddev) {
    double z;
    if (has_spare_) {
      has_spare_ = false;
      z = spare_;
    } else {
      const double u1 = 1.0 - UniformDouble();  // (0, 1]: log is finite
      const double u2 = UniformDouble();
      const double r = std::sqrt(-2.0 * std::log(u1));
      const double theta = kTwoPi * u2;
      z = r * std::cos(theta);
      spare_ = r * std::sin(theta);
      has_spare_ = true;
    }
    return static_cast<float>(static_cast<double>(mean) + static_cast<double>(stddev) * z);
  }

 private:
  static constexpr uint64_t kMultiplier = 6364136223846793005ull;
  static constexpr double kTwoPi = 6.283185307179586476925286766559;

  uint64_t state_;
  uint64_t inc_;  // odd
  bool has_spare_ = false;
  double spare_ = 0.0;
};

// Fisher–Yates (Durstenfeld): every permutation of `values` equally likely, one UniformInt
// per element, from the back.
template <typename T>
void Shuffle(absl::Span<T> values, Random& rng) {
  for (size_t i = values.size(); i > 1; --i) {
    const auto j = static_cast<size_t>(rng.UniformInt(i));
    using std::swap;
    swap(values[i - 1], values[j]);
  }
}

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_RANDOM_H_
