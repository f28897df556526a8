#include "engine/train/optimizer.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/models/forecaster.h"
#include "engine/train/optimizer_avx2.h"
#include "kernels/ref/optimizer.h"

namespace forecastd {
namespace {

absl::Status Invalid(absl::string_view field, float value, absl::string_view rule) {
  return absl::InvalidArgumentError(
      absl::StrCat("optimizer.", field, " = ", value, ": must be ", rule));
}

}  // namespace

v1::OptimizerConfig WithDefaults(const v1::OptimizerConfig& config) {
  v1::OptimizerConfig c = config;
  if (c.kind() == v1::OPTIMIZER_UNSPECIFIED) c.set_kind(v1::OPTIMIZER_ADAM);
  if (c.learning_rate() == 0.0f) c.set_learning_rate(1e-3f);
  if (c.beta1() == 0.0f) c.set_beta1(0.9f);
  if (c.beta2() == 0.0f) c.set_beta2(0.999f);
  if (c.eps() == 0.0f) c.set_eps(1e-8f);
  return c;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const v1::OptimizerConfig& config,
                                                             const ParameterArena& arena) {
  const v1::OptimizerConfig c = WithDefaults(config);
  if (!(c.learning_rate() > 0.0f) || !std::isfinite(c.learning_rate())) {
    return Invalid("learning_rate", c.learning_rate(), "finite and > 0");
  }
  if (!(c.weight_decay() >= 0.0f) || !std::isfinite(c.weight_decay())) {
    return Invalid("weight_decay", c.weight_decay(), "finite and >= 0");
  }
  if (!(c.momentum() >= 0.0f && c.momentum() < 1.0f)) {
    return Invalid("momentum", c.momentum(), "in [0, 1)");
  }
  if (c.nesterov() && (c.kind() != v1::OPTIMIZER_SGD || c.momentum() == 0.0f)) {
    return absl::InvalidArgumentError("optimizer.nesterov needs OPTIMIZER_SGD with momentum > 0");
  }
  if (!(c.beta1() > 0.0f && c.beta1() < 1.0f)) return Invalid("beta1", c.beta1(), "in (0, 1)");
  if (!(c.beta2() > 0.0f && c.beta2() < 1.0f)) return Invalid("beta2", c.beta2(), "in (0, 1)");
  if (!(c.eps() > 0.0f)) return Invalid("eps", c.eps(), "> 0");
  if (!(c.clip_grad_norm() >= 0.0f) || !std::isfinite(c.clip_grad_norm())) {
    return Invalid("clip_grad_norm", c.clip_grad_norm(), "finite and >= 0 (0: no clipping)");
  }
  return std::unique_ptr<Optimizer>(new Optimizer(c, arena));
}

Optimizer::Optimizer(const v1::OptimizerConfig& config, const ParameterArena& arena)
    : config_(config) {
  for (const ParameterSpec& spec : arena.specs()) {
    if (!Forecaster::IsTrainable(spec)) continue;
    if (!ranges_.empty() && ranges_.back().first + ranges_.back().second == spec.offset) {
      ranges_.back().second += spec.numel;
    } else {
      ranges_.emplace_back(spec.offset, spec.numel);
    }
  }
  const auto n = static_cast<size_t>(arena.size());
  const bool adam = config_.kind() != v1::OPTIMIZER_SGD;
  if (adam || config_.momentum() != 0.0f) m_.assign(n, 0.0f);
  if (adam) v_.assign(n, 0.0f);
}

double Optimizer::Step(ParameterArena& params, float* grads, float lr) {
  // The norm runs over the trainable ranges only; the others' gradients are zero anyway.
  double sum_sq = 0.0;
  for (const auto& [offset, n] : ranges_) {
    if (HasAvx2()) {
      sum_sq += GradSquaredSumAvx2(grads + offset, n);
    } else {
      const double norm = ref::GradNorm(grads + offset, n);
      sum_sq += norm * norm;
    }
  }
  const double norm = std::sqrt(sum_sq);
  if (config_.clip_grad_norm() > 0.0f) {
    for (const auto& [offset, n] : ranges_) {
      ref::ClipGradNorm(grads + offset, n, norm, config_.clip_grad_norm());
    }
  }
  ++steps_;
  float* p = params.data();
  if (config_.kind() == v1::OPTIMIZER_SGD) {
    const ref::SgdHyper hyper{lr, config_.momentum(), 0.0f, config_.weight_decay(),
                              config_.nesterov()};
    for (const auto& [offset, n] : ranges_) {
      ref::SgdUpdate(p + offset, m_.empty() ? nullptr : m_.data() + offset, grads + offset, n,
                     hyper, steps_ == 1);
    }
  } else {
    const ref::AdamHyper hyper{lr,
                               config_.beta1(),
                               config_.beta2(),
                               config_.eps(),
                               config_.weight_decay(),
                               config_.kind() == v1::OPTIMIZER_ADAMW};
    const auto update = HasAvx2() ? AdamUpdateAvx2 : ref::AdamUpdate;
    for (const auto& [offset, n] : ranges_) {
      update(p + offset, m_.data() + offset, v_.data() + offset, grads + offset, n, steps_, hyper);
    }
  }
  return norm;
}

std::vector<std::pair<std::string, const std::vector<float>*>> Optimizer::state() const {
  std::vector<std::pair<std::string, const std::vector<float>*>> state;
  if (config_.kind() == v1::OPTIMIZER_SGD) {
    if (!m_.empty()) state.emplace_back("momentum", &m_);
  } else {
    state.emplace_back("m", &m_);
    state.emplace_back("v", &v_);
  }
  return state;
}

absl::Status Optimizer::Restore(
    const std::vector<std::pair<std::string, std::vector<float>>>& state, int64_t steps) {
  const auto mine = this->state();
  if (mine.size() != state.size()) {
    return absl::InvalidArgumentError(absl::StrCat("optimizer state has ", state.size(),
                                                   " arrays; this optimizer keeps ", mine.size()));
  }
  for (size_t i = 0; i < mine.size(); ++i) {
    if (mine[i].first != state[i].first || mine[i].second->size() != state[i].second.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "optimizer state '", state[i].first, "' (", state[i].second.size(),
          " floats) does not match '", mine[i].first, "' (", mine[i].second->size(), ")"));
    }
  }
  if (steps < 0) return absl::InvalidArgumentError("negative optimizer step count");
  // state() lists m_ first, then v_ for Adam(W).
  if (!state.empty()) m_ = state[0].second;
  if (state.size() > 1) v_ = state[1].second;
  steps_ = steps;
  return absl::OkStatus();
}

}  // namespace forecastd
