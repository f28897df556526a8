// Reference data movement of models with covariates or several series
// (ModelConfig.covariates, ModelConfig.series): a strided copy of a 3-D block, which assembles the
// rows a model reads from its window, its future-known covariates and its series' static values
// (and takes a window's gradient back out of them), and the gather of each window's row of a
// per-series table. The oracle for kernels/cuda/covariates and what HostDataOps runs.
// Thread-safe.
#ifndef FORECASTD_KERNELS_REF_COVARIATES_H_
#define FORECASTD_KERNELS_REF_COVARIATES_H_

#include <cstdint>

namespace forecastd::ref {

// The extents and element strides of a 3-D block (a stride may be 0: the same element again).
struct Block3 {
  int64_t n0 = 1, n1 = 1, n2 = 1;
};
struct Strides3 {
  int64_t s0 = 0, s1 = 0, s2 = 0;
};

// out[i0 * o.s0 + i1 * o.s1 + i2 * o.s2] = inp[i0 * in.s0 + i1 * in.s1 + i2 * in.s2], or = fill
// when inp is nullptr, for every i0 < n0, i1 < n1, i2 < n2. The written elements are distinct and
// do not overlap inp.
void BlockCopy(float* out, const float* inp, float fill, const Block3& n, const Strides3& o,
               const Strides3& in);

// out (B, W)[b, :] = table (S, W)[s, :] with s = index[b * index_stride], a float holding a whole
// number, clamped to [0, S) (callers pass valid indices; the clamp keeps a bad one in bounds).
void GatherSeries(float* out, const float* table, const float* index, int64_t index_stride,
                  int64_t B, int64_t W, int64_t S);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_COVARIATES_H_
