// op_test::TestMemory on the GPU, for the GPU tests of the CUDA backend
// (cuda_backend_gpu_test.cc, recurrent_sequence_gpu_test.cc): blocks from the shared test
// allocator (tests/testing/gpu_env.h). Test-only; not thread-safe.
#ifndef FORECASTD_TESTS_BACKENDS_CUDA_CUDA_TEST_MEMORY_H_
#define FORECASTD_TESTS_BACKENDS_CUDA_CUDA_TEST_MEMORY_H_

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <limits>
#include <utility>
#include <vector>

#include "backends/cuda/cuda_allocator.h"
#include "tests/backends/op_test_util.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd::op_test {

// Device buffers from the shared allocator. The backend's stream is non-blocking, so it is not
// ordered after these legacy-stream copies: every upload waits for the device before
// returning, every download waits for all queued work (which also surfaces kernel faults), and
// so does the destructor before the blocks go back.
class CudaTestMemory final : public TestMemory {
 public:
  // The allocator may hand these blocks to the next case's uploads at once: let queued work
  // on them finish first.
  ~CudaTestMemory() override { cudaDeviceSynchronize(); }

  float* Upload(const std::vector<float>& host) override {
    float* device = Allocate(static_cast<int64_t>(host.size()));
    if (!host.empty()) {
      Require(cudaMemcpy(device, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
              "cudaMemcpy to the device");
    }
    Require(cudaDeviceSynchronize(), "cudaDeviceSynchronize after an upload");
    return device;
  }
  float* Output(int64_t n) override {
    return Upload(std::vector<float>(n, std::numeric_limits<float>::quiet_NaN()));
  }
  std::vector<float> Download(const float* device, int64_t n) override {
    Require(cudaDeviceSynchronize(), "cudaDeviceSynchronize before a download");
    std::vector<float> host(n);
    if (n > 0) {
      Require(cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost),
              "cudaMemcpy from the device");
    }
    return host;
  }

 private:
  static void Require(cudaError_t error, const char* what) {
    INFO(what << ": " << cudaGetErrorString(error));
    REQUIRE(error == cudaSuccess);
  }
  float* Allocate(int64_t n) {
    // At least one float, so that even an empty tensor has a distinct non-null address.
    absl::StatusOr<DeviceBuffer> buffer = testing::SharedGpuEnv().allocator->Allocate(
        std::max<int64_t>(n, 1) * static_cast<int64_t>(sizeof(float)));
    INFO(buffer.status().ToString());
    REQUIRE(buffer.ok());
    return buffers_.emplace_back(std::move(*buffer)).as<float>();
  }

  std::deque<DeviceBuffer> buffers_;
};

}  // namespace forecastd::op_test

#endif  // FORECASTD_TESTS_BACKENDS_CUDA_CUDA_TEST_MEMORY_H_
