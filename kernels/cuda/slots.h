// Gathers and scatters rows of a slab by slot index: how a batch of tick streams reads its
// recurrent states from the state slab and writes them back inside one step (and a CUDA graph
// of it), with no per-stream copies. Launchers only; the kernels live in slots.cu. The host
// loops of HostDataOps (engine/models/data_ops.cc) are the reference.
// Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_SLOTS_H_
#define FORECASTD_KERNELS_CUDA_SLOTS_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// out (R, W)[r, :] = slab[slots[r] * stride, + W) for r < R. All pointers device memory.
absl::Status GatherSlotsLaunch(float* out, const float* slab, const int32_t* slots, int64_t R,
                               int64_t stride, int64_t W, cudaStream_t stream);
// slab[slots[r] * stride, + W) = inp (R, W)[r, :]; slots distinct. All pointers device memory.
absl::Status ScatterSlotsLaunch(float* slab, const float* inp, const int32_t* slots, int64_t R,
                                int64_t stride, int64_t W, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_SLOTS_H_
