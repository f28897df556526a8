// Which rows of a device tensor hold a value that is not finite: the check a request's windows
// get on the host, for windows the host never sees (a client's CUDA shared memory). The
// reference is kernels/ref/finite.h. Launchers only; the kernel lives in finite.cu.
// Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_FINITE_H_
#define FORECASTD_KERNELS_CUDA_FINITE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"

namespace forecastd::cuda {

// flags[r] = 1 when row r of x (rows, cols) holds a NaN or an infinity, else 0. Both device
// memory; rows, cols >= 0.
absl::Status NonFiniteRowsLaunch(uint8_t* flags, const float* x, int64_t rows, int64_t cols,
                                 cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_FINITE_H_
