#include "engine/train/training_engine.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

class HostTrainingEngine final : public TrainingEngine {
 public:
  HostTrainingEngine(Backend& backend, Forecaster& model, Optimizer& optimizer,
                     const TrainingLoss& loss)
      : backend_(backend),
        model_(model),
        optimizer_(optimizer),
        loss_(loss),
        grads_(static_cast<size_t>(model.parameters().size())) {}

  std::string device() const override { return "cpu"; }
  absl::Status Push() override { return absl::OkStatus(); }
  absl::Status Pull() override { return absl::OkStatus(); }
  int64_t steps_taken() const override { return optimizer_.steps_taken(); }

  absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> dropout_seed) override {
    pred_.resize(static_cast<size_t>(B * model_.num_outputs()));
    dpred_.resize(pred_.size());
    tape_.dropout_seed = dropout_seed;
    RETURN_IF_ERROR(model_.ForwardTrain(backend_, pred_.data(), x, B, tape_));
    const double loss = loss_.Compute(dpred_.data(), pred_.data(), y, B);
    // A diverged step updates nothing: the caller stops the job on a non-finite loss.
    if (!std::isfinite(loss)) return loss;
    RETURN_IF_ERROR(model_.Backward(backend_, grads_.data(), dpred_.data(), tape_));
    optimizer_.Step(model_.parameters(), grads_.data(), lr);
    return loss;
  }

  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override {
    pred_.resize(static_cast<size_t>(B * model_.num_outputs()));
    tape_.dropout_seed.reset();
    RETURN_IF_ERROR(model_.ForwardTrain(backend_, pred_.data(), x, B, tape_));
    return loss_.Evaluate(pred_.data(), y, B);
  }

 private:
  Backend& backend_;
  Forecaster& model_;
  Optimizer& optimizer_;
  const TrainingLoss& loss_;
  TrainingTape tape_;
  std::vector<float> grads_, pred_, dpred_;
};

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeHostTrainingEngine(
    Backend& backend, Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config) {
  if (config.precision() != v1::PRECISION_UNSPECIFIED && config.precision() != v1::PRECISION_FP32) {
    return absl::InvalidArgumentError(
        absl::StrCat("training precision ", v1::Precision_Name(config.precision()),
                     " needs a GPU; this job trains on the CPU, in FP32 (set --train-device to a "
                     "GPU, or leave precision unset)"));
  }
  return std::make_unique<HostTrainingEngine>(backend, model, optimizer, loss);
}

}  // namespace forecastd
