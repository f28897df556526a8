// DataOps: the data movement of a forecaster's forward and training passes that the Backend op
// set leaves out (standardising, gathering rows, dropout masks), on host memory (HostDataOps) or a
// device's. Used by one pass at a time; HostDataOps() is stateless and shared.
#ifndef FORECASTD_ENGINE_MODELS_DATA_OPS_H_
#define FORECASTD_ENGINE_MODELS_DATA_OPS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/covariates.h"
#include "kernels/ref/window_scaling.h"

namespace forecastd {

// The steps of a forward or training pass that the Backend op set leaves out: standardising the
// input, de-standardising the forecast, per-window scaling, copying rows between buffers, and
// dropout. The default,
// HostDataOps(), runs them as loops on host memory; a caller whose buffers are device memory
// passes its device's version (CudaDataOps, engine/models/cuda_data_ops.h, on the backend's
// stream), whose work must be ordered with the backend's ops. Used by one pass at a time.
class DataOps {
 public:
  virtual ~DataOps() = default;
  // out (R, F) = (inp (R, F) - mean (F)) / std (F), column by column.
  virtual absl::Status Standardize(float* out, const float* inp, const float* mean,
                                   const float* std, int64_t R, int64_t F) = 0;
  // For each row r < R of the (R, C) matrices y and out, columns [c0, c0 + W):
  // out[r, c] = y[r, c] * std[0] + mean[0] (one target's statistics; other columns untouched).
  virtual absl::Status Destandardize(float* out, const float* y, const float* mean,
                                     const float* std, int64_t R, int64_t C, int64_t c0,
                                     int64_t W) = 0;
  // out (R, W) = rows of inp: out[r, :] = inp[r * stride, r * stride + W).
  virtual absl::Status GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                                  int64_t W) = 0;
  // GatherRows' inverse: out[r * stride, r * stride + W) = inp[r, :] (the rest untouched).
  virtual absl::Status ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                                   int64_t W) = 0;
  // Rows of a slab picked by slot: out[r, :] = slab[slots[r] * stride, + W) for r < R; slots
  // are int32 of the same memory as the slab.
  virtual absl::Status GatherSlots(float* out, const float* slab, const int32_t* slots, int64_t R,
                                   int64_t stride, int64_t W) = 0;
  // GatherSlots' inverse: slab[slots[r] * stride, + W) = inp[r, :]; slots are distinct.
  virtual absl::Status ScatterSlots(float* slab, const float* inp, const int32_t* slots, int64_t R,
                                    int64_t stride, int64_t W) = 0;
  // out[i] = inp[i] for i < n.
  virtual absl::Status Copy(float* out, const float* inp, int64_t n) = 0;
  // out[i] = 0 for i < n.
  virtual absl::Status Zero(float* out, int64_t n) = 0;
  // out[i] = inp[i] * mask[i] for i < n; out may be inp.
  virtual absl::Status Multiply(float* out, const float* inp, const float* mask, int64_t n) = 0;
  // Per-window scaling (ModelConfig.window_scaling); the contracts are kernels/ref/
  // window_scaling.h's functions of the same names, whose pointers are all memory of this
  // DataOps' kind except `statistic` and the sizes.
  virtual absl::Status WindowStats(float* center, float* scale, const float* x, int64_t B,
                                   int64_t T, int64_t F, ref::WindowStatistic statistic,
                                   float eps) = 0;
  virtual absl::Status ScaleWindows(float* xw, float* z, const float* x, const float* center,
                                    const float* scale, const float* gamma, const float* beta,
                                    int64_t B, int64_t T, int64_t F) = 0;
  virtual absl::Status UnscaleTarget(float* out, float* v_out, const float* d, const float* last,
                                     int64_t last_stride, const float* center, const float* scale,
                                     int64_t stats_stride, const float* gamma, const float* beta,
                                     float eps2, int64_t B, int64_t J, int64_t C, int64_t c0,
                                     int64_t W) = 0;
  virtual absl::Status UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta, float* dlast,
                                             int64_t last_stride, const float* dout, const float* v,
                                             const float* scale, int64_t stats_stride,
                                             const float* gamma, float eps2, int64_t B, int64_t J,
                                             int64_t C, int64_t c0, int64_t W) = 0;
  virtual absl::Status ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw,
                                            const float* z, int64_t R, int64_t F) = 0;
  // Covariates and series (ModelConfig.covariates, ModelConfig.series); the contracts are
  // kernels/ref/covariates.h's functions of the same names, all pointers memory of this DataOps'
  // kind.
  virtual absl::Status BlockCopy(float* out, const float* inp, float fill, const ref::Block3& n,
                                 const ref::Strides3& o, const ref::Strides3& in) = 0;
  virtual absl::Status GatherSeries(float* out, const float* table, const float* index,
                                    int64_t index_stride, int64_t B, int64_t W, int64_t S) = 0;
  // Inverted-dropout multipliers: mask[i] = 0 when the i-th UniformFloat() of Random(seed)
  // (engine/random.h) is below p, else 1/(1-p). Every implementation draws the same
  // stream, so one seed gives one mask on every device. p in (0, 1).
  virtual absl::Status DropoutMask(float* mask, int64_t n, float p, uint64_t seed) = 0;
};

// The host loops; stateless, shared by every host forward call.
DataOps& HostDataOps();

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_DATA_OPS_H_
