// Transformer encoder forecaster: Linear(F -> D) plus sinusoidal positional encoding, L
// layers with nn.TransformerEncoderLayer semantics (batch_first; post-LN by default, pre-LN
// with `norm_first`, which also adds the final `encoder.norm`), then a Linear head on the
// last position giving P * targets values. Parameter names follow PyTorch (see
// model_config.proto). Thread-safety as Forecaster.
#ifndef FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_

#include <string>

#include "absl/strings/string_view.h"
#include "engine/models/forecaster.h"

namespace forecastd {

class TransformerForecaster final : public Forecaster {
 public:
  explicit TransformerForecaster(const ModelConfig& config);

 private:
  void DeclareParameters(ParameterArena& arena) override;
  absl::Status ForwardStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                   float* out, const float* xn, int64_t B,
                                   Workspace& workspace) const override;
  int64_t BodyWorkspaceFloats(int64_t B) const override;

  // The name of encoder layer k's parameter `rest`, e.g. Layer(0, "linear1.weight").
  static std::string Layer(int k, absl::string_view rest);
  // The first parameter of backward block k, whose gradients (and everything after them in the
  // arena) are final once it is done: the head (with the final norm) for k = num_layers, else
  // encoder layer k.
  std::string GradientBlock(int k) const;
  std::vector<int64_t> GradientBlockStarts() const override;

  absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                TrainingTape& tape) const override;
  absl::Status BackwardBody(Backend& backend, float* dparams, float* dxn, const float* dout,
                            TrainingTape& tape) const override;

  // What one encoder layer's training forward keeps, and the whole step's tape; see
  // transformer_training.cc.
  struct LayerTape;
  struct Tape;
  absl::Status LayerForwardTrain(Backend& backend, int k, const LayerTape& lt, int64_t B,
                                 TrainingTape& tape) const;
  // dx0 (N, D) from dx2 (N, D); dx2 is clobbered.
  absl::Status LayerBackward(Backend& backend, int k, const LayerTape& lt, float* dx0, float* dx2,
                             float* dparams, int64_t B, TrainingTape& tape) const;

  // Encoder layer k (weights in `p`) after its self-attention, on N rows: x (N, D) holds the
  // layer's input rows and sa (N, D) their projected attention; x ends as the layer's output. tmp
  // (N, D) and ff (N, d_ff) are scratch; sa is overwritten.
  absl::Status FinishLayer(Backend& backend, const ParameterView& p, int k, float* x, float* sa,
                           float* tmp, float* ff, int64_t N) const;

  const v1::TransformerConfig tf_;
  const float eps_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_TRANSFORMER_FORECASTER_H_
