// bfloat16 on the CPU: the conversions at the edges of the oneDNN backend's bf16 products
// (DnnlBackend::Options::Math::kBf16). A bfloat16 is the upper 16 bits of a float32: 8
// significant bits, float32's range. float32 -> bfloat16 rounds to nearest, ties to even, as
// oneDNN's reorders and PyTorch's .bfloat16() do; NaN stays NaN. For backends/cpu/ and its
// tests. Thread-safe: pure functions.
#ifndef FORECASTD_BACKENDS_CPU_BF16_H_
#define FORECASTD_BACKENDS_CPU_BF16_H_

#include <cstdint>
#include <cstring>

namespace forecastd::cpu {

inline uint16_t ToBf16(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((bits >> 16) | 0x40u);
  bits += 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>(bits >> 16);
}

inline float FromBf16(uint16_t b) {
  const uint32_t bits = uint32_t{b} << 16;
  float x;
  std::memcpy(&x, &bits, sizeof(x));
  return x;
}

// x rounded to the nearest bfloat16, as a float32.
inline float RoundToBf16(float x) { return FromBf16(ToBf16(x)); }

// n values each way, shared out over the calling thread's OpenMP threads when there are many.
void ToBf16(const float* in, uint16_t* out, int64_t n);
void FromBf16(const uint16_t* in, float* out, int64_t n);

}  // namespace forecastd::cpu

#endif  // FORECASTD_BACKENDS_CPU_BF16_H_
