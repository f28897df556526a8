// Small fixed models that the fuzz targets hold untrusted input against: the weights a
// safetensors file is loaded into, the windows a PredictRequest must fit. Their configs are
// those of two golden cases (tests/golden/lstm_uni_l1 and transformer_quantile), so the
// golden weights in the seed corpus load into them whole. Built once on first use and never
// modified afterwards, so any number of threads may share them.
#ifndef FORECASTD_TESTS_FUZZ_FUZZ_MODELS_H_
#define FORECASTD_TESTS_FUZZ_FUZZ_MODELS_H_

#include <cstdint>

#include "engine/models/forecaster.h"

namespace forecastd::fuzz {

// "lstm_uni_l1": 1-layer LSTM (hidden 5), lookback 7, features (load, temperature, price),
// horizon 4, targets (load, price); batching.max_batch_size 8.
const Forecaster& LstmModel();
// "transformer_quantile": 2-layer pre-LN transformer (d_model 8, 2 heads), lookback 7, the
// same features, horizon 4, targets (load, temperature), quantiles (0.1, 0.5, 0.9);
// batching.max_batch_size 1000000, so that the server's own limits are what bound a request.
const Forecaster& TransformerModel();

// "gru_covariates": 1-layer GRU (hidden 4), lookback 5, features (load, temperature, holiday),
// horizon 3, target load, the future-known covariate holiday, the calendar feature hour of day
// and the series (north, south); batching.max_batch_size 8.
const Forecaster& CovariateModel();

// The model's own bound on a request's windows: batching.max_batch_size, 0 meaning 32, as
// engine/serving's BatcherOptionsFromConfig reads it.
int64_t MaxBatchRows(const Forecaster& model);

}  // namespace forecastd::fuzz

#endif  // FORECASTD_TESTS_FUZZ_FUZZ_MODELS_H_
