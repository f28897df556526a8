// Per-window scaling (ModelConfig.window_scaling, RevIN) on device memory: CudaDataOps'
// WindowStats, ScaleWindows, UnscaleTarget and their backward passes. The reference is
// kernels/ref/window_scaling.h; each launcher takes its function's arguments, in order, plus
// the stream. The element-wise results round each step as the reference does (no FMA
// contraction, IEEE division and square root), so they equal it bit for bit; the float sums
// run in a fixed order of their own (no atomics), so they are reproducible run to run and
// close to, not equal to, the reference's sequential sums. No launcher synchronises, reads
// device memory on the host or allocates, so all are safe inside CUDA graph capture; zero
// sizes launch nothing. Launchers only; the kernels live in window_scaling.cu. Thread-safe:
// each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_WINDOW_SCALING_H_
#define FORECASTD_KERNELS_CUDA_WINDOW_SCALING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/window_scaling.h"

namespace forecastd::cuda {

// As ref::WindowStats: one thread per (b, f) sums over t in the reference's order, in double.
//   center (B, F), scale (B, F), x (B, T, F); T > 0 unless B * F == 0
absl::Status WindowStatsLaunch(float* center, float* scale, const float* x, int64_t B, int64_t T,
                               int64_t F, ref::WindowStatistic statistic, float eps,
                               cudaStream_t stream);

// As ref::ScaleWindows. z and gamma may be nullptr (beta is read only with gamma); xw may be x.
//   xw, z, x (B, T, F); center, scale (B, F); gamma, beta (F)
absl::Status ScaleWindowsLaunch(float* xw, float* z, const float* x, const float* center,
                                const float* scale, const float* gamma, const float* beta,
                                int64_t B, int64_t T, int64_t F, cudaStream_t stream);

// As ref::UnscaleTarget. v_out, last, center, scale and gamma may be nullptr (center 0, scale 1;
// beta is read only with gamma).
//   out, v_out, d (B, J, C), columns [c0, c0 + W) written; 0 <= c0, c0 + W <= C
//   last[b * last_stride], center[b * stats_stride], scale[b * stats_stride] for b < B
//   gamma, beta (1)
absl::Status UnscaleTargetLaunch(float* out, float* v_out, const float* d, const float* last,
                                 int64_t last_stride, const float* center, const float* scale,
                                 int64_t stats_stride, const float* gamma, const float* beta,
                                 float eps2, int64_t B, int64_t J, int64_t C, int64_t c0, int64_t W,
                                 cudaStream_t stream);

// As ref::UnscaleTargetBackward: dd written, dgamma[0] and dbeta[0] decreased (only with
// gamma; then v is read), dlast[b * last_stride] increased (only when dlast is not nullptr).
// Each row's sum into dlast is one warp's (fixed lanes, then a fixed shuffle tree); the sums
// into dgamma and dbeta are one block's over all B * J * W elements, read back from dd, so dd
// may be dout.
//   dd, dout, v (B, J, C), columns [c0, c0 + W); 0 <= c0, c0 + W <= C
//   scale[b * stats_stride], dlast[b * last_stride] for b < B; gamma, dgamma, dbeta (1)
absl::Status UnscaleTargetBackwardLaunch(float* dd, float* dgamma, float* dbeta, float* dlast,
                                         int64_t last_stride, const float* dout, const float* v,
                                         const float* scale, int64_t stats_stride,
                                         const float* gamma, float eps2, int64_t B, int64_t J,
                                         int64_t C, int64_t c0, int64_t W, cudaStream_t stream);

// As ref::ScaleWindowsBackward: dgamma[f] and dbeta[f] increased by column sums over R rows.
// One block owns a tile of columns over all rows and adds its lanes' partial sums in a fixed
// order.
//   dgamma, dbeta (F); dxw, z (R, F)
absl::Status ScaleWindowsBackwardLaunch(float* dgamma, float* dbeta, const float* dxw,
                                        const float* z, int64_t R, int64_t F, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_WINDOW_SCALING_H_
