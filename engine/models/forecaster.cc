#include "engine/models/forecaster.h"

#include <algorithm>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/models/recurrent_forecaster.h"
#include "engine/models/transformer_forecaster.h"
#include "engine/random.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

absl::Status Workspace::Reserve(int64_t n) {
  if (n <= capacity()) return absl::OkStatus();
  if (external_ != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "workspace needs ", n, " floats; its external memory holds ", external_floats_));
  }
  buffer_.resize(static_cast<size_t>(n));
  return absl::OkStatus();
}

float* Workspace::Alloc(int64_t n) {
  if (used_ + n > capacity()) {
    // A model asked for more than its WorkspaceFloats() promised: a bug, not bad input.
    spdlog::critical("Workspace::Alloc: {} floats requested with {} of {} used", n, used_,
                     capacity());
    std::abort();
  }
  float* p = data() + used_;
  // Keep every allocation 64-byte aligned for vectorised kernels.
  used_ += (n + 15) / 16 * 16;
  return p;
}

namespace {

class HostLoopDataOps final : public DataOps {
 public:
  absl::Status Standardize(float* out, const float* inp, const float* mean, const float* std,
                           int64_t R, int64_t F) override {
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t f = 0; f < F; ++f) out[i * F + f] = (inp[i * F + f] - mean[f]) / std[f];
    }
    return absl::OkStatus();
  }
  absl::Status Destandardize(float* out, const float* y, const float* mean, const float* std,
                             int64_t R, int64_t C, int64_t c0, int64_t W) override {
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t c = c0; c < c0 + W; ++c) out[i * C + c] = y[i * C + c] * std[0] + mean[0];
    }
    return absl::OkStatus();
  }
  absl::Status GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                          int64_t W) override {
    for (int64_t r = 0; r < R; ++r) std::copy(inp + r * stride, inp + r * stride + W, out + r * W);
    return absl::OkStatus();
  }
  absl::Status ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                           int64_t W) override {
    for (int64_t r = 0; r < R; ++r) std::copy(inp + r * W, inp + (r + 1) * W, out + r * stride);
    return absl::OkStatus();
  }
  absl::Status Copy(float* out, const float* inp, int64_t n) override {
    std::copy(inp, inp + n, out);
    return absl::OkStatus();
  }
  absl::Status Zero(float* out, int64_t n) override {
    std::fill_n(out, n, 0.0f);
    return absl::OkStatus();
  }
  absl::Status Multiply(float* out, const float* inp, const float* mask, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * mask[i];
    return absl::OkStatus();
  }
  absl::Status DropoutMask(float* mask, int64_t n, float p, uint64_t seed) override {
    Random rng(seed);
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) mask[i] = rng.UniformFloat() < p ? 0.0f : scale;
    return absl::OkStatus();
  }
};

}  // namespace

DataOps& HostDataOps() {
  static HostLoopDataOps* const ops = new HostLoopDataOps();
  return *ops;
}

TrainingTape::~TrainingTape() {
  for (const Buffer& buffer : device_buffers_) placement_.memory->Free(buffer.data);
}

absl::StatusOr<float*> TrainingTape::Alloc(int64_t n) {
  if (placement_.memory == nullptr) {
    if (next_ == host_buffers_.size()) host_buffers_.emplace_back();
    std::vector<float>& buffer = host_buffers_[next_++];
    if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
    return buffer.data();
  }
  if (next_ == device_buffers_.size()) device_buffers_.emplace_back();
  Buffer& buffer = device_buffers_[next_];
  if (buffer.floats < n) {
    // The slot's old contents are dead (Reset() came before), so it is replaced, not grown.
    ASSIGN_OR_RETURN(float* const grown, placement_.memory->Allocate(n));
    if (buffer.data != nullptr) placement_.memory->Free(buffer.data);
    buffer = {grown, n};
  }
  ++next_;
  return buffer.data;
}

absl::StatusOr<float*> TrainingTape::DropoutMask(int64_t n, float p, uint64_t site) {
  if (!dropout_seed.has_value() || !(p > 0.0f)) return nullptr;
  ASSIGN_OR_RETURN(float* const mask, Alloc(n));
  // The site index is mixed into the seed rather than passed as PCG's stream selector, whose
  // streams from one seed are known to be correlated.
  RETURN_IF_ERROR(data().DropoutMask(mask, n, p, SplitMix64(*dropout_seed ^ SplitMix64(site))));
  return mask;
}

absl::StatusOr<std::unique_ptr<Forecaster>> Forecaster::Create(const ModelConfig& config) {
  RETURN_IF_ERROR(ValidateModelConfig(config));
  std::unique_ptr<Forecaster> model;
  switch (config.architecture_case()) {
    case ModelConfig::kLstm:
    case ModelConfig::kGru:
      model.reset(new RecurrentForecaster(config));
      break;
    case ModelConfig::kTransformer:
      model.reset(new TransformerForecaster(config));
      break;
    case ModelConfig::ARCHITECTURE_NOT_SET:
      return absl::InvalidArgumentError("no architecture");
  }
  if (model->standardized()) {
    model->parameters_.Add("normalizer.mean", {model->num_features_});
    model->parameters_.Add("normalizer.std", {model->num_features_});
  }
  model->DeclareParameters(model->parameters_);
  if (model->parameters_.size() > kMaxParameters) {
    return absl::InvalidArgumentError(
        absl::StrCat("model config '", config.name(), "': ", model->parameters_.size(),
                     " parameters; at most ", kMaxParameters, " are supported"));
  }
  model->parameters_.Allocate();
  if (model->standardized()) {
    // Identity standardisation until real statistics are loaded.
    float* std = model->parameters_.at("normalizer.std");
    for (int f = 0; f < model->num_features_; ++f) std[f] = 1.0f;
  }
  return model;
}

Forecaster::Forecaster(const ModelConfig& config)
    : config_(config),
      num_features_(NumFeatures(config)),
      num_targets_(NumTargets(config)),
      num_quantiles_(NumQuantiles(config)),
      target_features_(TargetFeatureIndices(config)) {}

bool Forecaster::standardized() const { return config_.normalization() != v1::NORMALIZATION_NONE; }

int64_t Forecaster::WorkspaceFloats(int64_t B) const {
  const int64_t pad = 16;
  const int64_t T = lookback(), F = num_features_, P = horizon();
  return (B * T * F + pad) + (B * P * num_targets_ * num_quantiles_ + pad) + BodyWorkspaceFloats(B);
}

std::vector<float> Forecaster::NeutralWindows(int64_t B) const {
  const int64_t T = lookback(), F = num_features_;
  std::vector<float> windows(static_cast<size_t>(B * T * F), 0.0f);
  if (standardized()) {
    const float* mean = parameters_.at("normalizer.mean");
    for (int64_t i = 0; i < B * T; ++i) std::copy(mean, mean + F, windows.begin() + i * F);
  }
  return windows;
}

absl::Status Forecaster::Forward(Backend& backend, float* out, const float* inp, int64_t B,
                                 Workspace& workspace, const ForwardPlacement& placement) const {
  if (B <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", B, " must be > 0"));
  const int64_t T = lookback(), F = num_features_, P = horizon(), K = num_targets_,
                Q = num_quantiles_;
  RETURN_IF_ERROR(workspace.Reserve(WorkspaceFloats(B)));
  workspace.Reset();
  const ParameterView p(parameters_,
                        placement.weights != nullptr ? placement.weights : parameters_.data());
  DataOps& data = placement.data_ops != nullptr ? *placement.data_ops : HostDataOps();

  const float* xn = inp;
  if (standardized()) {
    float* scaled = workspace.Alloc(B * T * F);
    RETURN_IF_ERROR(
        data.Standardize(scaled, inp, p.at("normalizer.mean"), p.at("normalizer.std"), B * T, F));
    xn = scaled;
  }

  float* y = workspace.Alloc(B * P * K * Q);
  RETURN_IF_ERROR(ForwardStandardized(backend, p, data, y, xn, B, workspace));

  if (!standardized()) return data.Copy(out, y, B * P * K * Q);
  const float* mean = p.at("normalizer.mean");
  const float* std = p.at("normalizer.std");
  for (int64_t k = 0; k < K; ++k) {
    const int f = target_features_[static_cast<size_t>(k)];
    RETURN_IF_ERROR(data.Destandardize(out, y, mean + f, std + f, B * P, K * Q, k * Q, Q));
  }
  return absl::OkStatus();
}

bool Forecaster::IsTrainable(const ParameterSpec& spec) {
  return !absl::StartsWith(spec.name, "normalizer.");
}

absl::Status Forecaster::ForwardTrain(Backend& backend, float* out, const float* xn, int64_t B,
                                      TrainingTape& tape) const {
  if (B <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", B, " must be > 0"));
  tape.Reset();
  tape.batch = B;
  return ForwardTrainBody(backend, out, xn, B, tape);
}

absl::Status Forecaster::Backward(Backend& backend, float* dparams, const float* dout,
                                  TrainingTape& tape) const {
  if (tape.batch <= 0) return absl::FailedPreconditionError("Backward without ForwardTrain");
  for (const ParameterSpec& spec : parameters_.specs()) {
    if (!IsTrainable(spec)) RETURN_IF_ERROR(tape.data().Zero(dparams + spec.offset, spec.numel));
  }
  return BackwardBody(backend, dparams, dout, tape);
}

}  // namespace forecastd
