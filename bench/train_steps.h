// What the bench programs' `--train` modes share (forecast_bench on the CPU, gpu_bench on a
// GPU): optimiser steps of a TrainingEngine on one seeded batch, each timed alone on the host
// clock. Header-only.
#ifndef FORECASTD_BENCH_TRAIN_STEPS_H_
#define FORECASTD_BENCH_TRAIN_STEPS_H_

#include <chrono>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "bench/bench_timing.h"
#include "engine/train/training_engine.h"
#include "kernels/base/status.h"

namespace forecastd::bench {

struct TrainSteps {
  Timing timing;
  double last_loss = 0.0;
};

// `warmup` untimed and then `iters` timed TrainingEngine::Step calls on B windows of
// `window_floats` standardised inputs and `target_floats` targets each, N(0, 1) from `seed`, at
// learning rate 1e-5 (small enough that the loss stays finite over any number of steps), the
// step index as the dropout seed. INTERNAL when a loss is not finite.
inline absl::StatusOr<TrainSteps> TimeTrainingSteps(TrainingEngine& engine, int64_t B,
                                                    int64_t window_floats, int64_t target_floats,
                                                    uint64_t seed, int64_t warmup, int64_t iters) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(B * window_floats));
  std::vector<float> y(static_cast<size_t>(B * target_floats));
  for (float& v : x) v = normal(rng);
  for (float& v : y) v = normal(rng);
  constexpr float kLearningRate = 1e-5f;
  TrainSteps result;
  const auto step = [&](int64_t i) -> absl::Status {
    ASSIGN_OR_RETURN(result.last_loss,
                     engine.Step(x.data(), y.data(), B, kLearningRate, static_cast<uint64_t>(i)));
    if (!std::isfinite(result.last_loss)) {
      return absl::InternalError("the training loss is not finite");
    }
    return absl::OkStatus();
  };
  for (int64_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(step(i));
  std::vector<double> step_us;
  step_us.reserve(static_cast<size_t>(iters));
  for (int64_t i = 0; i < iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(step(warmup + i));
    step_us.push_back(
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
            .count());
  }
  result.timing = Summarize(std::move(step_us));
  return result;
}

}  // namespace forecastd::bench

#endif  // FORECASTD_BENCH_TRAIN_STEPS_H_
