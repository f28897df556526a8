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
    InstanceStreams::Options options;
    options.num_streams = 4;
    absl::StatusOr<std::unique_ptr<InstanceStreams>> streams =
        InstanceStreams::Create(options, e->allocator.get());
    if (!streams.ok()) FAIL("InstanceStreams::Create: " << streams.status().ToString());
    e->streams = std::move(*streams);
    return e;
  }();
  return *env;
}

}  // namespace forecastd::testing
