// Where a Train job's steps run on this server. A job that names no devices trains on the
// server's training device (--train-device); one that names devices (TrainingConfig.devices:
// "cuda:<i>" entries, "all" for every GPU in use, or "cpu") trains there: on one GPU with that
// GPU's engine, on several with one data-parallel rank per GPU joined over NCCL
// (engine/train/data_parallel.h). Each step holds a training lease of every device it uses.
// Thread-safe: PlaceTrainingJob reads the devices only.
#ifndef FORECASTD_SERVER_TRAINING_PLACEMENT_H_
#define FORECASTD_SERVER_TRAINING_PLACEMENT_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/serving/model_instance.h"
#include "engine/train/data_parallel.h"
#include "engine/train/train_job_manager.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

struct TrainingDevices {
  // The devices the server uses (--devices), CPU included; not owned.
  std::vector<ExecutionDevice*> devices;
  // The CPU's scheduler (a CPU-trained step's lease); not owned.
  DeviceScheduler* cpu_scheduler = nullptr;
  // How long a rank waits for the others in a collective, beyond the slowest step seen,
  // before the job is failed.
  absl::Duration collective_timeout = absl::Seconds(10);
  // The server's training device (--train-device, resolved): "cpu" or "cuda:<i>".
  std::string default_device = "cpu";
};

// The placement for `config.devices()` (empty: the default device). INVALID_ARGUMENT for a
// device the server does not use, one named twice, "cpu" beside GPUs, or "all" without a GPU;
// with a `group`, for the CPU too (ranks in several daemons run on GPUs).
absl::StatusOr<JobPlacement> PlaceTrainingJob(const TrainingDevices& devices,
                                              const v1::TrainingConfig& config,
                                              const RankGroup* group = nullptr);
// The GPU ordinals of the devices `config.devices()` names (as PlaceTrainingJob resolves
// them): how many ranks this daemon would run.
absl::StatusOr<int> CountTrainingRanks(const TrainingDevices& devices,
                                       const v1::TrainingConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_TRAINING_PLACEMENT_H_
