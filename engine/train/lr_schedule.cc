#include "engine/train/lr_schedule.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"

namespace forecastd {

absl::StatusOr<LearningRateSchedule> LearningRateSchedule::Create(const v1::ScheduleConfig& config,
                                                                  float peak_lr,
                                                                  int64_t total_steps) {
  v1::ScheduleConfig c = config;
  if (c.kind() == v1::SCHEDULE_UNSPECIFIED) c.set_kind(v1::SCHEDULE_CONSTANT);
  if (c.step_epochs() == 0) c.set_step_epochs(1);
  if (c.gamma() == 0.0f) c.set_gamma(0.1f);
  if (c.warmup_steps() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule.warmup_steps = ", c.warmup_steps(), ": must be >= 0"));
  }
  if (!(c.min_lr_ratio() >= 0.0f && c.min_lr_ratio() <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule.min_lr_ratio = ", c.min_lr_ratio(), ": must be in [0, 1]"));
  }
  if (c.step_epochs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule.step_epochs = ", c.step_epochs(), ": must be >= 1"));
  }
  if (!(c.gamma() > 0.0f && c.gamma() <= 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("schedule.gamma = ", c.gamma(), ": must be in (0, 1]"));
  }
  if (total_steps < 1) return absl::InvalidArgumentError("a schedule needs at least one step");
  return LearningRateSchedule(c, peak_lr, total_steps);
}

float LearningRateSchedule::At(int64_t step, int64_t epoch) const {
  const int64_t warmup = config_.warmup_steps();
  // Linear warm-up: step 0 runs at peak/warmup, step warmup-1 at the peak.
  if (config_.kind() != v1::SCHEDULE_STEP && step < warmup) {
    return peak_lr_ * static_cast<float>(step + 1) / static_cast<float>(warmup);
  }
  switch (config_.kind()) {
    case v1::SCHEDULE_COSINE: {
      const int64_t span = std::max<int64_t>(1, total_steps_ - warmup - 1);
      const double progress =
          std::min(1.0, static_cast<double>(step - warmup) / static_cast<double>(span));
      const double floor = config_.min_lr_ratio();
      const double scale = floor + (1.0 - floor) * 0.5 * (1.0 + std::cos(M_PI * progress));
      return static_cast<float>(peak_lr_ * scale);
    }
    case v1::SCHEDULE_STEP: {
      const int64_t decays = epoch / config_.step_epochs();
      return static_cast<float>(
          peak_lr_ * std::pow(static_cast<double>(config_.gamma()), static_cast<double>(decays)));
    }
    default:
      return peak_lr_;
  }
}

}  // namespace forecastd
