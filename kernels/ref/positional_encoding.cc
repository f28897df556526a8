#include "kernels/ref/positional_encoding.h"

#include <cmath>

namespace forecastd::ref {
namespace {

double PeValue(int64_t t, int64_t c, int64_t D) {
  const int64_t two_i = c - c % 2;
  const double angle =
      static_cast<double>(t) *
      std::exp(-std::log(10000.0) * static_cast<double>(two_i) / static_cast<double>(D));
  return c % 2 == 0 ? std::sin(angle) : std::cos(angle);
}

}  // namespace

void PositionalEncodingTable(float* pe, int64_t T, int64_t D) {
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t c = 0; c < D; ++c) {
      pe[t * D + c] = static_cast<float>(PeValue(t, c, D));
    }
  }
}

void PositionalEncodingForward(float* out, const float* inp, int64_t B, int64_t T, int64_t D) {
  // The sum is taken in float, as PyTorch adds its float32 pe buffer; element-wise, so out
  // may alias inp.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      const int64_t row = (b * T + t) * D;
      for (int64_t c = 0; c < D; ++c) {
        out[row + c] = inp[row + c] + static_cast<float>(PeValue(t, c, D));
      }
    }
  }
}

}  // namespace forecastd::ref
