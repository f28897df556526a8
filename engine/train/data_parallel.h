// Data-parallel training (a TrainingEngine over several ranks): one rank per device, each a
// thread with its own engine, model replica (weights), optimiser state and Communicator. A step
// of the global batch (B windows) splits it into the ranks' contiguous shards, as evenly as B
// allows (rank r takes rows [r*B/R, (r+1)*B/R)); every rank runs forward and backward on its
// shard, the gradient arena is summed across ranks weighted by each shard's share of B (the
// global batch's mean gradient; TrainingEngine::StepShard), and every rank applies the same
// clipping and optimiser update, so the replicas stay bitwise identical. The step's loss is
// the shards' losses weighted likewise. Evaluate splits the batch the same way, without
// collectives, so each window is evaluated once. Rank 0 works on the job's own model and
// optimiser: Pull() brings rank 0's values into them; Push() sends them to every rank.
// Dropout masks are drawn per rank from the step's seed and the rank, so with dropout a run
// on R ranks is not the run on one device (without dropout it is, up to rounding).
// Thread-compatible: one training thread drives it (the rank threads are its own).
#ifndef FORECASTD_ENGINE_TRAIN_DATA_PARALLEL_H_
#define FORECASTD_ENGINE_TRAIN_DATA_PARALLEL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/communicator.h"
#include "engine/train/training_engine.h"

namespace forecastd {

struct DataParallelOptions {
  // Ranks in this process, >= 1.
  int ranks = 1;
  // The group's ranks over every process (>= ranks) and the first of this process's
  // (this process runs ranks [first_rank, first_rank + ranks)). One process: ranks and 0.
  int world_size = 0;  // 0: `ranks`
  int first_rank = 0;
  // Makes local rank i's communicator (group rank first_rank + i), on that rank's own thread;
  // every rank's is made at the same time, as NCCL's initialisation needs.
  std::function<absl::StatusOr<std::unique_ptr<Communicator>>(int local_rank)> make_communicator;
  // Makes local rank i's engine over its model replica and optimiser, on that rank's thread.
  TrainingEngineFactoryForRank make_engine;
  // > 0: after every step, each communicator's timeout (Communicator::SetTimeout) becomes this
  // margin plus the slowest step seen so far, so a lost rank is noticed that long after the
  // others arrive, however long steps take. 0: the communicators keep their own timeouts.
  absl::Duration collective_margin = absl::ZeroDuration();
};

// This process's ranks in a group whose ranks span processes (daemons): ranks [first_rank,
// first_rank + this process's ranks) of world_size, in the communicators' group named by
// unique_id (for NCCL, NewNcclUniqueId's bytes, made by the process of rank 0).
struct RankGroup {
  std::string unique_id;
  int world_size = 0;
  int first_rank = 0;
};

// INVALID_ARGUMENT for bad options, or a batch_size that does not split evenly over the world
// size; what making a rank's communicator or engine returned otherwise (the ranks made so far
// are ended). Stateful training is refused (FAILED_PRECONDITION).
absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeDataParallelTrainingEngine(
    DataParallelOptions options, Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config);

// Rows [begin, end) of a global batch of B rows that rank `rank` of `ranks` takes.
std::pair<int64_t, int64_t> ShardRows(int64_t B, int rank, int ranks);

// Fnv1a (engine/hash.h) of the bytes of `n` floats: what the ranks' weights are compared by.
uint64_t ArenaChecksum(const float* data, int64_t n);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_DATA_PARALLEL_H_
