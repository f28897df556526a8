#include "engine/models/recurrent_forecaster.h"

#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

std::string Suffix(int layer, int direction) {
  return absl::StrCat("_l", layer, direction == 1 ? "_reverse" : "");
}

}  // namespace

RecurrentForecaster::RecurrentForecaster(const ModelConfig& config)
    : Forecaster(config),
      is_lstm_(config.has_lstm()),
      rnn_(config.has_lstm() ? config.lstm() : config.gru()),
      gates_(config.has_lstm() ? 4 : 3),
      directions_(rnn_.bidirectional() ? 2 : 1) {}

void RecurrentForecaster::DeclareParameters(ParameterArena& arena) {
  const int64_t H = rnn_.hidden_size(), G = gates_;
  layer_offsets_.clear();
  for (int l = 0; l < rnn_.num_layers(); ++l) {
    const int64_t I = l == 0 ? body_features() : directions_ * H;
    for (int d = 0; d < directions_; ++d) {
      const std::string s = Suffix(l, d);
      DirectionOffsets& o = layer_offsets_.emplace_back();
      o.w_ih = arena.Add("rnn.weight_ih" + s, {G * H, I});
      o.w_hh = arena.Add("rnn.weight_hh" + s, {G * H, H});
      o.b_ih = arena.Add("rnn.bias_ih" + s, {G * H});
      o.b_hh = arena.Add("rnn.bias_hh" + s, {G * H});
    }
  }
  head_weight_offset_ = arena.Add("head.weight", {num_outputs(), directions_ * H});
  head_bias_offset_ = arena.Add("head.bias", {num_outputs()});
  if (standardized()) {
    mean_offset_ = (*arena.Find("normalizer.mean"))->offset;
    std_offset_ = (*arena.Find("normalizer.std"))->offset;
  }
}

int64_t RecurrentForecaster::BodyWorkspaceFloats(int64_t B) const {
  const int64_t T = body_lookback(), H = rnn_.hidden_size();
  // Two ping-pong layer outputs (B, T, ND*H) and the last step (B, ND*H), each padded.
  return 2 * (B * T * directions_ * H + 16) + (B * directions_ * H + 16);
}

void RecurrentForecaster::LayerWeights(const ParameterView& p, int l,
                                       RecurrentDirectionWeights* weights) const {
  for (int d = 0; d < directions_; ++d) {
    const DirectionOffsets& o = layer_offsets_[static_cast<size_t>(l * directions_ + d)];
    weights[d] = {p.AtOffset(o.w_ih), p.AtOffset(o.w_hh), p.AtOffset(o.b_ih), p.AtOffset(o.b_hh)};
  }
}

void RecurrentForecaster::LayerGrads(int l, float* dparams, RecurrentDirectionGrads* grads) const {
  for (int d = 0; d < directions_; ++d) {
    const DirectionOffsets& o = layer_offsets_[static_cast<size_t>(l * directions_ + d)];
    grads[d] = {dparams + o.w_ih, dparams + o.w_hh, dparams + o.b_ih, dparams + o.b_hh};
  }
}

std::vector<RecurrentDirectionWeights> RecurrentForecaster::StackWeights(
    const ParameterView& p) const {
  std::vector<RecurrentDirectionWeights> weights(
      static_cast<size_t>(rnn_.num_layers() * directions_));
  for (int l = 0; l < rnn_.num_layers(); ++l) LayerWeights(p, l, weights.data() + l * directions_);
  return weights;
}

std::vector<RecurrentDirectionGrads> RecurrentForecaster::StackGrads(float* dparams) const {
  std::vector<RecurrentDirectionGrads> grads(static_cast<size_t>(rnn_.num_layers() * directions_));
  for (int l = 0; l < rnn_.num_layers(); ++l)
    LayerGrads(l, dparams, grads.data() + l * directions_);
  return grads;
}

absl::Status RecurrentForecaster::RunLayer(Backend& backend, const ParameterView& p, int l,
                                           float* out, const float* inp, int64_t B) const {
  const int64_t H = rnn_.hidden_size(), ND = directions_;
  RecurrentDirectionWeights weights[2];
  LayerWeights(p, l, weights);
  const RecurrentDims dims{B, body_lookback(), l == 0 ? int64_t{body_features()} : ND * H, H, ND};
  if (is_lstm_) {
    return backend.LstmLayer(out, nullptr, nullptr, inp, nullptr, nullptr, weights, dims);
  }
  return backend.GruLayer(out, nullptr, inp, nullptr, weights, dims);
}

absl::Status RecurrentForecaster::ForwardStandardized(Backend& backend, const ParameterView& p,
                                                      DataOps& data, float* out, const float* xn,
                                                      int64_t B, Workspace& workspace) const {
  const int64_t T = body_lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int L = rnn_.num_layers();
  float* result = workspace.Alloc(B * T * ND * H);
  float* scratch = workspace.Alloc(B * T * ND * H);
  const std::vector<RecurrentDirectionWeights> weights = StackWeights(p);
  const RecurrentDims dims{B, T, body_features(), H, ND};
  // The head reads the last time step of the top layer, both directions side by side.
  float* last = workspace.Alloc(B * ND * H);
  if (backend.HasFastPath(FastPath::kRecurrentStackLast)) {
    RETURN_IF_ERROR(backend.RecurrentStackLast(cell(), last, result, xn, weights.data(), dims, L));
  } else {
    RETURN_IF_ERROR(backend.RecurrentStack(cell(), result, scratch, xn, weights.data(), dims, L));
    RETURN_IF_ERROR(data.GatherRows(last, result + (T - 1) * ND * H, B, T * ND * H, ND * H));
  }
  return backend.Linear(out, last, p.AtOffset(head_weight_offset_), p.AtOffset(head_bias_offset_),
                        B, ND * H, num_outputs());
}

// State mode. A stream's state is, layer after layer, h (H) and for an LSTM c (H):
//   slab[slot * S + l * SL, + H) = h_l,  slab[slot * S + l * SL + H, + H) = c_l,
// with SL = 2H (LSTM) or H (GRU) and S = L * SL. One step runs each layer for T = 1 from the
// gathered states: out_l = h_l' (B, H) feeds layer l + 1, and the head reads the top one. A
// backend with FastPath::kRecurrentStep runs all that as one call on the slab itself.
int64_t RecurrentForecaster::StateFloats() const {
  if (directions_ != 1 || !SupportsStateMode(config())) return 0;
  return int64_t{rnn_.num_layers()} * (is_lstm_ ? 2 : 1) * rnn_.hidden_size();
}

int64_t RecurrentForecaster::StepBodyWorkspaceFloats(int64_t B) const {
  const int64_t H = rnn_.hidden_size(), pad = 16;
  // h_0, c_0, c_n and two ping-pong outputs, each (B, H).
  return 5 * (B * H + pad);
}

RecurrentStepForecastSpec RecurrentForecaster::StepForecastSpec(const ParameterView* p) const {
  RecurrentStepForecastSpec spec;
  spec.outputs = num_outputs();
  spec.target_features = target_features();
  spec.quantiles = num_quantiles();
  if (p != nullptr) {
    spec.head_weight = p->AtOffset(head_weight_offset_);
    spec.head_bias = p->AtOffset(head_bias_offset_);
    if (standardized()) {
      spec.x_mean = spec.y_mean = p->AtOffset(mean_offset_);
      spec.x_std = spec.y_std = p->AtOffset(std_offset_);
    }
  }
  return spec;
}

bool RecurrentForecaster::StepOneCallFits(const Backend& backend, int64_t B) const {
  return backend.HasFastPath(FastPath::kRecurrentStepForecast) &&
         backend.RecurrentStepForecastFits({B, 1, body_features(), rnn_.hidden_size(), 1},
                                           rnn_.num_layers(), StepForecastSpec(nullptr));
}

absl::Status RecurrentForecaster::StepOneCall(Backend& backend, const ParameterView& p, float* out,
                                              const float* x, float* slab, const int32_t* slots,
                                              int64_t B) const {
  const std::vector<RecurrentDirectionWeights> weights = StackWeights(p);
  return backend.RecurrentStepForecast(cell(), out, slab, slots, x, weights.data(),
                                       {B, 1, body_features(), rnn_.hidden_size(), 1},
                                       rnn_.num_layers(), StepForecastSpec(&p));
}

absl::Status RecurrentForecaster::StepStandardized(Backend& backend, const ParameterView& p,
                                                   DataOps& data, float* out, const float* xn,
                                                   float* slab, const int32_t* slots, int64_t B,
                                                   Workspace& workspace) const {
  const int64_t H = rnn_.hidden_size(), S = StateFloats(), SL = (is_lstm_ ? 2 : 1) * H;
  const int L = rnn_.num_layers();
  float* outputs[2] = {workspace.Alloc(B * H), workspace.Alloc(B * H)};
  if (backend.HasFastPath(FastPath::kRecurrentStep)) {
    // The backend reads and writes the states in the slab itself (one fused kernel per layer
    // on the GPU); the top layer's h' lands in outputs[0].
    const std::vector<RecurrentDirectionWeights> weights = StackWeights(p);
    RETURN_IF_ERROR(backend.RecurrentStep(cell(), outputs[0], outputs[1], slab, slots, xn,
                                          weights.data(), {B, 1, body_features(), H, 1}, L));
    return backend.Linear(out, outputs[0], p.AtOffset(head_weight_offset_),
                          p.AtOffset(head_bias_offset_), B, H, num_outputs());
  }
  float* h_0 = workspace.Alloc(B * H);
  float* c_0 = is_lstm_ ? workspace.Alloc(B * H) : nullptr;
  float* c_n = is_lstm_ ? workspace.Alloc(B * H) : nullptr;
  const float* inp = xn;
  for (int l = 0; l < L; ++l) {
    float* h = slab + l * SL;
    float* layer_out = outputs[l % 2];
    RecurrentDirectionWeights weights[1];
    LayerWeights(p, l, weights);
    const RecurrentDims dims{B, 1, l == 0 ? int64_t{body_features()} : H, H, 1};
    RETURN_IF_ERROR(data.GatherSlots(h_0, h, slots, B, S, H));
    if (is_lstm_) {
      RETURN_IF_ERROR(data.GatherSlots(c_0, h + H, slots, B, S, H));
      RETURN_IF_ERROR(backend.LstmLayer(layer_out, nullptr, c_n, inp, h_0, c_0, weights, dims));
      RETURN_IF_ERROR(data.ScatterSlots(h + H, c_n, slots, B, S, H));
    } else {
      RETURN_IF_ERROR(backend.GruLayer(layer_out, nullptr, inp, h_0, weights, dims));
    }
    // For one time step the layer's output is its final h.
    RETURN_IF_ERROR(data.ScatterSlots(h, layer_out, slots, B, S, H));
    inp = layer_out;
  }
  return backend.Linear(out, inp, p.AtOffset(head_weight_offset_), p.AtOffset(head_bias_offset_), B,
                        H, num_outputs());
}

}  // namespace forecastd
