#include "kernels/ref/loss.h"

#include <algorithm>
#include <cmath>

namespace forecastd::ref {
namespace {

double Sign(double x) { return x > 0.0 ? 1.0 : (x < 0.0 ? -1.0 : 0.0); }

struct PointLoss {
  double loss;
  double grad;  // d loss / d pred
};

// One element of the element-wise losses, e = pred - y.
PointLoss ElementLoss(LossKind kind, double e, double delta) {
  switch (kind) {
    case LossKind::kMse:
      return {e * e, 2.0 * e};
    case LossKind::kMae:
      return {std::abs(e), Sign(e)};
    case LossKind::kHuber:
      // The branches meet with equal value and slope at |e| = delta, so which one takes the
      // boundary does not matter; PyTorch's forward gives it to the linear one, as here.
      if (std::abs(e) < delta) return {0.5 * e * e, e};
      return {delta * (std::abs(e) - 0.5 * delta), delta * Sign(e)};
    case LossKind::kQuantile:
      break;  // not element-wise: LossForwardBackward handles it
  }
  return {0.0, 0.0};
}

}  // namespace

double LossForwardBackward(float* dpred, const float* pred, const float* target, int64_t N,
                           const LossSpec& spec) {
  double sum = 0.0;
  if (spec.kind == LossKind::kQuantile) {
    const int64_t Q = spec.Q;
    const double inv_count = 1.0 / static_cast<double>(N * Q);
    for (int64_t n = 0; n < N; ++n) {
      for (int64_t q = 0; q < Q; ++q) {
        const double tau = spec.quantiles[q];
        const double diff = static_cast<double>(target[n]) - pred[n * Q + q];  // y - pred
        sum += std::max(tau * diff, (tau - 1.0) * diff);
        double grad = 0.5 - tau;  // the tie, split as torch.maximum splits it
        if (diff > 0.0) grad = -tau;
        if (diff < 0.0) grad = 1.0 - tau;
        dpred[n * Q + q] = static_cast<float>(grad * inv_count);
      }
    }
    return sum * inv_count;
  }

  const double inv_count = 1.0 / static_cast<double>(N);
  for (int64_t n = 0; n < N; ++n) {
    const double e = static_cast<double>(pred[n]) - target[n];
    const PointLoss point = ElementLoss(spec.kind, e, spec.huber_delta);
    sum += point.loss;
    dpred[n] = static_cast<float>(point.grad * inv_count);
  }
  return sum * inv_count;
}

}  // namespace forecastd::ref
