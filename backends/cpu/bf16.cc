#include "backends/cpu/bf16.h"

namespace forecastd::cpu {

// Below this many values a parallel region costs more than the conversion.
constexpr int64_t kParallelValues = int64_t{1} << 16;

void ToBf16(const float* in, uint16_t* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelValues)
  for (int64_t i = 0; i < n; ++i) out[i] = ToBf16(in[i]);
}

void FromBf16(const uint16_t* in, float* out, int64_t n) {
#pragma omp parallel for schedule(static) if (n >= kParallelValues)
  for (int64_t i = 0; i < n; ++i) out[i] = FromBf16(in[i]);
}

}  // namespace forecastd::cpu
