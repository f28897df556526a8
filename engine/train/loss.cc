#include "engine/train/loss.h"

#include <cmath>

#include "absl/strings/str_cat.h"

namespace forecastd {

absl::StatusOr<TrainingLoss> TrainingLoss::Create(const v1::LossConfig& config,
                                                  const ModelConfig& model) {
  const bool quantile_model = model.quantiles_size() > 0;
  v1::LossKind kind = config.kind();
  if (kind == v1::LOSS_UNSPECIFIED) kind = quantile_model ? v1::LOSS_QUANTILE : v1::LOSS_MSE;
  if (quantile_model != (kind == v1::LOSS_QUANTILE)) {
    return absl::InvalidArgumentError(
        quantile_model
            ? absl::StrCat("model '", model.name(), "' forecasts quantiles; it trains with ",
                           "LOSS_QUANTILE, not ", v1::LossKind_Name(kind))
            : absl::StrCat("LOSS_QUANTILE needs a model with quantiles; '", model.name(),
                           "' makes point forecasts"));
  }
  const float delta = config.huber_delta() == 0.0f ? 1.0f : config.huber_delta();
  if (!(delta > 0.0f) || !std::isfinite(delta)) {
    return absl::InvalidArgumentError(
        absl::StrCat("loss.huber_delta = ", config.huber_delta(), ": must be > 0"));
  }
  return TrainingLoss(kind, delta, {model.quantiles().begin(), model.quantiles().end()},
                      int64_t{model.horizon()} * model.target_names_size());
}

TrainingLoss::TrainingLoss(v1::LossKind kind, float huber_delta, std::vector<float> quantiles,
                           int64_t per_window)
    : kind_(kind),
      huber_delta_(huber_delta),
      quantiles_(std::move(quantiles)),
      per_window_(per_window) {}

ref::LossSpec TrainingLoss::Spec() const {
  ref::LossSpec spec;
  switch (kind_) {
    case v1::LOSS_MAE:
      spec.kind = ref::LossKind::kMae;
      break;
    case v1::LOSS_HUBER:
      spec.kind = ref::LossKind::kHuber;
      spec.huber_delta = huber_delta_;
      break;
    case v1::LOSS_QUANTILE:
      spec.kind = ref::LossKind::kQuantile;
      spec.quantiles = quantiles_.data();
      spec.Q = static_cast<int64_t>(quantiles_.size());
      break;
    default:
      spec.kind = ref::LossKind::kMse;
  }
  return spec;
}

double TrainingLoss::Compute(float* dpred, const float* pred, const float* target,
                             int64_t B) const {
  return ref::LossForwardBackward(dpred, pred, target, B * per_window_, Spec());
}

double TrainingLoss::Evaluate(const float* pred, const float* target, int64_t B) const {
  const ref::LossSpec spec = Spec();
  std::vector<float> unused(static_cast<size_t>(B * per_window_ * spec.Q));
  return ref::LossForwardBackward(unused.data(), pred, target, B * per_window_, spec);
}

std::string TrainingLoss::name() const {
  switch (kind_) {
    case v1::LOSS_MAE:
      return "mae";
    case v1::LOSS_HUBER:
      return absl::StrCat("huber(delta=", huber_delta_, ")");
    case v1::LOSS_QUANTILE:
      return "quantile";
    default:
      return "mse";
  }
}

}  // namespace forecastd
