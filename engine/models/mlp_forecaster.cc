// The MLP forecaster's forward pass and its training pair.
//
// On B windows, x_0 (B, I) the body input xn (B, T, F) read as one row of I = T * F values per
// window (row-major, so no copy), H = hidden_size, L = num_layers, O = P * targets * Q:
//   h_k     = x_k W_k^T + b_k                     (B, H)   W_k (H, I or H), k = 0 .. L-1
//   x_{k+1} = act(h_k) * m_k                      (B, H)   m_k: dropout mask, training only
//   out     = x_L W_head^T + b_head               (B, O)
// Backward, from dout = d(loss)/d(out):
//   dW_head, db_head, dx_L   = LinearBackward(dout, x_L)
//   dh_k = act'(h_k) * (dx_{k+1} * m_k);   dW_k, db_k, dx_k = LinearBackward(dh_k, x_k)
// dx_0 is d(loss)/d(xn), computed only when asked for (window scaling's affine map).
#include "engine/models/mlp_forecaster.h"

#include <utility>

#include "kernels/base/status.h"

namespace forecastd {

struct MlpForecaster::Tape {
  const float* xn = nullptr;  // (B, I) the caller's standardised body input, x_0
  std::vector<float*> h;      // [L] (B, H) each hidden layer before its activation
  std::vector<float*> x;      // [L] (B, H) each hidden layer's output x_{k+1}
  std::vector<float*> mask;   // [L] (B, H) dropout masks, nullptr without dropout
  std::vector<float*> saved;  // [L] what LinearForTraining kept for layer k, or nullptr
};

MlpForecaster::MlpForecaster(const ModelConfig& config) : Forecaster(config), mlp_(config.mlp()) {}

int64_t MlpForecaster::LayerInputs(int k) const {
  if (k == 0) return int64_t{body_lookback()} * body_features();
  return mlp_.hidden_size();
}

void MlpForecaster::DeclareParameters(ParameterArena& arena) {
  const int64_t H = mlp_.hidden_size();
  for (int k = 0; k < num_layers(); ++k) {
    weight_.push_back(arena.Add(Weight(k), {H, LayerInputs(k)}));
    bias_.push_back(arena.Add(Bias(k), {H}));
  }
  weight_.push_back(arena.Add("head.weight", {num_outputs(), LayerInputs(num_layers())}));
  bias_.push_back(arena.Add("head.bias", {num_outputs()}));
}

int64_t MlpForecaster::BodyWorkspaceFloats(int64_t B) const {
  return num_layers() == 0 ? 0 : 2 * (B * mlp_.hidden_size() + 16);
}

absl::Status MlpForecaster::ForwardStandardized(Backend& backend, const ParameterView& p,
                                                DataOps& /*data*/, float* out, const float* xn,
                                                int64_t B, Workspace& workspace) const {
  const int64_t H = mlp_.hidden_size();
  const float* x = xn;
  float* buffers[2] = {nullptr, nullptr};
  if (num_layers() > 0) {
    buffers[0] = workspace.Alloc(B * H);
    buffers[1] = workspace.Alloc(B * H);
  }
  for (int k = 0; k < num_layers(); ++k) {
    float* h = buffers[k % 2];
    RETURN_IF_ERROR(
        backend.Linear(h, x, p.AtOffset(weight_[k]), p.AtOffset(bias_[k]), B, LayerInputs(k), H));
    RETURN_IF_ERROR(Activate(backend, mlp_.activation(), h, h, B * H));
    x = h;
  }
  const int L = num_layers();
  return backend.Linear(out, x, p.AtOffset(weight_[L]), p.AtOffset(bias_[L]), B, LayerInputs(L),
                        num_outputs());
}

absl::Status MlpForecaster::ForwardTrainBody(Backend& backend, float* out, const float* xn,
                                             int64_t B, TrainingTape& tape) const {
  const int64_t H = mlp_.hidden_size();
  const int L = num_layers();
  const ParameterView p = tape.weights(parameters());
  Tape& t = tape.EmplaceModelTape<Tape>();
  t.xn = xn;
  const float* x = xn;
  for (int k = 0; k < L; ++k) {
    const int64_t in = LayerInputs(k);
    ASSIGN_OR_RETURN(float* const h, tape.Alloc(B * H));
    ASSIGN_OR_RETURN(float* const y, tape.Alloc(B * H));
    float* saved = nullptr;
    if (const int64_t n = backend.LinearSavedFloats(B, in, H); n > 0) {
      ASSIGN_OR_RETURN(saved, tape.Alloc(n));
    }
    ASSIGN_OR_RETURN(float* const mask,
                     tape.DropoutMask(B * H, mlp_.dropout(), static_cast<uint64_t>(k)));
    RETURN_IF_ERROR(backend.LinearForTraining(h, saved, x, p.AtOffset(weight_[k]),
                                              p.AtOffset(bias_[k]), B, in, H));
    RETURN_IF_ERROR(Activate(backend, mlp_.activation(), y, h, B * H));
    RETURN_IF_ERROR(ApplyDropout(tape.data(), y, mask, B * H));
    t.h.push_back(h);
    t.x.push_back(y);
    t.mask.push_back(mask);
    t.saved.push_back(saved);
    x = y;
  }
  return backend.Linear(out, x, p.AtOffset(weight_[L]), p.AtOffset(bias_[L]), B, LayerInputs(L),
                        num_outputs());
}

// The arena holds the normaliser, the layers in order, then the head; the backward pass
// finishes them from the end.
std::vector<int64_t> MlpForecaster::GradientBlockStarts() const {
  std::vector<int64_t> starts;
  for (int k = num_layers(); k >= 0; --k) starts.push_back(weight_[k]);
  return starts;
}

absl::Status MlpForecaster::BackwardBody(Backend& backend, float* dparams, float* dxn,
                                         const float* dout, TrainingTape& tape) const {
  const Tape* const t = tape.model_tape<Tape>();
  if (t == nullptr) return absl::FailedPreconditionError("Backward without this model's tape");
  const int64_t B = tape.batch, H = mlp_.hidden_size();
  const int L = num_layers();
  const ParameterView p = tape.weights(parameters());
  const auto input = [&](int k) { return k == 0 ? t->xn : t->x[k - 1]; };
  // dx: the gradient reaching the head's or layer k's input; two buffers, in turn.
  float* dx[2] = {nullptr, nullptr};
  if (L > 0) {
    ASSIGN_OR_RETURN(dx[0], tape.Alloc(B * H));
    ASSIGN_OR_RETURN(dx[1], tape.Alloc(B * H));
  }
  float* d = L > 0 ? dx[0] : dxn;
  RETURN_IF_ERROR(backend.LinearBackward(d, dparams + weight_[L], dparams + bias_[L], dout,
                                         input(L), nullptr, p.AtOffset(weight_[L]), B,
                                         LayerInputs(L), num_outputs()));
  RETURN_IF_ERROR(GradientsFinalFrom(tape, "head.weight"));
  for (int k = L - 1; k >= 0; --k) {
    RETURN_IF_ERROR(ApplyDropout(tape.data(), d, t->mask[k], B * H));
    RETURN_IF_ERROR(ActivateBackward(backend, mlp_.activation(), d, d, t->h[k], B * H));
    float* const next = k == 0 ? dxn : (d == dx[0] ? dx[1] : dx[0]);
    RETURN_IF_ERROR(backend.LinearBackward(next, dparams + weight_[k], dparams + bias_[k], d,
                                           input(k), t->saved[k], p.AtOffset(weight_[k]), B,
                                           LayerInputs(k), H));
    RETURN_IF_ERROR(GradientsFinalFrom(tape, Weight(k)));
    d = next;
  }
  return absl::OkStatus();
}

}  // namespace forecastd
