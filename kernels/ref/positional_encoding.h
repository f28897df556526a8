// Reference sinusoidal positional encoding ("Attention Is All You Need"), added to a
// [B, T, D] activation. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_POSITIONAL_ENCODING_H_
#define FORECASTD_KERNELS_REF_POSITIONAL_ENCODING_H_

#include <cstdint>

namespace forecastd::ref {

// pe[t, 2i]   = sin(t * exp(-ln(10000) * 2i / D))
// pe[t, 2i+1] = cos(t * exp(-ln(10000) * 2i / D))
//   out (B, T, D) = inp (B, T, D) + pe (T, D), computed in double and rounded to float;
//   out may alias inp. D may be odd (the last column is then a sine).
void PositionalEncodingForward(float* out, const float* inp, int64_t B, int64_t T, int64_t D);

// The table alone: pe (T, D).
void PositionalEncodingTable(float* pe, int64_t T, int64_t D);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_POSITIONAL_ENCODING_H_
