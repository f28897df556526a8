// Optimiser updates for the CUDA backend with the arithmetic of kernels/ref (optimizer.h):
// SGD (momentum, dampening, Nesterov, L2 decay) and Adam/AdamW on one flat parameter array,
// and global-norm clipping as two device-side steps (squared norm, then scale) that never
// synchronise with the host. Device pointers and a trailing stream. Launchers only; the
// kernels live in optimizer.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_OPTIMIZER_H_
#define FORECASTD_KERNELS_CUDA_OPTIMIZER_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/optimizer.h"

namespace forecastd::cuda {

// One SGD step as ref::SgdUpdate: per element in double, rounded once into the stored float
// (bit-for-bit the reference's result). velocity (n) is read and written only when
// hyper.momentum != 0 (it may be null otherwise).
absl::Status SgdUpdate(float* param, float* velocity, const float* grad, int64_t n,
                       const ref::SgdHyper& hyper, bool first_step, cudaStream_t stream);

// One Adam(W) step as ref::AdamUpdate, t the 1-based step count including this step;
// m, v (n) the moments, zero before the first step. Bit-for-bit the reference's result.
absl::Status AdamUpdate(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                        const ref::AdamHyper& hyper, cudaStream_t stream);

// out[0] = sum_i grad[i]^2, summed in double in a fixed order (per-block partials, then one
// final block) and rounded to float; reproducible. Above 4096 elements the call borrows a few
// KB of stream-ordered scratch (cudaMallocAsync) for the partials.
//   out: device, 1 float
absl::Status GradNormSquared(float* out, const float* grad, int64_t n, cudaStream_t stream);

// grad *= scale where scale = min(1, max_norm / (sqrt(*norm_sq) + 1e-6)) < 1, as
// ref::ClipGradNorm with norm = sqrt(*norm_sq); computed on the device, so no host sync.
//   norm_sq: device, 1 float (GradNormSquared's output, or a sum of several)
absl::Status ScaleByClip(float* grad, int64_t n, const float* norm_sq, float max_norm,
                         cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_OPTIMIZER_H_
