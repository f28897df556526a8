// The CUDA state a GPU test binary shares: one CudaAllocator and one InstanceStreams (4 streams, a
// lease per test backend), made on first use and never destroyed (tearing CUDA state down during
// static destruction races the runtime's own teardown). A failure to make them fails the calling
// test. Thread-safe (a function-local static).
#ifndef FORECASTD_TESTS_TESTING_GPU_ENV_H_
#define FORECASTD_TESTS_TESTING_GPU_ENV_H_

#include <memory>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/instance_streams.h"

namespace forecastd::testing {

struct GpuEnv {
  std::unique_ptr<CudaAllocator> allocator;
  std::unique_ptr<InstanceStreams> streams;
};

GpuEnv& SharedGpuEnv();

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_GPU_ENV_H_
