// Forwarding header, kept only because backends/cuda/cuda_backend.h (being reworked on another
// branch) still includes this name: the per-instance streams and StreamLease are declared in
// backends/cuda/instance_streams.h, which new code includes. Delete this file once
// cuda_backend.h includes instance_streams.h. Thread-safety: see instance_streams.h.
#ifndef FORECASTD_BACKENDS_CUDA_STREAM_POOL_H_
#define FORECASTD_BACKENDS_CUDA_STREAM_POOL_H_

#include "backends/cuda/instance_streams.h"

#endif  // FORECASTD_BACKENDS_CUDA_STREAM_POOL_H_
