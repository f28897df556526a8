// Where a TrainJob's optimiser steps run. The weights being trained, their gradients and the
// optimiser's state live with the engine, and a step (forward, loss, backward, clipping,
// update) runs there: HostTrainingEngine on a Backend over host memory, CudaTrainingEngine
// (cuda_training_engine.h) on one GPU. The model's arena and the Optimizer's state stay the
// copies a checkpoint reads and a published version is written from: Pull() brings the
// engine's current values into them, Push() sends them (a resumed checkpoint) to the engine.
// Thread-compatible: one training thread drives an engine.
#ifndef FORECASTD_ENGINE_TRAIN_TRAINING_ENGINE_H_
#define FORECASTD_ENGINE_TRAIN_TRAINING_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "backends/communicator.h"
#include "engine/models/forecaster.h"
#include "engine/train/loss.h"
#include "engine/train/optimizer.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

class TrainingEngine {
 public:
  virtual ~TrainingEngine() = default;

  // "cpu", "cuda:0", ...: where the steps run.
  virtual std::string device() const = 0;

  // Sends the model's arena and the Optimizer's state and step count to the engine.
  virtual absl::Status Push() = 0;
  // Writes the engine's weights into the model's arena and its optimiser state and step count
  // into the Optimizer.
  virtual absl::Status Pull() = 0;

  // One optimiser step at learning rate `lr` on B windows: x (B, input_floats()) standardised
  // input records (Forecaster::ForwardTrain; (B, T, F) for a model whose record is the window)
  // and y (B, P, targets) standardised targets, host memory. With `dropout_seed` the forward pass
  // applies the model's dropout (TrainingTape::dropout_seed). Returns the batch's mean loss
  // under the weights before the update. A non-finite loss is returned as it is; the caller
  // decides (the update it caused is then not to be kept).
  virtual absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                                      std::optional<uint64_t> dropout_seed) = 0;
  // Step as one rank of a data-parallel job (data_parallel.h): forward and backward on this
  // rank's B windows (B may be 0: a zero gradient), then the gradient arena becomes the sum over
  // `communicator`'s ranks of each rank's gradient times its `share` (its rows over the global
  // batch's), then clipping and the update, which every rank thus applies alike. Returns this
  // rank's loss on its own windows (0 for none), under the weights before the update. Every
  // rank joins the sum even when its loss is not finite. UNIMPLEMENTED from an engine without
  // data-parallel steps.
  virtual absl::StatusOr<double> StepShard(const float* x, const float* y, int64_t B, float lr,
                                           std::optional<uint64_t> dropout_seed,
                                           Communicator& communicator, float share);
  // Checksums (ArenaChecksum, data_parallel.h) of the weights of every replica the engine
  // keeps, one per rank: equal on every rank of a healthy data-parallel job. An engine of one
  // replica: none (nothing to compare).
  virtual absl::StatusOr<std::vector<uint64_t>> WeightChecksums();
  // For jobs whose ranks span processes (data_parallel.h): `words` on the group's rank 0
  // replace every other rank's (a collective: every rank of the group calls it, in the same
  // order as its other collectives). An engine whose ranks are all in this process: nothing
  // to do.
  virtual absl::Status ShareFromFirstRank(std::vector<uint32_t>& words);
  // Ends the engine's collectives, from any thread: a step waiting for ranks that will not come
  // returns UNAVAILABLE. Nothing for an engine without collectives.
  virtual void Abort() {}
  // As one rank: the group's rank 0's weights and optimiser state replace this rank's
  // (engine memory; Pull() brings them out). UNIMPLEMENTED from an engine without
  // data-parallel steps.
  virtual absl::Status BroadcastState(Communicator& communicator);
  // As one rank, on `n` floats of host memory at `values`: without `sum_scale`, the group's
  // rank 0's values replace this rank's (Communicator::Broadcast); with it, every rank's values
  // become the sum over the ranks of each one's values times its sum_scale
  // (AllReduceScaledSum). The default passes host memory to the communicator (host
  // communicators); a GPU's engine stages it through device memory.
  virtual absl::Status HostCollective(float* values, int64_t n, Communicator& communicator,
                                      std::optional<float> sum_scale = std::nullopt);
  // The mean loss of the current weights on B windows, without dropout or update.
  virtual absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) = 0;
  // Optimiser steps taken, including those of a pushed checkpoint.
  virtual int64_t steps_taken() const = 0;

  // Stateful training (TrainingConfig.stateful): B streams side by side, each carrying its
  // recurrent state (Forecaster::ChunkStateFloats) from one chunk to the next. ResetStates
  // sets the B streams' states to zero (the start of an epoch, or of validation). StepChunk
  // takes one optimiser step at rate `lr` on the next chunk of K steps: x (B, K, F)
  // standardised inputs, y (B, K, P, targets) standardised targets (host memory), the loss the
  // mean over all B*K steps' outputs, gradients through this chunk only; the chunk's final
  // states, detached, become the states the next chunk starts from. Returns the loss under the
  // weights before the update (non-finite as Step). EvaluateChunk: the loss without dropout or
  // update, carrying the states likewise. FAILED_PRECONDITION from an engine without stateful
  // training (the default), or when B differs from the last ResetStates'.
  virtual absl::Status ResetStates(int64_t B);
  virtual absl::StatusOr<double> StepChunk(const float* x, const float* y, int64_t B, int64_t K,
                                           float lr, std::optional<uint64_t> dropout_seed);
  virtual absl::StatusOr<double> EvaluateChunk(const float* x, const float* y, int64_t B,
                                               int64_t K);
};

// Makes one rank's engine of a data-parallel job (data_parallel.h): local rank `rank`, over
// that rank's model replica and optimiser, on the rank's own thread.
using TrainingEngineFactoryForRank = std::function<absl::StatusOr<std::unique_ptr<TrainingEngine>>(
    int rank, Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config)>;

// Makes the engine a job's steps run on, for its model, optimiser, loss and configuration
// (all outliving the engine). A TrainJob without one uses MakeHostTrainingEngine on its
// backend.
using TrainingEngineFactory = std::function<absl::StatusOr<std::unique_ptr<TrainingEngine>>(
    Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config)>;

// Steps on `backend` over host memory, updating the model's arena and `optimizer` in place
// (Push and Pull have nothing to move). Training precision other than FP32 or unspecified:
// INVALID_ARGUMENT (reduced-precision training runs on a GPU).
absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeHostTrainingEngine(
    Backend& backend, Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_TRAINING_ENGINE_H_
