#include "engine/models/cuda_data_ops.h"

#include "engine/random.h"
#include "kernels/cuda/covariates.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/normalize.h"
#include "kernels/cuda/slots.h"
#include "kernels/cuda/window_scaling.h"

namespace forecastd {

absl::Status CudaDataOps::Standardize(float* out, const float* inp, const float* mean,
                                      const float* std, int64_t R, int64_t F) {
  return cuda::StandardizeLaunch(out, inp, mean, std, R, F, stream_);
}

absl::Status CudaDataOps::Destandardize(float* out, const float* y, const float* mean,
                                        const float* std, int64_t R, int64_t C, int64_t c0,
                                        int64_t W) {
  return cuda::DestandardizeLaunch(out, y, mean, std, R, C, c0, W, stream_);
}

absl::Status CudaDataOps::GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                                     int64_t W) {
  if (R == 0 || W == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      out, static_cast<size_t>(W) * sizeof(float), inp, static_cast<size_t>(stride) * sizeof(float),
      static_cast<size_t>(W) * sizeof(float), static_cast<size_t>(R), cudaMemcpyDeviceToDevice,
      stream_));
  return absl::OkStatus();
}

absl::Status CudaDataOps::Copy(float* out, const float* inp, int64_t n) {
  if (n == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out, inp, static_cast<size_t>(n) * sizeof(float),
                                       cudaMemcpyDeviceToDevice, stream_));
  return absl::OkStatus();
}

absl::Status CudaDataOps::GatherSlots(float* out, const float* slab, const int32_t* slots,
                                      int64_t R, int64_t stride, int64_t W) {
  return cuda::GatherSlotsLaunch(out, slab, slots, R, stride, W, stream_);
}

absl::Status CudaDataOps::ScatterSlots(float* slab, const float* inp, const int32_t* slots,
                                       int64_t R, int64_t stride, int64_t W) {
  return cuda::ScatterSlotsLaunch(slab, inp, slots, R, stride, W, stream_);
}

absl::Status CudaDataOps::ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                                      int64_t W) {
  if (R == 0 || W == 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(cudaMemcpy2DAsync(
      out, static_cast<size_t>(stride) * sizeof(float), inp, static_cast<size_t>(W) * sizeof(float),
      static_cast<size_t>(W) * sizeof(float), static_cast<size_t>(R), cudaMemcpyDeviceToDevice,
      stream_));
  return absl::OkStatus();
}

absl::Status CudaDataOps::Zero(float* out, int64_t n) {
  return cuda::FillLaunch(out, 0.0f, n, stream_);
}

absl::Status CudaDataOps::Multiply(float* out, const float* inp, const float* mask, int64_t n) {
  return cuda::MultiplyLaunch(out, inp, mask, n, stream_);
}

absl::Status CudaDataOps::BlockCopy(float* out, const float* inp, float fill, const ref::Block3& n,
                                    const ref::Strides3& o, const ref::Strides3& in) {
  return cuda::BlockCopyLaunch(out, inp, fill, n, o, in, stream_);
}

absl::Status CudaDataOps::GatherSeries(float* out, const float* table, const float* index,
                                       int64_t index_stride, int64_t B, int64_t W, int64_t S) {
  return cuda::GatherSeriesLaunch(out, table, index, index_stride, B, W, S, stream_);
}

absl::Status CudaDataOps::WindowStats(float* center, float* scale, const float* x, int64_t B,
                                      int64_t T, int64_t F, ref::WindowStatistic statistic,
                                      float eps) {
  return cuda::WindowStatsLaunch(center, scale, x, B, T, F, statistic, eps, stream_);
}

absl::Status CudaDataOps::ScaleWindows(float* xw, float* z, const float* x, const float* center,
                                       const float* scale, const float* gamma, const float* beta,
                                       int64_t B, int64_t T, int64_t F) {
  return cuda::ScaleWindowsLaunch(xw, z, x, center, scale, gamma, beta, B, T, F, stream_);
}

absl::Status CudaDataOps::UnscaleTarget(float* out, float* v_out, const float* d, const float* last,
                                        int64_t last_stride, const float* center,
                                        const float* scale, int64_t stats_stride,
                                        const float* gamma, const float* beta, float eps2,
                                        int64_t B, int64_t J, int64_t C, int64_t c0, int64_t W) {
  return cuda::UnscaleTargetLaunch(out, v_out, d, last, last_stride, center, scale, stats_stride,
                                   gamma, beta, eps2, B, J, C, c0, W, stream_);
}

absl::Status CudaDataOps::UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta,
                                                float* dlast, int64_t last_stride,
                                                const float* dout, const float* v,
                                                const float* scale, int64_t stats_stride,
                                                const float* gamma, float eps2, int64_t B,
                                                int64_t J, int64_t C, int64_t c0, int64_t W) {
  return cuda::UnscaleTargetBackwardLaunch(dd, dgamma, dbeta, dlast, last_stride, dout, v, scale,
                                           stats_stride, gamma, eps2, B, J, C, c0, W, stream_);
}

absl::Status CudaDataOps::ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw,
                                               const float* z, int64_t R, int64_t F) {
  return cuda::ScaleWindowsBackwardLaunch(dgamma, dbeta, dxw, z, R, F, stream_);
}

absl::Status CudaDataOps::DropoutMask(float* mask, int64_t n, float p, uint64_t seed) {
  // The host generator's state after seeding; the device draws its stream from there.
  const Random rng(seed);
  return cuda::DropoutMaskLaunch(mask, n, p, 1.0f / (1.0f - p), rng.state(), rng.increment(),
                                 stream_);
}

}  // namespace forecastd
