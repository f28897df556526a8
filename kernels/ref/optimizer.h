// Reference optimiser updates with exactly the arithmetic of PyTorch's torch.optim.SGD,
// Adam and AdamW (single-tensor, non-foreach, non-fused paths), and global-norm gradient
// clipping as torch.nn.utils.clip_grad_norm_. Each works on one flat float array, so a model's
// whole parameter arena (and its mirrored gradients and moments) is one call. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_OPTIMIZER_H_
#define FORECASTD_KERNELS_REF_OPTIMIZER_H_

#include <cstdint>

namespace forecastd::ref {

struct SgdHyper {
  float lr = 0.01f;
  float momentum = 0.0f;  // 0: plain SGD, no velocity kept
  float dampening = 0.0f;
  float weight_decay = 0.0f;  // L2, added to the gradient
  bool nesterov = false;
};

// g = grad + weight_decay * param;
// with momentum: buf = g on the first step (`first_step`), else momentum * buf + (1 - dampening) g;
//                g = nesterov ? g + momentum * buf : buf;
// param -= lr * g.   velocity (n) is read and written only when momentum != 0.
void SgdUpdate(float* param, float* velocity, const float* grad, int64_t n, const SgdHyper& hyper,
               bool first_step);

struct AdamHyper {
  float lr = 1e-3f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float eps = 1e-8f;
  float weight_decay = 0.0f;
  bool decoupled_weight_decay = false;  // AdamW: param *= 1 - lr * weight_decay first
};

// Adam(W), step t (1-based, the count including this step):
//   AdamW: param *= 1 - lr * wd;  Adam: g = grad + wd * param
//   m = beta1 m + (1 - beta1) g;  v = beta2 v + (1 - beta2) g^2
//   param -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//   m, v (n): the moments, zero before the first step
void AdamUpdate(float* param, float* m, float* v, const float* grad, int64_t n, int64_t t,
                const AdamHyper& hyper);

// The L2 norm of grad (n), summed in double.
double GradNorm(const float* grad, int64_t n);

// scale = min(1, max_norm / (norm + 1e-6)), as clip_grad_norm_ computes it; grad is multiplied
// by scale only when scale < 1 (so in effect when norm > max_norm - 1e-6). `norm` is normally
// GradNorm(grad, n), but may be the norm over several arrays clipped together.
// Returns the scale applied (1 when none).
float ClipGradNorm(float* grad, int64_t n, double norm, double max_norm);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_OPTIMIZER_H_
