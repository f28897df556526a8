#include "backends/device.h"

#include <sched.h>

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "backends/cpu_topology.h"
#include "backends/device_memory.h"
#include "spdlog/spdlog.h"

namespace forecastd {

absl::Status CheckCudaIpcArguments(absl::string_view raw_handle, int64_t byte_size) {
  if (static_cast<int64_t>(raw_handle.size()) != kCudaIpcHandleBytes) {
    return absl::InvalidArgumentError(absl::StrCat("a CUDA IPC handle has ", kCudaIpcHandleBytes,
                                                   " bytes; got ", raw_handle.size()));
  }
  if (byte_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("byte_size must be positive, got ", byte_size));
  }
  return absl::OkStatus();
}

std::string Device::Id() const {
  return kind == DeviceKind::kCpu ? std::string("cpu") : absl::StrCat("cuda:", index);
}

absl::StatusOr<std::vector<DeviceSpec>> ParseDeviceList(absl::string_view text) {
  std::vector<DeviceSpec> specs;
  for (absl::string_view raw : absl::StrSplit(text, ',')) {
    const absl::string_view entry = absl::StripAsciiWhitespace(raw);
    if (entry == "all") {
      specs.push_back({DeviceKind::kCpu, 0});
      specs.push_back({DeviceKind::kCuda, DeviceSpec::kEveryIndex, /*only_if_present=*/true});
    } else if (entry == "cpu") {
      specs.push_back({DeviceKind::kCpu, 0});
    } else if (entry == "cuda" || entry == "gpu") {
      specs.push_back({DeviceKind::kCuda, DeviceSpec::kEveryIndex});
    } else if (absl::StartsWith(entry, "cuda:")) {
      int index = 0;
      if (!absl::SimpleAtoi(entry.substr(5), &index) || index < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "bad device '", entry, "': a GPU index must be a number >= 0, as in cuda:0"));
      }
      specs.push_back({DeviceKind::kCuda, index});
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad device '", entry, "': expected cpu, cuda, cuda:<index> or all, comma-separated"));
    }
  }
  if (specs.empty()) return absl::InvalidArgumentError("the device list is empty");
  return specs;
}

int UsableCpuCores() { return static_cast<int>(AllowedCpus().size()); }

DeviceRegistry::DeviceRegistry(std::vector<Device> devices) : devices_(std::move(devices)) {}

DeviceRegistry DeviceRegistry::Discover() {
  std::vector<Device> devices;
  Device cpu;
  cpu.kind = DeviceKind::kCpu;
  cpu.name = absl::StrCat("host CPU, ", UsableCpuCores(), " threads");
  devices.push_back(cpu);
  absl::StatusOr<std::vector<Device>> gpus = DiscoverCudaDevices();
  if (gpus.ok()) {
    devices.insert(devices.end(), gpus->begin(), gpus->end());
  } else {
    spdlog::warn("CUDA devices could not be listed, serving on the CPU only: {}",
                 gpus.status().ToString());
  }
  return DeviceRegistry(std::move(devices));
}

int DeviceRegistry::cuda_device_count() const {
  return static_cast<int>(std::count_if(devices_.begin(), devices_.end(), [](const Device& d) {
    return d.kind == DeviceKind::kCuda;
  }));
}

absl::StatusOr<std::vector<Device>> DeviceRegistry::Resolve(
    const std::vector<DeviceSpec>& specs) const {
  std::vector<bool> chosen(devices_.size(), false);
  for (const DeviceSpec& spec : specs) {
    bool matched = false;
    for (size_t i = 0; i < devices_.size(); ++i) {
      if (devices_[i].kind != spec.kind) continue;
      if (spec.index != DeviceSpec::kEveryIndex && devices_[i].index != spec.index) continue;
      chosen[i] = true;
      matched = true;
    }
    if (!matched && !spec.only_if_present) {
      std::vector<std::string> present;
      for (const Device& d : devices_) present.push_back(d.Id());
      const std::string wanted = spec.index == DeviceSpec::kEveryIndex
                                     ? std::string("cuda")
                                     : absl::StrCat("cuda:", spec.index);
      return absl::NotFoundError(absl::StrCat("device ", wanted, " is not present; this host has ",
                                              absl::StrJoin(present, ", ")));
    }
  }
  std::vector<Device> resolved;
  for (size_t i = 0; i < devices_.size(); ++i) {
    if (chosen[i]) resolved.push_back(devices_[i]);
  }
  return resolved;
}

}  // namespace forecastd
