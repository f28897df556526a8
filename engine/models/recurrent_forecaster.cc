#include "engine/models/recurrent_forecaster.h"

#include <string>

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
  arena.Add("head.weight", {int64_t{horizon()} * num_targets(), directions_ * H});
  arena.Add("head.bias", {int64_t{horizon()} * num_targets()});
}

int64_t RecurrentForecaster::BodyWorkspaceFloats(int64_t B) const {
  const int64_t T = lookback(), H = rnn_.hidden_size();
  // Two ping-pong layer outputs (B, T, ND*H) and the last step (B, ND*H), each padded.
  return 2 * (B * T * directions_ * H + 16) + (B * directions_ * H + 16);
}

absl::Status RecurrentForecaster::ForwardStandardized(Backend& backend, float* out, const float* xn,
                                                      int64_t B, Workspace& workspace) const {
  const int64_t T = lookback(), H = rnn_.hidden_size(), ND = directions_;
  const ParameterArena& p = parameters();
  float* layer_out[2] = {workspace.Alloc(B * T * ND * H), workspace.Alloc(B * T * ND * H)};
  const float* layer_in = xn;
  float* result = nullptr;
  for (int l = 0; l < rnn_.num_layers(); ++l) {
    RecurrentDirectionWeights weights[2];
    for (int d = 0; d < ND; ++d) {
      const std::string s = Suffix(l, d);
      weights[d] = {p.at("rnn.weight_ih" + s), p.at("rnn.weight_hh" + s), p.at("rnn.bias_ih" + s),
                    p.at("rnn.bias_hh" + s)};
    }
    const RecurrentDims dims{B, T, l == 0 ? int64_t{num_features()} : ND * H, H, ND};
    result = layer_out[l % 2];
    if (is_lstm_) {
      RETURN_IF_ERROR(
          backend.LstmLayer(result, nullptr, nullptr, layer_in, nullptr, nullptr, weights, dims));
    } else {
      RETURN_IF_ERROR(backend.GruLayer(result, nullptr, layer_in, nullptr, weights, dims));
    }
    layer_in = result;
  }
  // The head reads the last time step of the top layer, both directions side by side.
  float* last = workspace.Alloc(B * ND * H);
  for (int64_t b = 0; b < B; ++b) {
    const float* src = result + (b * T + (T - 1)) * ND * H;
    std::copy(src, src + ND * H, last + b * ND * H);
  }
  return backend.Linear(out, last, p.at("head.weight"), p.at("head.bias"), B, ND * H,
                        int64_t{horizon()} * num_targets());
}

}  // namespace forecastd
