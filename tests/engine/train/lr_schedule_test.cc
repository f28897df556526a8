// Learning-rate schedules, the Optimizer's handling of the arena, and the loss choice.
#include "engine/train/lr_schedule.h"

#include <cmath>
#include <string>
#include <vector>

#include "engine/models/forecaster.h"
#include "engine/train/loss.h"
#include "engine/train/optimizer.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

LearningRateSchedule Make(v1::ScheduleKind kind, int64_t warmup, float floor, int64_t total,
                          int step_epochs = 0, float gamma = 0.0f) {
  v1::ScheduleConfig c;
  c.set_kind(kind);
  c.set_warmup_steps(warmup);
  c.set_min_lr_ratio(floor);
  c.set_step_epochs(step_epochs);
  c.set_gamma(gamma);
  auto s = LearningRateSchedule::Create(c, 0.1f, total);
  INFO(s.status().ToString());
  REQUIRE(s.ok());
  return *s;
}

TEST_CASE("Constant, cosine with warm-up and step schedules", "[unit][train]") {
  const auto constant = Make(v1::SCHEDULE_CONSTANT, 0, 0.0f, 100);
  REQUIRE(constant.At(0, 0) == 0.1f);
  REQUIRE(constant.At(99, 9) == 0.1f);

  const auto warm = Make(v1::SCHEDULE_CONSTANT, 4, 0.0f, 100);
  REQUIRE(warm.At(0, 0) == Approx(0.025f));
  REQUIRE(warm.At(3, 0) == Approx(0.1f));
  REQUIRE(warm.At(50, 3) == 0.1f);

  // Warm-up over 10 steps, then half a cosine from the peak to 10% of it at step 99.
  const auto cosine = Make(v1::SCHEDULE_COSINE, 10, 0.1f, 100);
  REQUIRE(cosine.At(0, 0) == Approx(0.01f));
  REQUIRE(cosine.At(9, 0) == Approx(0.1f));
  REQUIRE(cosine.At(10, 1) == Approx(0.1f));
  REQUIRE(cosine.At(99, 9) == Approx(0.01f));
  const float mid = cosine.At(10 + 89 / 2, 5);
  REQUIRE(mid == Approx(0.1f * (0.1f + 0.9f * 0.5f * (1.0f + std::cos(M_PI * 44.0 / 89.0)))));
  for (int64_t s = 10; s < 99; ++s) REQUIRE(cosine.At(s + 1, 0) <= cosine.At(s, 0));

  const auto step = Make(v1::SCHEDULE_STEP, 0, 0.0f, 100, 3, 0.5f);
  REQUIRE(step.At(0, 0) == 0.1f);
  REQUIRE(step.At(40, 2) == 0.1f);
  REQUIRE(step.At(41, 3) == Approx(0.05f));
  REQUIRE(step.At(90, 6) == Approx(0.025f));
}

TEST_CASE("Schedule settings out of range are refused", "[unit][train]") {
  v1::ScheduleConfig c;
  c.set_warmup_steps(-1);
  REQUIRE(!LearningRateSchedule::Create(c, 0.1f, 10).ok());
  c = {};
  c.set_min_lr_ratio(1.5f);
  REQUIRE(!LearningRateSchedule::Create(c, 0.1f, 10).ok());
  c = {};
  c.set_gamma(2.0f);
  REQUIRE(!LearningRateSchedule::Create(c, 0.1f, 10).ok());
  REQUIRE(!LearningRateSchedule::Create({}, 0.1f, 0).ok());
}

ModelConfig Small() {
  ModelConfig c;
  // Named strings, not literals: GCC 12 warns falsely (-Wrestrict) on short literal assigns.
  static const std::string kName = "model", kFeature = "feature";
  c.set_name(kName);
  c.set_lookback(4);
  c.set_horizon(2);
  c.add_feature_names(kFeature);
  c.add_target_names(kFeature);
  c.mutable_gru()->set_hidden_size(3);
  c.mutable_gru()->set_num_layers(1);
  return c;
}

TEST_CASE("The optimizer updates trainable parameters only and restores its state",
          "[unit][train]") {
  auto model = Forecaster::Create(Small()).value();
  ParameterArena& p = model->parameters();
  std::vector<float> grads(static_cast<size_t>(p.size()), 1.0f);
  v1::OptimizerConfig config;
  config.set_kind(v1::OPTIMIZER_ADAM);
  auto optimizer = Optimizer::Create(config, p).value();
  const std::vector<float> before(p.data(), p.data() + p.size());
  const double norm = optimizer->Step(p, grads.data(), 0.01f);
  // The normaliser's slots are not part of the norm, and their values do not move.
  const int64_t trainable = p.size() - 2;
  REQUIRE(norm == Approx(std::sqrt(static_cast<double>(trainable))));
  for (const ParameterSpec& spec : p.specs()) {
    for (int64_t i = 0; i < spec.numel; ++i) {
      const float was = before[static_cast<size_t>(spec.offset + i)];
      const float now = p.data()[spec.offset + i];
      CAPTURE(spec.name, i);
      if (Forecaster::IsTrainable(spec)) {
        REQUIRE(now == Approx(was - 0.01f));  // Adam's first step moves by lr * sign(grad)
      } else {
        REQUIRE(now == was);
      }
    }
  }

  std::vector<std::pair<std::string, std::vector<float>>> state;
  for (const auto& [name, values] : optimizer->state()) state.emplace_back(name, *values);
  REQUIRE(state.size() == 2);
  auto restored = Optimizer::Create(config, p).value();
  REQUIRE(restored->Restore(state, optimizer->steps_taken()).ok());
  std::vector<float> g1(grads), g2(grads);
  std::vector<float> a(p.data(), p.data() + p.size());
  optimizer->Step(p, g1.data(), 0.01f);
  const std::vector<float> after_original(p.data(), p.data() + p.size());
  std::copy(a.begin(), a.end(), p.data());
  restored->Step(p, g2.data(), 0.01f);
  REQUIRE(std::vector<float>(p.data(), p.data() + p.size()) == after_original);

  state.pop_back();
  REQUIRE(restored->Restore(state, 1).code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Clipping scales the whole gradient to the global norm", "[unit][train]") {
  auto model = Forecaster::Create(Small()).value();
  ParameterArena& p = model->parameters();
  std::vector<float> grads(static_cast<size_t>(p.size()), 3.0f);
  v1::OptimizerConfig config;
  config.set_kind(v1::OPTIMIZER_SGD);
  config.set_clip_grad_norm(1.0f);
  auto optimizer = Optimizer::Create(config, p).value();
  const double norm = optimizer->Step(p, grads.data(), 0.1f);
  double clipped = 0.0;
  for (const ParameterSpec& spec : p.specs()) {
    if (!Forecaster::IsTrainable(spec)) continue;
    for (int64_t i = 0; i < spec.numel; ++i) {
      clipped += double{grads[static_cast<size_t>(spec.offset + i)]} *
                 grads[static_cast<size_t>(spec.offset + i)];
    }
  }
  REQUIRE(norm > 1.0);
  REQUIRE(std::sqrt(clipped) == Approx(1.0).epsilon(1e-5));
}

TEST_CASE("Optimizer and loss settings are validated", "[unit][train]") {
  auto model = Forecaster::Create(Small()).value();
  v1::OptimizerConfig config;
  config.set_beta1(1.0f);
  REQUIRE_THAT(std::string(Optimizer::Create(config, model->parameters()).status().message()),
               Catch::Contains("beta1"));
  config = {};
  config.set_nesterov(true);
  REQUIRE(!Optimizer::Create(config, model->parameters()).ok());

  v1::LossConfig loss;
  REQUIRE(TrainingLoss::Create(loss, Small()).value().kind() == v1::LOSS_MSE);
  loss.set_kind(v1::LOSS_HUBER);
  loss.set_huber_delta(-1.0f);
  REQUIRE(!TrainingLoss::Create(loss, Small()).ok());
  ModelConfig quantile = Small();
  quantile.add_quantiles(0.5f);
  REQUIRE(TrainingLoss::Create({}, quantile).value().kind() == v1::LOSS_QUANTILE);
  loss = {};
  loss.set_kind(v1::LOSS_MAE);
  REQUIRE(!TrainingLoss::Create(loss, quantile).ok());
}

}  // namespace
}  // namespace forecastd
