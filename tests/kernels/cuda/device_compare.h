// Test helpers for the CUDA kernel tests: a device array that checks for writes past its end,
// seeded random inputs, and an element-wise comparison with the reference that names the
// first mismatching indices. Test-only; thread-compatible.
#ifndef FORECASTD_TESTS_KERNELS_CUDA_DEVICE_COMPARE_H_
#define FORECASTD_TESTS_KERNELS_CUDA_DEVICE_COMPARE_H_

#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "tests/testing/catch.h"

namespace forecastd::testing {

inline std::vector<float> RandomVector(std::mt19937& rng, int64_t n, float lo = -1.0f,
                                       float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// 0 or 1/(1-p) each (kept with probability 1-p), as training draws an inverted-dropout mask.
inline std::vector<float> DropoutMask(std::mt19937& rng, int64_t n, double p = 0.1) {
  std::bernoulli_distribution keep(1.0 - p);
  std::vector<float> m(static_cast<size_t>(n));
  for (float& x : m) x = keep(rng) ? static_cast<float>(1.0 / (1.0 - p)) : 0.0f;
  return m;
}

inline std::vector<float> NanVector(int64_t n) {
  return std::vector<float>(static_cast<size_t>(n), std::numeric_limits<float>::quiet_NaN());
}

// Requires an OK status, printing it otherwise.
#define REQUIRE_OK(expr)                       \
  do {                                         \
    const absl::Status fd_s_ = (expr);         \
    INFO(#expr << " -> " << fd_s_.ToString()); \
    REQUIRE(fd_s_.ok());                       \
  } while (false)

// Waits for the device and fails on any asynchronous kernel error.
inline void RequireDeviceOk() {
  const cudaError_t error = cudaDeviceSynchronize();
  INFO("CUDA: " << cudaGetErrorName(error) << ": " << cudaGetErrorString(error));
  REQUIRE(error == cudaSuccess);
}

// n floats of device memory followed by kGuard sentinel floats; Download() checks that no
// kernel wrote past the end.
class DeviceArray {
 public:
  static constexpr int64_t kGuard = 64;
  static constexpr float kSentinel = 12345.0f;

  explicit DeviceArray(const std::vector<float>& host) : n_(static_cast<int64_t>(host.size())) {
    std::vector<float> padded = host;
    padded.resize(static_cast<size_t>(n_ + kGuard), kSentinel);
    REQUIRE(cudaMalloc(reinterpret_cast<void**>(&data_), padded.size() * sizeof(float)) ==
            cudaSuccess);
    REQUIRE(cudaMemcpy(data_, padded.data(), padded.size() * sizeof(float),
                       cudaMemcpyHostToDevice) == cudaSuccess);
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(data_); }

  float* get() const { return data_; }
  int64_t size() const { return n_; }

  std::vector<float> Download() const {
    RequireDeviceOk();
    std::vector<float> padded(static_cast<size_t>(n_ + kGuard));
    REQUIRE(cudaMemcpy(padded.data(), data_, padded.size() * sizeof(float),
                       cudaMemcpyDeviceToHost) == cudaSuccess);
    int64_t clobbered = 0;
    for (int64_t i = n_; i < n_ + kGuard; ++i) clobbered += padded[i] != kSentinel;
    INFO("guard elements written past the end of a " << n_ << "-float array");
    REQUIRE(clobbered == 0);
    padded.resize(static_cast<size_t>(n_));
    return padded;
  }

 private:
  int64_t n_;
  float* data_ = nullptr;
};

// "[i, j, k]" for flat index `flat` of a row-major array of `shape`.
inline std::string IndexString(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  std::ostringstream os;
  os << "[";
  for (size_t k = 0; k < index.size(); ++k) os << (k > 0 ? ", " : "") << index[k];
  os << "]";
  return os.str();
}

// Checks |got - want| <= atol + rtol * |want| for every element (a NaN fails), reporting the
// count and the first few mismatches with their indices.
inline void ExpectNear(const std::string& name, const std::vector<float>& got,
                       const std::vector<float>& want, const std::vector<int64_t>& shape,
                       double atol, double rtol) {
  int64_t size = 1;
  for (int64_t s : shape) size *= s;
  REQUIRE(static_cast<int64_t>(want.size()) == size);
  REQUIRE(got.size() == want.size());
  constexpr int kReported = 8;
  int64_t mismatches = 0;
  double worst = 0.0;
  std::ostringstream first;
  first.precision(9);
  for (int64_t e = 0; e < size; ++e) {
    const double g = got[static_cast<size_t>(e)], w = want[static_cast<size_t>(e)];
    const double err = std::abs(g - w);
    if (!(err <= atol + rtol * std::abs(w))) {
      if (mismatches < kReported) {
        first << "\n  " << name << IndexString(e, shape) << ": got " << g << ", want " << w;
      }
      ++mismatches;
    }
    if (err > worst || std::isnan(err)) worst = err;
  }
  INFO(name << ": " << mismatches << " of " << size << " elements outside atol " << atol
            << " + rtol " << rtol << " (largest error " << worst << ")" << first.str());
  CHECK(mismatches == 0);
}

// Bit-for-bit equality, reported like ExpectNear.
inline void ExpectEqual(const std::string& name, const std::vector<float>& got,
                        const std::vector<float>& want, const std::vector<int64_t>& shape) {
  ExpectNear(name, got, want, shape, 0.0, 0.0);
}

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_KERNELS_CUDA_DEVICE_COMPARE_H_
