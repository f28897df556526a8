// A training job's checkpoint: the weights, the best weights so far, the optimiser's state and
// the early-stopping bookkeeping after a whole epoch, so a job killed at any moment resumes
// from its last finished epoch and then computes exactly what it would have (bit-identical
// losses on the CPU). Stored as one safetensors file written atomically (temp file, fsync,
// rename, directory fsync): a reader finds the previous checkpoint or the new one, never a
// part. Stateless functions; thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_CHECKPOINT_H_
#define FORECASTD_ENGINE_TRAIN_CHECKPOINT_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"

namespace forecastd {

struct TrainCheckpoint {
  // Identifies the job (model and training configuration); a checkpoint of another job is
  // never resumed.
  std::string fingerprint;

  int64_t epochs_done = 0;      // epochs finished; the next one to run is this (0-based)
  int64_t optimizer_steps = 0;  // steps taken, as the optimiser counts them
  std::vector<float> params;    // the parameter arena, normaliser included

  // Early stopping. best_epoch is -1 and best_params empty until an epoch was validated.
  int64_t best_epoch = -1;
  double best_validation_loss = std::numeric_limits<double>::infinity();
  int64_t epochs_without_improvement = 0;
  std::vector<float> best_params;

  // Optimiser::state(): named arena-sized arrays.
  std::vector<std::pair<std::string, std::vector<float>>> optimizer_state;

  // One entry per finished epoch (validation NaN when there is no validation part).
  std::vector<double> train_losses;
  std::vector<double> validation_losses;
};

absl::Status WriteCheckpoint(const std::string& path, const TrainCheckpoint& checkpoint);

// NOT_FOUND when there is no file; DATA_LOSS or INVALID_ARGUMENT for one that is damaged or
// not a forecastd checkpoint.
absl::StatusOr<TrainCheckpoint> ReadCheckpoint(const std::string& path);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_CHECKPOINT_H_
