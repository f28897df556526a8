// Reference check of windows for values that are not finite (NaN, +-infinity): what the
// server refuses in a request unless told to accept it. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_FINITE_H_
#define FORECASTD_KERNELS_REF_FINITE_H_

#include <cstdint>

namespace forecastd::ref {

// flags[r] = 1 when row r of x (rows, cols) holds a value that is not finite, else 0.
void NonFiniteRows(uint8_t* flags, const float* x, int64_t rows, int64_t cols);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_FINITE_H_
