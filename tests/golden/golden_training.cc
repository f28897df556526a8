#include "tests/golden/golden_training.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "absl/strings/numbers.h"
#include "tests/testing/catch.h"

namespace forecastd {

std::string GoldenText(const SafetensorsFile& file, const std::string& key) {
  const auto it = file.metadata().find(key);
  INFO(key);
  REQUIRE(it != file.metadata().end());
  return it->second;
}

float GoldenNumber(const SafetensorsFile& file, const std::string& key) {
  double x = 0.0;
  INFO(key);
  REQUIRE(absl::SimpleAtod(GoldenText(file, key), &x));
  return static_cast<float>(x);
}

TrainingLoss GoldenLoss(const SafetensorsFile& file, const ModelConfig& model) {
  v1::LossConfig config;
  const std::string kind = GoldenText(file, "loss");
  if (kind == "mse") config.set_kind(v1::LOSS_MSE);
  if (kind == "mae") config.set_kind(v1::LOSS_MAE);
  if (kind == "huber") config.set_kind(v1::LOSS_HUBER);
  if (kind == "quantile") config.set_kind(v1::LOSS_QUANTILE);
  REQUIRE(config.kind() != v1::LOSS_UNSPECIFIED);
  config.set_huber_delta(GoldenNumber(file, "huber_delta"));
  return TrainingLoss::Create(config, model).value();
}

std::unique_ptr<Optimizer> GoldenOptimizer(const SafetensorsFile& file, ParameterArena& params) {
  v1::OptimizerConfig config;
  const std::string kind = GoldenText(file, "optimizer");
  if (kind == "sgd") config.set_kind(v1::OPTIMIZER_SGD);
  if (kind == "adam") config.set_kind(v1::OPTIMIZER_ADAM);
  if (kind == "adamw") config.set_kind(v1::OPTIMIZER_ADAMW);
  REQUIRE(config.kind() != v1::OPTIMIZER_UNSPECIFIED);
  config.set_learning_rate(GoldenNumber(file, "lr"));
  config.set_beta1(GoldenNumber(file, "beta1"));
  config.set_beta2(GoldenNumber(file, "beta2"));
  config.set_eps(GoldenNumber(file, "eps"));
  config.set_weight_decay(GoldenNumber(file, "weight_decay"));
  config.set_momentum(GoldenNumber(file, "momentum"));
  config.set_nesterov(GoldenText(file, "nesterov") == "true");
  config.set_clip_grad_norm(GoldenNumber(file, "clip_grad_norm"));
  auto optimizer = Optimizer::Create(config, params);
  INFO(optimizer.status().ToString());
  REQUIRE(optimizer.ok());
  return *std::move(optimizer);
}

double GoldenError(double got, double want) {
  return std::abs(got - want) / std::max(std::abs(want), 1.0);
}

}  // namespace forecastd
