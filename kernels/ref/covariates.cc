#include "kernels/ref/covariates.h"

#include <algorithm>

namespace forecastd::ref {

void BlockCopy(float* out, const float* inp, float fill, const Block3& n, const Strides3& o,
               const Strides3& in) {
  for (int64_t i0 = 0; i0 < n.n0; ++i0) {
    for (int64_t i1 = 0; i1 < n.n1; ++i1) {
      for (int64_t i2 = 0; i2 < n.n2; ++i2) {
        out[i0 * o.s0 + i1 * o.s1 + i2 * o.s2] =
            inp != nullptr ? inp[i0 * in.s0 + i1 * in.s1 + i2 * in.s2] : fill;
      }
    }
  }
}

void GatherSeries(float* out, const float* table, const float* index, int64_t index_stride,
                  int64_t B, int64_t W, int64_t S) {
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = std::clamp(static_cast<int64_t>(index[b * index_stride]), int64_t{0}, S - 1);
    std::copy(table + s * W, table + (s + 1) * W, out + b * W);
  }
}

}  // namespace forecastd::ref
