// Reference per-window scaling (ModelConfig.window_scaling, RevIN): each window's statistics,
// the scaled window a model reads, the forecast mapped back, and the backward passes of the last
// two into the affine parameters (the statistics carry no gradient). The oracle for
// kernels/cuda/window_scaling and what HostDataOps runs. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_WINDOW_SCALING_H_
#define FORECASTD_KERNELS_REF_WINDOW_SCALING_H_

#include <cstdint>

namespace forecastd::ref {

enum class WindowStatistic {
  kMeanStd,    // center: the mean over t; scale: sqrt(population variance + eps)
  kLastValue,  // center: x[T - 1]; scale: 1
};

// center (B, F) and scale (B, F) of the windows x (B, T, F), per window and feature. kMeanStd
// sums in double: mean = sum_t x / T, var = sum_t (x - mean)^2 / T with the float mean, each
// rounded to float, scale = sqrt(var + eps) in float.
void WindowStats(float* center, float* scale, const float* x, int64_t B, int64_t T, int64_t F,
                 WindowStatistic statistic, float eps);

// z[b, t, f] = (x[b, t, f] - center[b, f]) / scale[b, f]; xw = z * gamma[f] + beta[f] with
// gamma (F) and beta (F), or xw = z when gamma is nullptr. z may be nullptr (not kept); xw may be
// x (in place).
//   xw, z, x (B, T, F); center, scale (B, F)
void ScaleWindows(float* xw, float* z, const float* x, const float* center, const float* scale,
                  const float* gamma, const float* beta, int64_t B, int64_t T, int64_t F);

// One target's forecasts mapped back to the units of x. Rows b < B of d and out are (J, C)
// blocks (row stride J * C); for j < J and c in [c0, c0 + W):
//   a = d[b, j, c] + (last ? last[b * last_stride] : 0)
//   v = gamma ? (a - beta[0]) / (gamma[0] + eps2) : a
//   out[b, j, c] = v * scale[b * stats_stride] + center[b * stats_stride]
// and v_out[b, j, c] = v when v_out is not nullptr. Other columns are left alone. center and
// scale point at the target's feature (stats_stride F), or are nullptr for 0 and 1 (no window
// statistics); last at its value in the scaled window's last row (last_stride T * F); gamma and
// beta at its affine parameters.
void UnscaleTarget(float* out, float* v_out, const float* d, const float* last, int64_t last_stride,
                   const float* center, const float* scale, int64_t stats_stride,
                   const float* gamma, const float* beta, float eps2, int64_t B, int64_t J,
                   int64_t C, int64_t c0, int64_t W);

// UnscaleTarget's backward, for the same arguments, given dout = d(loss)/d(out) and v its v_out:
//   da = dout[b, j, c] * scale[b * stats_stride] / (gamma ? gamma[0] + eps2 : 1)  (scale nullptr:
//   1) dd[b, j, c] = da (columns [c0, c0 + W) written, others left alone) with gamma: dgamma[0] -=
//   sum da * v, dbeta[0] -= sum da (added to what they hold) with dlast: dlast[b * last_stride] +=
//   sum over j, c of da[b, j, c]
// Sums in float.
void UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta, float* dlast,
                           int64_t last_stride, const float* dout, const float* v,
                           const float* scale, int64_t stats_stride, const float* gamma, float eps2,
                           int64_t B, int64_t J, int64_t C, int64_t c0, int64_t W);

// ScaleWindows' backward into its affine parameters: for each f,
// dgamma[f] += sum_r dxw[r, f] * z[r, f] and dbeta[f] += sum_r dxw[r, f], over r < R rows (B * T)
// in order, in float.
void ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw, const float* z, int64_t R,
                          int64_t F);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_WINDOW_SCALING_H_
