// The recurrent forecaster's training pair: a forward pass that keeps what its backward needs,
// and the backward pass through it.
//
// L layers of nn.LSTM / nn.GRU (batch_first, ND directions, zero initial states), nn.LSTM's
// `dropout` between layers in training, and a Linear head on the top layer's last time step:
//   x_0     = xn                           (B, T, F)
//   y_l     = layer_l(x_l)                 (B, T, ND*H)    l = 0 .. L-1
//   x_{l+1} = y_l * m_l                    (B, T, ND*H)    l < L-1; none after the top layer
//   last    = y_{L-1}[:, T-1, :]           (B, ND*H)       both directions side by side
//   out     = last @ head.weight^T + head.bias             (B, P*targets*Q)
// m_l is a mask from TrainingTape::DropoutMask (site l), or none (1) without dropout.
// Backward: dlast = dout @ head.weight (with the head's gradients); dy_{L-1} is zero but at step
// T-1, where it is dlast; layer l's backward takes dy_l and x_l to dx_l and its weight gradients
// (recomputing its forward from x_l), and dy_{l-1} = dx_l * m_{l-1}.
//
// The tape is kept one of two ways. Stacked (StackedTraining: no dropout, and a backend with
// FastPath::kRecurrentStackBackward): one RecurrentStackForTraining runs every layer and fills
// the tape's RecurrentSaved, which the one RecurrentStackBackward reads instead of recomputing.
// Layer by layer otherwise: each layer's input x_l is kept for its layer backward.
#include <cstdint>
#include <vector>

#include "engine/models/recurrent_forecaster.h"
#include "kernels/base/status.h"

namespace forecastd {

struct RecurrentForecaster::Tape {
  bool stacked = false;
  // x_l, layer l's input: layer_in[0] = xn (B, T, F), the caller's; then (B, T, ND*H), after
  // dropout. Stacked: xn alone.
  std::vector<const float*> layer_in;
  // m_l (B, T, ND*H) for l < L-1, each nullptr without dropout. Stacked: none.
  std::vector<const float*> masks;
  float* top = nullptr;  // (B, T, ND*H) y_{L-1}, the top layer's output
  // Stacked: what RecurrentStackForTraining saved (state: RecurrentSavedFloats floats of the
  // tape's memory; out = top).
  RecurrentSaved stack;
  float* last = nullptr;  // (B, ND*H) the head's input
};

bool RecurrentForecaster::StackedTraining(const Backend& backend, const TrainingTape& tape) const {
  const bool dropout =
      tape.dropout_seed.has_value() && rnn_.dropout() > 0.0f && rnn_.num_layers() > 1;
  return !dropout && backend.HasFastPath(FastPath::kRecurrentStackBackward);
}

absl::Status RecurrentForecaster::ForwardTrainBody(Backend& backend, float* out, const float* xn,
                                                   int64_t B, TrainingTape& tape) const {
  const int64_t T = body_lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int64_t S = B * T * ND * H;
  const int L = rnn_.num_layers();
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  Tape& t = tape.EmplaceModelTape<Tape>();
  t.stacked = StackedTraining(backend, tape);
  t.layer_in.push_back(xn);
  if (t.stacked) {
    const std::vector<RecurrentDirectionWeights> weights = StackWeights(p);
    const RecurrentDims dims{B, T, body_features(), H, ND};
    ASSIGN_OR_RETURN(t.top, tape.Alloc(S));
    float* scratch = nullptr;
    if (L > 1) {
      ASSIGN_OR_RETURN(scratch, tape.Alloc(S));
    }
    ASSIGN_OR_RETURN(t.stack.state_floats, backend.RecurrentSavedFloats(cell(), dims, L));
    if (t.stack.state_floats > 0) {
      ASSIGN_OR_RETURN(t.stack.state, tape.Alloc(t.stack.state_floats));
    }
    RETURN_IF_ERROR(backend.RecurrentStackForTraining(cell(), t.top, scratch, xn, weights.data(),
                                                      dims, L, &t.stack));
  } else {
    for (int l = 0; l < L; ++l) {
      ASSIGN_OR_RETURN(float* const y, tape.Alloc(S));
      RETURN_IF_ERROR(RunLayer(backend, p, l, y, t.layer_in.back(), B));
      if (l + 1 == L) {
        t.top = y;
        break;
      }
      // In place: the backward pass recomputes layer l from its input and never reads its
      // undropped output.
      ASSIGN_OR_RETURN(float* const mask,
                       tape.DropoutMask(S, rnn_.dropout(), static_cast<uint64_t>(l)));
      RETURN_IF_ERROR(ApplyDropout(data, y, mask, S));
      t.masks.push_back(mask);
      t.layer_in.push_back(y);
    }
  }
  ASSIGN_OR_RETURN(t.last, tape.Alloc(B * ND * H));
  RETURN_IF_ERROR(data.GatherRows(t.last, t.top + (T - 1) * ND * H, B, T * ND * H, ND * H));
  return backend.Linear(out, t.last, p.at("head.weight"), p.at("head.bias"), B, ND * H,
                        num_outputs());
}

absl::Status RecurrentForecaster::BackwardBody(Backend& backend, float* dparams, float* dxn,
                                               const float* dout, TrainingTape& tape) const {
  if (HoldsChunkTape(tape)) {
    if (dxn != nullptr) return absl::InvalidArgumentError("a chunk's backward gives no dxn");
    return BackwardChunk(backend, dparams, dout, tape);
  }
  Tape* const t = tape.model_tape<Tape>();
  if (t == nullptr) return absl::FailedPreconditionError("Backward without this model's tape");
  const int64_t B = tape.batch, T = body_lookback(), H = rnn_.hidden_size(), ND = directions_;
  const int64_t S = B * T * ND * H;
  const int L = rnn_.num_layers();
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  ASSIGN_OR_RETURN(float* const dlast, tape.Alloc(B * ND * H));
  RETURN_IF_ERROR(backend.LinearBackward(dlast, grad(dparams, "head.weight"),
                                         grad(dparams, "head.bias"), dout, t->last, nullptr,
                                         p.at("head.weight"), B, ND * H, num_outputs()));
  // Only the last time step of the top layer reaches the head.
  float* dlayer[2];
  for (float*& d : dlayer) {
    ASSIGN_OR_RETURN(d, tape.Alloc(S));
  }
  float* dtop = dlayer[0];
  RETURN_IF_ERROR(data.Zero(dtop, S));
  RETURN_IF_ERROR(data.ScatterRows(dtop + (T - 1) * ND * H, dlast, B, T * ND * H, ND * H));
  if (t->stacked) {
    const std::vector<RecurrentDirectionWeights> weights = StackWeights(p);
    const std::vector<RecurrentDirectionGrads> grads = StackGrads(dparams);
    ASSIGN_OR_RETURN(float* const scratch, tape.Alloc((L + 1) * S));
    return backend.RecurrentStackBackward(
        cell(), dxn, grads.data(), dtop, scratch, t->layer_in[0], weights.data(),
        RecurrentDims{B, T, body_features(), H, ND}, L, &t->stack);
  }
  for (int l = L - 1; l >= 0; --l) {
    const float* dl_out = dlayer[(L - 1 - l) % 2];
    float* dl_in = l > 0 ? dlayer[(L - l) % 2] : dxn;
    RecurrentDirectionWeights weights[2];
    RecurrentDirectionGrads grads[2];
    LayerWeights(p, l, weights);
    LayerGrads(l, dparams, grads);
    const RecurrentDims dims{B, T, l == 0 ? int64_t{body_features()} : ND * H, H, ND};
    const float* inp = t->layer_in[static_cast<size_t>(l)];
    if (is_lstm_) {
      RETURN_IF_ERROR(
          backend.LstmLayerBackward(dl_in, grads, dl_out, inp, nullptr, nullptr, weights, dims));
    } else {
      RETURN_IF_ERROR(backend.GruLayerBackward(dl_in, grads, dl_out, inp, nullptr, weights, dims));
    }
    // Layer l's input was layer l-1's output times its dropout mask.
    if (l > 0) {
      RETURN_IF_ERROR(ApplyDropout(data, dl_in, t->masks[static_cast<size_t>(l - 1)], S));
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
