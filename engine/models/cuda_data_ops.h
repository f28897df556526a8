// The Forecaster's data movement (standardise, de-standardise, per-window scaling, gather and
// scatter rows, copy, dropout) on device memory, for a forward or training pass whose weights
// and activations live on a CUDA GPU (ForwardPlacement, TrainingPlacement). Every call is queued
// on one stream, the backend's, so it is ordered with the backend's ops; row copies are strided
// cudaMemcpy2DAsync calls, which graph capture records as copy nodes. Built only with CUDA.
// Thread-compatible (one per stream).
#ifndef FORECASTD_ENGINE_MODELS_CUDA_DATA_OPS_H_
#define FORECASTD_ENGINE_MODELS_CUDA_DATA_OPS_H_

#include <cuda_runtime.h>

#include <cstdint>

#include "absl/status/status.h"
#include "engine/models/data_ops.h"

namespace forecastd {

class CudaDataOps final : public DataOps {
 public:
  explicit CudaDataOps(cudaStream_t stream) : stream_(stream) {}

  absl::Status Standardize(float* out, const float* inp, const float* mean, const float* std,
                           int64_t R, int64_t F) override;
  absl::Status Destandardize(float* out, const float* y, const float* mean, const float* std,
                             int64_t R, int64_t C, int64_t c0, int64_t W) override;
  absl::Status GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                          int64_t W) override;
  absl::Status ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                           int64_t W) override;
  absl::Status GatherSlots(float* out, const float* slab, const int32_t* slots, int64_t R,
                           int64_t stride, int64_t W) override;
  absl::Status ScatterSlots(float* slab, const float* inp, const int32_t* slots, int64_t R,
                            int64_t stride, int64_t W) override;
  absl::Status Copy(float* out, const float* inp, int64_t n) override;
  absl::Status Zero(float* out, int64_t n) override;
  absl::Status Multiply(float* out, const float* inp, const float* mask, int64_t n) override;
  absl::Status BlockCopy(float* out, const float* inp, float fill, const ref::Block3& n,
                         const ref::Strides3& o, const ref::Strides3& in) override;
  absl::Status GatherSeries(float* out, const float* table, const float* index,
                            int64_t index_stride, int64_t B, int64_t W, int64_t S) override;
  absl::Status WindowStats(float* center, float* scale, const float* x, int64_t B, int64_t T,
                           int64_t F, ref::WindowStatistic statistic, float eps) override;
  absl::Status ScaleWindows(float* xw, float* z, const float* x, const float* center,
                            const float* scale, const float* gamma, const float* beta, int64_t B,
                            int64_t T, int64_t F) override;
  absl::Status UnscaleTarget(float* out, float* v_out, const float* d, const float* last,
                             int64_t last_stride, const float* center, const float* scale,
                             int64_t stats_stride, const float* gamma, const float* beta,
                             float eps2, int64_t B, int64_t J, int64_t C, int64_t c0,
                             int64_t W) override;
  absl::Status UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta, float* dlast,
                                     int64_t last_stride, const float* dout, const float* v,
                                     const float* scale, int64_t stats_stride, const float* gamma,
                                     float eps2, int64_t B, int64_t J, int64_t C, int64_t c0,
                                     int64_t W) override;
  absl::Status ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw, const float* z,
                                    int64_t R, int64_t F) override;
  absl::Status DropoutMask(float* mask, int64_t n, float p, uint64_t seed) override;

 private:
  const cudaStream_t stream_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_CUDA_DATA_OPS_H_
