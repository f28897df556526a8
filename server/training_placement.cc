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

namespace {

// The devices `config.devices()` names (or the default one): GPUs, or nothing and `cpu` set.
absl::StatusOr<std::vector<ExecutionDevice*>> ResolveDevices(const TrainingDevices& devices,
                                                             const v1::TrainingConfig& config,
                                                             bool& cpu) {
  std::vector<std::string> names(config.devices().begin(), config.devices().end());
  if (names.empty()) names.push_back(devices.default_device);
  std::vector<ExecutionDevice*> gpus;
  for (ExecutionDevice* d : devices.devices) {
    if (d->id() != "cpu") gpus.push_back(d);
  }
  std::vector<ExecutionDevice*> chosen;
  cpu = false;
  for (const std::string& name : names) {
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
  return chosen;
}

}  // namespace

absl::StatusOr<int> CountTrainingRanks(const TrainingDevices& devices,
                                       const v1::TrainingConfig& config) {
  bool cpu = false;
  ASSIGN_OR_RETURN(const std::vector<ExecutionDevice*> chosen,
                   ResolveDevices(devices, config, cpu));
  return cpu ? 1 : static_cast<int>(chosen.size());
}

absl::StatusOr<JobPlacement> PlaceTrainingJob(const TrainingDevices& devices,
                                              const v1::TrainingConfig& config,
                                              const RankGroup* group) {
  bool cpu = false;
  ASSIGN_OR_RETURN(const std::vector<ExecutionDevice*> chosen,
                   ResolveDevices(devices, config, cpu));
  if (cpu && group != nullptr) {
    return absl::InvalidArgumentError(
        "a job whose ranks span daemons trains on GPUs; name this daemon's GPUs in "
        "training.devices (it would train on the CPU)");
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
  placement.engine_factory = MakeGpuTrainingEngineFactory(
      std::move(ranks), devices.collective_timeout,
      group != nullptr ? std::optional<RankGroup>(*group) : std::nullopt);
  return placement;
#else
  (void)group;
  return absl::InternalError("GPU devices in a server built without CUDA");
#endif
}

}  // namespace forecastd
