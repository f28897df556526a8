// TrainingTape: what one training step of a forecaster keeps from its forward pass to its
// backward pass, in host memory or (TrainingPlacement, TapeMemory) a device's. The training engines
// own one per step loop; Forecaster::ForwardTrain fills it and Forecaster::Backward reads it.
// Owned by one training thread.
#ifndef FORECASTD_ENGINE_MODELS_TRAINING_TAPE_H_
#define FORECASTD_ENGINE_MODELS_TRAINING_TAPE_H_

#include <any>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/models/data_ops.h"
#include "engine/models/parameters.h"

namespace forecastd {

// Memory for a TrainingTape whose buffers live on a device (for host memory the tape needs
// none). Used by one tape at a time.
class TapeMemory {
 public:
  virtual ~TapeMemory() = default;
  // `n` floats, 64-byte aligned; RESOURCE_EXHAUSTED when the device has no room.
  virtual absl::StatusOr<float*> Allocate(int64_t n) = 0;
  // Gives back a buffer from Allocate; nothing queued may still use it.
  virtual void Free(float* buffer) = 0;
};

// Where a training step finds its weights, keeps its activations and moves data: by default
// (all nullptr) the model's own arena, host memory and HostDataOps(); a GPU training engine
// gives the device copy of the arena, device memory and its DataOps. All or none are set.
struct TrainingPlacement {
  // A copy of the arena's data (same layout), e.g. on the device; nullptr: the arena itself.
  const float* weights = nullptr;
  DataOps* data_ops = nullptr;
  TapeMemory* memory = nullptr;  // not owned; must outlive the tape
};

// The activations one training step keeps from its forward pass to its backward pass, plus the
// backward pass's scratch and dropout masks, in host memory or, with a TrainingPlacement, in
// device memory. Buffers are kept and reused by later steps of the same or smaller shapes.
// Owned by one training thread.
class TrainingTape {
 public:
  TrainingTape() = default;
  explicit TrainingTape(const TrainingPlacement& placement) : placement_(placement) {}
  ~TrainingTape();
  TrainingTape(const TrainingTape&) = delete;
  TrainingTape& operator=(const TrainingTape&) = delete;

  // Starts a new step; earlier buffers are handed out again. Keeps dropout_seed.
  void Reset() {
    next_ = 0;
    model_tape_.reset();
  }
  // `n` floats, valid until the next Reset() (contents unspecified). RESOURCE_EXHAUSTED when
  // device memory runs out.
  absl::StatusOr<float*> Alloc(int64_t n);

  // Inverted-dropout multipliers (nn.Dropout in training) for `n` units of dropout site `site`:
  // each 0 with probability p, else 1/(1-p), drawn in order from a stream that depends on
  // dropout_seed and `site` alone (DataOps::DropoutMask), so one seed gives one mask per site
  // whatever the parameters or the device. nullptr, meaning no dropout, when dropout_seed is
  // unset or p is 0 (nothing is drawn then). Valid until the next Reset(). p in [0, 1).
  absl::StatusOr<float*> DropoutMask(int64_t n, float p, uint64_t site);

  // The weights a step reads: the placement's copy of `arena`, or the arena itself.
  ParameterView weights(const ParameterArena& arena) const {
    return ParameterView(arena, placement_.weights != nullptr ? placement_.weights : arena.data());
  }
  DataOps& data() const {
    return placement_.data_ops != nullptr ? *placement_.data_ops : HostDataOps();
  }

  // Set by the caller before ForwardTrain: with a seed, the forward pass applies the model's
  // dropout (config's `dropout`) with masks from DropoutMask; unset (the default), it runs
  // without dropout, as evaluation does. TrainJob sets DeriveSeed(job seed,
  // SeedPurpose::kDropout, optimiser step) (engine/random.h) before every step, so a
  // resumed job draws the same masks.
  std::optional<uint64_t> dropout_seed;
  // What the forward pass left for the backward pass: the model's own tape struct
  // (RecurrentForecaster::Tape, TransformerForecaster::Tape), a value of pointers into this
  // tape's buffers and the backends' saved training state. EmplaceModelTape starts a fresh one;
  // model_tape is nullptr when the tape holds none of that type. Reset() drops it.
  template <typename ModelTape>
  ModelTape& EmplaceModelTape() {
    return model_tape_.emplace<ModelTape>();
  }
  template <typename ModelTape>
  ModelTape* model_tape() {
    return std::any_cast<ModelTape>(&model_tape_);
  }
  // Set by the caller before Backward, or empty: called as the backward pass finishes
  // gradients, with `from` such that every gradient at arena offset >= `from` is final (written,
  // or on a device queued) from then on, so a data-parallel engine can start summing them over
  // its ranks while the rest of the backward runs. Models that finish their blocks from the
  // arena's end towards its start call it after each block; others never call it (the engine
  // then sums everything after Backward). A failure ends the backward pass with it.
  std::function<absl::Status(int64_t from)> on_gradients_final;
  int64_t batch = 0;
  // What ForwardTrain keeps of a model's window scaling (ModelConfig.window_scaling) for
  // Backward: buffers of this tape, nullptr where the config needs none.
  struct WindowScaling {
    const float* scale = nullptr;  // (B, F) each window's scale; nullptr: 1 (no statistics)
    const float* z = nullptr;      // (B, T, F) the scaled window before the affine map
    const float* xw = nullptr;     // (B, T, F) what the model's body read
    const float* v = nullptr;      // (B, P * targets * Q) the forecasts before scale and center
  } window_scaling;

 private:
  struct Buffer {
    float* data = nullptr;
    int64_t floats = 0;
  };

  const TrainingPlacement placement_{};
  std::any model_tape_;
  // Host buffers (no placement.memory); each slot is its own vector, so growing one never
  // moves another.
  std::vector<std::vector<float>> host_buffers_;
  std::vector<Buffer> device_buffers_;  // from placement.memory
  size_t next_ = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_TRAINING_TAPE_H_
