// Multilayer perceptron forecaster: each window's body input flattened into one vector, L hidden
// layers Linear + activation, then a Linear head giving P * targets (* Q) values; no
// hidden layers is a linear model of the window. Parameter names follow PyTorch's
// (`layers.{k}.weight`, `head.weight`; see model_config.proto). Window mode only in streams
// (no recurrent state). Thread-safety as Forecaster.
#ifndef FORECASTD_ENGINE_MODELS_MLP_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_MLP_FORECASTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "engine/models/forecaster.h"

namespace forecastd {

class MlpForecaster final : public Forecaster {
 public:
  explicit MlpForecaster(const ModelConfig& config);

 private:
  void DeclareParameters(ParameterArena& arena) override;
  absl::Status ForwardStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                   float* out, const float* xn, int64_t B,
                                   Workspace& workspace) const override;
  int64_t BodyWorkspaceFloats(int64_t B) const override;
  absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                TrainingTape& tape) const override;
  absl::Status BackwardBody(Backend& backend, float* dparams, float* dxn, const float* dout,
                            TrainingTape& tape) const override;
  std::vector<int64_t> GradientBlockStarts() const override;

  // What the training forward keeps; see mlp_forecaster.cc.
  struct Tape;

  int num_layers() const { return mlp_.num_layers(); }
  // Inputs of layer k (k = num_layers(): the head's): T * F of the flattened window for k = 0,
  // else hidden_size.
  int64_t LayerInputs(int k) const;
  static std::string Weight(int k) { return "layers." + std::to_string(k) + ".weight"; }
  static std::string Bias(int k) { return "layers." + std::to_string(k) + ".bias"; }

  const v1::MlpConfig mlp_;
  // Layer k's weight and bias, then the head's, as arena offsets (DeclareParameters).
  std::vector<int64_t> weight_, bias_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_MLP_FORECASTER_H_
