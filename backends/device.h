// The devices forecastd can run on: the CPU always, and each CUDA GPU when the build has
// CUDA and the host has a usable driver and device. DeviceRegistry discovers them once at
// start-up; `--devices` is parsed into DeviceSpecs and resolved against it.
// Device and DeviceSpec are values; a DeviceRegistry is immutable after Discover() and so
// may be shared by threads freely.
#ifndef FORECASTD_BACKENDS_DEVICE_H_
#define FORECASTD_BACKENDS_DEVICE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace forecastd {

enum class DeviceKind { kCpu, kCuda };

struct Device {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;  // 0 for the CPU; the CUDA ordinal for a GPU
  std::string name;
  int64_t memory_bytes = 0;    // total device memory; 0 for the CPU (host memory is shared)
  int compute_capability = 0;  // major * 10 + minor for a GPU, e.g. 90; 0 for the CPU

  // "cpu" or "cuda:<index>", the same spelling `--devices` accepts.
  std::string Id() const;
};

// One entry of `--devices`: a kind and an index, or every device of that kind.
struct DeviceSpec {
  static constexpr int kEveryIndex = -1;
  DeviceKind kind = DeviceKind::kCpu;
  int index = kEveryIndex;
  // Set by "all": resolving succeeds even when no such device is present.
  bool only_if_present = false;

  bool operator==(const DeviceSpec&) const = default;
};

// Parses a comma-separated list such as "cpu", "cuda:0,cuda:1", "cpu,cuda" or "all"
// ("all" = the CPU and every GPU). Entries may repeat; an empty list or an unknown or
// malformed entry is INVALID_ARGUMENT naming the entry.
absl::StatusOr<std::vector<DeviceSpec>> ParseDeviceList(absl::string_view text);

// The CPU cores this process may run on: those of its affinity mask (taskset, a container's
// cpuset), else what the hardware reports; at least 1.
int UsableCpuCores();

// Every CUDA GPU the driver reports, with its name, memory and compute capability, for
// DeviceRegistry::Discover(). A host without a driver or without a GPU yields an empty list,
// not an error; other CUDA failures are errors. CMake links one definition: the driver's list
// in a CUDA build (backends/cuda/cuda_devices.cc), an always-empty one otherwise
// (backends/no_cuda_devices.cc), so this layer never includes backends/cuda/.
absl::StatusOr<std::vector<Device>> DiscoverCudaDevices();

// The GPU libraries this build was compiled against, for `forecastd --version`: "CUDA 13.0,
// cuDNN 9.13.0, NCCL 2.28.3" in a CUDA build, "CPU only" otherwise. Linked as
// DiscoverCudaDevices is.
std::string GpuBuildInfo();

class DeviceRegistry {
 public:
  // Finds the CPU and, in a CUDA build, every GPU the driver reports. A host without a
  // driver or GPU is not an error: it simply has the CPU alone.
  static DeviceRegistry Discover();

  // For tests and tools that want a fixed set.
  explicit DeviceRegistry(std::vector<Device> devices);

  const std::vector<Device>& devices() const { return devices_; }
  int cuda_device_count() const;

  // The devices `specs` name, in registry order, each once. A GPU that is not present, or
  // "cuda" on a host without GPUs, is NOT_FOUND with a message that says what is present.
  absl::StatusOr<std::vector<Device>> Resolve(const std::vector<DeviceSpec>& specs) const;

 private:
  std::vector<Device> devices_;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_DEVICE_H_
