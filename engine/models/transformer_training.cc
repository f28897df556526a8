// The transformer forecaster's training pair: a forward pass over every position of every
// layer that keeps its activations, and the backward pass through them. (Inference runs the
// last layer on the last position only; in training the cost of the full last layer is small
// next to the backward pass, and one uniform layer keeps the pair simple to check.)
//
// One encoder layer on N = B*T rows, in both layouts:
//   post-LN (PyTorch's default)        pre-LN (norm_first)
//   n1  = x0                           n1  = LN1(x0)
//   qkv = in_proj(n1); a = attention(qkv, m_att) (keeping att); sa = out_proj(a) * m_sa
//   r1  = x0 + sa                      r1  = x0 + sa
//   x1  = LN1(r1)                      x1  = r1
//   n2  = x1                           n2  = LN2(x1)
//   h   = linear1(n2); g = act(h) * m_ff; f = linear2(g) * m_f
//   r2  = x1 + f                       r2  = x1 + f
//   x2  = LN2(r2)                      x2  = r2
// The m_ are nn.TransformerEncoderLayer's dropouts in training (the attention weights'
// inside self_attn, dropout1, dropout, dropout2), each a mask from TrainingTape::DropoutMask
// or none (1) without dropout. forecastd_torch.py's module has no other dropout (none after
// the positional encoding). Backward: the gradient reaching a masked tensor is multiplied by
// its mask; the attention op takes its mask itself.
#include <cstdint>
#include <vector>

#include "engine/models/transformer_forecaster.h"
#include "kernels/base/status.h"

namespace forecastd {

struct TransformerForecaster::LayerTape {
  float* x0;   // (N, D) the layer's input
  float* n1;   // (N, D) attention input (x0 itself when post-LN)
  float* qkv;  // (N, 3D)
  float* att;  // Backend::AttentionSavedFloats: by default the weights (B, NH, T, T)
  float* a;    // (N, D) attention output, before out_proj
  float* r1;   // (N, D)
  float* x1;   // (N, D) (r1 itself when pre-LN)
  float* n2;   // (N, D) feed-forward input (x1 itself when post-LN)
  float* h;    // (N, FF) before the activation
  float* g;    // (N, FF) after it
  float* r2;   // (N, D)
  float* x2;   // (N, D) the layer's output (r2 itself when pre-LN)
  // Dropout masks, each nullptr without dropout.
  float* m_att;  // (B, NH, T, T) on the attention weights
  float* m_sa;   // (N, D) on out_proj's output
  float* m_ff;   // (N, FF) on the activation's output (g above is after it)
  float* m_f;    // (N, D) on linear2's output
  // What each Linear kept for its backward (Backend::LinearForTraining), or nullptr.
  float* s_in;   // in_proj
  float* s_out;  // out_proj
  float* s_ff1;  // linear1
  float* s_ff2;  // linear2
};

// The whole step's tape, in TrainingTape's model tape.
struct TransformerForecaster::Tape {
  const float* xn = nullptr;      // (B, T, F) the caller's standardised windows
  std::vector<LayerTape> layers;  // [L]
  float* last = nullptr;          // (B, D) the top layer's output at position T-1
  float* normed = nullptr;        // (B, D) the final norm's output (pre-LN), else nullptr
};

namespace {

// Dropout sites of encoder layer k are kSitesPerLayer * k + one of these.
enum DropoutSite : uint64_t {
  kAttentionWeights = 0,
  kAttentionOutput = 1,
  kFeedForwardHidden = 2,
  kFeedForwardOutput = 3,
  kSitesPerLayer = 4,
};

}  // namespace

absl::Status TransformerForecaster::LayerForwardTrain(Backend& backend, int k, const LayerTape& lt,
                                                      int64_t B, TrainingTape& tape) const {
  const int64_t T = body_lookback(), D = tf_.d_model(), NH = tf_.num_heads(),
                FF = tf_.dim_feedforward();
  const int64_t N = B * T;
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  const bool pre = tf_.norm_first();
  ASSIGN_OR_RETURN(float* const scratch, tape.Alloc(N * D));
  if (pre) {
    RETURN_IF_ERROR(backend.LayerNorm(lt.n1, nullptr, nullptr, lt.x0,
                                      p.at(Layer(k, "norm1.weight")), p.at(Layer(k, "norm1.bias")),
                                      N, D, eps_));
  }
  RETURN_IF_ERROR(backend.LinearForTraining(lt.qkv, lt.s_in, lt.n1,
                                            p.at(Layer(k, "self_attn.in_proj_weight")),
                                            p.at(Layer(k, "self_attn.in_proj_bias")), N, D, 3 * D));
  RETURN_IF_ERROR(backend.Attention(lt.a, lt.att, lt.qkv, lt.m_att, B, T, D, NH, tf_.causal()));
  RETURN_IF_ERROR(backend.LinearForTraining(scratch, lt.s_out, lt.a,
                                            p.at(Layer(k, "self_attn.out_proj.weight")),
                                            p.at(Layer(k, "self_attn.out_proj.bias")), N, D, D));
  RETURN_IF_ERROR(ApplyDropout(data, scratch, lt.m_sa, N * D));
  RETURN_IF_ERROR(backend.Residual(lt.r1, lt.x0, scratch, N * D));
  if (!pre) {
    RETURN_IF_ERROR(backend.LayerNorm(lt.x1, nullptr, nullptr, lt.r1,
                                      p.at(Layer(k, "norm1.weight")), p.at(Layer(k, "norm1.bias")),
                                      N, D, eps_));
  } else {
    RETURN_IF_ERROR(backend.LayerNorm(lt.n2, nullptr, nullptr, lt.x1,
                                      p.at(Layer(k, "norm2.weight")), p.at(Layer(k, "norm2.bias")),
                                      N, D, eps_));
  }
  RETURN_IF_ERROR(backend.LinearForTraining(lt.h, lt.s_ff1, lt.n2, p.at(Layer(k, "linear1.weight")),
                                            p.at(Layer(k, "linear1.bias")), N, D, FF));
  RETURN_IF_ERROR(Activate(backend, tf_.activation(), lt.g, lt.h, N * FF));
  RETURN_IF_ERROR(ApplyDropout(data, lt.g, lt.m_ff, N * FF));
  RETURN_IF_ERROR(backend.LinearForTraining(scratch, lt.s_ff2, lt.g,
                                            p.at(Layer(k, "linear2.weight")),
                                            p.at(Layer(k, "linear2.bias")), N, FF, D));
  RETURN_IF_ERROR(ApplyDropout(data, scratch, lt.m_f, N * D));
  RETURN_IF_ERROR(backend.Residual(lt.r2, lt.x1, scratch, N * D));
  if (!pre) {
    RETURN_IF_ERROR(backend.LayerNorm(lt.x2, nullptr, nullptr, lt.r2,
                                      p.at(Layer(k, "norm2.weight")), p.at(Layer(k, "norm2.bias")),
                                      N, D, eps_));
  }
  return absl::OkStatus();
}

absl::Status TransformerForecaster::ForwardTrainBody(Backend& backend, float* out, const float* xn,
                                                     int64_t B, TrainingTape& tape) const {
  const int64_t T = body_lookback(), F = body_features(), D = tf_.d_model(), NH = tf_.num_heads();
  const int64_t FF = tf_.dim_feedforward(), N = B * T, L = tf_.num_layers();
  const ParameterView p = tape.weights(parameters());
  const bool pre = tf_.norm_first();
  Tape& t = tape.EmplaceModelTape<Tape>();
  t.xn = xn;

  ASSIGN_OR_RETURN(float* x, tape.Alloc(N * D));
  RETURN_IF_ERROR(
      backend.Linear(x, xn, p.at("input_proj.weight"), p.at("input_proj.bias"), N, F, D));
  RETURN_IF_ERROR(backend.PositionalEncoding(x, x, B, T, D));
  // A fresh buffer, or `alias` where the layout (pre- or post-LN) reuses one.
  const auto own_or = [&tape](bool own, float* alias, int64_t n) -> absl::StatusOr<float*> {
    if (!own) return alias;
    return tape.Alloc(n);
  };
  // Room for what a Linear of IN -> OUT features over N rows keeps for its backward.
  const auto linear_saved = [&](int64_t IN, int64_t OUT) -> absl::StatusOr<float*> {
    const int64_t n = backend.LinearSavedFloats(N, IN, OUT);
    if (n == 0) return nullptr;
    return tape.Alloc(n);
  };
  for (int k = 0; k < L; ++k) {
    LayerTape lt;
    lt.x0 = x;
    ASSIGN_OR_RETURN(lt.n1, own_or(pre, x, N * D));
    ASSIGN_OR_RETURN(lt.qkv, tape.Alloc(N * 3 * D));
    ASSIGN_OR_RETURN(lt.a, tape.Alloc(N * D));
    ASSIGN_OR_RETURN(lt.r1, tape.Alloc(N * D));
    ASSIGN_OR_RETURN(lt.x1, own_or(!pre, lt.r1, N * D));
    ASSIGN_OR_RETURN(lt.n2, own_or(pre, lt.x1, N * D));
    ASSIGN_OR_RETURN(lt.h, tape.Alloc(N * FF));
    ASSIGN_OR_RETURN(lt.g, tape.Alloc(N * FF));
    ASSIGN_OR_RETURN(lt.r2, tape.Alloc(N * D));
    ASSIGN_OR_RETURN(lt.x2, own_or(!pre, lt.r2, N * D));
    const float p_drop = tf_.dropout();
    const uint64_t site = kSitesPerLayer * static_cast<uint64_t>(k);
    ASSIGN_OR_RETURN(lt.m_att, tape.DropoutMask(B * NH * T * T, p_drop, site + kAttentionWeights));
    ASSIGN_OR_RETURN(lt.att,
                     tape.Alloc(backend.AttentionSavedFloats(B, T, D, NH, lt.m_att != nullptr)));
    ASSIGN_OR_RETURN(lt.m_sa, tape.DropoutMask(N * D, p_drop, site + kAttentionOutput));
    ASSIGN_OR_RETURN(lt.m_ff, tape.DropoutMask(N * FF, p_drop, site + kFeedForwardHidden));
    ASSIGN_OR_RETURN(lt.m_f, tape.DropoutMask(N * D, p_drop, site + kFeedForwardOutput));
    ASSIGN_OR_RETURN(lt.s_in, linear_saved(D, 3 * D));
    ASSIGN_OR_RETURN(lt.s_out, linear_saved(D, D));
    ASSIGN_OR_RETURN(lt.s_ff1, linear_saved(D, FF));
    ASSIGN_OR_RETURN(lt.s_ff2, linear_saved(FF, D));
    RETURN_IF_ERROR(LayerForwardTrain(backend, k, lt, B, tape));
    t.layers.push_back(lt);
    x = lt.x2;
  }
  ASSIGN_OR_RETURN(t.last, tape.Alloc(B * D));
  RETURN_IF_ERROR(tape.data().GatherRows(t.last, x + (T - 1) * D, B, T * D, D));
  const float* head_in = t.last;
  if (pre) {
    ASSIGN_OR_RETURN(t.normed, tape.Alloc(B * D));
    RETURN_IF_ERROR(backend.LayerNorm(t.normed, nullptr, nullptr, t.last,
                                      p.at("encoder.norm.weight"), p.at("encoder.norm.bias"), B, D,
                                      eps_));
    head_in = t.normed;
  }
  return backend.Linear(out, head_in, p.at("head.weight"), p.at("head.bias"), B, D, num_outputs());
}

absl::Status TransformerForecaster::LayerBackward(Backend& backend, int k, const LayerTape& lt,
                                                  float* dx0, float* dx2, float* dparams, int64_t B,
                                                  TrainingTape& tape) const {
  const int64_t T = body_lookback(), D = tf_.d_model(), NH = tf_.num_heads(),
                FF = tf_.dim_feedforward();
  const int64_t N = B * T;
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  const bool pre = tf_.norm_first();
  const auto dp = [&](absl::string_view rest) { return grad(dparams, Layer(k, rest)); };
  ASSIGN_OR_RETURN(float* const dx1, tape.Alloc(N * D));
  ASSIGN_OR_RETURN(float* const dn, tape.Alloc(N * D));
  ASSIGN_OR_RETURN(float* const dg, tape.Alloc(N * FF));
  ASSIGN_OR_RETURN(float* const dqkv, tape.Alloc(N * 3 * D));
  // The gradient of a dropped branch output, its residual's gradient times the mask.
  float* dmasked = nullptr;
  if (lt.m_sa != nullptr || lt.m_f != nullptr) {
    ASSIGN_OR_RETURN(dmasked, tape.Alloc(N * D));
  }
  const auto masked = [&](const float* d, const float* mask) -> absl::StatusOr<const float*> {
    if (mask == nullptr) return d;
    RETURN_IF_ERROR(data.Multiply(dmasked, d, mask, N * D));
    return dmasked;
  };

  // Feed-forward block: dr2 -> (dx1 via the residual) + (dn2 via linear2, act, linear1).
  float* dr2 = dx2;
  if (!pre) {
    RETURN_IF_ERROR(backend.LayerNormBackward(dx1, dp("norm2.weight"), dp("norm2.bias"), dx2, lt.r2,
                                              p.at(Layer(k, "norm2.weight")), N, D, eps_));
    RETURN_IF_ERROR(data.Copy(dx2, dx1, N * D));
  }
  RETURN_IF_ERROR(data.Copy(dx1, dr2, N * D));
  ASSIGN_OR_RETURN(const float* const df, masked(dr2, lt.m_f));
  RETURN_IF_ERROR(backend.LinearBackward(dg, dp("linear2.weight"), dp("linear2.bias"), df, lt.g,
                                         lt.s_ff2, p.at(Layer(k, "linear2.weight")), N, FF, D));
  RETURN_IF_ERROR(ApplyDropout(data, dg, lt.m_ff, N * FF));
  RETURN_IF_ERROR(ActivateBackward(backend, tf_.activation(), dg, dg, lt.h, N * FF));
  RETURN_IF_ERROR(backend.LinearBackward(dn, dp("linear1.weight"), dp("linear1.bias"), dg, lt.n2,
                                         lt.s_ff1, p.at(Layer(k, "linear1.weight")), N, D, FF));
  if (pre) {
    // dn2 -> through LN2 onto x1; reuse dx2 (already copied into dx1) as scratch.
    RETURN_IF_ERROR(backend.LayerNormBackward(dx2, dp("norm2.weight"), dp("norm2.bias"), dn, lt.x1,
                                              p.at(Layer(k, "norm2.weight")), N, D, eps_));
    RETURN_IF_ERROR(backend.Residual(dx1, dx1, dx2, N * D));
  } else {
    RETURN_IF_ERROR(backend.Residual(dx1, dx1, dn, N * D));
  }

  // Attention block: dx1 -> dr1 -> (dx0 via the residual) + (dn1 via out_proj, attention,
  // in_proj).
  float* dr1 = dx1;
  if (!pre) {
    RETURN_IF_ERROR(backend.LayerNormBackward(dx2, dp("norm1.weight"), dp("norm1.bias"), dx1, lt.r1,
                                              p.at(Layer(k, "norm1.weight")), N, D, eps_));
    dr1 = dx2;
  }
  RETURN_IF_ERROR(data.Copy(dx0, dr1, N * D));
  ASSIGN_OR_RETURN(const float* const dsa, masked(dr1, lt.m_sa));
  RETURN_IF_ERROR(backend.LinearBackward(dn, dp("self_attn.out_proj.weight"),
                                         dp("self_attn.out_proj.bias"), dsa, lt.a, lt.s_out,
                                         p.at(Layer(k, "self_attn.out_proj.weight")), N, D, D));
  RETURN_IF_ERROR(
      backend.AttentionBackward(dqkv, dn, lt.qkv, lt.att, lt.m_att, B, T, D, NH, tf_.causal()));
  RETURN_IF_ERROR(backend.LinearBackward(dn, dp("self_attn.in_proj_weight"),
                                         dp("self_attn.in_proj_bias"), dqkv, lt.n1, lt.s_in,
                                         p.at(Layer(k, "self_attn.in_proj_weight")), N, D, 3 * D));
  if (pre) {
    RETURN_IF_ERROR(backend.LayerNormBackward(dx1, dp("norm1.weight"), dp("norm1.bias"), dn, lt.x0,
                                              p.at(Layer(k, "norm1.weight")), N, D, eps_));
    RETURN_IF_ERROR(backend.Residual(dx0, dx0, dx1, N * D));
  } else {
    RETURN_IF_ERROR(backend.Residual(dx0, dx0, dn, N * D));
  }
  return absl::OkStatus();
}

// The arena holds the normaliser, the input projection, the layers in order, then the final
// norm and the head; the backward pass finishes them from the end.
std::string TransformerForecaster::GradientBlock(int k) const {
  if (k < tf_.num_layers()) return Layer(k, "self_attn.in_proj_weight");
  return tf_.norm_first() ? "encoder.norm.weight" : "head.weight";
}

std::vector<int64_t> TransformerForecaster::GradientBlockStarts() const {
  std::vector<int64_t> starts;
  for (int k = tf_.num_layers(); k >= 0; --k) starts.push_back(Offset(GradientBlock(k)));
  return starts;
}

absl::Status TransformerForecaster::BackwardBody(Backend& backend, float* dparams, float* dxn,
                                                 const float* dout, TrainingTape& tape) const {
  const Tape* const t = tape.model_tape<Tape>();
  if (t == nullptr) return absl::FailedPreconditionError("Backward without this model's tape");
  const int64_t B = tape.batch, T = body_lookback(), F = body_features(), D = tf_.d_model();
  const int64_t N = B * T, L = tf_.num_layers();
  const ParameterView p = tape.weights(parameters());
  DataOps& data = tape.data();
  const bool pre = tf_.norm_first();
  const float* head_in = pre ? t->normed : t->last;

  ASSIGN_OR_RETURN(float* const dlast, tape.Alloc(B * D));
  RETURN_IF_ERROR(backend.LinearBackward(dlast, grad(dparams, "head.weight"),
                                         grad(dparams, "head.bias"), dout, head_in, nullptr,
                                         p.at("head.weight"), B, D, num_outputs()));
  if (pre) {
    ASSIGN_OR_RETURN(float* const dnormed, tape.Alloc(B * D));
    RETURN_IF_ERROR(data.Copy(dnormed, dlast, B * D));
    RETURN_IF_ERROR(backend.LayerNormBackward(dlast, grad(dparams, "encoder.norm.weight"),
                                              grad(dparams, "encoder.norm.bias"), dnormed, t->last,
                                              p.at("encoder.norm.weight"), B, D, eps_));
  }
  RETURN_IF_ERROR(GradientsFinalFrom(tape, GradientBlock(static_cast<int>(L))));
  // Only position T-1 of the top layer reaches the head.
  float* dx[2];
  for (float*& d : dx) {
    ASSIGN_OR_RETURN(d, tape.Alloc(N * D));
  }
  RETURN_IF_ERROR(data.Zero(dx[0], N * D));
  RETURN_IF_ERROR(data.ScatterRows(dx[0] + (T - 1) * D, dlast, B, T * D, D));
  int cur = 0;
  for (int k = static_cast<int>(L) - 1; k >= 0; --k) {
    RETURN_IF_ERROR(LayerBackward(backend, k, t->layers[static_cast<size_t>(k)], dx[1 - cur],
                                  dx[cur], dparams, B, tape));
    RETURN_IF_ERROR(GradientsFinalFrom(tape, GradientBlock(k)));
    cur = 1 - cur;
  }
  // The positional encoding passes the gradient through; the input projection's input needs
  // one only when asked (dxn).
  return backend.LinearBackward(dxn, grad(dparams, "input_proj.weight"),
                                grad(dparams, "input_proj.bias"), dx[cur], t->xn, nullptr,
                                p.at("input_proj.weight"), N, F, D);
}

}  // namespace forecastd
