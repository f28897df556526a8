// Needs a GPU. Training on the GPU (CudaTrainingEngine) against the CPU: device dropout masks
// equal to the host's bit for bit, training steps of every architecture (with dropout and
// clipping) ending where the reference backend's do, a TrainJob on the GPU learning as the
// CPU job does and resuming from its checkpoint (and on stacked series with covariates), bf16
// mixed precision staying near fp32, and a step too large for the GPU's memory refused with
// RESOURCE_EXHAUSTED, the engine still usable.
#include "engine/train/cuda_training_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/reference_backend.h"
#include "engine/models/cuda_data_ops.h"
#include "engine/train/checkpoint.h"
#include "engine/train/train_job.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  return testing::RandomVector(rng, n);
}

using testing::DeviceArray;

TEST_CASE("Device dropout masks and data ops are the host's, bit for bit", "[gpu][train]") {
  CudaDataOps device(nullptr);
  DataOps& host = HostDataOps();
  // Odd lengths cross the kernel's per-thread chunks of draws.
  for (const int64_t n : {int64_t{1}, int64_t{17}, int64_t{100003}}) {
    for (const float p : {0.1f, 0.5f, 0.9f}) {
      for (const uint64_t seed : {uint64_t{0}, uint64_t{42}, ~uint64_t{0}}) {
        CAPTURE(n, p, seed);
        std::vector<float> want(static_cast<size_t>(n));
        REQUIRE(host.DropoutMask(want.data(), n, p, seed).ok());
        DeviceArray got(std::vector<float>(static_cast<size_t>(n), -1.0f));
        REQUIRE(device.DropoutMask(got.get(), n, p, seed).ok());
        REQUIRE(got.Download() == want);
      }
    }
  }
  const std::vector<float> a = RandomVector(1000, 1), mask = RandomVector(1000, 2);
  std::vector<float> want(a.size());
  REQUIRE(host.Multiply(want.data(), a.data(), mask.data(), 1000).ok());
  DeviceArray da(a), dmask(mask);
  REQUIRE(device.Multiply(da.get(), da.get(), dmask.get(), 1000).ok());  // in place
  REQUIRE(da.Download() == want);

  // 10 rows of 7 scattered into rows of stride 30 at column 5, the rest zero.
  const std::vector<float> rows = RandomVector(70, 3);
  std::vector<float> scattered(300, 0.0f);
  REQUIRE(host.ScatterRows(scattered.data() + 5, rows.data(), 10, 30, 7).ok());
  DeviceArray dscattered(RandomVector(300, 4)), drows(rows);
  REQUIRE(device.Zero(dscattered.get(), 300).ok());
  REQUIRE(device.ScatterRows(dscattered.get() + 5, drows.get(), 10, 30, 7).ok());
  REQUIRE(dscattered.Download() == scattered);
}

ModelConfig Base(const std::string& name) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(12);
  c.set_horizon(3);
  for (const std::string f : {"a", "b"}) {
    c.add_feature_names(f);
    c.add_target_names(f);
  }
  return c;
}

std::vector<ModelConfig> Architectures() {
  ModelConfig lstm = Base("lstm");
  lstm.mutable_lstm()->set_hidden_size(16);
  lstm.mutable_lstm()->set_num_layers(2);
  lstm.mutable_lstm()->set_bidirectional(true);
  lstm.mutable_lstm()->set_dropout(0.2f);
  ModelConfig gru = Base("gru");
  gru.mutable_gru()->set_hidden_size(8);
  gru.mutable_gru()->set_num_layers(2);
  gru.mutable_gru()->set_dropout(0.3f);
  ModelConfig post = Base("transformer_post_ln");
  post.mutable_transformer()->set_d_model(16);
  post.mutable_transformer()->set_num_heads(2);
  post.mutable_transformer()->set_num_layers(2);
  post.mutable_transformer()->set_dim_feedforward(32);
  post.mutable_transformer()->set_dropout(0.1f);
  ModelConfig pre = post;
  pre.set_name("transformer_pre_ln");
  pre.mutable_transformer()->set_norm_first(true);
  pre.mutable_transformer()->set_causal(true);
  ModelConfig quantile = Base("lstm_quantiles");
  quantile.mutable_lstm()->set_hidden_size(8);
  quantile.mutable_lstm()->set_num_layers(1);
  quantile.add_quantiles(0.1f);
  quantile.add_quantiles(0.5f);
  quantile.add_quantiles(0.9f);
  // Window scaling: RevIN with its affine map and forecast changes, and the last value alone.
  ModelConfig revin = Base("gru_window_scaling");
  revin.mutable_gru()->set_hidden_size(8);
  revin.mutable_gru()->set_num_layers(1);
  revin.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
  revin.mutable_window_scaling()->set_affine(true);
  revin.mutable_window_scaling()->set_forecast_change(true);
  ModelConfig last = pre;
  last.set_name("transformer_last_value");
  last.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_LAST_VALUE);
  ModelConfig mlp = Base("mlp");
  mlp.mutable_mlp()->set_hidden_size(24);
  mlp.mutable_mlp()->set_num_layers(2);
  mlp.mutable_mlp()->set_activation(v1::ACTIVATION_RELU);
  mlp.mutable_mlp()->set_dropout(0.2f);
  ModelConfig linear = revin;  // an MLP without hidden layers, with RevIN
  linear.set_name("mlp_linear_window_scaling");
  linear.mutable_mlp()->Clear();
  return {lstm, gru, post, pre, quantile, revin, last, mlp, linear};
}

double MaxAbsDiff(const float* a, const float* b, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; ++i) worst = std::max(worst, std::abs(double{a[i]} - b[i]));
  return worst;
}

TEST_CASE("GPU training steps end where the reference backend's do, for every architecture",
          "[gpu][train]") {
  for (const ModelConfig& config : Architectures()) {
    CAPTURE(config.name());
    v1::TrainingConfig training;
    training.mutable_optimizer()->set_kind(v1::OPTIMIZER_SGD);
    training.mutable_optimizer()->set_momentum(0.9f);
    training.mutable_optimizer()->set_clip_grad_norm(0.5f);  // the first steps clip
    const std::unique_ptr<Forecaster> cpu_model = testing::RandomModel(config, 11);
    const std::unique_ptr<Forecaster> gpu_model = testing::RandomModel(config, 11);
    auto cpu_optimizer = Optimizer::Create(training.optimizer(), cpu_model->parameters());
    auto gpu_optimizer = Optimizer::Create(training.optimizer(), gpu_model->parameters());
    REQUIRE((cpu_optimizer.ok() && gpu_optimizer.ok()));
    auto loss = TrainingLoss::Create(training.loss(), config);
    REQUIRE(loss.ok());
    ReferenceBackend reference;
    auto cpu = MakeHostTrainingEngine(reference, *cpu_model, **cpu_optimizer, *loss, training);
    auto gpu = MakeCudaTrainingEngine({}, *gpu_model, **gpu_optimizer, *loss, training);
    INFO(gpu.status().ToString());
    REQUIRE((cpu.ok() && gpu.ok()));
    REQUIRE((*gpu)->device() == "cuda:0");
    REQUIRE((*gpu)->Push().ok());

    constexpr int64_t kB = 6;
    const int64_t x_floats = kB * config.lookback() * 2;
    const int64_t y_floats = kB * loss->per_window();
    for (int step = 0; step < 3; ++step) {
      CAPTURE(step);
      const std::vector<float> x = RandomVector(x_floats, 100 + step);
      const std::vector<float> y = RandomVector(y_floats, 200 + step);
      const uint64_t seed = 1000 + static_cast<uint64_t>(step);
      auto want = (*cpu)->Step(x.data(), y.data(), kB, 0.05f, seed);
      auto got = (*gpu)->Step(x.data(), y.data(), kB, 0.05f, seed);
      INFO(got.status().ToString());
      REQUIRE((want.ok() && got.ok()));
      CHECK(std::abs(*got - *want) <= 1e-5 * (1.0 + std::abs(*want)));
    }
    REQUIRE((*gpu)->steps_taken() == 3);
    REQUIRE((*gpu)->Pull().ok());
    REQUIRE((*gpu_optimizer)->steps_taken() == 3);
    const ParameterArena& want = cpu_model->parameters();
    const ParameterArena& got = gpu_model->parameters();
    const double weight_error = MaxAbsDiff(got.data(), want.data(), want.size());
    const double momentum_error =
        MaxAbsDiff((*gpu_optimizer)->state()[0].second->data(),
                   (*cpu_optimizer)->state()[0].second->data(), want.size());
    // The starting weights moved by more than this, so the comparison is not vacuous.
    const std::unique_ptr<Forecaster> start = testing::RandomModel(config, 11);
    const double moved = MaxAbsDiff(want.data(), start->parameters().data(), want.size());
    CAPTURE(weight_error, momentum_error, moved);
    CHECK(moved > 1e-2);
    CHECK(weight_error < 2e-5);
    CHECK(momentum_error < 2e-5);

    // Validation's loss (no dropout, no update) agrees too and changes nothing.
    const std::vector<float> x = RandomVector(x_floats, 300), y = RandomVector(y_floats, 301);
    auto want_eval = (*cpu)->Evaluate(x.data(), y.data(), kB);
    auto got_eval = (*gpu)->Evaluate(x.data(), y.data(), kB);
    REQUIRE((want_eval.ok() && got_eval.ok()));
    CHECK(std::abs(*got_eval - *want_eval) <= 1e-5 * (1.0 + std::abs(*want_eval)));
    REQUIRE((*gpu)->steps_taken() == 3);
  }
}

v1::InlineSeries Series(int rows) {
  v1::InlineSeries s;
  s.set_rows(rows);
  for (int i = 0; i < rows; ++i) {
    const float t = static_cast<float>(i);
    s.add_values(10.0f + 3.0f * std::sin(t * 0.3f) + 0.05f * std::sin(12.9898f * t));
    s.add_values(-2.0f + 0.5f * std::sin(t * 0.3f - 0.6f) + 0.2f * std::cos(t * 0.11f));
  }
  return s;
}

TrainJobOptions JobOptions(const fs::path& dir, const ModelConfig& model, bool gpu) {
  TrainJobOptions o;
  o.model = model;
  o.training.mutable_data()->mutable_inline_series()->CopyFrom(Series(240));
  o.training.set_epochs(4);
  o.training.set_batch_size(16);
  o.training.set_seed(7);
  o.training.mutable_optimizer()->set_learning_rate(1e-2f);
  o.training.mutable_optimizer()->set_clip_grad_norm(1.0f);
  o.model_dir = (dir / model.name()).string();
  o.data_dir = dir;
  o.publish = false;
  static ReferenceBackend* const reference = new ReferenceBackend();
  o.backend = reference;
  if (gpu) {
    o.engine_factory = [](Forecaster& m, Optimizer& optimizer, const TrainingLoss& loss,
                          const v1::TrainingConfig& config) {
      return MakeCudaTrainingEngine({}, m, optimizer, loss, config);
    };
  }
  return o;
}

struct JobRun {
  TrainResult result;
  std::vector<float> weights;
};

JobRun RunJob(TrainJobOptions options) {
  auto job = TrainJob::Create(std::move(options));
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  auto result = (*job)->Run();
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  const ParameterArena& p = (*job)->model().parameters();
  return {*result, std::vector<float>(p.data(), p.data() + p.size())};
}

ModelConfig SmallTransformer() {
  ModelConfig c = Base("toy_transformer");
  c.mutable_transformer()->set_d_model(16);
  c.mutable_transformer()->set_num_heads(2);
  c.mutable_transformer()->set_num_layers(2);
  c.mutable_transformer()->set_dim_feedforward(32);
  c.mutable_transformer()->set_dropout(0.1f);
  return c;
}

TEST_CASE("A TrainJob on the GPU learns as the CPU job does, and resumes from its checkpoint",
          "[gpu][train]") {
  testing::TempDir scratch;
  const fs::path dir = scratch.path();
  for (const ModelConfig& config : {Architectures()[0], SmallTransformer()}) {
    CAPTURE(config.name());
    const JobRun cpu = RunJob(JobOptions(dir, config, false));
    const JobRun gpu = RunJob(JobOptions(dir, config, true));
    REQUIRE(gpu.result.device == "cuda:0");
    REQUIRE(cpu.result.device == "cpu");
    REQUIRE(gpu.result.train_losses.size() == 4);
    // It learns: the last epoch's loss well below the first's.
    CHECK(gpu.result.train_losses.back() < 0.7 * gpu.result.train_losses.front());
    for (size_t e = 0; e < 4; ++e) {
      CAPTURE(e);
      CHECK(std::abs(gpu.result.train_losses[e] - cpu.result.train_losses[e]) <
            1e-3 * cpu.result.train_losses[e]);
      CHECK(std::abs(gpu.result.validation_losses[e] - cpu.result.validation_losses[e]) <
            1e-3 * cpu.result.validation_losses[e]);
    }
    CHECK(gpu.result.best_epoch == cpu.result.best_epoch);

    // Interrupted after epoch 2 and resumed: the weights an uninterrupted GPU job ends with.
    TrainJobOptions options = JobOptions(dir, config, true);
    options.checkpoint_path = (dir / (config.name() + ".ckpt")).string();
    TrainJob* raw = nullptr;
    options.on_progress = [&raw](const TrainProgress& p) {
      if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 2) raw->Cancel();
    };
    auto interrupted = TrainJob::Create(options);
    REQUIRE(interrupted.ok());
    raw = interrupted->get();
    REQUIRE((*interrupted)->Run().status().code() == absl::StatusCode::kCancelled);
    options.on_progress = nullptr;
    const JobRun resumed = RunJob(options);
    CHECK(resumed.result.resumed_from_epoch == 2);
    CHECK(MaxAbsDiff(resumed.weights.data(), gpu.weights.data(),
                     static_cast<int64_t>(gpu.weights.size())) < 1e-5);
  }
}

// Two hourly series stacked in one CSV: a load with a daily cycle, a promotion every fifth hour
// (known ahead) that lifts it, and each region's capacity (static).
std::string StackedCsv() {
  std::string csv = "time,region,load,promo,capacity\n";
  for (int s = 0; s < 2; ++s) {
    for (int i = 0; i < 120; ++i) {
      const float promo = (i + s) % 5 == 0 ? 1.0f : 0.0f;
      const float t = static_cast<float>(i);
      const float load = 20.0f + 15.0f * static_cast<float>(s) + 3.0f * std::sin(t * 0.2618f) +
                         2.0f * promo + 0.1f * std::sin(12.9898f * t);
      absl::StrAppend(&csv, 1704067200 + 3600 * i, ",", s == 0 ? "south" : "north", ",", load, ",",
                      promo, ",", 100 * (s + 1), "\n");
    }
  }
  return csv;
}

// A model of `c`'s architecture over the stacked series, with a future-known covariate, a
// calendar feature and a static covariate.
ModelConfig WithCovariates(ModelConfig c) {
  c.set_name(c.name() + "_covariates");
  c.clear_feature_names();
  c.clear_target_names();
  c.add_feature_names("load");
  c.add_feature_names("promo");
  c.add_target_names("load");
  c.mutable_covariates()->add_future("promo");
  c.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  c.mutable_covariates()->add_static_features("capacity");
  return c;
}

TEST_CASE("A TrainJob on stacked series with covariates runs on the GPU as on the CPU",
          "[gpu][train]") {
  testing::TempDir scratch;
  const fs::path dir = scratch.path();
  {
    std::ofstream out(dir / "regions.csv");
    out << StackedCsv();
  }
  for (const ModelConfig& config :
       {WithCovariates(Architectures()[0]), WithCovariates(SmallTransformer())}) {
    CAPTURE(config.name());
    const auto options = [&](bool gpu) {
      TrainJobOptions o = JobOptions(dir, config, gpu);
      o.training.mutable_data()->set_csv_path("regions.csv");
      o.training.mutable_data()->set_timestamp_column("time");
      o.training.mutable_data()->set_series_column("region");
      return o;
    };
    const JobRun cpu = RunJob(options(false));
    const JobRun gpu = RunJob(options(true));
    REQUIRE(gpu.result.device == "cuda:0");
    REQUIRE(gpu.result.train_losses.size() == 4);
    CHECK(gpu.result.train_losses.back() < gpu.result.train_losses.front());
    for (size_t e = 0; e < 4; ++e) {
      CAPTURE(e);
      CHECK(std::abs(gpu.result.train_losses[e] - cpu.result.train_losses[e]) <
            1e-3 * cpu.result.train_losses[e]);
      CHECK(std::abs(gpu.result.validation_losses[e] - cpu.result.validation_losses[e]) <
            1e-3 * cpu.result.validation_losses[e]);
    }
  }
}

TEST_CASE("bf16 mixed-precision training stays near fp32 training", "[gpu][train]") {
  testing::TempDir scratch;
  const fs::path dir = scratch.path();
  const ModelConfig config = SmallTransformer();
  const JobRun fp32 = RunJob(JobOptions(dir, config, true));
  TrainJobOptions options = JobOptions(dir, config, true);
  options.training.set_precision(v1::PRECISION_BF16);
  const JobRun bf16 = RunJob(options);
  // bf16 products really ran: the weights differ from fp32's ...
  CHECK(MaxAbsDiff(bf16.weights.data(), fp32.weights.data(),
                   static_cast<int64_t>(fp32.weights.size())) > 1e-6);
  // ... and the job learns as well, epoch by epoch within a few percent.
  for (size_t e = 0; e < fp32.result.train_losses.size(); ++e) {
    CAPTURE(e, bf16.result.train_losses[e], fp32.result.train_losses[e]);
    CHECK(std::abs(bf16.result.train_losses[e] - fp32.result.train_losses[e]) <
          5e-2 * fp32.result.train_losses[e]);
  }
  CHECK(bf16.result.train_losses.back() < 0.7 * bf16.result.train_losses.front());

  // FP16 needs loss scaling, which forecastd does not do; the CPU takes FP32 only.
  options.training.set_precision(v1::PRECISION_FP16);
  CHECK(TrainJob::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
  TrainJobOptions cpu = JobOptions(dir, config, false);
  cpu.training.set_precision(v1::PRECISION_BF16);
  CHECK(TrainJob::Create(cpu).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("A step too large for the GPU's memory is RESOURCE_EXHAUSTED; smaller ones still run",
          "[gpu][train]") {
  CudaAllocator::Options allocator_options;
  allocator_options.limit_bytes = int64_t{96} << 20;
  auto allocator = CudaAllocator::Create(allocator_options);
  REQUIRE(allocator.ok());
  const ModelConfig config = SmallTransformer();
  const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 3);
  v1::TrainingConfig training;
  auto optimizer = Optimizer::Create(training.optimizer(), model->parameters());
  auto loss = TrainingLoss::Create(training.loss(), config);
  REQUIRE((optimizer.ok() && loss.ok()));
  CudaTrainingEngineOptions options;
  options.allocator = allocator->get();
  options.workspace_bytes = int64_t{4} << 20;
  auto engine = MakeCudaTrainingEngine(options, *model, **optimizer, *loss, training);
  INFO(engine.status().ToString());
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Push().ok());
  // 20,000 windows: each layer's attention weights alone are 23 MB, the feed-forward
  // activations twice 31 MB.
  constexpr int64_t kHuge = 20000;
  const std::vector<float> x = RandomVector(kHuge * 12 * 2, 1);
  const std::vector<float> y = RandomVector(kHuge * loss->per_window(), 2);
  auto refused = (*engine)->Step(x.data(), y.data(), kHuge, 1e-3f, 5);
  CAPTURE(refused.status().ToString());
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  auto fine = (*engine)->Step(x.data(), y.data(), 8, 1e-3f, 5);
  INFO(fine.status().ToString());
  REQUIRE(fine.ok());
  REQUIRE(std::isfinite(*fine));
}

}  // namespace
}  // namespace forecastd
