#include "kernels/ref/optimizer.h"

#include <algorithm>
#include <cmath>

namespace forecastd::ref {

// Each update works per element in double and rounds once into the float it stores, where
// PyTorch rounds after every fp32 op, so the two differ by a few ulp at most. The state
// (velocity, moments) is read back from its float storage, as PyTorch's fp32 state is.

void SgdUpdate(float* param, float* velocity, const float* grad, int64_t n, const SgdHyper& hyper,
               bool first_step) {
  const double lr = hyper.lr;
  const double momentum = hyper.momentum;
  const double dampening = hyper.dampening;
  const double wd = hyper.weight_decay;
  for (int64_t i = 0; i < n; ++i) {
    double g = static_cast<double>(grad[i]) + wd * param[i];
    if (hyper.momentum != 0.0f) {
      // PyTorch starts the buffer as a copy of the gradient, without dampening.
      const double buf_new = first_step ? g : momentum * velocity[i] + (1.0 - dampening) * g;
      velocity[i] = static_cast<float>(buf_new);
      const double buf = velocity[i];
      g = hyper.nesterov ? g + momentum * buf : buf;
    }
    param[i] = static_cast<float>(param[i] - lr * g);
  }
}

void AdamUpdate(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                const AdamHyper& hyper) {
  const double lr = hyper.lr;
  const double beta1 = hyper.beta1;
  const double beta2 = hyper.beta2;
  const double eps = hyper.eps;
  const double wd = hyper.weight_decay;
  const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
  const double bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, static_cast<double>(t)));
  const double step_size = lr / bias_correction1;
  for (int64_t i = 0; i < n; ++i) {
    double p = param[i];
    double g = grad[i];
    if (hyper.decoupled_weight_decay) {
      p *= 1.0 - lr * wd;
    } else {
      g += wd * p;
    }
    m[i] = static_cast<float>(beta1 * m[i] + (1.0 - beta1) * g);
    v[i] = static_cast<float>(beta2 * v[i] + (1.0 - beta2) * g * g);
    const double denom = std::sqrt(static_cast<double>(v[i])) / bias_correction2_sqrt + eps;
    param[i] = static_cast<float>(p - step_size * m[i] / denom);
  }
}

double GradNorm(const float* grad, int64_t n) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    sum += static_cast<double>(grad[i]) * static_cast<double>(grad[i]);
  }
  return std::sqrt(sum);
}

float ClipGradNorm(float* grad, int64_t n, double norm, double max_norm) {
  // PyTorch holds the coefficient as an fp32 tensor and multiplies in fp32.
  const float scale = static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
  if (scale >= 1.0f) return 1.0f;
  for (int64_t i = 0; i < n; ++i) grad[i] *= scale;
  return scale;
}

}  // namespace forecastd::ref
