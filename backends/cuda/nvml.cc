#include "backends/cuda/nvml.h"

#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd {

// The few NVML declarations used, as nvml.h (which ships with the driver's development files,
// not on every build host) declares them. Their ABI is stable: these entry points and structs
// have kept their layout since NVML's v2 entry points (driver 3xx).
namespace {
using NvmlReturn = int;  // nvmlReturn_t; NVML_SUCCESS is 0
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;
  unsigned long long free;
  unsigned long long used;
};
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlErrorNotFound = 6;
constexpr unsigned int kNvmlUuidBufferBytes = 96;  // NVML_DEVICE_UUID_V2_BUFFER_SIZE
constexpr const char* kLibrary = "libnvidia-ml.so.1";
}  // namespace

struct Nvml::Api {
  NvmlReturn (*init)();
  NvmlReturn (*shutdown)();
  const char* (*error_string)(NvmlReturn);
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*);
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*);
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*);
  // Optional: nullptr when this NVML lacks them, and the readings go without.
  NvmlReturn (*uuid)(NvmlDevice, char*, unsigned int);
  NvmlReturn (*power_usage)(NvmlDevice, unsigned int*);  // milliwatts

  absl::Status Error(absl::StatusCode code, NvmlReturn result, const char* call) const {
    return absl::Status(code, absl::StrCat("NVML error ", result, " in ", call, ": ",
                                           error_string != nullptr ? error_string(result) : "?"));
  }
};

namespace {
template <typename Fn>
bool Resolve(void* library, const char* name, Fn* fn) {
  *fn = reinterpret_cast<Fn>(dlsym(library, name));
  return *fn != nullptr;
}
}  // namespace

absl::StatusOr<std::unique_ptr<Nvml>> Nvml::Load() {
  void* library = dlopen(kLibrary, RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    return absl::UnavailableError(absl::StrCat("NVML unavailable: cannot load ", kLibrary, " (",
                                               why != nullptr ? why : "not found",
                                               "); GPU utilisation and memory metrics are off"));
  }
  auto api = std::make_unique<Api>();
  const bool resolved =
      Resolve(library, "nvmlInit_v2", &api->init) &&
      Resolve(library, "nvmlShutdown", &api->shutdown) &&
      Resolve(library, "nvmlErrorString", &api->error_string) &&
      Resolve(library, "nvmlDeviceGetHandleByPciBusId_v2", &api->handle_by_pci_bus_id) &&
      Resolve(library, "nvmlDeviceGetUtilizationRates", &api->utilization) &&
      Resolve(library, "nvmlDeviceGetMemoryInfo", &api->memory);
  if (!resolved) {
    const char* why = dlerror();
    dlclose(library);
    return absl::UnavailableError(absl::StrCat("NVML unavailable: ", kLibrary,
                                               " lacks an entry point (",
                                               why != nullptr ? why : "?", ")"));
  }
  Resolve(library, "nvmlDeviceGetUUID", &api->uuid);
  Resolve(library, "nvmlDeviceGetPowerUsage", &api->power_usage);
  const NvmlReturn result = api->init();
  if (result != kNvmlSuccess) {
    absl::Status status = api->Error(absl::StatusCode::kUnavailable, result, "nvmlInit_v2");
    dlclose(library);
    return status;
  }
  return std::unique_ptr<Nvml>(new Nvml(library, std::move(api)));
}

Nvml::Nvml(void* library, std::unique_ptr<Api> api) : library_(library), api_(std::move(api)) {}

Nvml::~Nvml() {
  api_->shutdown();
  dlclose(library_);
}

absl::StatusOr<void*> Nvml::DeviceHandle(int cuda_device) {
  absl::MutexLock lock(&mu_);
  if (auto it = handles_.find(cuda_device); it != handles_.end()) return it->second;
  char bus_id[32] = {0};
  const cudaError_t error = cudaDeviceGetPCIBusId(bus_id, sizeof(bus_id), cuda_device);
  if (error == cudaErrorInvalidDevice) {
    cudaGetLastError();
    return absl::NotFoundError(absl::StrCat("no CUDA device ", cuda_device));
  }
  CUDA_RETURN_IF_ERROR(error);
  NvmlDevice device = nullptr;
  const NvmlReturn result = api_->handle_by_pci_bus_id(bus_id, &device);
  if (result != kNvmlSuccess) {
    return api_->Error(
        result == kNvmlErrorNotFound ? absl::StatusCode::kNotFound : absl::StatusCode::kUnavailable,
        result, "nvmlDeviceGetHandleByPciBusId_v2");
  }
  handles_.emplace(cuda_device, device);
  return device;
}

absl::StatusOr<GpuUsage> Nvml::Usage(int cuda_device) {
  ASSIGN_OR_RETURN(void* device, DeviceHandle(cuda_device));
  GpuUsage usage;
  NvmlMemory memory{};
  NvmlReturn result = api_->memory(device, &memory);
  if (result != kNvmlSuccess) {
    return api_->Error(absl::StatusCode::kUnavailable, result, "nvmlDeviceGetMemoryInfo");
  }
  usage.memory_total_bytes = static_cast<int64_t>(memory.total);
  usage.memory_used_bytes = static_cast<int64_t>(memory.used);
  usage.memory_free_bytes = static_cast<int64_t>(memory.free);
  NvmlUtilization utilization{};
  result = api_->utilization(device, &utilization);
  if (result != kNvmlSuccess) {
    return api_->Error(absl::StatusCode::kUnavailable, result, "nvmlDeviceGetUtilizationRates");
  }
  usage.utilization_percent = static_cast<int>(utilization.gpu);
  usage.memory_utilization_percent = static_cast<int>(utilization.memory);
  char uuid[kNvmlUuidBufferBytes] = {0};
  if (api_->uuid != nullptr && api_->uuid(device, uuid, sizeof(uuid)) == kNvmlSuccess) {
    usage.uuid = uuid;
  }
  unsigned int milliwatts = 0;
  if (api_->power_usage != nullptr && api_->power_usage(device, &milliwatts) == kNvmlSuccess) {
    usage.power_milliwatts = milliwatts;
  }
  return usage;
}

}  // namespace forecastd
