// The forward and training passes of models whose input record is more than the window: models
// with future-known features (ModelConfig.covariates.future and calendar features) or series
// (ModelConfig.series). With T, P, F, Fk, Fs, S as in forecaster.h and R = input_floats():
//
//   record b      = [x_b (T, F) | f_b (P, Fk) | s_b (1, with series)]
//   statistics    c_b, d_b (F) = normalizer.mean[s_b], normalizer.std[s_b] (with series; else
//                 the model's one row; 0 and 1 without a normaliser)
//   standardise   xn_b = (x_b - c_b) / d_b,  fn_b[p, k] = (f_b[p, k] - c_b[j_k]) / d_b[j_k]
//                 (j_k: the feature column of future-known feature k)
//   window scale  xw_b = window_scaling(xn_b) on every column but the future-known ones, which
//                 keep xn_b's values (they are known, not a level to follow)
//   body input    u_b (T' = T + P if Fk > 0 else T, W = F + Fs + (Fk > 0)):
//                   u_b[t < T]        = [xw_b[t] | static_b | 0]
//                   u_b[T + p]        = [0 except u[j_k] = fn_b[p, k] | static_b | 1]
//                 static_b = series.static[s_b] (Fs values, with static covariates)
//   body          a_b = body(u_b) (B, P * targets * Q)
//   forecast      window scaling mapped back (forecast.cc), then y * d_b[f_k] + c_b[f_k] per
//                 target k
//
// Training reads standardised records (the dataset standardises each series by its own
// statistics) and stops before the last line. The backward pass is window scaling's
// (BackwardScaled) with the body's input gradient du taken back to the window's columns:
// dxw[b, t, f] = du[b, t, f] for t < T, zero on the future-known columns. No other gradient
// leaves the body: the statistics, the future-known values and the static values are data.
#include <algorithm>

#include "engine/models/forecaster.h"
#include "kernels/base/status.h"

namespace forecastd {

namespace {

// One column of a (rows, width) matrix to the same column of another: n rows.
absl::Status CopyColumn(DataOps& data, float* out, int64_t out_width, const float* inp,
                        int64_t in_width, int64_t rows) {
  return data.BlockCopy(out, inp, 0.0f, ref::Block3{rows, 1, 1}, ref::Strides3{out_width, 0, 0},
                        ref::Strides3{in_width, 0, 0});
}

}  // namespace

int64_t Forecaster::RecordWorkspaceFloats(int64_t B) const {
  const int64_t pad = 16;
  const int64_t T = lookback(), F = num_features_, P = horizon(), Fk = num_future_features();
  const int64_t TF = B * T * F + pad, PF = B * P * Fk + pad, BF = B * F + pad;
  // Raw and standardised windows and future values, the scaled windows, the statistics of the
  // normaliser and of the windows, the future values' statistics, the static values, the body's
  // input, its output and the forecast before de-standardisation.
  return 3 * TF + 2 * PF + 4 * BF + 2 * (B * Fk + pad) + (B * num_static_ + pad) +
         (B * body_lookback_ * body_features_ + pad) + 2 * (B * num_outputs() + pad) +
         BodyWorkspaceFloats(B);
}

absl::Status Forecaster::RecordStatistics(DataOps& data, const ParameterView& p, float* center,
                                          float* scale, const float* idx, int64_t idx_stride,
                                          int64_t B) const {
  const int64_t F = num_features_;
  if (!standardized()) {
    RETURN_IF_ERROR(data.Zero(center, B * F));
    return data.BlockCopy(scale, nullptr, 1.0f, ref::Block3{B * F, 1, 1}, ref::Strides3{1, 0, 0},
                          ref::Strides3{});
  }
  const float* mean = p.at("normalizer.mean");
  const float* std = p.at("normalizer.std");
  if (num_series_ > 0) {
    RETURN_IF_ERROR(data.GatherSeries(center, mean, idx, idx_stride, B, F, num_series_));
    return data.GatherSeries(scale, std, idx, idx_stride, B, F, num_series_);
  }
  const ref::Block3 n{B, F, 1};
  const ref::Strides3 rows{F, 1, 0}, broadcast{0, 1, 0};
  RETURN_IF_ERROR(data.BlockCopy(center, mean, 0.0f, n, rows, broadcast));
  return data.BlockCopy(scale, std, 0.0f, n, rows, broadcast);
}

absl::Status Forecaster::AssembleBodyInput(DataOps& data, const ParameterView& p, float* u,
                                           float* statics, const float* xw, const float* fn,
                                           const float* idx, int64_t idx_stride, int64_t B) const {
  const int64_t T = lookback(), F = num_features_, P = horizon(), Fk = num_future_features();
  const int64_t Tb = body_lookback_, W = body_features_, Fs = num_static_;
  RETURN_IF_ERROR(data.Zero(u, B * Tb * W));
  RETURN_IF_ERROR(data.BlockCopy(u, xw, 0.0f, ref::Block3{B, T, F}, ref::Strides3{Tb * W, W, 1},
                                 ref::Strides3{T * F, F, 1}));
  if (Fs > 0) {
    RETURN_IF_ERROR(
        data.GatherSeries(statics, p.at("series.static"), idx, idx_stride, B, Fs, num_series_));
    RETURN_IF_ERROR(data.BlockCopy(u + F, statics, 0.0f, ref::Block3{B, Tb, Fs},
                                   ref::Strides3{Tb * W, W, 1}, ref::Strides3{Fs, 0, 1}));
  }
  if (Fk == 0) return absl::OkStatus();
  for (int64_t k = 0; k < Fk; ++k) {
    const int64_t j = future_features_[static_cast<size_t>(k)];
    RETURN_IF_ERROR(data.BlockCopy(u + T * W + j, fn + k, 0.0f, ref::Block3{B, P, 1},
                                   ref::Strides3{Tb * W, W, 0}, ref::Strides3{P * Fk, Fk, 0}));
  }
  return data.BlockCopy(u + T * W + (W - 1), nullptr, 1.0f, ref::Block3{B, P, 1},
                        ref::Strides3{Tb * W, W, 0}, ref::Strides3{});
}

absl::Status Forecaster::ForwardRecords(Backend& backend, const ParameterView& p, DataOps& data,
                                        float* out, const float* inp, int64_t B,
                                        Workspace& workspace) const {
  const int64_t T = lookback(), F = num_features_, P = horizon(), Fk = num_future_features(),
                K = num_targets_, Q = num_quantiles_, R = input_floats_;
  const float* idx = num_series_ > 0 ? inp + T * F + P * Fk : nullptr;
  float* center = workspace.Alloc(B * F);
  float* scale = workspace.Alloc(B * F);
  RETURN_IF_ERROR(RecordStatistics(data, p, center, scale, idx, R, B));
  // The raw window and future values side by side, then standardised.
  float* x = workspace.Alloc(B * T * F);
  RETURN_IF_ERROR(data.GatherRows(x, inp, B, R, T * F));
  float* xn = workspace.Alloc(B * T * F);
  RETURN_IF_ERROR(data.ScaleWindows(xn, nullptr, x, center, scale, nullptr, nullptr, B, T, F));
  float* fn = nullptr;
  if (Fk > 0) {
    float* f = workspace.Alloc(B * P * Fk);
    RETURN_IF_ERROR(data.GatherRows(f, inp + T * F, B, R, P * Fk));
    float* fc = workspace.Alloc(B * Fk);
    float* fs = workspace.Alloc(B * Fk);
    for (int64_t k = 0; k < Fk; ++k) {
      const int64_t j = future_features_[static_cast<size_t>(k)];
      RETURN_IF_ERROR(CopyColumn(data, fc + k, Fk, center + j, F, B));
      RETURN_IF_ERROR(CopyColumn(data, fs + k, Fk, scale + j, F, B));
    }
    fn = workspace.Alloc(B * P * Fk);
    RETURN_IF_ERROR(data.ScaleWindows(fn, nullptr, f, fc, fs, nullptr, nullptr, B, P, Fk));
  }
  const float* xw = xn;
  float* wc = nullptr;
  float* ws = nullptr;
  if (window_statistics()) {
    float* scaled = workspace.Alloc(B * T * F);
    wc = workspace.Alloc(B * F);
    ws = workspace.Alloc(B * F);
    RETURN_IF_ERROR(ScaleWindows(data, p, scaled, nullptr, wc, ws, xn, B));
    xw = scaled;
  }
  float* u = workspace.Alloc(B * body_lookback_ * body_features_);
  float* statics = workspace.Alloc(B * num_static_);
  RETURN_IF_ERROR(AssembleBodyInput(data, p, u, statics, xw, fn, idx, R, B));
  float* y = workspace.Alloc(B * P * K * Q);
  if (scales_windows()) {
    float* d = workspace.Alloc(B * P * K * Q);
    RETURN_IF_ERROR(ForwardStandardized(backend, p, data, d, u, B, workspace));
    RETURN_IF_ERROR(UnscaleForecasts(data, p, y, nullptr, d, xw, wc, ws, B));
  } else {
    RETURN_IF_ERROR(ForwardStandardized(backend, p, data, y, u, B, workspace));
  }
  // De-standardise each window by its own statistics.
  for (int64_t k = 0; k < K; ++k) {
    const int f = target_features_[static_cast<size_t>(k)];
    RETURN_IF_ERROR(data.UnscaleTarget(out, nullptr, y, nullptr, 0, center + f, scale + f, F,
                                       nullptr, nullptr, 0.0f, B, P, K * Q, k * Q, Q));
  }
  return absl::OkStatus();
}

absl::Status Forecaster::BodyInputGradientToWindows(DataOps& data, float* dxw, const float* du,
                                                    int64_t B) const {
  const int64_t T = lookback(), F = num_features_, W = body_features_;
  RETURN_IF_ERROR(data.BlockCopy(dxw, du, 0.0f, ref::Block3{B, T, F}, ref::Strides3{T * F, F, 1},
                                 ref::Strides3{body_lookback_ * W, W, 1}));
  for (const int j : future_features_) {
    RETURN_IF_ERROR(data.BlockCopy(dxw + j, nullptr, 0.0f, ref::Block3{B * T, 1, 1},
                                   ref::Strides3{F, 0, 0}, ref::Strides3{}));
  }
  return absl::OkStatus();
}

}  // namespace forecastd
