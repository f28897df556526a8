#include "kernels/cuda/positional_encoding.h"

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// --- kernels

// The frequencies exp(-ln(10000) * 2i / D), one per column pair, computed by the host's libm
// exactly as the reference computes them, and passed by value (a __grid_constant__ parameter
// is read in place from the constant bank, dynamic index and all). 500 doubles keep all the
// parameters within the classic 4 KB; wider models (D > 1000) compute them on the device.
constexpr int kMaxTableFreqs = 500;

struct Frequencies {
  double value[kMaxTableFreqs];
  bool from_host;  // false: computed on the device (D > 2 * kMaxTableFreqs)
};

// One thread per table entry (t, c), looping over the batch, so the double-precision
// transcendentals run T*D times rather than B*T*D. With the host's frequencies the angle
// t * freq is the reference's bit for bit, and only the device's double sin/cos (within 2
// ulp of glibc's) could round to a different float, which takes landing within a few double
// ulps of a float rounding boundary. The sum is taken in float, as the reference's.
template <typename T>
__global__ void PositionalEncodingKernel(T* out, const T* inp, int64_t B, int64_t TD, int64_t D,
                                         double neg_ln_10000,
                                         const __grid_constant__ Frequencies freqs) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < TD;
       e += stride) {
    const int64_t t = e / D;
    const int64_t c = e - t * D;
    const int64_t two_i = c - c % 2;
    const double freq =
        freqs.from_host ? freqs.value[two_i / 2]
                        : exp(neg_ln_10000 * static_cast<double>(two_i) / static_cast<double>(D));
    const double angle = static_cast<double>(t) * freq;
    const float pe = static_cast<float>(c % 2 == 0 ? sin(angle) : cos(angle));
    for (int64_t b = 0; b < B; ++b) {
      out[b * TD + e] = static_cast<T>(static_cast<float>(inp[b * TD + e]) + pe);
    }
  }
}

}  // namespace

// --- launchers

absl::Status PositionalEncodingForward(float* out, const float* inp, int64_t B, int64_t T,
                                       int64_t D, cudaStream_t stream) {
  if (B < 0 || T < 0 || D < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PositionalEncodingForward: sizes must be >= 0, got B=", B, " T=", T, " D=", D));
  }
  if (B == 0 || T == 0 || D == 0) return absl::OkStatus();
  if (out == nullptr || inp == nullptr) {
    return absl::InvalidArgumentError("PositionalEncodingForward: null pointer");
  }
  // The reference's expression, term by term.
  const double neg_ln_10000 = -std::log(10000.0);
  static_assert(sizeof(Frequencies) + 64 <= 4096, "kernel parameters over 4 KB");
  Frequencies freqs{};
  freqs.from_host = (D + 1) / 2 <= kMaxTableFreqs;
  if (freqs.from_host) {
    for (int64_t i = 0; i < (D + 1) / 2; ++i) {
      freqs.value[i] = std::exp(neg_ln_10000 * static_cast<double>(2 * i) / static_cast<double>(D));
    }
  }
  constexpr int kThreads = 256;
  const int64_t TD = T * D;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((TD + kThreads - 1) / kThreads, 65535));
  PositionalEncodingKernel<<<blocks, kThreads, 0, stream>>>(out, inp, B, TD, D, neg_ln_10000,
                                                            freqs);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
