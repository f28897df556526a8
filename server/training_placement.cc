#include "server/training_placement.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/status.h"
#if FORECASTD_WITH_CUDA
#include "engine/serving/cuda_execution_device.h"
#include "engine/train/cuda_training_engine.h"
#endif

namespace forecastd {

absl::StatusOr<JobPlacement> PlaceTrainingJob(const TrainingDevices& devices,
                                              const v1::TrainingConfig& config) {
  std::vector<ExecutionDevice*> gpus;
  for (ExecutionDevice* d : devices.devices) {
    if (d->id() != "cpu") gpus.push_back(d);
  }
  std::vector<ExecutionDevice*> chosen;
  bool cpu = false;
  for (const std::string& name : config.devices()) {
    if (name == "cpu") {
      cpu = true;
      continue;
    }
    if (name == "all") {
      if (gpus.empty()) {
        return absl::InvalidArgumentError(
            "training.devices \"all\" names every GPU, and this server uses none");
      }
      chosen.insert(chosen.end(), gpus.begin(), gpus.end());
      continue;
    }
    const auto found = std::find_if(gpus.begin(), gpus.end(),
                                    [&name](ExecutionDevice* d) { return d->id() == name; });
    if (found == gpus.end()) {
      std::vector<std::string> in_use;
      for (ExecutionDevice* d : gpus) in_use.push_back(d->id());
      return absl::InvalidArgumentError(
          absl::StrCat("training.devices: ", name, " is not a GPU this server uses (",
                       in_use.empty() ? "none" : absl::StrJoin(in_use, ", "), ")"));
    }
    chosen.push_back(*found);
  }
  for (size_t i = 0; i < chosen.size(); ++i) {
    if (std::find(chosen.begin(), chosen.begin() + static_cast<std::ptrdiff_t>(i), chosen[i]) !=
        chosen.begin() + static_cast<std::ptrdiff_t>(i)) {
      return absl::InvalidArgumentError(
          absl::StrCat("training.devices names ", chosen[i]->id(), " twice"));
    }
  }
  if (cpu && !chosen.empty()) {
    return absl::InvalidArgumentError(
        "training.devices: a job trains on the CPU or on GPUs, not on both");
  }
  JobPlacement placement;
  if (cpu) {
    // The host engine (TrainJobOptions without an engine factory).
    if (devices.cpu_scheduler != nullptr) placement.schedulers.push_back(devices.cpu_scheduler);
    return placement;
  }
#if FORECASTD_WITH_CUDA
  std::vector<CudaTrainingEngineOptions> ranks;
  for (ExecutionDevice* d : chosen) {
    auto* gpu = dynamic_cast<CudaExecutionDevice*>(d);
    if (gpu == nullptr) return absl::InternalError(absl::StrCat(d->id(), " is not a GPU"));
    CudaTrainingEngineOptions rank;
    rank.device = gpu->allocator().device();
    rank.allocator = &gpu->allocator();
    ranks.push_back(rank);
    placement.schedulers.push_back(&gpu->scheduler());
  }
  placement.engine_factory =
      MakeGpuTrainingEngineFactory(std::move(ranks), devices.collective_timeout);
  return placement;
#else
  return absl::InternalError("GPU devices in a server built without CUDA");
#endif
}

}  // namespace forecastd
