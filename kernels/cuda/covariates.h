// Covariates' data movement on device memory: CudaDataOps' BlockCopy and GatherSeries. The
// reference is kernels/ref/covariates.h; each launcher takes its function's arguments, in order,
// plus the stream, and copies exactly what the reference copies (bit for bit). No launcher
// synchronises, reads device memory on the host or allocates, so both are safe inside CUDA graph
// capture; zero sizes launch nothing. Launchers only; the kernels live in covariates.cu.
// Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_COVARIATES_H_
#define FORECASTD_KERNELS_CUDA_COVARIATES_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/covariates.h"

namespace forecastd::cuda {

// As ref::BlockCopy: one thread per element, grid-stride. inp nullptr: writes fill.
absl::Status BlockCopyLaunch(float* out, const float* inp, float fill, const ref::Block3& n,
                             const ref::Strides3& o, const ref::Strides3& in, cudaStream_t stream);

// As ref::GatherSeries: one thread per element of out (B, W), grid-stride.
absl::Status GatherSeriesLaunch(float* out, const float* table, const float* index,
                                int64_t index_stride, int64_t B, int64_t W, int64_t S,
                                cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_COVARIATES_H_
