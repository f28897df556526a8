#include "server/training_placement.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/status.h"
#if FORECASTD_WITH_CUDA
#include "backends/cuda/nccl_communicator.h"
#include "engine/serving/cuda_execution_device.h"
#include "engine/train/cuda_training_engine.h"
#include "engine/train/data_parallel.h"
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
  if (ranks.size() == 1) {
    placement.engine_factory = [rank = ranks.front()](Forecaster& model, Optimizer& optimizer,
                                                      const TrainingLoss& loss,
                                                      const v1::TrainingConfig& training) {
      return MakeCudaTrainingEngine(rank, model, optimizer, loss, training);
    };
    return placement;
  }
  const absl::Duration timeout = devices.collective_timeout;
  placement.engine_factory =
      [ranks, timeout](
          Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
          const v1::TrainingConfig& training) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
    // A new group per job, named by a fresh id.
    ASSIGN_OR_RETURN(const std::string id, NewNcclUniqueId());
    DataParallelOptions options;
    options.ranks = static_cast<int>(ranks.size());
    options.make_communicator = [ranks, id, timeout](int rank) {
      NcclCommunicatorOptions nccl;
      nccl.device = ranks[static_cast<size_t>(rank)].device;
      nccl.rank = rank;
      nccl.size = static_cast<int>(ranks.size());
      nccl.unique_id = id;
      nccl.timeout = timeout;
      return CreateNcclCommunicator(nccl);
    };
    options.make_engine = [ranks](int rank, Forecaster& m, Optimizer& o, const TrainingLoss& l,
                                  const v1::TrainingConfig& c) {
      return MakeCudaTrainingEngine(ranks[static_cast<size_t>(rank)], m, o, l, c);
    };
    return MakeDataParallelTrainingEngine(std::move(options), model, optimizer, loss, training);
  };
  return placement;
#else
  return absl::InternalError("GPU devices in a server built without CUDA");
#endif
}

}  // namespace forecastd
