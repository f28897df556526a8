// Needs two GPUs (the binary is skipped on a host with fewer). Data-parallel training over NCCL:
// two GPUs take the steps one GPU takes on the same global batch (losses and weights within
// 1e-5, fp32), with the ranks' weights bitwise identical; bf16 mixed precision trains on two
// GPUs alike; a TrainJob on two GPUs validates, checkpoints and resumes bit for bit; and a
// rank that fails ends the step on both GPUs with its error instead of a hang.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/nccl_communicator.h"
#include "engine/train/checkpoint.h"
#include "engine/train/cuda_training_engine.h"
#include "engine/train/data_parallel.h"
#include "engine/train/train_job.h"
#include "kernels/base/status.h"
#include "tests/testing/catch.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

ModelConfig Base(const std::string& name) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(16);
  c.set_horizon(3);
  for (const std::string f : {"a", "b"}) {
    c.add_feature_names(f);
    c.add_target_names(f);
  }
  return c;
}

ModelConfig Lstm() {
  ModelConfig c = Base("lstm");
  c.mutable_lstm()->set_hidden_size(32);
  c.mutable_lstm()->set_num_layers(2);
  c.mutable_lstm()->set_bidirectional(true);
  return c;
}

ModelConfig Transformer() {
  ModelConfig c = Base("transformer");
  auto* t = c.mutable_transformer();
  t->set_d_model(32);
  t->set_num_heads(4);
  t->set_num_layers(2);
  t->set_dim_feedforward(64);
  return c;
}

std::vector<CudaTrainingEngineOptions> Gpus(std::initializer_list<int> ordinals) {
  std::vector<CudaTrainingEngineOptions> ranks;
  for (const int d : ordinals) {
    CudaTrainingEngineOptions o;
    o.device = d;
    ranks.push_back(o);
  }
  return ranks;
}

double RelativeDiff(double a, double b) { return std::abs(a - b) / (1.0 + std::abs(b)); }

struct StepRun {
  std::vector<double> losses;
  std::vector<float> weights;
  std::vector<uint64_t> checksums;
};

// `steps` steps of `config` from seeded weights on the engines `factory` makes, on random
// batches of B windows that depend on the step alone.
StepRun RunSteps(const ModelConfig& config, const v1::TrainingConfig& training,
                 const TrainingEngineFactory& factory, int64_t B, int steps) {
  const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 17);
  auto optimizer = Optimizer::Create(training.optimizer(), model->parameters());
  REQUIRE(optimizer.ok());
  auto loss = TrainingLoss::Create(training.loss(), config);
  REQUIRE(loss.ok());
  auto engine = factory(*model, **optimizer, *loss, training);
  INFO(engine.status().ToString());
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Push().ok());
  StepRun run;
  std::mt19937 gen(23);
  std::normal_distribution<float> normal;
  std::vector<float> x(static_cast<size_t>(B * config.lookback() * 2));
  std::vector<float> y(static_cast<size_t>(B * loss->per_window()));
  for (int step = 0; step < steps; ++step) {
    for (float& v : x) v = normal(gen);
    for (float& v : y) v = normal(gen);
    auto l = (*engine)->Step(x.data(), y.data(), B, 1e-3f, std::nullopt);
    INFO(l.status().ToString());
    REQUIRE(l.ok());
    run.losses.push_back(*l);
  }
  auto sums = (*engine)->WeightChecksums();
  REQUIRE(sums.ok());
  run.checksums = *sums;
  REQUIRE((*engine)->Pull().ok());
  run.weights.assign(model->parameters().data(),
                     model->parameters().data() + model->parameters().size());
  return run;
}

TEST_CASE("Two GPUs take the ten steps one GPU takes on the same global batch, fp32",
          "[gpu][train][data_parallel]") {
  // Adam for the LSTM; SGD with momentum for the transformer, whose key bias has a gradient of
  // pure rounding noise that Adam would turn into full steps.
  const std::vector<std::pair<ModelConfig, v1::OptimizerKind>> cases = {
      {Lstm(), v1::OPTIMIZER_ADAM}, {Transformer(), v1::OPTIMIZER_SGD}};
  for (const auto& [config, optimizer] : cases) {
    for (const int64_t B : {int64_t{32}, int64_t{13}}) {  // 13: shards of 6 and 7
      CAPTURE(config.name(), B);
      v1::TrainingConfig training;
      training.set_batch_size(32);
      training.set_precision(v1::PRECISION_FP32);
      training.mutable_optimizer()->set_kind(optimizer);
      training.mutable_optimizer()->set_momentum(0.9f);
      training.mutable_optimizer()->set_clip_grad_norm(1.0f);
      const StepRun one = RunSteps(
          config, training, MakeGpuTrainingEngineFactory(Gpus({0}), absl::Seconds(60)), B, 10);
      const StepRun two = RunSteps(
          config, training, MakeGpuTrainingEngineFactory(Gpus({0, 1}), absl::Seconds(60)), B, 10);
      for (size_t s = 0; s < one.losses.size(); ++s) {
        CAPTURE(s, one.losses[s], two.losses[s]);
        CHECK(RelativeDiff(two.losses[s], one.losses[s]) <= 1e-5);
      }
      double worst = 0.0;
      for (size_t i = 0; i < one.weights.size(); ++i) {
        worst = std::max(worst, RelativeDiff(two.weights[i], one.weights[i]));
      }
      CAPTURE(worst);
      CHECK(worst <= 1e-5);
      REQUIRE(two.checksums.size() == 2);
      CHECK(two.checksums[0] == two.checksums[1]);
    }
  }
}

TEST_CASE("Gradient sums in buckets during the backward give the steps of one sum after it",
          "[gpu][train][data_parallel]") {
  v1::TrainingConfig training;
  training.set_batch_size(32);
  training.set_precision(v1::PRECISION_FP32);
  training.mutable_optimizer()->set_kind(v1::OPTIMIZER_SGD);
  training.mutable_optimizer()->set_momentum(0.9f);
  std::vector<CudaTrainingEngineOptions> bucketed = Gpus({0, 1});
  for (CudaTrainingEngineOptions& rank : bucketed) rank.gradient_bucket_bytes = 1;  // every block
  for (const int64_t B : {int64_t{32}, int64_t{1}}) {  // 1: rank 1 has no windows
    CAPTURE(B);
    const StepRun whole =
        RunSteps(Transformer(), training,
                 MakeGpuTrainingEngineFactory(Gpus({0, 1}), absl::Seconds(60)), B, 5);
    const StepRun buckets = RunSteps(
        Transformer(), training, MakeGpuTrainingEngineFactory(bucketed, absl::Seconds(60)), B, 5);
    CHECK(buckets.losses == whole.losses);
    CHECK(buckets.weights == whole.weights);
    REQUIRE(buckets.checksums.size() == 2);
    CHECK(buckets.checksums[0] == buckets.checksums[1]);
  }
}

TEST_CASE("bf16 mixed precision trains on two GPUs with the ranks identical",
          "[gpu][train][data_parallel]") {
  v1::TrainingConfig training;
  training.set_batch_size(32);
  training.set_precision(v1::PRECISION_BF16);
  for (const ModelConfig& config : {Lstm(), Transformer()}) {
    CAPTURE(config.name());
    const StepRun one = RunSteps(
        config, training, MakeGpuTrainingEngineFactory(Gpus({0}), absl::Seconds(60)), 32, 10);
    const StepRun two = RunSteps(
        config, training, MakeGpuTrainingEngineFactory(Gpus({0, 1}), absl::Seconds(60)), 32, 10);
    REQUIRE(two.checksums.size() == 2);
    CHECK(two.checksums[0] == two.checksums[1]);
    for (size_t s = 0; s < one.losses.size(); ++s) {
      CAPTURE(s, one.losses[s], two.losses[s]);
      REQUIRE(std::isfinite(two.losses[s]));
      // bf16 products over shards of another size round differently; the trajectory stays.
      CHECK(RelativeDiff(two.losses[s], one.losses[s]) <= 2e-2);
    }
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

TEST_CASE("A job on two GPUs learns as on one, validates once per epoch and resumes bit for bit",
          "[gpu][train][data_parallel]") {
  const fs::path dir = fs::temp_directory_path() / absl::StrCat("dp_gpu_test_", getpid());
  fs::remove_all(dir);
  fs::create_directories(dir);
  TrainJobOptions o;
  o.model = Lstm();
  o.training.mutable_data()->mutable_inline_series()->CopyFrom(Series(600));
  o.training.set_epochs(4);
  o.training.set_batch_size(32);
  o.training.set_seed(7);
  o.training.set_precision(v1::PRECISION_FP32);
  o.training.mutable_optimizer()->set_learning_rate(1e-2f);
  o.model_dir = (dir / "lstm").string();
  o.data_dir = dir;
  o.publish = false;
  o.engine_factory = MakeGpuTrainingEngineFactory(Gpus({0}), absl::Seconds(60));
  const TrainResult one = TrainJob::Create(o).value()->Run().value();
  REQUIRE(one.device == "cuda:0");

  o.engine_factory = MakeGpuTrainingEngineFactory(Gpus({0, 1}), absl::Seconds(60));
  const TrainResult straight = TrainJob::Create(o).value()->Run().value();
  REQUIRE(straight.device == "cuda:0,cuda:1");
  REQUIRE(straight.steps == one.steps);
  REQUIRE(straight.validation_losses.size() == 4);
  for (size_t e = 0; e < one.train_losses.size(); ++e) {
    CAPTURE(e, one.train_losses[e], straight.train_losses[e]);
    CHECK(RelativeDiff(straight.train_losses[e], one.train_losses[e]) <= 1e-4);
    CHECK(RelativeDiff(straight.validation_losses[e], one.validation_losses[e]) <= 1e-4);
  }
  CHECK(straight.train_losses.back() < straight.train_losses.front());

  o.checkpoint_path = (dir / "job.ckpt").string();
  TrainJob* raw = nullptr;
  o.on_progress = [&](const TrainProgress& p) {
    if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 2) raw->Cancel();
  };
  auto interrupted = TrainJob::Create(o).value();
  raw = interrupted.get();
  REQUIRE(interrupted->Run().status().code() == absl::StatusCode::kCancelled);
  REQUIRE(ReadCheckpoint(o.checkpoint_path).value().epochs_done == 2);
  o.on_progress = nullptr;
  const TrainResult resumed = TrainJob::Create(o).value()->Run().value();
  REQUIRE(resumed.resumed_from_epoch == 2);
  REQUIRE(resumed.train_losses == straight.train_losses);
  REQUIRE(resumed.validation_losses == straight.validation_losses);
  fs::remove_all(dir);
}

// A rank's engine that fails its step `fail_at` (0-based) before joining the collective.
class FailingRank final : public TrainingEngine {
 public:
  FailingRank(std::unique_ptr<TrainingEngine> inner, int fail_at)
      : inner_(std::move(inner)), fail_at_(fail_at) {}
  std::string device() const override { return inner_->device(); }
  absl::Status Push() override { return inner_->Push(); }
  absl::Status Pull() override { return inner_->Pull(); }
  absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> seed) override {
    return inner_->Step(x, y, B, lr, seed);
  }
  absl::StatusOr<double> StepShard(const float* x, const float* y, int64_t B, float lr,
                                   std::optional<uint64_t> seed, Communicator& communicator,
                                   float share) override {
    if (steps_++ == fail_at_) return absl::InternalError("rank 1 failed on purpose");
    return inner_->StepShard(x, y, B, lr, seed, communicator, share);
  }
  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override {
    return inner_->Evaluate(x, y, B);
  }
  int64_t steps_taken() const override { return inner_->steps_taken(); }

 private:
  std::unique_ptr<TrainingEngine> inner_;
  const int fail_at_;
  int steps_ = 0;
};

TEST_CASE("A GPU rank that fails ends the step on both GPUs with its error, not a hang",
          "[gpu][train][data_parallel]") {
  const ModelConfig config = Lstm();
  v1::TrainingConfig training;
  training.set_batch_size(8);
  const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 3);
  auto optimizer = Optimizer::Create(training.optimizer(), model->parameters()).value();
  auto loss = TrainingLoss::Create(training.loss(), config).value();
  const std::string id = NewNcclUniqueId().value();
  DataParallelOptions options;
  options.ranks = 2;
  options.make_communicator = [id](int rank) {
    NcclCommunicatorOptions nccl;
    nccl.device = rank;
    nccl.rank = rank;
    nccl.size = 2;
    nccl.unique_id = id;
    nccl.timeout = absl::Seconds(120);  // the abort, not the clock, must end rank 0's wait
    return CreateNcclCommunicator(nccl);
  };
  options.make_engine =
      [](int rank, Forecaster& m, Optimizer& o, const TrainingLoss& l,
         const v1::TrainingConfig& c) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
    CudaTrainingEngineOptions gpu;
    gpu.device = rank;
    ASSIGN_OR_RETURN(auto engine, MakeCudaTrainingEngine(gpu, m, o, l, c));
    if (rank == 0) return engine;
    return std::unique_ptr<TrainingEngine>(std::make_unique<FailingRank>(std::move(engine), 2));
  };
  auto engine = MakeDataParallelTrainingEngine(options, *model, *optimizer, loss, training);
  INFO(engine.status().ToString());
  REQUIRE(engine.ok());
  REQUIRE((*engine)->Push().ok());
  std::vector<float> x(static_cast<size_t>(8 * config.lookback() * 2), 0.1f);
  std::vector<float> y(static_cast<size_t>(8 * loss.per_window()), 0.2f);
  REQUIRE((*engine)->Step(x.data(), y.data(), 8, 1e-3f, std::nullopt).ok());
  REQUIRE((*engine)->Step(x.data(), y.data(), 8, 1e-3f, std::nullopt).ok());
  const absl::Time start = absl::Now();
  const auto failed = (*engine)->Step(x.data(), y.data(), 8, 1e-3f, std::nullopt);
  CAPTURE(failed.status().ToString(), absl::Now() - start);
  REQUIRE(failed.status().code() == absl::StatusCode::kInternal);
  REQUIRE(absl::StrContains(failed.status().message(), "rank 1 failed on purpose"));
  REQUIRE(absl::Now() - start < absl::Seconds(60));
  // The group is over: the next step says so rather than waiting.
  REQUIRE(!(*engine)->Step(x.data(), y.data(), 8, 1e-3f, std::nullopt).ok());
}

}  // namespace
}  // namespace forecastd
