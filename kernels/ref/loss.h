// Reference (fp32 in, fp64 sums) training losses with PyTorch's definitions and mean
// reduction: MSE (nn.MSELoss), MAE (nn.L1Loss), Huber (nn.HuberLoss) and the quantile
// (pinball) loss for probabilistic forecasts. Each call returns the loss and writes its
// gradient with respect to the prediction in the same pass. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_LOSS_H_
#define FORECASTD_KERNELS_REF_LOSS_H_

#include <cstdint>

namespace forecastd::ref {

enum class LossKind {
  kMse,       // mean (pred - y)^2
  kMae,       // mean |pred - y|; d/dpred at pred == y is 0 (sign(0), as PyTorch)
  kHuber,     // mean of 0.5 e^2 if |e| < delta, else delta (|e| - 0.5 delta); e = pred - y
  kQuantile,  // mean over (n, q) of max(tau_q (y - pred_q), (tau_q - 1) (y - pred_q))
};

struct LossSpec {
  LossKind kind = LossKind::kMse;
  float huber_delta = 1.0f;          // kHuber only
  const float* quantiles = nullptr;  // kQuantile: tau (Q), each in (0, 1)
  int64_t Q = 1;                     // kQuantile: number of quantiles
};

// Mean loss over every element; dpred = d(mean loss)/d(pred).
//   pred, dpred (N) for kMse, kMae, kHuber; (N, Q) for kQuantile (quantile fastest)
//   target (N)
// For kQuantile the gradient of one term is -tau where y > pred and 1 - tau where y < pred; at
// pred == y it is the mean of the two, 0.5 - tau, as torch.maximum splits a tie between its
// arguments tau (y - pred) and (tau - 1) (y - pred). (Before the mean's 1 / (N Q).)
double LossForwardBackward(float* dpred, const float* pred, const float* target, int64_t N,
                           const LossSpec& spec);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_LOSS_H_
