// Conversions between fp32 and the 16-bit storage formats (bfloat16, float16) on the device:
// the CUDA backend keeps fp32 tensors and converts at the edges of the ops it runs in 16-bit
// storage (cuDNN's recurrent layers under the bf16 / fp16 precisions). Rounding is to nearest
// even, as __float2bfloat16 / __float2half do; finite values beyond fp16's range saturate to
// +-65504 (bf16 has fp32's range). Launchers only; the kernels live in convert.cu.
// Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_CONVERT_H_
#define FORECASTD_KERNELS_CUDA_CONVERT_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "absl/status/status.h"

namespace forecastd::cuda {

enum class Storage16 { kBf16, kFp16 };

// out[i] = in[i] rounded to `type`, for i < n. `out` holds n 16-bit values.
absl::Status ConvertTo16(void* out, const float* in, int64_t n, Storage16 type,
                         cudaStream_t stream);

// out (T, B, C) = in (B, T, C) with its two leading axes swapped (the sequence-major layout of
// cuDNN's recurrent data), rounded to `type` (out then holds B*T*C 16-bit values), or copied
// as fp32 when `type` is nullopt.
absl::Status ToTimeMajor(void* out, const float* in, int64_t B, int64_t T, int64_t C,
                         std::optional<Storage16> type, cudaStream_t stream);

// out[i] = in[i] widened to fp32 (exact), for i < n. `in` holds n 16-bit values of `type`.
absl::Status ConvertFrom16(float* out, const void* in, int64_t n, Storage16 type,
                           cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_CONVERT_H_
