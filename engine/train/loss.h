// The training loss of a job: MSE, MAE, Huber or, for a model with quantiles, the quantile
// (pinball) loss, chosen from a LossConfig and checked against the model (a quantile model
// trains with the quantile loss and only it). Losses are taken in standardised units, on the
// model's standardised forecasts, so each target counts alike whatever its scale.
// Thread-safe (const after Create).
#ifndef FORECASTD_ENGINE_TRAIN_LOSS_H_
#define FORECASTD_ENGINE_TRAIN_LOSS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/model_config.h"
#include "forecastd/v1/training.pb.h"
#include "kernels/ref/loss.h"

namespace forecastd {

class TrainingLoss {
 public:
  // INVALID_ARGUMENT when the kind does not fit the model (quantile loss without quantiles,
  // a point loss for a quantile model) or huber_delta <= 0.
  static absl::StatusOr<TrainingLoss> Create(const v1::LossConfig& config,
                                             const ModelConfig& model);

  // The mean loss over a batch and its gradient:
  //   pred, dpred (B, P, targets, Q)   the model's standardised forecasts (Q = 1: no axis)
  //   target (B, P, targets)           standardised targets
  double Compute(float* dpred, const float* pred, const float* target, int64_t B) const;
  // The same without the gradient (validation).
  double Evaluate(const float* pred, const float* target, int64_t B) const;

  v1::LossKind kind() const { return kind_; }
  std::string name() const;
  // The kernels' description of this loss; its quantiles point into this object (host memory).
  ref::LossSpec Spec() const;
  const std::vector<float>& quantiles() const { return quantiles_; }
  // Targets per window, P * targets; a window has Q times as many predictions.
  int64_t per_window() const { return per_window_; }

 private:
  TrainingLoss(v1::LossKind kind, float huber_delta, std::vector<float> quantiles,
               int64_t per_window);

  v1::LossKind kind_;
  float huber_delta_;
  std::vector<float> quantiles_;
  int64_t per_window_;  // P * targets
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_LOSS_H_
