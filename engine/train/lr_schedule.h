// The learning rate of each optimiser step: constant (with optional linear warm-up), cosine
// decay after a linear warm-up, or step decay per epoch, from a ScheduleConfig. A pure
// function of the step and epoch, so a resumed job continues the same curve. Thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_LR_SCHEDULE_H_
#define FORECASTD_ENGINE_TRAIN_LR_SCHEDULE_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

class LearningRateSchedule {
 public:
  // `total_steps`: the optimiser steps of the whole run (epochs * steps per epoch), the end of
  // the cosine curve. INVALID_ARGUMENT for negative or out-of-range settings.
  static absl::StatusOr<LearningRateSchedule> Create(const v1::ScheduleConfig& config,
                                                     float peak_lr, int64_t total_steps);

  // The rate for optimiser step `step` (0-based) taken in epoch `epoch` (0-based).
  float At(int64_t step, int64_t epoch) const;

 private:
  LearningRateSchedule(const v1::ScheduleConfig& config, float peak_lr, int64_t total_steps)
      : config_(config), peak_lr_(peak_lr), total_steps_(total_steps) {}

  v1::ScheduleConfig config_;  // defaults filled in
  float peak_lr_;
  int64_t total_steps_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_LR_SCHEDULE_H_
