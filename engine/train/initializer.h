// Fresh weights for a model about to be trained from scratch, with PyTorch's default
// initialisations so a model trained here starts where the same nn.Module would: nn.LSTM /
// nn.GRU U(-1/sqrt(H), 1/sqrt(H)) for every weight and bias; nn.Linear U(-1/sqrt(fan_in),
// 1/sqrt(fan_in)) for weight and bias; nn.MultiheadAttention's in_proj_weight Xavier-uniform
// and its biases 0; LayerNorm weight 1, bias 0; window scaling's affine map weight 1, bias 0
// (RevIN's). The normaliser is left alone. Draws come from
// engine/random.h, so one seed gives the same weights on every machine.
// Thread-compatible (writes the model's parameters).
#ifndef FORECASTD_ENGINE_TRAIN_INITIALIZER_H_
#define FORECASTD_ENGINE_TRAIN_INITIALIZER_H_

#include <cstdint>

#include "engine/models/forecaster.h"

namespace forecastd {

void InitializeParameters(Forecaster& model, uint64_t seed);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_INITIALIZER_H_
