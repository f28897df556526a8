#include "kernels/ref/finite.h"

#include <cmath>

namespace forecastd::ref {

void NonFiniteRows(uint8_t* flags, const float* x, int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r) {
    uint8_t bad = 0;
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(x[r * cols + c])) {
        bad = 1;
        break;
      }
    }
    flags[r] = bad;
  }
}

}  // namespace forecastd::ref
