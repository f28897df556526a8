// The golden cases: the folders under tests/golden/ that make_golden.py writes, each a model
// (config.json, model.safetensors), its forecast (io.safetensors) and its training run
// (train.safetensors). golden_test and train_golden_test both run every one of them. The
// stateful training cases (lstm_tbptt, gru_tbptt) are tbptt_golden_test's alone.
#ifndef FORECASTD_TESTS_GOLDEN_GOLDEN_CASES_H_
#define FORECASTD_TESTS_GOLDEN_GOLDEN_CASES_H_

namespace forecastd {

inline constexpr const char* kGoldenCases[] = {
    "lstm_uni_l1",
    "lstm_uni_l2",
    "lstm_bi_l1",
    "lstm_bi_l2",
    "gru_uni_l1",
    "gru_bi_l2",
    "transformer_postln_gelu",
    "transformer_preln_relu",
    "transformer_postln_relu_causal",
    "transformer_preln_gelu_tanh",
    "lstm_quantile",
    "transformer_quantile",
    "lstm_window_scaling",
    "gru_last_value",
    "transformer_window_scaling",
    "lstm_covariates",
    "transformer_series",
    "gru_series",
    "mlp_relu",
    "mlp_linear_window_scaling",
    "mlp_covariates",
};

}  // namespace forecastd

#endif  // FORECASTD_TESTS_GOLDEN_GOLDEN_CASES_H_
