#include "engine/models/transformer_forecaster.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

std::string Layer(int k, absl::string_view rest) {
  return absl::StrCat("encoder.layers.", k, ".", rest);
}

}  // namespace

TransformerForecaster::TransformerForecaster(const ModelConfig& config)
    : Forecaster(config), tf_(config.transformer()), eps_(LayerNormEps(config.transformer())) {}

void TransformerForecaster::DeclareParameters(ParameterArena& arena) const {
  const int64_t D = tf_.d_model(), FF = tf_.dim_feedforward();
  arena.Add("input_proj.weight", {D, num_features()});
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
  arena.Add("head.weight", {int64_t{horizon()} * num_targets(), D});
  arena.Add("head.bias", {int64_t{horizon()} * num_targets()});
}

int64_t TransformerForecaster::BodyWorkspaceFloats(int64_t B) const {
  const int64_t T = lookback(), D = tf_.d_model(), FF = tf_.dim_feedforward();
  const int64_t BT = B * T, pad = 16;
  // x, tmp, attn (B,T,D) + qkv (B,T,3D) + ff (B,T,FF) + last (B,D) + normed last (B,D)
  return 3 * (BT * D + pad) + (BT * 3 * D + pad) + (BT * FF + pad) + 2 * (B * D + pad);
}

absl::Status TransformerForecaster::Activation(Backend& backend, float* x, int64_t n) const {
  switch (tf_.activation()) {
    case v1::ACTIVATION_RELU:
      return backend.Relu(x, x, n);
    case v1::ACTIVATION_GELU_TANH:
      return backend.Gelu(x, x, n, GeluForm::kTanh);
    default:
      return backend.Gelu(x, x, n, GeluForm::kErf);
  }
}

absl::Status TransformerForecaster::ForwardStandardized(Backend& backend, float* out,
                                                        const float* xn, int64_t B,
                                                        Workspace& workspace) const {
  const int64_t T = lookback(), F = num_features(), D = tf_.d_model(), NH = tf_.num_heads();
  const int64_t FF = tf_.dim_feedforward(), BT = B * T;
  const ParameterArena& p = parameters();
  float* x = workspace.Alloc(BT * D);     // the residual stream
  float* tmp = workspace.Alloc(BT * D);   // normalised input or pre-norm sum
  float* attn = workspace.Alloc(BT * D);  // attention output, then projected
  float* qkv = workspace.Alloc(BT * 3 * D);
  float* ff = workspace.Alloc(BT * FF);

  RETURN_IF_ERROR(
      backend.Linear(x, xn, p.at("input_proj.weight"), p.at("input_proj.bias"), BT, F, D));
  RETURN_IF_ERROR(backend.PositionalEncoding(x, x, B, T, D));

  for (int k = 0; k < tf_.num_layers(); ++k) {
    const float* n1w = p.at(Layer(k, "norm1.weight"));
    const float* n1b = p.at(Layer(k, "norm1.bias"));
    const float* n2w = p.at(Layer(k, "norm2.weight"));
    const float* n2b = p.at(Layer(k, "norm2.bias"));
    // Self-attention block: x = x + SA(LN1(x)) (pre-LN) or x = LN1(x + SA(x)) (post-LN).
    const float* sa_in = x;
    if (tf_.norm_first()) {
      RETURN_IF_ERROR(backend.LayerNorm(tmp, nullptr, nullptr, x, n1w, n1b, BT, D, eps_));
      sa_in = tmp;
    }
    RETURN_IF_ERROR(backend.Linear(qkv, sa_in, p.at(Layer(k, "self_attn.in_proj_weight")),
                                   p.at(Layer(k, "self_attn.in_proj_bias")), BT, D, 3 * D));
    RETURN_IF_ERROR(backend.Attention(attn, nullptr, qkv, B, T, D, NH, tf_.causal()));
    RETURN_IF_ERROR(backend.Linear(tmp, attn, p.at(Layer(k, "self_attn.out_proj.weight")),
                                   p.at(Layer(k, "self_attn.out_proj.bias")), BT, D, D));
    if (tf_.norm_first()) {
      RETURN_IF_ERROR(backend.Residual(x, x, tmp, BT * D));
    } else {
      RETURN_IF_ERROR(backend.Residual(tmp, x, tmp, BT * D));
      RETURN_IF_ERROR(backend.LayerNorm(x, nullptr, nullptr, tmp, n1w, n1b, BT, D, eps_));
    }
    // Feed-forward block, the same way round with LN2.
    const float* ff_in = x;
    if (tf_.norm_first()) {
      RETURN_IF_ERROR(backend.LayerNorm(tmp, nullptr, nullptr, x, n2w, n2b, BT, D, eps_));
      ff_in = tmp;
    }
    RETURN_IF_ERROR(backend.Linear(ff, ff_in, p.at(Layer(k, "linear1.weight")),
                                   p.at(Layer(k, "linear1.bias")), BT, D, FF));
    RETURN_IF_ERROR(Activation(backend, ff, BT * FF));
    RETURN_IF_ERROR(backend.Linear(attn, ff, p.at(Layer(k, "linear2.weight")),
                                   p.at(Layer(k, "linear2.bias")), BT, FF, D));
    if (tf_.norm_first()) {
      RETURN_IF_ERROR(backend.Residual(x, x, attn, BT * D));
    } else {
      RETURN_IF_ERROR(backend.Residual(tmp, x, attn, BT * D));
      RETURN_IF_ERROR(backend.LayerNorm(x, nullptr, nullptr, tmp, n2w, n2b, BT, D, eps_));
    }
  }

  float* last = workspace.Alloc(B * D);
  for (int64_t b = 0; b < B; ++b) {
    const float* src = x + (b * T + (T - 1)) * D;
    std::copy(src, src + D, last + b * D);
  }
  if (tf_.norm_first()) {
    float* normed = workspace.Alloc(B * D);
    RETURN_IF_ERROR(backend.LayerNorm(normed, nullptr, nullptr, last, p.at("encoder.norm.weight"),
                                      p.at("encoder.norm.bias"), B, D, eps_));
    last = normed;
  }
  return backend.Linear(out, last, p.at("head.weight"), p.at("head.bias"), B, D,
                        int64_t{horizon()} * num_targets());
}

}  // namespace forecastd
