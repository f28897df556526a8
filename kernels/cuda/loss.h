// Training losses for the CUDA backend (MSE, MAE, Huber, quantile, all with mean reduction):
// the mean loss and its gradient with respect to the prediction in one call, mirroring
// kernels/ref (loss.h) with device pointers and a trailing stream. Launchers only; the
// kernels live in loss.cu. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_LOSS_H_
#define FORECASTD_KERNELS_CUDA_LOSS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/loss.h"

namespace forecastd::cuda {

// loss[0] = the mean loss over every element (rounded to float); dpred = d(mean loss)/d(pred).
//   pred, dpred (N) for kMse, kMae, kHuber; (N, Q) for kQuantile (quantile fastest)
//   target (N)
//   spec.quantiles: a DEVICE pointer to tau (Q) for kQuantile
// Each element's loss and gradient are computed in double as the reference does, so dpred
// matches it bit for bit; the sum is reduced in double in a fixed order (per-block partials,
// then one final block), so the loss is reproducible. Above 4096 elements the call borrows a
// few KB of stream-ordered scratch (cudaMallocAsync) for the partials.
absl::Status LossForwardBackward(float* dpred, float* loss, const float* pred, const float* target,
                                 int64_t N, const ref::LossSpec& spec, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_LOSS_H_
