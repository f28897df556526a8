// Data-parallel training on CPU ranks joined by host communicators: two ranks take the step
// one rank takes on the doubled batch; shards cover each global batch once; a TrainJob on two
// ranks sees every window of the epoch once, compares the ranks' weights after every epoch and
// resumes from its checkpoint bit for bit; a failing or drifting rank fails the job, never
// hangs it; and batches that do not split are refused.
#include "engine/train/data_parallel.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/match.h"
#include "absl/synchronization/mutex.h"
#include "backends/host_communicator.h"
#include "backends/reference_backend.h"
#include "engine/train/checkpoint.h"
#include "engine/train/train_job.h"
#include "engine/train/train_job_manager.h"
#include "kernels/base/status.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using data_test::TempDir;

ModelConfig Lstm() {
  ModelConfig c = data_test::SmallModel(12, 3, {"a", "b"}, {"a", "b"});
  c.mutable_lstm()->set_hidden_size(8);
  c.mutable_lstm()->set_num_layers(2);
  return c;
}

ModelConfig Transformer() {
  ModelConfig c = data_test::SmallModel(12, 3, {"a", "b"}, {"a", "b"});
  auto* t = c.mutable_transformer();
  t->set_d_model(8);
  t->set_num_heads(2);
  t->set_num_layers(1);
  t->set_dim_feedforward(16);
  return c;
}

// An engine that forwards to another and can be told to fail a step or to report other
// weights, and records the first input value of every window it steps over.
class ProbeEngine final : public TrainingEngine {
 public:
  struct Shared {
    absl::Mutex mu;
    std::vector<float> first_values ABSL_GUARDED_BY(mu);  // one per window stepped over
  };

  ProbeEngine(std::unique_ptr<TrainingEngine> inner, Forecaster& model, Shared* shared,
              int64_t window_floats)
      : inner_(std::move(inner)), model_(model), shared_(shared), window_floats_(window_floats) {}

  int fail_at_step = -1;       // StepShard fails with INTERNAL at this step (0-based)
  bool drift_on_pull = false;  // Pull changes one weight, as a rank gone astray would

  std::string device() const override { return inner_->device(); }
  absl::Status Push() override { return inner_->Push(); }
  absl::Status Pull() override {
    RETURN_IF_ERROR(inner_->Pull());
    if (drift_on_pull) model_.parameters().data()[0] += 1.0f;
    return absl::OkStatus();
  }
  absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> seed) override {
    return inner_->Step(x, y, B, lr, seed);
  }
  absl::StatusOr<double> StepShard(const float* x, const float* y, int64_t B, float lr,
                                   std::optional<uint64_t> seed, Communicator& communicator,
                                   float share) override {
    if (steps_++ == fail_at_step) return absl::InternalError("rank failed on purpose");
    if (shared_ != nullptr) {
      absl::MutexLock lock(&shared_->mu);
      for (int64_t i = 0; i < B; ++i) shared_->first_values.push_back(x[i * window_floats_]);
    }
    return inner_->StepShard(x, y, B, lr, seed, communicator, share);
  }
  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override {
    return inner_->Evaluate(x, y, B);
  }
  absl::Status BroadcastState(Communicator& communicator) override {
    return inner_->BroadcastState(communicator);
  }
  absl::Status HostCollective(float* values, int64_t n, Communicator& communicator,
                              std::optional<float> sum_scale) override {
    return inner_->HostCollective(values, n, communicator, sum_scale);
  }
  int64_t steps_taken() const override { return inner_->steps_taken(); }

 private:
  std::unique_ptr<TrainingEngine> inner_;
  Forecaster& model_;
  Shared* shared_;
  const int64_t window_floats_;
  int steps_ = 0;
};

// What the ranks' engines are made with in a test.
struct RankSetup {
  int ranks = 2;
  absl::Duration timeout = absl::Seconds(30);
  ProbeEngine::Shared* shared = nullptr;
  // Applied to local rank i's engine once made.
  std::function<void(int, ProbeEngine&)> configure;
};

// A factory of data-parallel engines over host ranks on `backend` (a fresh group per engine).
TrainingEngineFactory HostRanks(Backend& backend, RankSetup setup) {
  return [&backend, setup](
             Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
             const v1::TrainingConfig& config) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
    ASSIGN_OR_RETURN(auto group, MakeHostCommunicators(setup.ranks, setup.timeout));
    auto shared_group =
        std::make_shared<std::vector<std::unique_ptr<Communicator>>>(std::move(group));
    DataParallelOptions options;
    options.ranks = setup.ranks;
    options.make_communicator = [shared_group](int rank) {
      return absl::StatusOr<std::unique_ptr<Communicator>>(
          std::move((*shared_group)[static_cast<size_t>(rank)]));
    };
    options.make_engine =
        [&backend, setup](
            int rank, Forecaster& m, Optimizer& o, const TrainingLoss& l,
            const v1::TrainingConfig& c) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
      ASSIGN_OR_RETURN(auto inner, MakeHostTrainingEngine(backend, m, o, l, c));
      auto probe = std::make_unique<ProbeEngine>(std::move(inner), m, setup.shared,
                                                 m.lookback() * m.num_features());
      if (setup.configure) setup.configure(rank, *probe);
      return std::unique_ptr<TrainingEngine>(std::move(probe));
    };
    return MakeDataParallelTrainingEngine(std::move(options), model, optimizer, loss, config);
  };
}

bool Near(double a, double b, double tolerance) {
  return std::abs(a - b) <= tolerance * (1.0 + std::abs(b));
}

TEST_CASE("ShardRows splits a batch into contiguous shards, as evenly as it goes",
          "[unit][train][data_parallel]") {
  for (int64_t B : {1, 2, 7, 32, 33}) {
    for (int ranks : {1, 2, 3, 8}) {
      int64_t next = 0;
      for (int r = 0; r < ranks; ++r) {
        const auto [begin, end] = ShardRows(B, r, ranks);
        REQUIRE(begin == next);
        REQUIRE(end - begin >= B / ranks);
        REQUIRE(end - begin <= B / ranks + 1);
        next = end;
      }
      REQUIRE(next == B);
    }
  }
}

TEST_CASE("A backward pass reports the gradient blocks its model declares, in order",
          "[unit][train][data_parallel]") {
  ReferenceBackend backend;
  ModelConfig pre = Transformer();
  pre.mutable_transformer()->set_norm_first(true);
  pre.mutable_transformer()->set_num_layers(3);
  for (const ModelConfig& config : {Transformer(), pre, Lstm()}) {
    auto model = Forecaster::Create(config).value();
    const int64_t B = 3;
    std::vector<float> x(static_cast<size_t>(B * model->lookback() * model->num_features()), 0.5f);
    std::vector<float> out(static_cast<size_t>(B * model->num_outputs()));
    std::vector<float> dparams(static_cast<size_t>(model->parameters().size()));
    TrainingTape tape;
    std::vector<int64_t> reported;
    tape.on_gradients_final = [&](int64_t from) {
      reported.push_back(from);
      return absl::OkStatus();
    };
    REQUIRE(model->ForwardTrain(backend, out.data(), x.data(), B, tape).ok());
    REQUIRE(model->Backward(backend, dparams.data(), out.data(), tape).ok());
    REQUIRE(reported == model->GradientBlockStarts());
    if (config.has_transformer()) {
      REQUIRE(reported.size() == static_cast<size_t>(config.transformer().num_layers() + 1));
      REQUIRE(std::is_sorted(reported.rbegin(), reported.rend()));
    }
  }
}

TEST_CASE("Two CPU ranks take the steps one CPU rank takes on the doubled batch",
          "[unit][train][data_parallel]") {
  ReferenceBackend backend;
  // Adam turns a gradient that is rounding noise into a full step, and a transformer's key
  // bias has exactly that gradient (softmax ignores a shift of the scores), so the transformer
  // is compared under SGD with momentum; the LSTM under both.
  const std::vector<std::pair<ModelConfig, v1::OptimizerKind>> cases = {
      {Lstm(), v1::OPTIMIZER_ADAM},
      {Lstm(), v1::OPTIMIZER_SGD},
      {Transformer(), v1::OPTIMIZER_SGD}};
  for (const auto& [config, optimizer] : cases) {
    for (const int64_t B : {int64_t{16}, int64_t{7}}) {  // 7: shards of 3 and 4 rows
      CAPTURE(config.has_lstm(), v1::OptimizerKind_Name(optimizer), B);
      v1::TrainingConfig training;
      training.set_batch_size(16);
      training.mutable_optimizer()->set_kind(optimizer);
      training.mutable_optimizer()->set_momentum(0.9f);
      training.mutable_optimizer()->set_learning_rate(1e-2f);
      training.mutable_optimizer()->set_clip_grad_norm(0.5f);
      auto one_model = Forecaster::Create(config).value();
      std::mt19937 gen(5);
      std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
      for (int64_t i = 0; i < one_model->parameters().size(); ++i) {
        one_model->parameters().data()[i] = dist(gen);
      }
      auto two_model = Forecaster::Create(config).value();
      std::copy(one_model->parameters().data(),
                one_model->parameters().data() + one_model->parameters().size(),
                two_model->parameters().data());
      const TrainingLoss loss = TrainingLoss::Create(training.loss(), config).value();
      auto one_opt = Optimizer::Create(training.optimizer(), one_model->parameters()).value();
      auto two_opt = Optimizer::Create(training.optimizer(), two_model->parameters()).value();
      auto one = MakeHostTrainingEngine(backend, *one_model, *one_opt, loss, training).value();
      auto two = HostRanks(backend, {})(*two_model, *two_opt, loss, training);
      REQUIRE(two.ok());
      REQUIRE((*two)->device() == "cpu,cpu");
      REQUIRE((*two)->Push().ok());

      const int64_t x_floats = B * one_model->lookback() * one_model->num_features();
      const int64_t y_floats = B * loss.per_window();
      std::vector<float> x(static_cast<size_t>(x_floats)), y(static_cast<size_t>(y_floats));
      std::normal_distribution<float> normal;
      for (int step = 0; step < 5; ++step) {
        for (float& v : x) v = normal(gen);
        for (float& v : y) v = normal(gen);
        const double a = one->Step(x.data(), y.data(), B, 1e-2f, std::nullopt).value();
        const absl::StatusOr<double> b = (*two)->Step(x.data(), y.data(), B, 1e-2f, std::nullopt);
        REQUIRE(b.ok());
        REQUIRE(Near(*b, a, 1e-6));
      }
      REQUIRE((*two)->steps_taken() == 5);
      REQUIRE((*two)->Pull().ok());
      const ParameterArena& p1 = one_model->parameters();
      const ParameterArena& p2 = two_model->parameters();
      double worst = 0.0;
      for (int64_t i = 0; i < p1.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(p2.data()[i]) - p1.data()[i]) /
                                    (1.0 + std::abs(static_cast<double>(p1.data()[i]))));
      }
      CAPTURE(worst);
      REQUIRE(worst <= 1e-6);
      // Both ranks hold bitwise the same weights.
      const std::vector<uint64_t> sums = (*two)->WeightChecksums().value();
      REQUIRE(sums.size() == 2);
      REQUIRE(sums[0] == sums[1]);
      // Evaluation splits the windows between the ranks and weighs them back together.
      const double e1 = one->Evaluate(x.data(), y.data(), B).value();
      const double e2 = (*two)->Evaluate(x.data(), y.data(), B).value();
      REQUIRE(Near(e2, e1, 1e-6));
    }
  }
}

TrainJobOptions JobOptions(const TempDir& dir, Backend& backend) {
  TrainJobOptions o;
  o.model = Lstm();
  v1::InlineSeries series;
  series.set_rows(230);
  for (int i = 0; i < 230; ++i) {
    // The first feature is the row index, so a window's first value names it.
    series.add_values(static_cast<float>(i));
    series.add_values(std::sin(0.3f * static_cast<float>(i)));
  }
  *o.training.mutable_data()->mutable_inline_series() = series;
  o.training.set_epochs(3);
  o.training.set_batch_size(16);
  o.training.set_seed(3);
  o.training.mutable_optimizer()->set_learning_rate(1e-2f);
  o.model_dir = (dir.path / "m").string();
  o.data_dir = dir.path;
  o.backend = &backend;
  o.publish = false;
  return o;
}

TEST_CASE("A job on two CPU ranks steps over every window of an epoch once",
          "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  options.training.set_epochs(1);
  // One rank without the data-parallel engine: the windows the epoch's permutation holds.
  ProbeEngine::Shared alone;
  RankSetup single;
  single.ranks = 1;
  single.shared = &alone;
  options.engine_factory = HostRanks(backend, single);
  auto job = TrainJob::Create(options).value();
  REQUIRE(job->Run().ok());

  ProbeEngine::Shared both;
  RankSetup two;
  two.shared = &both;
  options.engine_factory = HostRanks(backend, two);
  auto job2 = TrainJob::Create(options).value();
  const auto result = job2->Run();
  REQUIRE(result.ok());
  REQUIRE(result->device == "cpu,cpu");

  absl::MutexLock lock_alone(&alone.mu);
  absl::MutexLock lock_both(&both.mu);
  std::vector<float> expected = alone.first_values, seen = both.first_values;
  REQUIRE(static_cast<int64_t>(expected.size()) == job->dataset().num_train_windows());
  std::sort(expected.begin(), expected.end());
  std::sort(seen.begin(), seen.end());
  REQUIRE(std::adjacent_find(seen.begin(), seen.end()) == seen.end());  // none twice
  REQUIRE(seen == expected);                                            // none skipped
}

TEST_CASE("A job on two CPU ranks matches one rank's losses and resumes bit for bit",
          "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  const TrainResult one = [&] {
    auto job = TrainJob::Create(options).value();
    return job->Run().value();
  }();
  options.engine_factory = HostRanks(backend, {});
  const TrainResult straight = TrainJob::Create(options).value()->Run().value();
  REQUIRE(straight.train_losses.size() == one.train_losses.size());
  for (size_t e = 0; e < one.train_losses.size(); ++e) {
    REQUIRE(Near(straight.train_losses[e], one.train_losses[e], 1e-5));
    REQUIRE(Near(straight.validation_losses[e], one.validation_losses[e], 1e-5));
  }

  options.checkpoint_path = (dir.path / "job.ckpt").string();
  TrainJob* raw = nullptr;
  options.on_progress = [&](const TrainProgress& p) {
    if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 1) raw->Cancel();
  };
  auto interrupted = TrainJob::Create(options).value();
  raw = interrupted.get();
  REQUIRE(interrupted->Run().status().code() == absl::StatusCode::kCancelled);
  REQUIRE(ReadCheckpoint(options.checkpoint_path).value().epochs_done == 1);
  options.on_progress = nullptr;
  const TrainResult resumed = TrainJob::Create(options).value()->Run().value();
  REQUIRE(resumed.resumed_from_epoch == 1);
  REQUIRE(resumed.train_losses == straight.train_losses);
  REQUIRE(resumed.validation_losses == straight.validation_losses);
  REQUIRE(resumed.steps == straight.steps);
}

// The engine factory of "process" `first_rank` of a group of two: one rank, its end of `group`,
// its engine a ProbeEngine that `configure` (if any) sets up.
TrainingEngineFactory OneOfTwoProcesses(
    Backend& backend, std::shared_ptr<std::vector<std::unique_ptr<Communicator>>> group,
    int first_rank, std::function<void(ProbeEngine&)> configure = nullptr) {
  return [&backend, group, first_rank, configure](Forecaster& model, Optimizer& optimizer,
                                                  const TrainingLoss& loss,
                                                  const v1::TrainingConfig& config) {
    DataParallelOptions options;
    options.ranks = 1;
    options.world_size = 2;
    options.first_rank = first_rank;
    options.make_communicator = [group, first_rank](int) {
      return absl::StatusOr<std::unique_ptr<Communicator>>(
          std::move((*group)[static_cast<size_t>(first_rank)]));
    };
    options.make_engine =
        [&backend, configure](
            int, Forecaster& m, Optimizer& o, const TrainingLoss& l,
            const v1::TrainingConfig& c) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
      ASSIGN_OR_RETURN(auto inner, MakeHostTrainingEngine(backend, m, o, l, c));
      auto probe = std::make_unique<ProbeEngine>(std::move(inner), m, nullptr,
                                                 m.lookback() * m.num_features());
      if (configure) configure(*probe);
      return std::unique_ptr<TrainingEngine>(std::move(probe));
    };
    return MakeDataParallelTrainingEngine(std::move(options), model, optimizer, loss, config);
  };
}

// Runs a coordinator job and a worker job of one group of two ranks side by side (as two
// daemons would), calling `created` with both before they run; the coordinator's result and the
// worker's status. When the coordinator ends, the worker is cancelled, as the coordinating
// daemon does with its workers' jobs.
std::pair<absl::StatusOr<TrainResult>, absl::Status> RunAsTwoProcesses(
    Backend& backend, TrainJobOptions coordinator, TrainJobOptions worker,
    const std::function<void(TrainJob&, TrainJob&)>& created = nullptr) {
  auto group = std::make_shared<std::vector<std::unique_ptr<Communicator>>>(
      MakeHostCommunicators(2, absl::Seconds(60)).value());
  coordinator.engine_factory = OneOfTwoProcesses(backend, group, 0);
  coordinator.make_engine_in_run = true;
  worker.engine_factory = OneOfTwoProcesses(backend, group, 1);
  worker.make_engine_in_run = true;
  worker.worker = true;
  worker.publish = false;
  worker.checkpoint_path.clear();
  worker.on_progress = nullptr;
  auto first = TrainJob::Create(coordinator);
  auto second = TrainJob::Create(worker);
  REQUIRE(first.ok());
  REQUIRE(second.ok());
  if (created) created(**first, **second);
  absl::Status worker_status;
  std::thread worker_thread([&] { worker_status = (*second)->Run().status(); });
  absl::StatusOr<TrainResult> result = (*first)->Run();
  (*second)->Cancel();
  worker_thread.join();
  return {std::move(result), worker_status};
}

TEST_CASE("A job whose two ranks are in two processes trains as the one-process job does",
          "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  options.training.set_early_stopping_patience(1);
  options.training.set_epochs(6);
  options.engine_factory = HostRanks(backend, {});
  const TrainResult together = TrainJob::Create(options).value()->Run().value();

  auto [split, worker_status] = RunAsTwoProcesses(backend, options, options);
  INFO(split.status().ToString() << " / worker: " << worker_status.ToString());
  REQUIRE(split.ok());
  REQUIRE(worker_status.ok());
  // The same steps in the same order; the losses sum across processes instead of inside one.
  REQUIRE(split->steps == together.steps);
  REQUIRE(split->epochs_run == together.epochs_run);
  REQUIRE(split->stopped_early == together.stopped_early);
  for (size_t e = 0; e < together.train_losses.size(); ++e) {
    REQUIRE(Near(split->train_losses[e], together.train_losses[e], 1e-6));
    REQUIRE(Near(split->validation_losses[e], together.validation_losses[e], 1e-6));
  }
}

TEST_CASE(
    "A job over two processes resumed from the coordinator's checkpoint continues bit for "
    "bit, the worker brought to its epoch and weights",
    "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  options.checkpoint_path = (dir.path / "split.ckpt").string();
  auto [straight, straight_worker] = RunAsTwoProcesses(backend, options, options);
  REQUIRE(straight.ok());
  REQUIRE(straight_worker.ok());
  std::filesystem::remove(options.checkpoint_path);

  TrainJob* coordinator = nullptr;
  TrainJobOptions interrupted = options;
  interrupted.on_progress = [&](const TrainProgress& p) {
    if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 1) coordinator->Cancel();
  };
  auto [cancelled, cancelled_worker] = RunAsTwoProcesses(
      backend, interrupted, options, [&](TrainJob& c, TrainJob&) { coordinator = &c; });
  REQUIRE(cancelled.status().code() == absl::StatusCode::kCancelled);
  // The worker was waiting for the coordinator's next step: its job ends, not hangs.
  REQUIRE(!cancelled_worker.ok());
  REQUIRE(ReadCheckpoint(options.checkpoint_path).value().epochs_done == 1);

  auto [resumed, resumed_worker] = RunAsTwoProcesses(backend, options, options);
  INFO(resumed.status().ToString() << " / worker: " << resumed_worker.ToString());
  REQUIRE(resumed.ok());
  REQUIRE(resumed_worker.ok());
  REQUIRE(resumed->resumed_from_epoch == 1);
  REQUIRE(resumed->train_losses == straight->train_losses);
  REQUIRE(resumed->validation_losses == straight->validation_losses);
  REQUIRE(resumed->steps == straight->steps);
}

// A job of a TrainJobManager whose one worker (rank 1, run here on a thread as a worker daemon
// would run it) fails its step `worker_fails_at`.
struct LostWorkerRun {
  JobSnapshot snapshot;
  absl::Status worker;
};

LostWorkerRun RunWithLostWorker(bool resume_on_failure, int worker_fails_at) {
  TempDir dir;
  ReferenceBackend backend;
  std::thread worker_thread;
  std::unique_ptr<TrainJob> worker_job;
  absl::Status worker_status;
  TrainJobManager::Options o;
  o.repository = (dir.path / "models").string();
  o.checkpoint_dir = (dir.path / "checkpoints").string();
  o.data_dir = dir.path;
  o.backend = &backend;
  o.join_workers = [&](const std::string&, const ModelConfig& config,
                       const v1::TrainingConfig& training) -> absl::StatusOr<JoinedWorkers> {
    auto group = std::make_shared<std::vector<std::unique_ptr<Communicator>>>(
        MakeHostCommunicators(2, absl::Seconds(60)).value());
    TrainJobOptions w;
    w.model = config;
    w.training = training;
    w.training.clear_workers();
    w.data_dir = dir.path;
    w.publish = false;
    w.worker = true;
    w.make_engine_in_run = true;
    w.engine_factory = OneOfTwoProcesses(
        backend, group, 1, [worker_fails_at](ProbeEngine& e) { e.fail_at_step = worker_fails_at; });
    ASSIGN_OR_RETURN(worker_job, TrainJob::Create(w));
    worker_thread = std::thread([&] { worker_status = worker_job->Run().status(); });
    JoinedWorkers joined;
    joined.placement.engine_factory = OneOfTwoProcesses(backend, group, 0);
    joined.end = [&] { worker_job->Cancel(); };
    joined.unreachable = [] { return std::string("10.0.0.2:8001 (gone)"); };
    return joined;
  };
  auto manager = TrainJobManager::Create(o).value();
  TrainJobManager::StartRequest request;
  request.model = std::string("m");
  request.config = Lstm();
  const std::string model_name = "m";
  request.config->set_name(model_name);
  request.training = JobOptions(dir, backend).training;
  request.training.set_epochs(3);
  request.training.add_workers()->set_address("10.0.0.2:8001");
  request.training.set_resume_on_failure(resume_on_failure);
  const absl::StatusOr<std::string> id = manager->Start(request);
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  LostWorkerRun run;
  run.snapshot = manager
                     ->Watch(
                         *id, [](const TrainProgress&) { return true; }, [] { return false; })
                     .value();
  manager->Shutdown();
  if (worker_thread.joinable()) worker_thread.join();
  run.worker = worker_status;
  return run;
}

TEST_CASE("A job that loses its worker fails naming it, or goes on alone from its checkpoint",
          "[unit][train][data_parallel]") {
  // 11 steps an epoch: the worker fails in the second epoch, after one checkpoint.
  const LostWorkerRun failed = RunWithLostWorker(/*resume_on_failure=*/false, 15);
  CAPTURE(failed.snapshot.error);
  REQUIRE(failed.snapshot.state == JobState::kFailed);
  REQUIRE(absl::StrContains(failed.snapshot.error, "lost worker 10.0.0.2:8001 (gone)"));
  REQUIRE(failed.snapshot.result.version == 0);
  CAPTURE(failed.worker.ToString());
  REQUIRE(absl::StrContains(failed.worker.message(), "rank failed on purpose"));

  const LostWorkerRun resumed = RunWithLostWorker(/*resume_on_failure=*/true, 15);
  CAPTURE(resumed.snapshot.error);
  REQUIRE(resumed.snapshot.state == JobState::kSucceeded);
  REQUIRE(resumed.snapshot.result.resumed_from_epoch == 1);
  REQUIRE(resumed.snapshot.result.epochs_run == 3);
  REQUIRE(resumed.snapshot.result.device == "cpu");
  REQUIRE(resumed.snapshot.result.version == 1);
}

TEST_CASE("Ranks whose weights differ after an epoch fail the job with INTERNAL",
          "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  RankSetup setup;
  setup.configure = [](int rank, ProbeEngine& engine) { engine.drift_on_pull = rank == 1; };
  options.engine_factory = HostRanks(backend, setup);
  const auto result = TrainJob::Create(options).value()->Run();
  REQUIRE(result.status().code() == absl::StatusCode::kInternal);
  REQUIRE(absl::StrContains(result.status().message(), "weights differ after epoch 1"));
}

TEST_CASE("A rank that fails a step fails the job with its error while the other rank waits",
          "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  RankSetup setup;
  // A long timeout: the other rank must be released by the abort, not by the clock.
  setup.timeout = absl::Seconds(600);
  setup.configure = [](int rank, ProbeEngine& engine) {
    if (rank == 1) engine.fail_at_step = 3;
  };
  options.engine_factory = HostRanks(backend, setup);
  const absl::Time start = absl::Now();
  const auto result = TrainJob::Create(options).value()->Run();
  REQUIRE(result.status().code() == absl::StatusCode::kInternal);
  REQUIRE(absl::StrContains(result.status().message(), "rank failed on purpose"));
  REQUIRE(absl::Now() - start < absl::Seconds(60));
}

TEST_CASE("A rank lost inside a collective fails the step at the timeout",
          "[unit][train][data_parallel]") {
  ReferenceBackend backend;
  v1::TrainingConfig training;
  training.set_batch_size(4);
  const ModelConfig config = Lstm();
  auto model = Forecaster::Create(config).value();
  const TrainingLoss loss = TrainingLoss::Create(training.loss(), config).value();
  auto optimizer = Optimizer::Create(training.optimizer(), model->parameters()).value();
  // Three ranks in the group, two of them here: the third never comes.
  auto group = MakeHostCommunicators(3, absl::Milliseconds(300)).value();
  auto shared_group = std::make_shared<decltype(group)>(std::move(group));
  DataParallelOptions options;
  options.ranks = 2;
  options.world_size = 3;
  options.make_communicator = [shared_group](int rank) {
    return absl::StatusOr<std::unique_ptr<Communicator>>(
        std::move((*shared_group)[static_cast<size_t>(rank)]));
  };
  options.make_engine = [&backend](int, Forecaster& m, Optimizer& o, const TrainingLoss& l,
                                   const v1::TrainingConfig& c) {
    return MakeHostTrainingEngine(backend, m, o, l, c);
  };
  training.set_batch_size(6);
  auto engine = MakeDataParallelTrainingEngine(options, *model, *optimizer, loss, training);
  REQUIRE(engine.ok());
  const int64_t B = 6;
  std::vector<float> x(static_cast<size_t>(B * model->lookback() * model->num_features()), 0.1f);
  std::vector<float> y(static_cast<size_t>(B * loss.per_window()), 0.2f);
  const absl::Time start = absl::Now();
  const auto step = (*engine)->Step(x.data(), y.data(), B, 1e-3f, std::nullopt);
  REQUIRE(step.status().code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(absl::Now() - start < absl::Seconds(30));
}

TEST_CASE("A batch that does not split over the ranks is refused", "[unit][train][data_parallel]") {
  TempDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = JobOptions(dir, backend);
  options.training.set_batch_size(15);
  options.engine_factory = HostRanks(backend, {});
  const auto job = TrainJob::Create(options);
  REQUIRE(job.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(job.status().message(), "does not split evenly over 2 devices"));
}

}  // namespace
}  // namespace forecastd
