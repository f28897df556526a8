// Transformer encoder forecaster: Linear(F -> D) plus sinusoidal positional encoding, L
// layers with nn.TransformerEncoderLayer semantics (batch_first; post-LN by default, pre-LN
// with `norm_first`, which also adds the final `encoder.norm`), then a Linear head on the
// last position giving P * targets values. Parameter names follow PyTorch (see
// model_config.proto). Thread-safety as Forecaster.
#ifndef FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_

#include "engine/models/forecaster.h"

namespace forecastd {

class TransformerForecaster final : public Forecaster {
 public:
  explicit TransformerForecaster(const ModelConfig& config);

 private:
  void DeclareParameters(ParameterArena& arena) const override;
  absl::Status ForwardStandardized(Backend& backend, float* out, const float* xn, int64_t B,
                                   Workspace& workspace) const override;
  int64_t BodyWorkspaceFloats(int64_t B) const override;

  absl::Status Activation(Backend& backend, float* x, int64_t n) const;
  // Encoder layer k after its self-attention, on N rows: x (N, D) holds the layer's input
  // rows and sa (N, D) their projected attention; x ends as the layer's output. tmp (N, D)
  // and ff (N, d_ff) are scratch; sa is overwritten.
  absl::Status FinishLayer(Backend& backend, int k, float* x, float* sa, float* tmp, float* ff,
                           int64_t N) const;

  const v1::TransformerConfig tf_;
  const float eps_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_
