// The main() of GPU test binaries: without a usable CUDA device (or with fewer than
// FORECASTD_GPU_TEST_MIN_DEVICES, 1 unless the binary defines it) it says so and exits with
// kSkipExitCode, which ctest reports as a skipped test rather than a pass.
#include <cuda_runtime_api.h>

#include <cstdio>

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#ifndef FORECASTD_GPU_TEST_MIN_DEVICES
#define FORECASTD_GPU_TEST_MIN_DEVICES 1
#endif

namespace {
constexpr int kSkipExitCode = 77;
constexpr int kMinDevices = FORECASTD_GPU_TEST_MIN_DEVICES;
}  // namespace

int main(int argc, char* argv[]) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device on this host (%s); GPU tests run only where one is.\n",
                error != cudaSuccess ? cudaGetErrorString(error) : "0 devices");
    return kSkipExitCode;
  }
  if (count < kMinDevices) {
    std::printf("SKIPPED: these tests need %d GPUs; this host has %d.\n", kMinDevices, count);
    return kSkipExitCode;
  }
  return Catch::Session().run(argc, argv);
}
