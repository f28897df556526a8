// The optimiser of a training job: SGD (with momentum), Adam or AdamW over a model's whole
// parameter arena, with optional global-norm gradient clipping. Its state (momentum or first
// and second moments) mirrors the arena's layout, so a step is one call per buffer and a
// checkpoint saves it as whole arrays. Parameters that are not trained (the normaliser's)
// are never touched. Thread-compatible: one training thread owns it.
#ifndef FORECASTD_ENGINE_TRAIN_OPTIMIZER_H_
#define FORECASTD_ENGINE_TRAIN_OPTIMIZER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/parameters.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

class Optimizer {
 public:
  // Validates `config` (rates > 0, betas in [0, 1), ...) and sizes the state for `arena`;
  // INVALID_ARGUMENT naming the bad field.
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const v1::OptimizerConfig& config,
                                                           const ParameterArena& arena);

  // One update at learning rate `lr`: clips `grads` (arena-sized; scaled in place when
  // clipping applies), then updates the trainable parameters. Returns the gradient's global
  // L2 norm before clipping.
  double Step(ParameterArena& params, float* grads, float lr);

  int64_t steps_taken() const { return steps_; }
  // The trainable [offset, offset + numel) ranges of the arena an update touches.
  const std::vector<std::pair<int64_t, int64_t>>& trainable_ranges() const { return ranges_; }
  const v1::OptimizerConfig& config() const { return config_; }
  float peak_learning_rate() const { return config_.learning_rate(); }

  // The state a checkpoint keeps: named arena-sized arrays ("m", "v" or "momentum") and the
  // step count. Restore checks the names and sizes.
  std::vector<std::pair<std::string, const std::vector<float>*>> state() const;
  absl::Status Restore(const std::vector<std::pair<std::string, std::vector<float>>>& state,
                       int64_t steps);

 private:
  Optimizer(const v1::OptimizerConfig& config, const ParameterArena& arena);

  // Constant after construction. `config_` has every default filled in.
  const v1::OptimizerConfig config_;
  // Trainable [offset, offset + numel) ranges of the arena, merged where adjacent.
  std::vector<std::pair<int64_t, int64_t>> ranges_;

  std::vector<float> m_;  // Adam(W) first moment, or SGD momentum buffer
  std::vector<float> v_;  // Adam(W) second moment
  int64_t steps_ = 0;
};

// The config with zero fields replaced by their documented defaults.
v1::OptimizerConfig WithDefaults(const v1::OptimizerConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_OPTIMIZER_H_
