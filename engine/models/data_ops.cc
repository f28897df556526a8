#include "engine/models/data_ops.h"

#include <algorithm>

#include "engine/random.h"

namespace forecastd {

namespace {

class HostLoopDataOps final : public DataOps {
 public:
  absl::Status Standardize(float* out, const float* inp, const float* mean, const float* std,
                           int64_t R, int64_t F) override {
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t f = 0; f < F; ++f) out[i * F + f] = (inp[i * F + f] - mean[f]) / std[f];
    }
    return absl::OkStatus();
  }
  absl::Status Destandardize(float* out, const float* y, const float* mean, const float* std,
                             int64_t R, int64_t C, int64_t c0, int64_t W) override {
    for (int64_t i = 0; i < R; ++i) {
      for (int64_t c = c0; c < c0 + W; ++c) out[i * C + c] = y[i * C + c] * std[0] + mean[0];
    }
    return absl::OkStatus();
  }
  absl::Status GatherRows(float* out, const float* inp, int64_t R, int64_t stride,
                          int64_t W) override {
    for (int64_t r = 0; r < R; ++r) std::copy(inp + r * stride, inp + r * stride + W, out + r * W);
    return absl::OkStatus();
  }
  absl::Status ScatterRows(float* out, const float* inp, int64_t R, int64_t stride,
                           int64_t W) override {
    for (int64_t r = 0; r < R; ++r) std::copy(inp + r * W, inp + (r + 1) * W, out + r * stride);
    return absl::OkStatus();
  }
  absl::Status GatherSlots(float* out, const float* slab, const int32_t* slots, int64_t R,
                           int64_t stride, int64_t W) override {
    for (int64_t r = 0; r < R; ++r) {
      const float* row = slab + int64_t{slots[r]} * stride;
      std::copy(row, row + W, out + r * W);
    }
    return absl::OkStatus();
  }
  absl::Status ScatterSlots(float* slab, const float* inp, const int32_t* slots, int64_t R,
                            int64_t stride, int64_t W) override {
    for (int64_t r = 0; r < R; ++r) {
      std::copy(inp + r * W, inp + (r + 1) * W, slab + int64_t{slots[r]} * stride);
    }
    return absl::OkStatus();
  }
  absl::Status Copy(float* out, const float* inp, int64_t n) override {
    std::copy(inp, inp + n, out);
    return absl::OkStatus();
  }
  absl::Status Zero(float* out, int64_t n) override {
    std::fill_n(out, n, 0.0f);
    return absl::OkStatus();
  }
  absl::Status Multiply(float* out, const float* inp, const float* mask, int64_t n) override {
    for (int64_t i = 0; i < n; ++i) out[i] = inp[i] * mask[i];
    return absl::OkStatus();
  }
  absl::Status BlockCopy(float* out, const float* inp, float fill, const ref::Block3& n,
                         const ref::Strides3& o, const ref::Strides3& in) override {
    ref::BlockCopy(out, inp, fill, n, o, in);
    return absl::OkStatus();
  }
  absl::Status GatherSeries(float* out, const float* table, const float* index,
                            int64_t index_stride, int64_t B, int64_t W, int64_t S) override {
    ref::GatherSeries(out, table, index, index_stride, B, W, S);
    return absl::OkStatus();
  }
  absl::Status WindowStats(float* center, float* scale, const float* x, int64_t B, int64_t T,
                           int64_t F, ref::WindowStatistic statistic, float eps) override {
    ref::WindowStats(center, scale, x, B, T, F, statistic, eps);
    return absl::OkStatus();
  }
  absl::Status ScaleWindows(float* xw, float* z, const float* x, const float* center,
                            const float* scale, const float* gamma, const float* beta, int64_t B,
                            int64_t T, int64_t F) override {
    ref::ScaleWindows(xw, z, x, center, scale, gamma, beta, B, T, F);
    return absl::OkStatus();
  }
  absl::Status UnscaleTarget(float* out, float* v_out, const float* d, const float* last,
                             int64_t last_stride, const float* center, const float* scale,
                             int64_t stats_stride, const float* gamma, const float* beta,
                             float eps2, int64_t B, int64_t J, int64_t C, int64_t c0,
                             int64_t W) override {
    ref::UnscaleTarget(out, v_out, d, last, last_stride, center, scale, stats_stride, gamma, beta,
                       eps2, B, J, C, c0, W);
    return absl::OkStatus();
  }
  absl::Status UnscaleTargetBackward(float* dd, float* dgamma, float* dbeta, float* dlast,
                                     int64_t last_stride, const float* dout, const float* v,
                                     const float* scale, int64_t stats_stride, const float* gamma,
                                     float eps2, int64_t B, int64_t J, int64_t C, int64_t c0,
                                     int64_t W) override {
    ref::UnscaleTargetBackward(dd, dgamma, dbeta, dlast, last_stride, dout, v, scale, stats_stride,
                               gamma, eps2, B, J, C, c0, W);
    return absl::OkStatus();
  }
  absl::Status ScaleWindowsBackward(float* dgamma, float* dbeta, const float* dxw, const float* z,
                                    int64_t R, int64_t F) override {
    ref::ScaleWindowsBackward(dgamma, dbeta, dxw, z, R, F);
    return absl::OkStatus();
  }
  absl::Status DropoutMask(float* mask, int64_t n, float p, uint64_t seed) override {
    Random rng(seed);
    const float scale = 1.0f / (1.0f - p);
    for (int64_t i = 0; i < n; ++i) mask[i] = rng.UniformFloat() < p ? 0.0f : scale;
    return absl::OkStatus();
  }
};

}  // namespace

DataOps& HostDataOps() {
  static HostLoopDataOps* const ops = new HostLoopDataOps();
  return *ops;
}

}  // namespace forecastd
