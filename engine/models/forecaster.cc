#include "engine/models/forecaster.h"

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/models/mlp_forecaster.h"
#include "engine/models/recurrent_forecaster.h"
#include "engine/models/transformer_forecaster.h"
#include "kernels/base/status.h"

namespace forecastd {

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
    case ModelConfig::kMlp:
      model.reset(new MlpForecaster(config));
      break;
    case ModelConfig::ARCHITECTURE_NOT_SET:
      return absl::InvalidArgumentError("no architecture");
  }
  const int64_t S = model->num_series_;
  if (model->num_static_ > 0 && S == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model config '", config.name(),
        "': static covariates are values per series, and the config names no series (training "
        "writes them from DataConfig.series_column)"));
  }
  if (model->standardized()) {
    const std::vector<int64_t> shape = S > 0 ? std::vector<int64_t>{S, model->num_features_}
                                             : std::vector<int64_t>{model->num_features_};
    model->parameters_.Add("normalizer.mean", shape);
    model->parameters_.Add("normalizer.std", shape);
  }
  if (model->num_static_ > 0) model->parameters_.Add("series.static", {S, model->num_static_});
  if (model->window_affine()) {
    model->parameters_.Add("window_scaling.weight", {model->num_features_});
    model->parameters_.Add("window_scaling.bias", {model->num_features_});
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
    std::fill(std, std + std::max<int64_t>(S, 1) * model->num_features_, 1.0f);
  }
  if (model->window_affine()) {
    // RevIN's start: the identity map.
    float* gain = model->parameters_.at("window_scaling.weight");
    for (int f = 0; f < model->num_features_; ++f) gain[f] = 1.0f;
  }
  return model;
}

Forecaster::Forecaster(const ModelConfig& config)
    : config_(config),
      num_features_(NumFeatures(config)),
      num_targets_(NumTargets(config)),
      num_quantiles_(NumQuantiles(config)),
      target_features_(TargetFeatureIndices(config)),
      future_features_(FutureFeatureIndices(config)),
      num_series_(NumSeries(config)),
      num_static_(NumStaticFeatures(config)),
      input_floats_(InputRecordFloats(config)),
      body_lookback_(config.lookback() + (future_features_.empty() ? 0 : config.horizon())),
      body_features_(num_features_ + num_static_ + (future_features_.empty() ? 0 : 1)) {}

bool Forecaster::standardized() const { return config_.normalization() != v1::NORMALIZATION_NONE; }

int64_t Forecaster::WorkspaceFloats(int64_t B) const {
  if (HasRecordExtras(config_)) return RecordWorkspaceFloats(B);
  const int64_t pad = 16;
  const int64_t T = lookback(), F = num_features_, P = horizon();
  int64_t floats =
      (B * T * F + pad) + (B * P * num_targets_ * num_quantiles_ + pad) + BodyWorkspaceFloats(B);
  // The scaled windows, their statistics and the body's output before mapping back.
  if (scales_windows()) floats += (B * T * F + pad) + 2 * (B * F + pad) + (B * num_outputs() + pad);
  return floats;
}

std::vector<float> Forecaster::NeutralWindows(int64_t B) const {
  const int64_t T = lookback(), F = num_features_, P = horizon(), R = input_floats_;
  std::vector<float> records(static_cast<size_t>(B * R), 0.0f);
  if (!standardized()) return records;
  const float* mean = parameters_.at("normalizer.mean");  // the first series' with series
  for (int64_t b = 0; b < B; ++b) {
    float* record = records.data() + b * R;
    for (int64_t t = 0; t < T; ++t) std::copy(mean, mean + F, record + t * F);
    float* future = record + T * F;
    for (int64_t p = 0; p < P && !future_features_.empty(); ++p) {
      for (size_t k = 0; k < future_features_.size(); ++k) {
        future[p * static_cast<int64_t>(future_features_.size()) + static_cast<int64_t>(k)] =
            mean[future_features_[k]];
      }
    }
  }
  return records;
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
  if (HasRecordExtras(config_)) return ForwardRecords(backend, p, data, out, inp, B, workspace);

  const float* xn = inp;
  float* scaled = nullptr;
  if (standardized()) {
    scaled = workspace.Alloc(B * T * F);
    RETURN_IF_ERROR(
        data.Standardize(scaled, inp, p.at("normalizer.mean"), p.at("normalizer.std"), B * T, F));
    xn = scaled;
  }

  float* y = workspace.Alloc(B * P * K * Q);
  if (!scales_windows()) {
    RETURN_IF_ERROR(ForwardStandardized(backend, p, data, y, xn, B, workspace));
    return Destandardize(data, p, out, y, B);
  }
  const float* xw = xn;
  float* center = nullptr;
  float* scale = nullptr;
  if (window_statistics()) {
    float* windows = scaled != nullptr ? scaled : workspace.Alloc(B * T * F);  // in place
    center = workspace.Alloc(B * F);
    scale = workspace.Alloc(B * F);
    RETURN_IF_ERROR(ScaleWindows(data, p, windows, nullptr, center, scale, xn, B));
    xw = windows;
  }
  float* d = workspace.Alloc(B * P * K * Q);
  RETURN_IF_ERROR(ForwardStandardized(backend, p, data, d, xw, B, workspace));
  RETURN_IF_ERROR(UnscaleForecasts(data, p, y, nullptr, d, xw, center, scale, B));
  return Destandardize(data, p, out, y, B);
}

absl::Status Forecaster::ScaleWindows(DataOps& data, const ParameterView& p, float* xw, float* z,
                                      float* center, float* scale, const float* xn,
                                      int64_t B) const {
  const int64_t T = lookback(), F = num_features_;
  const v1::WindowScaling& w = config_.window_scaling();
  const ref::WindowStatistic statistic = w.kind() == v1::WindowScaling::WINDOW_SCALING_MEAN_STD
                                             ? ref::WindowStatistic::kMeanStd
                                             : ref::WindowStatistic::kLastValue;
  RETURN_IF_ERROR(
      data.WindowStats(center, scale, xn, B, T, F, statistic, WindowScalingEps(config_)));
  const float* gamma = w.affine() ? p.at("window_scaling.weight") : nullptr;
  const float* beta = w.affine() ? p.at("window_scaling.bias") : nullptr;
  RETURN_IF_ERROR(data.ScaleWindows(xw, z, xn, center, scale, gamma, beta, B, T, F));
  // The future-known columns keep their values (forecaster_records.cc).
  for (const int j : future_features_) {
    RETURN_IF_ERROR(data.BlockCopy(xw + j, xn + j, 0.0f, ref::Block3{B * T, 1, 1},
                                   ref::Strides3{F, 0, 0}, ref::Strides3{F, 0, 0}));
  }
  return absl::OkStatus();
}

absl::Status Forecaster::UnscaleForecasts(DataOps& data, const ParameterView& p, float* out,
                                          float* v, const float* d, const float* xw,
                                          const float* center, const float* scale,
                                          int64_t B) const {
  const int64_t T = lookback(), F = num_features_, P = horizon(), K = num_targets_,
                Q = num_quantiles_;
  const v1::WindowScaling& w = config_.window_scaling();
  const float eps = WindowScalingEps(config_);
  for (int64_t k = 0; k < K; ++k) {
    const int f = target_features_[static_cast<size_t>(k)];
    const float* last = w.forecast_change() ? xw + (T - 1) * F + f : nullptr;
    RETURN_IF_ERROR(data.UnscaleTarget(
        out, v, d, last, T * F, center != nullptr ? center + f : nullptr,
        scale != nullptr ? scale + f : nullptr, F,
        w.affine() ? p.at("window_scaling.weight") + f : nullptr,
        w.affine() ? p.at("window_scaling.bias") + f : nullptr, eps * eps, B, P, K * Q, k * Q, Q));
  }
  return absl::OkStatus();
}

absl::Status Forecaster::Destandardize(DataOps& data, const ParameterView& p, float* out,
                                       const float* y, int64_t rows) const {
  const int64_t P = horizon(), K = num_targets_, Q = num_quantiles_;
  if (!standardized()) return data.Copy(out, y, rows * P * K * Q);
  const float* mean = p.at("normalizer.mean");
  const float* std = p.at("normalizer.std");
  for (int64_t k = 0; k < K; ++k) {
    const int f = target_features_[static_cast<size_t>(k)];
    RETURN_IF_ERROR(data.Destandardize(out, y, mean + f, std + f, rows * P, K * Q, k * Q, Q));
  }
  return absl::OkStatus();
}

int64_t Forecaster::StepWorkspaceFloats(int64_t B) const {
  const int64_t pad = 16;
  return (B * num_features_ + pad) + (B * num_outputs() + pad) + StepBodyWorkspaceFloats(B);
}

absl::Status Forecaster::Step(Backend& backend, float* out, const float* x, float* slab,
                              const int32_t* slots, int64_t B, Workspace& workspace,
                              const ForwardPlacement& placement) const {
  if (StateFloats() == 0) {
    return absl::UnimplementedError(absl::StrCat(
        "model '", config_.name(),
        "' has no state mode (only a unidirectional lstm or gru without window scaling keeps a "
        "state per stream)"));
  }
  if (B <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", B, " must be > 0"));
  const int64_t F = num_features_;
  const ParameterView p(parameters_,
                        placement.weights != nullptr ? placement.weights : parameters_.data());
  // One backend call: no workspace, no data movement of its own.
  if (StepOneCallFits(backend, B)) return StepOneCall(backend, p, out, x, slab, slots, B);
  RETURN_IF_ERROR(workspace.Reserve(StepWorkspaceFloats(B)));
  workspace.Reset();
  DataOps& data = placement.data_ops != nullptr ? *placement.data_ops : HostDataOps();
  const float* xn = x;
  if (standardized()) {
    float* scaled = workspace.Alloc(B * F);
    RETURN_IF_ERROR(
        data.Standardize(scaled, x, p.at("normalizer.mean"), p.at("normalizer.std"), B, F));
    xn = scaled;
  }
  float* y = workspace.Alloc(B * num_outputs());
  RETURN_IF_ERROR(StepStandardized(backend, p, data, y, xn, slab, slots, B, workspace));
  return Destandardize(data, p, out, y, B);
}

absl::Status Forecaster::StepOneCall(Backend& /*backend*/, const ParameterView& /*p*/,
                                     float* /*out*/, const float* /*x*/, float* /*slab*/,
                                     const int32_t* /*slots*/, int64_t /*B*/) const {
  return absl::UnimplementedError("no one-call step");
}

absl::Status Forecaster::StepStandardized(Backend& /*backend*/, const ParameterView& /*p*/,
                                          DataOps& /*data*/, float* /*out*/, const float* /*xn*/,
                                          float* /*slab*/, const int32_t* /*slots*/, int64_t /*B*/,
                                          Workspace& /*workspace*/) const {
  return absl::UnimplementedError("no state mode");
}

absl::Status Forecaster::Activate(Backend& backend, v1::Activation act, float* out,
                                  const float* inp, int64_t n) {
  switch (act) {
    case v1::ACTIVATION_RELU:
      return backend.Relu(out, inp, n);
    case v1::ACTIVATION_GELU_TANH:
      return backend.Gelu(out, inp, n, GeluForm::kTanh);
    default:
      return backend.Gelu(out, inp, n, GeluForm::kErf);
  }
}

absl::Status Forecaster::ActivateBackward(Backend& backend, v1::Activation act, float* dinp,
                                          const float* dout, const float* inp, int64_t n) {
  switch (act) {
    case v1::ACTIVATION_RELU:
      return backend.ReluBackward(dinp, dout, inp, n);
    case v1::ACTIVATION_GELU_TANH:
      return backend.GeluBackward(dinp, dout, inp, n, GeluForm::kTanh);
    default:
      return backend.GeluBackward(dinp, dout, inp, n, GeluForm::kErf);
  }
}

bool Forecaster::IsTrainable(const ParameterSpec& spec) {
  return !absl::StartsWith(spec.name, "normalizer.") && !absl::StartsWith(spec.name, "series.");
}

absl::Status Forecaster::ForwardTrain(Backend& backend, float* out, const float* xn, int64_t B,
                                      TrainingTape& tape) const {
  if (B <= 0) return absl::InvalidArgumentError(absl::StrCat("batch size ", B, " must be > 0"));
  tape.Reset();
  tape.batch = B;
  tape.window_scaling = {};
  const bool records = HasRecordExtras(config_);
  if (!records && !scales_windows()) return ForwardTrainBody(backend, out, xn, B, tape);
  const int64_t T = lookback(), F = num_features_, P = horizon(), Fk = num_future_features(),
                R = input_floats_;
  const ParameterView p = tape.weights(parameters_);
  DataOps& data = tape.data();
  // A record's window and future-known values side by side (forecaster_records.cc).
  const float* windows = xn;
  float* fn = nullptr;
  const float* idx = records && num_series_ > 0 ? xn + T * F + P * Fk : nullptr;
  if (records) {
    ASSIGN_OR_RETURN(float* const w, tape.Alloc(B * T * F));
    RETURN_IF_ERROR(data.GatherRows(w, xn, B, R, T * F));
    windows = w;
    if (Fk > 0) {
      ASSIGN_OR_RETURN(fn, tape.Alloc(B * P * Fk));
      RETURN_IF_ERROR(data.GatherRows(fn, xn + T * F, B, R, P * Fk));
    }
  }
  float* center = nullptr;
  float* scale = nullptr;
  float* z = nullptr;
  const float* xw = windows;
  if (window_statistics()) {
    ASSIGN_OR_RETURN(center, tape.Alloc(B * F));
    ASSIGN_OR_RETURN(scale, tape.Alloc(B * F));
    if (window_affine()) {
      ASSIGN_OR_RETURN(z, tape.Alloc(B * T * F));
    }
    ASSIGN_OR_RETURN(float* const scaled, tape.Alloc(B * T * F));
    RETURN_IF_ERROR(ScaleWindows(data, p, scaled, z, center, scale, windows, B));
    xw = scaled;
  }
  const float* body_in = xw;
  if (records) {
    ASSIGN_OR_RETURN(float* const u, tape.Alloc(B * body_lookback_ * body_features_));
    ASSIGN_OR_RETURN(float* const statics, tape.Alloc(std::max<int64_t>(B * num_static_, 1)));
    RETURN_IF_ERROR(AssembleBodyInput(data, p, u, statics, xw, fn, idx, R, B));
    body_in = u;
  }
  if (!scales_windows()) return ForwardTrainBody(backend, out, body_in, B, tape);
  ASSIGN_OR_RETURN(float* const d, tape.Alloc(B * num_outputs()));
  RETURN_IF_ERROR(ForwardTrainBody(backend, d, body_in, B, tape));
  float* v = nullptr;
  if (window_affine()) {
    ASSIGN_OR_RETURN(v, tape.Alloc(B * num_outputs()));
  }
  RETURN_IF_ERROR(UnscaleForecasts(data, p, out, v, d, xw, center, scale, B));
  tape.window_scaling = {scale, z, xw, v};
  return absl::OkStatus();
}

absl::Status Forecaster::SupportsStatefulTraining() const {
  return absl::InvalidArgumentError(
      "stateful training (training.stateful.chunk_length > 0) needs a unidirectional LSTM or "
      "GRU: a transformer keeps no recurrent state to carry from tick to tick; train it on "
      "windows (chunk_length 0)");
}

int64_t Forecaster::ChunkStateFloats(int64_t) const { return 0; }

absl::Status Forecaster::ForwardTrainChunkBody(Backend&, float*, float*, const float*, const float*,
                                               int64_t, int64_t, TrainingTape&) const {
  return SupportsStatefulTraining();
}

absl::Status Forecaster::ForwardTrainChunk(Backend& backend, float* out, float* state_n,
                                           const float* xn, const float* state_0, int64_t B,
                                           int64_t K, TrainingTape& tape) const {
  RETURN_IF_ERROR(SupportsStatefulTraining());
  if (B <= 0 || K <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("a chunk of ", B, " streams and ", K, " steps: both must be > 0"));
  }
  if (state_n == state_0) {
    return absl::InvalidArgumentError("a chunk's final states may not overwrite its initial ones");
  }
  tape.Reset();
  tape.batch = B;
  return ForwardTrainChunkBody(backend, out, state_n, xn, state_0, B, K, tape);
}

absl::Status Forecaster::Backward(Backend& backend, float* dparams, const float* dout,
                                  TrainingTape& tape) const {
  if (tape.batch <= 0) return absl::FailedPreconditionError("Backward without ForwardTrain");
  for (const ParameterSpec& spec : parameters_.specs()) {
    if (!IsTrainable(spec)) RETURN_IF_ERROR(tape.data().Zero(dparams + spec.offset, spec.numel));
  }
  if (!scales_windows()) return BackwardBody(backend, dparams, nullptr, dout, tape);
  return BackwardScaled(backend, dparams, dout, tape);
}

// Window scaling's backward (the statistics are constants): with a = d + xw_last (with
// forecast_change), v = (a - beta) / (gamma + eps^2) (affine) or a, out = v * scale + center,
//   da = dout * scale / (gamma + eps^2),  dd = da,
//   dbeta[f_k] -= sum da,  dgamma[f_k] -= sum da * v          (the forecast's side)
//   dxw = the body's d(loss)/d(input), plus sum_{p,q} da at the last row (forecast_change)
//   dgamma[f] += sum dxw * z,  dbeta[f] += sum dxw             (the window's side)
// Without affine nothing upstream of the body is trained and dxw is not computed.
absl::Status Forecaster::BackwardScaled(Backend& backend, float* dparams, const float* dout,
                                        TrainingTape& tape) const {
  const int64_t B = tape.batch, T = lookback(), F = num_features_, K = num_targets_,
                Q = num_quantiles_;
  const TrainingTape::WindowScaling& w = tape.window_scaling;
  if (w.xw == nullptr) return absl::FailedPreconditionError("Backward without ForwardTrain");
  DataOps& data = tape.data();
  const ParameterView p = tape.weights(parameters_);
  const bool affine = window_affine();
  const bool change = config_.window_scaling().forecast_change();
  const float eps = WindowScalingEps(config_);
  float* dgamma = nullptr;
  float* dbeta = nullptr;
  float* dlast = nullptr;  // (B, F): d(loss)/d(xw's last row) through forecast_change
  float* dxw = nullptr;
  float* du = nullptr;  // d(loss)/d(body input) of a model with record extras
  const bool records = HasRecordExtras(config_);
  if (affine) {
    dgamma = grad(dparams, "window_scaling.weight");
    dbeta = grad(dparams, "window_scaling.bias");
    RETURN_IF_ERROR(data.Zero(dgamma, F));
    RETURN_IF_ERROR(data.Zero(dbeta, F));
    ASSIGN_OR_RETURN(dxw, tape.Alloc(B * T * F));
    if (records) {
      ASSIGN_OR_RETURN(du, tape.Alloc(B * body_lookback_ * body_features_));
    }
    if (change) {
      ASSIGN_OR_RETURN(dlast, tape.Alloc(B * F));
      RETURN_IF_ERROR(data.Zero(dlast, B * F));
    }
  }
  ASSIGN_OR_RETURN(float* const dd, tape.Alloc(B * num_outputs()));
  for (int64_t k = 0; k < K; ++k) {
    const int f = target_features_[static_cast<size_t>(k)];
    RETURN_IF_ERROR(data.UnscaleTargetBackward(dd, affine ? dgamma + f : nullptr,
                                               affine ? dbeta + f : nullptr,
                                               dlast != nullptr ? dlast + f : nullptr, F, dout, w.v,
                                               w.scale != nullptr ? w.scale + f : nullptr, F,
                                               affine ? p.at("window_scaling.weight") + f : nullptr,
                                               eps * eps, B, horizon(), K * Q, k * Q, Q));
  }
  RETURN_IF_ERROR(BackwardBody(backend, dparams, records ? du : dxw, dd, tape));
  if (!affine) return absl::OkStatus();
  if (records) RETURN_IF_ERROR(BodyInputGradientToWindows(data, dxw, du, B));
  RETURN_IF_ERROR(data.ScaleWindowsBackward(dgamma, dbeta, dxw, w.z, B * T, F));
  if (dlast == nullptr) return absl::OkStatus();
  // The last rows of z, side by side, against dlast.
  ASSIGN_OR_RETURN(float* const z_last, tape.Alloc(B * F));
  RETURN_IF_ERROR(data.GatherRows(z_last, w.z + (T - 1) * F, B, T * F, F));
  return data.ScaleWindowsBackward(dgamma, dbeta, dlast, z_last, B, F);
}

}  // namespace forecastd
