#include "engine/train/training_engine.h"

#include <algorithm>
#include <cmath>
#include <string>
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

  absl::StatusOr<double> StepShard(const float* x, const float* y, int64_t B, float lr,
                                   std::optional<uint64_t> dropout_seed, Communicator& communicator,
                                   float share) override {
    const int64_t n = model_.parameters().size();
    double loss = 0.0;
    if (B == 0) {
      grads_.assign(static_cast<size_t>(n), 0.0f);
    } else {
      pred_.resize(static_cast<size_t>(B * model_.num_outputs()));
      dpred_.resize(pred_.size());
      tape_.dropout_seed = dropout_seed;
      RETURN_IF_ERROR(model_.ForwardTrain(backend_, pred_.data(), x, B, tape_));
      loss = loss_.Compute(dpred_.data(), pred_.data(), y, B);
      if (std::isfinite(loss)) {
        RETURN_IF_ERROR(model_.Backward(backend_, grads_.data(), dpred_.data(), tape_));
      } else {
        // The other ranks wait for this rank's gradient; a NaN one makes every rank's sum
        // non-finite, so no rank updates.
        grads_.assign(static_cast<size_t>(n), std::nanf(""));
      }
    }
    RETURN_IF_ERROR(communicator.AllReduceScaledSum(grads_.data(), n, share, nullptr));
    // A diverged step updates nothing, on every rank alike (they all hold the same sum).
    if (std::all_of(grads_.begin(), grads_.end(), [](float g) { return std::isfinite(g); })) {
      optimizer_.Step(model_.parameters(), grads_.data(), lr);
    }
    return loss;
  }

  absl::Status BroadcastState(Communicator& communicator) override {
    ParameterArena& params = model_.parameters();
    RETURN_IF_ERROR(communicator.Broadcast(params.data(), params.size(), 0, nullptr));
    std::vector<std::pair<std::string, std::vector<float>>> state;
    for (const auto& [name, values] : optimizer_.state()) {
      state.emplace_back(name, *values);
      RETURN_IF_ERROR(
          communicator.Broadcast(state.back().second.data(), params.size(), 0, nullptr));
    }
    return optimizer_.Restore(state, optimizer_.steps_taken());
  }

  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override {
    pred_.resize(static_cast<size_t>(B * model_.num_outputs()));
    tape_.dropout_seed.reset();
    RETURN_IF_ERROR(model_.ForwardTrain(backend_, pred_.data(), x, B, tape_));
    return loss_.Evaluate(pred_.data(), y, B);
  }

  absl::Status ResetStates(int64_t B) override {
    RETURN_IF_ERROR(model_.SupportsStatefulTraining());
    const auto n = static_cast<size_t>(model_.ChunkStateFloats(B));
    for (std::vector<float>& state : states_) state.assign(n, 0.0f);
    streams_ = B;
    current_ = 0;
    return absl::OkStatus();
  }

  absl::StatusOr<double> StepChunk(const float* x, const float* y, int64_t B, int64_t K, float lr,
                                   std::optional<uint64_t> dropout_seed) override {
    tape_.dropout_seed = dropout_seed;
    ASSIGN_OR_RETURN(const double loss, ForwardChunk(x, y, B, K, /*gradient=*/true));
    if (!std::isfinite(loss)) return loss;
    RETURN_IF_ERROR(model_.Backward(backend_, grads_.data(), dpred_.data(), tape_));
    optimizer_.Step(model_.parameters(), grads_.data(), lr);
    // The backward read the chunk's initial states; only now may the next chunk overwrite them.
    current_ ^= 1;
    return loss;
  }

  absl::StatusOr<double> EvaluateChunk(const float* x, const float* y, int64_t B,
                                       int64_t K) override {
    tape_.dropout_seed.reset();
    ASSIGN_OR_RETURN(const double loss, ForwardChunk(x, y, B, K, /*gradient=*/false));
    current_ ^= 1;
    return loss;
  }

 private:
  // The chunk's forward from states_[current_] into states_[current_ ^ 1], and its loss
  // (with dpred_ when `gradient`).
  absl::StatusOr<double> ForwardChunk(const float* x, const float* y, int64_t B, int64_t K,
                                      bool gradient) {
    if (B != streams_) {
      return absl::FailedPreconditionError(
          absl::StrCat("a chunk of ", B, " streams, but the states were reset for ", streams_));
    }
    pred_.resize(static_cast<size_t>(B * K * model_.num_outputs()));
    dpred_.resize(pred_.size());
    RETURN_IF_ERROR(model_.ForwardTrainChunk(backend_, pred_.data(), states_[current_ ^ 1].data(),
                                             x, states_[current_].data(), B, K, tape_));
    // Each step's row is one window's worth of forecasts.
    return gradient ? loss_.Compute(dpred_.data(), pred_.data(), y, B * K)
                    : loss_.Evaluate(pred_.data(), y, B * K);
  }

  Backend& backend_;
  Forecaster& model_;
  Optimizer& optimizer_;
  const TrainingLoss& loss_;
  TrainingTape tape_;
  std::vector<float> grads_, pred_, dpred_;
  // Stateful training: the streams' states at the next chunk's start are states_[current_];
  // the other one receives the chunk's final states. (B, ChunkStateFloats(B) / B) each.
  std::vector<float> states_[2];
  int64_t streams_ = 0;
  int current_ = 0;
};

}  // namespace

absl::StatusOr<double> TrainingEngine::StepShard(const float*, const float*, int64_t, float,
                                                 std::optional<uint64_t>, Communicator&, float) {
  return absl::UnimplementedError(
      absl::StrCat("training on ", device(), " does not take part in data-parallel steps"));
}

absl::Status TrainingEngine::ShareFromFirstRank(std::vector<uint32_t>&) { return absl::OkStatus(); }

absl::Status TrainingEngine::BroadcastState(Communicator&) {
  return absl::UnimplementedError(
      absl::StrCat("training on ", device(), " does not take part in data-parallel steps"));
}

absl::Status TrainingEngine::HostCollective(float* values, int64_t n, Communicator& communicator,
                                            std::optional<float> sum_scale) {
  if (sum_scale.has_value()) return communicator.AllReduceScaledSum(values, n, *sum_scale, nullptr);
  return communicator.Broadcast(values, n, /*root=*/0, nullptr);
}

absl::StatusOr<std::vector<uint64_t>> TrainingEngine::WeightChecksums() {
  return std::vector<uint64_t>{};
}

absl::Status TrainingEngine::ResetStates(int64_t) {
  return absl::FailedPreconditionError(
      absl::StrCat("stateful training does not run on ", device(), " yet; train on the CPU"));
}

absl::StatusOr<double> TrainingEngine::StepChunk(const float*, const float*, int64_t, int64_t,
                                                 float, std::optional<uint64_t>) {
  return ResetStates(0);
}

absl::StatusOr<double> TrainingEngine::EvaluateChunk(const float*, const float*, int64_t, int64_t) {
  return ResetStates(0);
}

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
