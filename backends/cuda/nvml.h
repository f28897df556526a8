// GPU utilisation, memory and power from NVML, for the per-GPU metrics. NVML ships with the driver,
// not the toolkit, so it is loaded at run time with dlopen("libnvidia-ml.so.1"): the binary
// has no link dependency on it, and a host (or container) without it gets a clear UNAVAILABLE
// status instead of failing to start. GPUs are named by their CUDA ordinal and matched to
// NVML's devices through their PCI bus id, since the two number devices differently (CUDA
// fastest first and after CUDA_VISIBLE_DEVICES, NVML in PCI order over every GPU).
// Thread-safe: NVML itself is, and the handle cache is under a mutex.
#ifndef FORECASTD_BACKENDS_CUDA_NVML_H_
#define FORECASTD_BACKENDS_CUDA_NVML_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace forecastd {

struct GpuUsage {
  // Percent of the last sample period (1/6 s to 1 s, by product) in which a kernel ran, and
  // in which device memory was read or written.
  int utilization_percent = 0;
  int memory_utilization_percent = 0;
  int64_t memory_total_bytes = 0;
  int64_t memory_used_bytes = 0;
  int64_t memory_free_bytes = 0;
  // NVML's identifier of the GPU ("GPU-<hex>"); empty when NVML does not give it.
  std::string uuid;
  // Power drawn by the whole board; -1 when NVML does not report it (some products, MIG).
  int64_t power_milliwatts = -1;
};

class Nvml {
 public:
  // Loads and initialises NVML. UNAVAILABLE, saying why, when the library is missing or its
  // initialisation fails (no driver, or no permission).
  static absl::StatusOr<std::unique_ptr<Nvml>> Load();
  // Shuts NVML down and unloads it.
  ~Nvml();

  Nvml(const Nvml&) = delete;
  Nvml& operator=(const Nvml&) = delete;

  // The current usage of the GPU with CUDA ordinal `cuda_device`. NOT_FOUND for an ordinal
  // CUDA does not have; UNAVAILABLE when NVML cannot answer for the device (for example
  // utilisation on a MIG instance, which NVML does not report).
  absl::StatusOr<GpuUsage> Usage(int cuda_device);

 private:
  struct Api;
  Nvml(void* library, std::unique_ptr<Api> api);

  // NVML's handle of the GPU, found once per ordinal.
  absl::StatusOr<void*> DeviceHandle(int cuda_device);

  // Constant after Load().
  void* const library_;
  const std::unique_ptr<const Api> api_;

  absl::Mutex mu_;
  absl::flat_hash_map<int, void*> handles_ ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_NVML_H_
