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

void RecurrentForecaster::DeclareParameters(ParameterArena& arena) const {
  const int64_t H = rnn_.hidden_size(), G = gates_;
  for (int l = 0; l < rnn_.num_layers(); ++l) {
    const int64_t I = l == 0 ? num_features() : directions_ * H;
    for (int d = 0; d < directions_; ++d) {
      const std::string s = Suffix(l, d);
      arena.Add("rnn.weight_ih" + s, {G * H, I});
      arena.Add("rnn.weight_hh" + s, {G * H, H});
      arena.Add("rnn.bias_ih" + s, {G * H});
      arena.Add("rnn.bias_hh" + s, {G * H});
    }
  }
  arena.Add("head.weight", {num_outputs(), directions_ * H});
  arena.Add("head.bias", {num_outputs()});
}

int64_t RecurrentForecaster::BodyWorkspaceFloats(int64_t B) const {
  const int64_t T = lookback(), H = rnn_.hidden_size();
  // Two ping-pong layer outputs (B, T, ND*H) and the last step (B, ND*H), each padded.
  return 2 * (B * T * directions_ * H + 16) + (B * directions_ * H + 16);
}

void RecurrentForecaster::LayerWeights(const ParameterView& p, int l,
                                       RecurrentDirectionWeights* weights) const {
  for (int d = 0; d < directions_; ++d) {
    const std::string s = Suffix(l, d);
    weights[d] = {p.at("rnn.weight_ih" + s), p.at("rnn.weight_hh" + s), p.at("rnn.bias_ih" + s),
                  p.at("rnn.bias_hh" + s)};
  }
}

void RecurrentForecaster::LayerGrads(int l, float* dparams, RecurrentDirectionGrads* grads) const {
  for (int d = 0; d < directions_; ++d) {
    const std::string s = Suffix(l, d);
    grads[d] = {grad(dparams, "rnn.weight_ih" + s), grad(dparams, "rnn.weight_hh" + s),
                grad(dparams, "rnn.bias_ih" + s), grad(dparams, "rnn.bias_hh" + s)};
  }
}

absl::Status RecurrentForecaster::RunLayer(Backend& backend, const ParameterView& p, int l,
                                           float* out, const float* inp, int64_t B) const {
  const int64_t H = rnn_.hidden_size(), ND = directions_;
  RecurrentDirectionWeights weights[2];
  LayerWeights(p, l, weights);
  const RecurrentDims dims{B, lookback(), l == 0 ? int64_t{num_features()} : ND * H, H, ND};
  if (is_lstm_) {
    return backend.LstmLayer(out, nullptr, nullptr, inp, nullptr, nullptr, weights, dims);
  }
  return backend.GruLayer(out, nullptr, inp, nullptr, weights, dims);
}

absl::Status RecurrentForecaster::ForwardStandardized(Backend& backend, const ParameterView& p,
                                                      DataOps& data, float* out, const float* xn,
                                                      int64_t B, Workspace& workspace) const {
  const int64_t T = lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int L = rnn_.num_layers();
  float* result = workspace.Alloc(B * T * ND * H);
  float* scratch = workspace.Alloc(B * T * ND * H);
  std::vector<RecurrentDirectionWeights> weights(static_cast<size_t>(L * ND));
  for (int l = 0; l < L; ++l) LayerWeights(p, l, weights.data() + l * ND);
  const RecurrentDims dims{B, T, num_features(), H, ND};
  const RecurrentCell cell = is_lstm_ ? RecurrentCell::kLstm : RecurrentCell::kGru;
  // The head reads the last time step of the top layer, both directions side by side.
  float* last = workspace.Alloc(B * ND * H);
  if (backend.SupportsOp(Op::kRecurrentStackLast)) {
    RETURN_IF_ERROR(backend.RecurrentStackLast(cell, last, result, xn, weights.data(), dims, L));
  } else {
    RETURN_IF_ERROR(backend.RecurrentStack(cell, result, scratch, xn, weights.data(), dims, L));
    RETURN_IF_ERROR(data.GatherRows(last, result + (T - 1) * ND * H, B, T * ND * H, ND * H));
  }
  return backend.Linear(out, last, p.at("head.weight"), p.at("head.bias"), B, ND * H,
                        num_outputs());
}

bool RecurrentForecaster::StackedTraining(const Backend& backend, const TrainingTape& tape) const {
  const bool dropout =
      tape.dropout_seed.has_value() && rnn_.dropout() > 0.0f && rnn_.num_layers() > 1;
  return !dropout && backend.SupportsOp(Op::kRecurrentStackBackward);
}

// Two tapes. Stacked (StackedTraining: no dropout, a backend with RecurrentStackBackward):
// saved[0] = xn, saved[1] the head's input, the last time step (B, ND*H); the backward
// recomputes the layers from xn. Layer by layer: saved[l] is layer l's input (saved[0] = xn;
// for l > 0 layer l-1's output after dropout), saved[L] the top layer's output, saved[L + 1]
// the head's input, and saved[L + 2 + l] for l < L-1 the dropout mask on layer l's output
// (B, T, ND*H) or nullptr. As nn.LSTM / nn.GRU, dropout (site l) acts on every layer's output
// but the top one's.
absl::Status RecurrentForecaster::ForwardTrainBody(Backend& backend, float* out, const float* xn,
                                                   int64_t B, TrainingTape& tape) const {
  const int64_t T = lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int L = rnn_.num_layers();
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  tape.saved.push_back(const_cast<float*>(xn));
  const float* top = nullptr;
  std::vector<float*> masks;
  if (StackedTraining(backend, tape)) {
    std::vector<RecurrentDirectionWeights> weights(static_cast<size_t>(L * ND));
    for (int l = 0; l < L; ++l) LayerWeights(p, l, weights.data() + l * ND);
    ASSIGN_OR_RETURN(float* const stack_out, tape.Alloc(B * T * ND * H));
    float* scratch = nullptr;
    if (L > 1) {
      ASSIGN_OR_RETURN(scratch, tape.Alloc(B * T * ND * H));
    }
    // stack_out and xn stay as they are until BackwardBody's RecurrentStackBackward, which
    // may then reuse this forward (RecurrentStackForTraining).
    RETURN_IF_ERROR(backend.RecurrentStackForTraining(
        is_lstm_ ? RecurrentCell::kLstm : RecurrentCell::kGru, stack_out, scratch, xn,
        weights.data(), RecurrentDims{B, T, num_features(), H, ND}, L));
    top = stack_out;
  } else {
    for (int l = 0; l < L; ++l) {
      ASSIGN_OR_RETURN(float* const layer_out, tape.Alloc(B * T * ND * H));
      RETURN_IF_ERROR(RunLayer(backend, p, l, layer_out, tape.saved.back(), B));
      if (l + 1 < L) {
        // In place: the backward pass recomputes layer l from its input and never reads its
        // undropped output.
        ASSIGN_OR_RETURN(float* const mask, tape.DropoutMask(B * T * ND * H, rnn_.dropout(),
                                                             static_cast<uint64_t>(l)));
        RETURN_IF_ERROR(ApplyDropout(data, layer_out, mask, B * T * ND * H));
        masks.push_back(mask);
      }
      tape.saved.push_back(layer_out);
    }
    top = tape.saved.back();
  }
  ASSIGN_OR_RETURN(float* const last, tape.Alloc(B * ND * H));
  RETURN_IF_ERROR(data.GatherRows(last, top + (T - 1) * ND * H, B, T * ND * H, ND * H));
  tape.saved.push_back(last);
  tape.saved.insert(tape.saved.end(), masks.begin(), masks.end());
  return backend.Linear(out, last, p.at("head.weight"), p.at("head.bias"), B, ND * H,
                        num_outputs());
}

absl::Status RecurrentForecaster::BackwardBody(Backend& backend, float* dparams, const float* dout,
                                               TrainingTape& tape) const {
  const int64_t B = tape.batch, T = lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int L = rnn_.num_layers();
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  const bool stacked = StackedTraining(backend, tape);
  const float* last = tape.saved[stacked ? 1 : static_cast<size_t>(L + 1)];
  ASSIGN_OR_RETURN(float* const dlast, tape.Alloc(B * ND * H));
  RETURN_IF_ERROR(backend.LinearBackward(dlast, grad(dparams, "head.weight"),
                                         grad(dparams, "head.bias"), dout, last, nullptr,
                                         p.at("head.weight"), B, ND * H, num_outputs()));
  // Only the last time step of the top layer reaches the head.
  float* dlayer[2];
  for (float*& d : dlayer) {
    ASSIGN_OR_RETURN(d, tape.Alloc(B * T * ND * H));
  }
  float* dtop = dlayer[0];
  RETURN_IF_ERROR(data.Zero(dtop, B * T * ND * H));
  RETURN_IF_ERROR(data.ScatterRows(dtop + (T - 1) * ND * H, dlast, B, T * ND * H, ND * H));
  if (stacked) {
    std::vector<RecurrentDirectionWeights> weights(static_cast<size_t>(L * ND));
    std::vector<RecurrentDirectionGrads> grads(static_cast<size_t>(L * ND));
    for (int l = 0; l < L; ++l) {
      LayerWeights(p, l, weights.data() + l * ND);
      LayerGrads(l, dparams, grads.data() + l * ND);
    }
    ASSIGN_OR_RETURN(float* const scratch, tape.Alloc((L + 1) * B * T * ND * H));
    return backend.RecurrentStackBackward(is_lstm_ ? RecurrentCell::kLstm : RecurrentCell::kGru,
                                          /*dinp=*/nullptr, grads.data(), dtop, scratch,
                                          tape.saved[0], weights.data(),
                                          RecurrentDims{B, T, num_features(), H, ND}, L);
  }
  for (int l = L - 1; l >= 0; --l) {
    const float* dl_out = dlayer[(L - 1 - l) % 2];
    float* dl_in = l > 0 ? dlayer[(L - l) % 2] : nullptr;
    RecurrentDirectionWeights weights[2];
    RecurrentDirectionGrads grads[2];
    LayerWeights(p, l, weights);
    LayerGrads(l, dparams, grads);
    const RecurrentDims dims{B, T, l == 0 ? int64_t{num_features()} : ND * H, H, ND};
    const float* inp = tape.saved[static_cast<size_t>(l)];
    if (is_lstm_) {
      RETURN_IF_ERROR(
          backend.LstmLayerBackward(dl_in, grads, dl_out, inp, nullptr, nullptr, weights, dims));
    } else {
      RETURN_IF_ERROR(backend.GruLayerBackward(dl_in, grads, dl_out, inp, nullptr, weights, dims));
    }
    // Layer l's input was layer l-1's output times its dropout mask.
    if (l > 0) {
      RETURN_IF_ERROR(ApplyDropout(data, dl_in, tape.saved[static_cast<size_t>(L + 2 + l - 1)],
                                   B * T * ND * H));
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
