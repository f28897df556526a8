#include "kernels/cuda/slots.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// One element per thread over the (R, W) rows, grid-stride. `gather` picks the direction:
// rows[r, w] <- slab[slots[r] * stride + w], or the reverse.
template <bool gather>
__global__ void SlotRowsKernel(float* slab, float* rows, const int32_t* slots, int64_t R,
                               int64_t stride, int64_t W) {
  const int64_t n = R * W;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const int64_t r = i / W, w = i - r * W;
    float* cell = slab + static_cast<int64_t>(slots[r]) * stride + w;
    if (gather) {
      rows[i] = *cell;
    } else {
      *cell = rows[i];
    }
  }
}

absl::Status Check(const char* name, const void* slab, const void* rows, const int32_t* slots,
                   int64_t R, int64_t stride, int64_t W) {
  if (R < 0 || W < 0 || stride < W) {
    return absl::InvalidArgumentError(
        absl::StrCat(name, ": bad sizes R=", R, " W=", W, " stride=", stride));
  }
  if (R > 0 && W > 0 && (slab == nullptr || rows == nullptr || slots == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(name, ": null pointer"));
  }
  return absl::OkStatus();
}

template <bool gather>
absl::Status Launch(float* slab, float* rows, const int32_t* slots, int64_t R, int64_t stride,
                    int64_t W, cudaStream_t stream) {
  if (R == 0 || W == 0) return absl::OkStatus();
  constexpr int kThreads = 256;
  const int64_t blocks = std::min<int64_t>((R * W + kThreads - 1) / kThreads, 65535);
  SlotRowsKernel<gather>
      <<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(slab, rows, slots, R, stride, W);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace

// --- launchers

absl::Status GatherSlotsLaunch(float* out, const float* slab, const int32_t* slots, int64_t R,
                               int64_t stride, int64_t W, cudaStream_t stream) {
  RETURN_IF_ERROR(Check("GatherSlotsLaunch", slab, out, slots, R, stride, W));
  return Launch<true>(const_cast<float*>(slab), out, slots, R, stride, W, stream);
}

absl::Status ScatterSlotsLaunch(float* slab, const float* inp, const int32_t* slots, int64_t R,
                                int64_t stride, int64_t W, cudaStream_t stream) {
  RETURN_IF_ERROR(Check("ScatterSlotsLaunch", slab, inp, slots, R, stride, W));
  return Launch<false>(slab, const_cast<float*>(inp), slots, R, stride, W, stream);
}

}  // namespace forecastd::cuda
