#include "tests/testing/gpu_env.h"

#include <utility>

#include "absl/status/statusor.h"
#include "tests/testing/catch.h"

namespace forecastd::testing {

GpuEnv& SharedGpuEnv() {
  static GpuEnv* const env = [] {
    auto* e = new GpuEnv;
    absl::StatusOr<std::unique_ptr<CudaAllocator>> allocator = CudaAllocator::Create({});
    if (!allocator.ok()) FAIL("CudaAllocator::Create: " << allocator.status().ToString());
    e->allocator = std::move(*allocator);
    StreamPool::Options options;
    options.streams_per_gpu = 4;
    absl::StatusOr<std::unique_ptr<StreamPool>> pool =
        StreamPool::Create(options, e->allocator.get());
    if (!pool.ok()) FAIL("StreamPool::Create: " << pool.status().ToString());
    e->pool = std::move(*pool);
    return e;
  }();
  return *env;
}

}  // namespace forecastd::testing
