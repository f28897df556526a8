// Makes one CUDA GPU current for the length of a scope (every backends/cuda/ entry point runs under
// one, so callers never need to know which device their thread last used). Thread-safe: the current
// device is a per-thread setting of the CUDA runtime.
#ifndef FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_
#define FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/device.h"

namespace forecastd {

// Makes `device` the calling thread's current CUDA device until the end of the scope, then
// restores the previous one. Switching costs nothing when it is already current. Check
// status() before issuing work: a bad ordinal leaves the thread's device unchanged.
class ScopedCudaDevice {
 public:
  explicit ScopedCudaDevice(int device);
  ~ScopedCudaDevice();

  ScopedCudaDevice(const ScopedCudaDevice&) = delete;
  ScopedCudaDevice& operator=(const ScopedCudaDevice&) = delete;

  const absl::Status& status() const { return status_; }

 private:
  int previous_ = -1;  // -1: nothing to restore
  absl::Status status_;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_CUDA_DEVICES_H_
