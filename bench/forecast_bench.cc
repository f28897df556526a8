// forecast_bench: loads `--model DIR` version `--version` as the server would, takes the first
// `--batch` windows of the `input` tensor of `--io FILE`, runs `--warmup` untimed forecasts
// and then `--iters` timed ones on `--backend`, writes the last forecast as tensor `output` of
// `--output FILE` (safetensors), and prints one JSON line:
//   {"backend":..., "batch":..., "iters":..., "median_us":..., "p90_us":..., "mean_us":...,
//    "min_us":...}
// Each call is timed alone with the steady clock; p90 is the nearest-rank 90th percentile.
// With `--train`, times training steps instead (MakeHostTrainingEngine on `--backend`: Adam,
// MSE, the model's dropout) on `--batch` windows and targets drawn from N(0, 1) with `--seed`
// (the standardised values a job's steps take), and prints
//   {"backend":..., "mode":"train", "batch":..., "iters":..., "median_us":..., ...,
//    "last_loss":...}
// Exit codes: 0 success, 1 a failure while loading or running, 2 bad arguments.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "bench/bench_timing.h"
#include "bench/train_steps.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "engine/train/loss.h"
#include "engine/train/optimizer.h"
#include "engine/train/training_engine.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

struct Flags {
  std::string model;
  int64_t version = 1;
  std::string io;
  int64_t batch = 1;
  int64_t warmup = 20;
  int64_t iters = 100;
  std::string backend = "dnnl";
  std::string output;
  bool train = false;
  uint64_t seed = 1;
};

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& name) {
  if (name == "reference") return std::unique_ptr<Backend>(std::make_unique<ReferenceBackend>());
  if (name == "dnnl" || name == "onednn") {
    ASSIGN_OR_RETURN(std::unique_ptr<DnnlBackend> dnnl, DnnlBackend::Create({}));
    return std::unique_ptr<Backend>(std::move(dnnl));
  }
  if (name == "dnnl-bf16") {
    ASSIGN_OR_RETURN(std::unique_ptr<DnnlBackend> dnnl,
                     DnnlBackend::Create({.math = DnnlBackend::Options::Math::kBf16}));
    return std::unique_ptr<Backend>(std::move(dnnl));
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown backend '", name, "'; expected dnnl, dnnl-bf16 or reference"));
}

absl::Status BenchTrain(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, LoadForecaster(flags.model, flags.version));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(flags.backend));
  const int64_t B = flags.batch;
  v1::TrainingConfig training;
  training.set_batch_size(static_cast<int32_t>(B));
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(training.optimizer(), model->parameters()));
  ASSIGN_OR_RETURN(const TrainingLoss loss, TrainingLoss::Create(training.loss(), model->config()));
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingEngine> engine,
                   MakeHostTrainingEngine(*backend, *model, *optimizer, loss, training));
  ASSIGN_OR_RETURN(
      const bench::TrainSteps steps,
      bench::TimeTrainingSteps(*engine, B, model->lookback() * model->num_features(),
                               loss.per_window(), flags.seed, flags.warmup, flags.iters));
  std::printf("%s\n", absl::StrFormat("{\"backend\":\"%s\",\"compute\":\"%s\",\"mode\":\"train\","
                                      "\"batch\":%d,\"iters\":%d,%s,\"last_loss\":%g}",
                                      backend->name(), backend->compute(), B, flags.iters,
                                      bench::TimingJson(steps.timing), steps.last_loss)
                          .c_str());
  return absl::OkStatus();
}

absl::Status Bench(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, LoadForecaster(flags.model, flags.version));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> backend, MakeBackend(flags.backend));
  ASSIGN_OR_RETURN(const SafetensorsFile io, SafetensorsFile::Read(flags.io));
  ASSIGN_OR_RETURN(const TensorInfo* info, io.Find("input"));
  const int64_t T = model->lookback(), F = model->num_features();
  if (info->shape.size() != 3 || info->shape[1] != T || info->shape[2] != F) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.io, ": input must be (B, ", T, ", ", F, ") for this model"));
  }
  if (flags.batch > info->shape[0]) {
    return absl::InvalidArgumentError(absl::StrCat("--batch ", flags.batch, " but ", flags.io,
                                                   " holds only ", info->shape[0], " windows"));
  }
  ASSIGN_OR_RETURN(const std::vector<float> all, io.ReadF32("input", info->shape));
  const std::vector<float> input(all.begin(), all.begin() + flags.batch * T * F);
  const int64_t B = flags.batch, P = model->horizon(), K = model->num_targets(),
                Q = model->num_quantiles();
  std::vector<float> output(B * P * K * Q);

  Workspace workspace;
  for (int64_t i = 0; i < flags.warmup; ++i) {
    RETURN_IF_ERROR(model->Forward(*backend, output.data(), input.data(), B, workspace));
  }
  std::vector<double> samples_us;
  samples_us.reserve(flags.iters);
  for (int64_t i = 0; i < flags.iters; ++i) {
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(model->Forward(*backend, output.data(), input.data(), B, workspace));
    const auto stop = std::chrono::steady_clock::now();
    samples_us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  if (!flags.output.empty()) {
    RETURN_IF_ERROR(WriteSafetensors(
        flags.output,
        {{"output", Q > 1 ? std::vector<int64_t>{B, P, K, Q} : std::vector<int64_t>{B, P, K},
          output}},
        {{"generator", "forecast_bench"}}));
  }
  std::printf("%s\n", absl::StrFormat(
                          "{\"backend\":\"%s\",\"compute\":\"%s\",\"batch\":%d,\"iters\":%d,%s}",
                          backend->name(), backend->compute(), B, flags.iters,
                          bench::TimingJson(bench::Summarize(std::move(samples_us))))
                          .c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  forecastd::Flags flags;
  CLI::App app{"Times forecastd's forward pass on one model; prints one JSON line."};
  app.add_option("--model", flags.model, "model directory (holds config.json)")->required();
  app.add_option("--version", flags.version, "version subdirectory")->check(CLI::PositiveNumber);
  app.add_option("--io", flags.io,
                 "safetensors file with tensor 'input' (B, T, F); required without --train");
  app.add_option("--batch", flags.batch, "windows per forecast")->check(CLI::PositiveNumber);
  app.add_option("--warmup", flags.warmup, "untimed calls first")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", flags.iters, "timed calls")->check(CLI::PositiveNumber);
  app.add_option("--backend", flags.backend,
                 "dnnl, dnnl-bf16 (bf16 products; AVX512-BF16 or AMX) or reference");
  app.add_option("--output", flags.output, "write the last forecast here (safetensors)");
  app.add_flag("--train", flags.train,
               "time training steps (Adam, MSE) on --batch seeded windows instead of forecasts");
  app.add_option("--seed", flags.seed, "seed of the training batch (with --train)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!flags.train && flags.io.empty()) {
    std::fprintf(stderr, "forecast_bench: --io is required (or --train)\n");
    return 2;
  }
  const absl::Status status = flags.train ? forecastd::BenchTrain(flags) : forecastd::Bench(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "forecast_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
