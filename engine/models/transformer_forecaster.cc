#include "engine/models/transformer_forecaster.h"

#include <algorithm>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
std::string TransformerForecaster::Layer(int k, absl::string_view rest) {
  return absl::StrCat("encoder.layers.", k, ".", rest);
}

TransformerForecaster::TransformerForecaster(const ModelConfig& config)
    : Forecaster(config), tf_(config.transformer()), eps_(LayerNormEps(config.transformer())) {}

void TransformerForecaster::DeclareParameters(ParameterArena& arena) {
  const int64_t D = tf_.d_model(), FF = tf_.dim_feedforward();
  arena.Add("input_proj.weight", {D, body_features()});
  arena.Add("input_proj.bias", {D});
  for (int k = 0; k < tf_.num_layers(); ++k) {
    arena.Add(Layer(k, "self_attn.in_proj_weight"), {3 * D, D});
    arena.Add(Layer(k, "self_attn.in_proj_bias"), {3 * D});
    arena.Add(Layer(k, "self_attn.out_proj.weight"), {D, D});
    arena.Add(Layer(k, "self_attn.out_proj.bias"), {D});
    arena.Add(Layer(k, "linear1.weight"), {FF, D});
    arena.Add(Layer(k, "linear1.bias"), {FF});
    arena.Add(Layer(k, "linear2.weight"), {D, FF});
    arena.Add(Layer(k, "linear2.bias"), {D});
    arena.Add(Layer(k, "norm1.weight"), {D});
    arena.Add(Layer(k, "norm1.bias"), {D});
    arena.Add(Layer(k, "norm2.weight"), {D});
    arena.Add(Layer(k, "norm2.bias"), {D});
  }
  if (tf_.norm_first()) {
    arena.Add("encoder.norm.weight", {D});
    arena.Add("encoder.norm.bias", {D});
  }
  arena.Add("head.weight", {num_outputs(), D});
  arena.Add("head.bias", {num_outputs()});
}

int64_t TransformerForecaster::BodyWorkspaceFloats(int64_t B) const {
  const int64_t T = body_lookback(), D = tf_.d_model(), FF = tf_.dim_feedforward();
  const int64_t BT = B * T, pad = 16;
  // x, tmp, attn (B,T,D) + qkv (B,T,3D) + ff (B,T,FF) + six (B,D) rows: `last`, the last
  // layer's sa_last, q, att_last and sa, and pre-LN's final `normed`.
  return 3 * (BT * D + pad) + (BT * 3 * D + pad) + (BT * FF + pad) + 6 * (B * D + pad);
}

absl::Status TransformerForecaster::FinishLayer(Backend& backend, const ParameterView& p, int k,
                                                float* x, float* sa, float* tmp, float* ff,
                                                int64_t N) const {
  const int64_t D = tf_.d_model(), FF = tf_.dim_feedforward();
  const float* n1w = p.at(Layer(k, "norm1.weight"));
  const float* n1b = p.at(Layer(k, "norm1.bias"));
  const float* n2w = p.at(Layer(k, "norm2.weight"));
  const float* n2b = p.at(Layer(k, "norm2.bias"));
  // x = x + SA (pre-LN) or x = LN1(x + SA) (post-LN).
  if (tf_.norm_first()) {
    RETURN_IF_ERROR(backend.Residual(x, x, sa, N * D));
  } else {
    RETURN_IF_ERROR(backend.Residual(tmp, x, sa, N * D));
    RETURN_IF_ERROR(backend.LayerNorm(x, nullptr, nullptr, tmp, n1w, n1b, N, D, eps_));
  }
  // Feed-forward block, the same way round with LN2; its output lands in `sa`.
  const float* ff_in = x;
  if (tf_.norm_first()) {
    RETURN_IF_ERROR(backend.LayerNorm(tmp, nullptr, nullptr, x, n2w, n2b, N, D, eps_));
    ff_in = tmp;
  }
  RETURN_IF_ERROR(backend.Linear(ff, ff_in, p.at(Layer(k, "linear1.weight")),
                                 p.at(Layer(k, "linear1.bias")), N, D, FF));
  RETURN_IF_ERROR(Activate(backend, tf_.activation(), ff, ff, N * FF));
  RETURN_IF_ERROR(backend.Linear(sa, ff, p.at(Layer(k, "linear2.weight")),
                                 p.at(Layer(k, "linear2.bias")), N, FF, D));
  if (tf_.norm_first()) {
    RETURN_IF_ERROR(backend.Residual(x, x, sa, N * D));
  } else {
    RETURN_IF_ERROR(backend.Residual(tmp, x, sa, N * D));
    RETURN_IF_ERROR(backend.LayerNorm(x, nullptr, nullptr, tmp, n2w, n2b, N, D, eps_));
  }
  return absl::OkStatus();
}

absl::Status TransformerForecaster::ForwardStandardized(Backend& backend, const ParameterView& p,
                                                        DataOps& data, float* out, const float* xn,
                                                        int64_t B, Workspace& workspace) const {
  const int64_t T = body_lookback(), F = body_features(), D = tf_.d_model(), NH = tf_.num_heads();
  const int64_t BT = B * T, L = tf_.num_layers();
  float* x = workspace.Alloc(BT * D);     // the residual stream
  float* tmp = workspace.Alloc(BT * D);   // normalised input or pre-norm sum
  float* attn = workspace.Alloc(BT * D);  // attention output, then projected
  float* qkv = workspace.Alloc(BT * 3 * D);
  float* ff = workspace.Alloc(BT * tf_.dim_feedforward());

  RETURN_IF_ERROR(
      backend.Linear(x, xn, p.at("input_proj.weight"), p.at("input_proj.bias"), BT, F, D));
  RETURN_IF_ERROR(backend.PositionalEncoding(x, x, B, T, D));

  // Self-attention input: x (post-LN) or LN1(x) (pre-LN), over all positions.
  const auto attention_input = [&](int k) -> absl::StatusOr<const float*> {
    if (!tf_.norm_first()) return x;
    RETURN_IF_ERROR(backend.LayerNorm(tmp, nullptr, nullptr, x, p.at(Layer(k, "norm1.weight")),
                                      p.at(Layer(k, "norm1.bias")), BT, D, eps_));
    return tmp;
  };
  // Every layer but the last over all T positions.
  for (int k = 0; k + 1 < L; ++k) {
    ASSIGN_OR_RETURN(const float* sa_in, attention_input(k));
    const float* in_w = p.at(Layer(k, "self_attn.in_proj_weight"));
    const float* in_b = p.at(Layer(k, "self_attn.in_proj_bias"));
    RETURN_IF_ERROR(backend.Linear(qkv, sa_in, in_w, in_b, BT, D, 3 * D));
    RETURN_IF_ERROR(
        backend.Attention(attn, nullptr, qkv, /*dropout_mask=*/nullptr, B, T, D, NH, tf_.causal()));
    RETURN_IF_ERROR(backend.Linear(tmp, attn, p.at(Layer(k, "self_attn.out_proj.weight")),
                                   p.at(Layer(k, "self_attn.out_proj.bias")), BT, D, D));
    std::swap(tmp, attn);  // attn: projected attention; tmp: free
    RETURN_IF_ERROR(FinishLayer(backend, p, k, x, attn, tmp, ff, BT));
  }

  // The head reads position T-1 only, and in the last layer nothing else depends on the other
  // positions' outputs: they contribute keys and values, and everything after the attention
  // runs on the B last rows. Same result as the full layer, at about 1/3 of its work.
  float* last = workspace.Alloc(B * D);
  const auto gather_last = [&](float* dst, const float* src) {
    return data.GatherRows(dst, src + (T - 1) * D, B, T * D, D);
  };
  if (L > 0) {
    const int k = static_cast<int>(L - 1);
    ASSIGN_OR_RETURN(const float* sa_in, attention_input(k));
    const float* in_w = p.at(Layer(k, "self_attn.in_proj_weight"));
    const float* in_b = p.at(Layer(k, "self_attn.in_proj_bias"));
    float* kv = qkv;  // (B, T, 2D)
    RETURN_IF_ERROR(backend.Linear(kv, sa_in, in_w + D * D, in_b + D, BT, D, 2 * D));
    float* sa_last = workspace.Alloc(B * D);
    float* q = workspace.Alloc(B * D);
    float* att_last = workspace.Alloc(B * D);
    float* sa = workspace.Alloc(B * D);
    RETURN_IF_ERROR(gather_last(sa_last, sa_in));
    RETURN_IF_ERROR(backend.Linear(q, sa_last, in_w, in_b, B, D, D));
    RETURN_IF_ERROR(backend.AttentionLastQuery(att_last, q, kv, B, T, D, NH));
    RETURN_IF_ERROR(backend.Linear(sa, att_last, p.at(Layer(k, "self_attn.out_proj.weight")),
                                   p.at(Layer(k, "self_attn.out_proj.bias")), B, D, D));
    RETURN_IF_ERROR(gather_last(last, x));
    RETURN_IF_ERROR(FinishLayer(backend, p, k, last, sa, /*tmp=*/sa_last, ff, B));
  } else {
    RETURN_IF_ERROR(gather_last(last, x));
  }
  if (tf_.norm_first()) {
    float* normed = workspace.Alloc(B * D);
    RETURN_IF_ERROR(backend.LayerNorm(normed, nullptr, nullptr, last, p.at("encoder.norm.weight"),
                                      p.at("encoder.norm.bias"), B, D, eps_));
    last = normed;
  }
  return backend.Linear(out, last, p.at("head.weight"), p.at("head.bias"), B, D, num_outputs());
}

}  // namespace forecastd
