// The recurrent forecaster's stateful training pair (truncated back-propagation through time,
// TrainingConfig.stateful): the forward pass over one chunk of K time steps of B streams,
// started from the states the previous chunk ended with, and the backward pass through the
// chunk alone.
//
// L unidirectional layers of nn.LSTM / nn.GRU (batch_first), each with its carried state, and
// the Linear head on the top layer's output at every step:
//   x_0       = xn                                  (B, K, F)   the chunk's standardised rows
//   y_l, s_l' = layer_l(x_l, s_l)                   (B, K, H)   l = 0 .. L-1
//   x_{l+1}   = y_l * m_l                           (B, K, H)   l < L-1
//   out       = y_{L-1} @ head.weight^T + head.bias (B*K, P*targets*Q), one row per step
// s_l is layer l's state at the chunk's start, (h, c) for an LSTM and h for a GRU, each
// (B, H), and s_l' its state after step K-1. The caller passes the s_l' of one chunk as the
// s_l of the next and zeros at the start of a stream: out is then, row by row, what the model
// run over the whole stream from zero states gives, i.e. what a tick stream in state mode
// forecasts after each tick. m_l is nn.LSTM's dropout between layers in training
// (TrainingTape::DropoutMask, site l), or none (1).
// The trainer scores every row: the row of step t forecasts the P rows after t, and the loss
// is the mean over the chunk's rows and outputs (TrainingLoss over B*K windows).
// Backward (truncated): the states are inputs that are not trained, so nothing flows into s_l
// and the chunk's loss does not reach earlier chunks; nothing flows back from s_l' either
// (later chunks' losses do not reach this one). With dout = d(loss)/d(out):
//   dy_{L-1}  = dout @ head.weight                  (B*K, H), with the head's gradients
//   dx_l, dW_l = layer_l backward (dy_l; x_l, s_l)  recomputing the layer from x_l and s_l
//   dy_{l-1}  = dx_l * m_{l-1}
// which are LstmLayerBackward / GruLayerBackward with h_0 (and c_0) = s_l.
#include <cstdint>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/recurrent_forecaster.h"
#include "kernels/base/status.h"

namespace forecastd {

struct RecurrentForecaster::ChunkTape {
  int64_t K = 0;  // time steps of the chunk
  // x_l, layer l's input: layer_in[0] = xn (B, K, F), the caller's; then (B, K, H), after
  // dropout. [L]
  std::vector<const float*> layer_in;
  // m_l (B, K, H) for l < L-1, each nullptr without dropout. [L-1]
  std::vector<const float*> masks;
  // The caller's state_0: h of every layer (L, B, H), then, for an LSTM, c (L, B, H). The
  // layer backwards recompute from it.
  const float* state_0 = nullptr;
  float* top = nullptr;  // (B, K, H) y_{L-1}, the head's input, one row per step
};

absl::Status RecurrentForecaster::SupportsStatefulTraining() const {
  if (directions_ != 1) {
    return absl::InvalidArgumentError(
        "stateful training (training.stateful.chunk_length > 0) needs a unidirectional LSTM or "
        "GRU: a bidirectional layer reads each window backwards from its end, which a stream "
        "that grows one tick at a time does not have; train it on windows (chunk_length 0)");
  }
  if (HasRecordExtras(config())) {
    return absl::InvalidArgumentError(
        "stateful training (training.stateful.chunk_length > 0) carries a state from tick to "
        "tick, and a model with future-known covariates, calendar features or series reads "
        "more than one row per forecast: train it on windows (chunk_length 0)");
  }
  if (HasWindowScaling(config())) {
    return absl::InvalidArgumentError(
        "stateful training (training.stateful.chunk_length > 0) carries a state from tick to "
        "tick, and window_scaling scales each whole window by its own statistics: train a "
        "model with window_scaling on windows (chunk_length 0)");
  }
  return absl::OkStatus();
}

int64_t RecurrentForecaster::ChunkStateFloats(int64_t B) const {
  if (!SupportsStatefulTraining().ok()) return 0;
  const int64_t per_kind = int64_t{rnn_.num_layers()} * B * rnn_.hidden_size();
  return is_lstm_ ? 2 * per_kind : per_kind;
}

bool RecurrentForecaster::HoldsChunkTape(TrainingTape& tape) {
  return tape.model_tape<ChunkTape>() != nullptr;
}

absl::Status RecurrentForecaster::ForwardTrainChunkBody(Backend& backend, float* out,
                                                        float* state_n, const float* xn,
                                                        const float* state_0, int64_t B, int64_t K,
                                                        TrainingTape& tape) const {
  const int64_t H = rnn_.hidden_size(), S = B * K * H, BH = B * H;
  const int L = rnn_.num_layers();
  // c follows every layer's h in a state.
  const int64_t c_offset = L * BH;
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  ChunkTape& t = tape.EmplaceModelTape<ChunkTape>();
  t.K = K;
  t.state_0 = state_0;
  t.layer_in.push_back(xn);
  for (int l = 0; l < L; ++l) {
    RecurrentDirectionWeights weights[1];
    LayerWeights(p, l, weights);
    const RecurrentDims dims{B, K, l == 0 ? int64_t{num_features()} : H, H, 1};
    ASSIGN_OR_RETURN(float* const y, tape.Alloc(S));
    const float* h_0 = state_0 + l * BH;
    float* h_n = state_n + l * BH;
    if (is_lstm_) {
      RETURN_IF_ERROR(backend.LstmLayer(y, h_n, h_n + c_offset, t.layer_in.back(), h_0,
                                        h_0 + c_offset, weights, dims));
    } else {
      RETURN_IF_ERROR(backend.GruLayer(y, h_n, t.layer_in.back(), h_0, weights, dims));
    }
    if (l + 1 == L) {
      t.top = y;
      break;
    }
    // In place, as in window training: the backward recomputes layer l from its input.
    ASSIGN_OR_RETURN(float* const mask,
                     tape.DropoutMask(S, rnn_.dropout(), static_cast<uint64_t>(l)));
    RETURN_IF_ERROR(ApplyDropout(data, y, mask, S));
    t.masks.push_back(mask);
    t.layer_in.push_back(y);
  }
  return backend.Linear(out, t.top, p.at("head.weight"), p.at("head.bias"), B * K, H,
                        num_outputs());
}

absl::Status RecurrentForecaster::BackwardChunk(Backend& backend, float* dparams, const float* dout,
                                                TrainingTape& tape) const {
  ChunkTape* const t = tape.model_tape<ChunkTape>();
  if (t == nullptr) return absl::FailedPreconditionError("BackwardChunk without a chunk's tape");
  const int64_t B = tape.batch, K = t->K, H = rnn_.hidden_size(), S = B * K * H, BH = B * H;
  const int L = rnn_.num_layers();
  const int64_t c_offset = L * BH;
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  float* dlayer[2];
  for (float*& d : dlayer) {
    ASSIGN_OR_RETURN(d, tape.Alloc(S));
  }
  // Every step's row reaches the head.
  RETURN_IF_ERROR(backend.LinearBackward(dlayer[0], grad(dparams, "head.weight"),
                                         grad(dparams, "head.bias"), dout, t->top, nullptr,
                                         p.at("head.weight"), B * K, H, num_outputs()));
  for (int l = L - 1; l >= 0; --l) {
    const float* dl_out = dlayer[(L - 1 - l) % 2];
    float* dl_in = l > 0 ? dlayer[(L - l) % 2] : nullptr;
    RecurrentDirectionWeights weights[1];
    RecurrentDirectionGrads grads[1];
    LayerWeights(p, l, weights);
    LayerGrads(l, dparams, grads);
    const RecurrentDims dims{B, K, l == 0 ? int64_t{num_features()} : H, H, 1};
    const float* inp = t->layer_in[static_cast<size_t>(l)];
    const float* h_0 = t->state_0 + l * BH;
    if (is_lstm_) {
      RETURN_IF_ERROR(
          backend.LstmLayerBackward(dl_in, grads, dl_out, inp, h_0, h_0 + c_offset, weights, dims));
    } else {
      RETURN_IF_ERROR(backend.GruLayerBackward(dl_in, grads, dl_out, inp, h_0, weights, dims));
    }
    // Layer l's input was layer l-1's output times its dropout mask.
    if (l > 0) {
      RETURN_IF_ERROR(ApplyDropout(data, dl_in, t->masks[static_cast<size_t>(l - 1)], S));
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
