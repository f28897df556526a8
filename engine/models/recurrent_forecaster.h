// LSTM and GRU forecasters: nn.LSTM / nn.GRU (batch_first) over the standardised window,
// then a Linear head on the last time step's output (both directions concatenated), giving
// P * targets values. Parameter names follow PyTorch: `rnn.weight_ih_l{k}[_reverse]`, ...,
// `head.weight`, `head.bias`. Thread-safety as Forecaster.
#ifndef FORECASTD_ENGINE_MODELS_RECURRENT_FORECASTER_H_
#define FORECASTD_ENGINE_MODELS_RECURRENT_FORECASTER_H_

#include <vector>

#include "engine/models/forecaster.h"

namespace forecastd {

class RecurrentForecaster final : public Forecaster {
 public:
  explicit RecurrentForecaster(const ModelConfig& config);

  int64_t StateFloats() const override;
  // Stateful training: unidirectional models only.
  absl::Status SupportsStatefulTraining() const override;
  int64_t ChunkStateFloats(int64_t B) const override;

 private:
  void DeclareParameters(ParameterArena& arena) override;
  absl::Status ForwardStandardized(Backend& backend, const ParameterView& p, DataOps& data,
                                   float* out, const float* xn, int64_t B,
                                   Workspace& workspace) const override;
  int64_t BodyWorkspaceFloats(int64_t B) const override;
  absl::Status StepStandardized(Backend& backend, const ParameterView& p, DataOps& data, float* out,
                                const float* xn, float* slab, const int32_t* slots, int64_t B,
                                Workspace& workspace) const override;
  int64_t StepBodyWorkspaceFloats(int64_t B) const override;
  bool StepOneCallFits(const Backend& backend, int64_t B) const override;
  absl::Status StepOneCall(Backend& backend, const ParameterView& p, float* out, const float* x,
                           float* slab, const int32_t* slots, int64_t B) const override;
  // The forecast around a one-call step; its pointers are `p`'s, none without it.
  RecurrentStepForecastSpec StepForecastSpec(const ParameterView* p) const;
  absl::Status ForwardTrainBody(Backend& backend, float* out, const float* xn, int64_t B,
                                TrainingTape& tape) const override;
  absl::Status BackwardBody(Backend& backend, float* dparams, float* dxn, const float* dout,
                            TrainingTape& tape) const override;

  absl::Status ForwardTrainChunkBody(Backend& backend, float* out, float* state_n, const float* xn,
                                     const float* state_0, int64_t B, int64_t K,
                                     TrainingTape& tape) const override;
  // What a chunk's training forward keeps for its backward, and that backward, which
  // BackwardBody runs when the tape holds a ChunkTape; see recurrent_stateful_training.cc.
  struct ChunkTape;
  static bool HoldsChunkTape(TrainingTape& tape);
  absl::Status BackwardChunk(Backend& backend, float* dparams, const float* dout,
                             TrainingTape& tape) const;

  // Layer l's weights in `p`, and where their gradients go in a dparams array.
  void LayerWeights(const ParameterView& p, int l, RecurrentDirectionWeights* weights) const;
  void LayerGrads(int l, float* dparams, RecurrentDirectionGrads* grads) const;
  // What a training forward keeps for its backward; see recurrent_training.cc.
  struct Tape;
  // Whether a training step on `backend` runs the layers as one stack
  // (RecurrentStackForTraining and RecurrentStackBackward): when no dropout acts between them
  // and the backend has that pair as a fast path (FastPath::kRecurrentStackBackward).
  bool StackedTraining(const Backend& backend, const TrainingTape& tape) const;
  // Every layer's weights, weights[l * ND + d], in `p`; and where their gradients go.
  std::vector<RecurrentDirectionWeights> StackWeights(const ParameterView& p) const;
  std::vector<RecurrentDirectionGrads> StackGrads(float* dparams) const;
  RecurrentCell cell() const { return is_lstm_ ? RecurrentCell::kLstm : RecurrentCell::kGru; }
  absl::Status RunLayer(Backend& backend, const ParameterView& p, int l, float* out,
                        const float* inp, int64_t B) const;

  const bool is_lstm_;
  const v1::RecurrentConfig rnn_;
  const int gates_;       // G: 4 for LSTM, 3 for GRU
  const int directions_;  // ND
  // Where the parameters lie in the arena (from DeclareParameters): layer l, direction d at
  // layer_offsets_[l * ND + d]; the normaliser's offsets are -1 without one.
  struct DirectionOffsets {
    int64_t w_ih, w_hh, b_ih, b_hh;
  };
  std::vector<DirectionOffsets> layer_offsets_;
  int64_t head_weight_offset_ = 0, head_bias_offset_ = 0;
  int64_t mean_offset_ = -1, std_offset_ = -1;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_RECURRENT_FORECASTER_H_
