// TrainJob end to end on small series: it learns, is deterministic for a seed, stops early
// and keeps the best epoch, cancels, resumes from a checkpoint bit for bit (with dropout too),
// fine-tunes from a published version, reports progress, and refuses bad requests before
// doing any work; stateful (truncated BPTT) jobs train, publish and refuse what they cannot
// train.
#include "engine/train/train_job.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/models/model_files.h"
#include "engine/train/checkpoint.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it when the test ends.
class ScratchDir {
 public:
  ScratchDir() {
    static int counter = 0;
    path_ = fs::temp_directory_path() /
            absl::StrCat("forecastd_train_job_test_", getpid(), "_", counter++);
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code error;
    fs::remove_all(path_, error);
  }
  const fs::path& path() const { return path_; }

 private:
  fs::path path_;
};

// Two features with daily-like cycles and a little deterministic noise; `a` leads `b`.
v1::InlineSeries Series(int rows, float phase = 0.0f) {
  v1::InlineSeries s;
  s.set_rows(rows);
  for (int i = 0; i < rows; ++i) {
    const float t = static_cast<float>(i) + phase;
    const float noise = 0.05f * std::sin(12.9898f * t);
    s.add_values(10.0f + 3.0f * std::sin(t * 0.3f) + noise);
    s.add_values(-2.0f + 0.5f * std::sin(t * 0.3f - 0.6f) + 0.2f * std::cos(t * 0.11f));
  }
  return s;
}

ModelConfig Lstm() {
  ModelConfig c;
  c.set_name("toy");
  c.set_lookback(12);
  c.set_horizon(3);
  // Through std::string: GCC 12 at -O3 warns falsely (-Wrestrict) on the const char* overloads.
  for (const std::string name : {"a", "b"}) {
    c.add_feature_names(name);
    c.add_target_names(name);
  }
  c.mutable_lstm()->set_hidden_size(8);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

TrainJobOptions Options(Backend* backend, const fs::path& dir, const ModelConfig& model) {
  TrainJobOptions o;
  o.model = model;
  o.training.mutable_data()->mutable_inline_series()->CopyFrom(Series(240));
  o.training.set_epochs(4);
  o.training.set_batch_size(16);
  o.training.set_seed(7);
  o.training.mutable_optimizer()->set_learning_rate(1e-2f);
  o.model_dir = (dir / model.name()).string();
  o.data_dir = dir;
  o.backend = backend;
  o.publish = false;
  return o;
}

TrainResult RunOk(TrainJobOptions options) {
  auto job = TrainJob::Create(std::move(options));
  INFO(job.status().ToString());
  REQUIRE(job.ok());
  auto result = (*job)->Run();
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  return *result;
}

std::vector<float> Weights(const TrainJobOptions& options, int64_t version) {
  auto model = LoadForecaster(options.model_dir, version);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  const ParameterArena& p = (*model)->parameters();
  return std::vector<float>(p.data(), p.data() + p.size());
}

TEST_CASE("A job whose training step would need more memory than allowed is refused first",
          "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  // A small transformer over a long lookback: few weights, but attention over T*T per head.
  ModelConfig big = Lstm();
  big.clear_lstm();
  big.set_lookback(4096);
  big.mutable_transformer()->set_d_model(16);
  big.mutable_transformer()->set_num_heads(2);
  big.mutable_transformer()->set_num_layers(2);
  big.mutable_transformer()->set_dim_feedforward(32);
  TrainJobOptions options = Options(&backend, dir.path(), big);
  options.training.set_batch_size(64);
  auto model = Forecaster::Create(big);
  REQUIRE(model.ok());
  const int64_t needed = EstimateTrainStepBytes(**model, 64);
  // At least the attention scores of one layer: B * NH * T * T floats.
  REQUIRE(needed >= int64_t{64} * 2 * 4096 * 4096 * 4);
  options.max_step_bytes = needed - 1;
  const auto refused = TrainJob::Create(options);
  REQUIRE(refused.status().code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(refused.status().message().find("--max-train-memory-bytes") != std::string::npos);

  // The same limit lets a model that fits through.
  TrainJobOptions small = Options(&backend, dir.path(), Lstm());
  small.max_step_bytes = needed - 1;
  REQUIRE(TrainJob::Create(small).ok());
}

TEST_CASE("A job learns the series and publishes a loadable version", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.publish = true;
  options.training.set_epochs(6);
  auto job = TrainJob::Create(options);
  REQUIRE(job.ok());
  const TrainResult result = (*job)->Run().value();
  REQUIRE(result.epochs_run == 6);
  REQUIRE(result.validation_losses.size() == 6);
  REQUIRE(result.validation_losses.back() < 0.5 * result.validation_losses.front());
  REQUIRE(result.train_losses.back() < result.train_losses.front());
  REQUIRE(result.version == 1);
  REQUIRE(ListVersions(options.model_dir) == std::vector<int64_t>{1});

  // The published weights are the job's, the normaliser fitted on the training rows.
  const ParameterArena& trained = (*job)->model().parameters();
  REQUIRE(Weights(options, 1) ==
          std::vector<float>(trained.data(), trained.data() + trained.size()));
  const float* mean = trained.at("normalizer.mean");
  REQUIRE(mean[0] == (*job)->dataset().mean()[0]);
  REQUIRE(std::abs(mean[0] - 10.0f) < 1.0f);

  // A second job publishes the next version.
  REQUIRE(RunOk(options).version == 2);
}

TEST_CASE("The same seed gives the same result bit for bit, another seed does not",
          "[unit][train]") {
  ScratchDir dir;
  auto backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  const TrainJobOptions options = Options(backend->get(), dir.path(), Lstm());
  auto a = TrainJob::Create(options).value();
  auto b = TrainJob::Create(options).value();
  const TrainResult ra = a->Run().value();
  const TrainResult rb = b->Run().value();
  REQUIRE(ra.train_losses == rb.train_losses);
  REQUIRE(ra.validation_losses == rb.validation_losses);
  const ParameterArena& pa = a->model().parameters();
  const ParameterArena& pb = b->model().parameters();
  REQUIRE(std::equal(pa.data(), pa.data() + pa.size(), pb.data()));

  TrainJobOptions other = options;
  other.training.set_seed(8);
  REQUIRE(RunOk(other).train_losses != ra.train_losses);
}

TEST_CASE("Early stopping ends the job and restores the best epoch's weights", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.training.set_epochs(10);
  options.training.set_early_stopping_patience(2);
  // No later epoch can beat the first by this much, so epochs 2 and 3 do not count.
  options.training.set_min_delta(1e6f);
  auto job = TrainJob::Create(options).value();
  const TrainResult result = job->Run().value();
  REQUIRE(result.stopped_early);
  REQUIRE(result.epochs_run == 3);
  REQUIRE(result.best_epoch == 1);
  REQUIRE(result.best_validation_loss == result.validation_losses[0]);

  // The kept weights are those after epoch 1: what a one-epoch job with the same seed ends
  // with (the schedule is constant, so the first epoch is the same in both).
  TrainJobOptions one = options;
  one.training.set_epochs(1);
  one.training.set_early_stopping_patience(0);
  auto first = TrainJob::Create(one).value();
  REQUIRE(first->Run().ok());
  const ParameterArena& kept = job->model().parameters();
  const ParameterArena& after_one = first->model().parameters();
  REQUIRE(std::equal(kept.data(), kept.data() + kept.size(), after_one.data()));
}

TEST_CASE("Cancel stops the job between steps and publishes nothing", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.publish = true;
  options.progress_every_steps = 1;
  TrainJob* raw = nullptr;
  int64_t steps_seen = 0;
  options.on_progress = [&](const TrainProgress& p) {
    steps_seen = p.step;
    if (p.step == 3) raw->Cancel();
  };
  auto job = TrainJob::Create(options).value();
  raw = job.get();
  const auto result = job->Run();
  REQUIRE(result.status().code() == absl::StatusCode::kCancelled);
  REQUIRE(steps_seen == 3);
  REQUIRE(ListVersions(options.model_dir).empty());
}

TEST_CASE("A job resumed from its checkpoint continues bit for bit", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.training.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAMW);
  options.training.mutable_optimizer()->set_weight_decay(0.01f);
  options.training.mutable_schedule()->set_kind(v1::SCHEDULE_COSINE);
  options.training.mutable_schedule()->set_warmup_steps(5);
  const TrainResult straight = RunOk(options);

  options.checkpoint_path = (dir.path() / "job.ckpt").string();
  TrainJob* raw = nullptr;
  options.on_progress = [&](const TrainProgress& p) {
    if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 2) raw->Cancel();
  };
  auto interrupted = TrainJob::Create(options).value();
  raw = interrupted.get();
  REQUIRE(interrupted->Run().status().code() == absl::StatusCode::kCancelled);
  REQUIRE(ReadCheckpoint(options.checkpoint_path).value().epochs_done == 2);

  options.on_progress = nullptr;
  auto resumed = TrainJob::Create(options).value();
  const TrainResult result = resumed->Run().value();
  REQUIRE(result.resumed_from_epoch == 2);
  REQUIRE(result.train_losses == straight.train_losses);
  REQUIRE(result.validation_losses == straight.validation_losses);
  REQUIRE(result.steps == straight.steps);

  // A checkpoint of another job is refused rather than resumed.
  WriteCheckpoint(options.checkpoint_path, ReadCheckpoint(options.checkpoint_path).value())
      .IgnoreError();
  TrainJobOptions different = options;
  different.training.set_seed(99);
  REQUIRE(TrainJob::Create(different).value()->Run().status().code() ==
          absl::StatusCode::kFailedPrecondition);
}

// Two-layer LSTM and one-layer transformer with dropout: every dropout site in use.
std::vector<ModelConfig> DropoutModels(float dropout) {
  ModelConfig lstm = Lstm();
  lstm.set_name("toy_lstm_dropout");
  lstm.mutable_lstm()->set_num_layers(2);
  lstm.mutable_lstm()->set_dropout(dropout);
  ModelConfig transformer = Lstm();
  transformer.set_name("toy_transformer_dropout");
  transformer.clear_lstm();
  auto* t = transformer.mutable_transformer();
  t->set_d_model(8);
  t->set_num_heads(2);
  t->set_num_layers(1);
  t->set_dim_feedforward(16);
  t->set_dropout(dropout);
  return {lstm, transformer};
}

TEST_CASE("A job with dropout learns, is deterministic for a seed, and differs from none",
          "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  const std::vector<ModelConfig> without = DropoutModels(0.0f);
  const std::vector<ModelConfig> with = DropoutModels(0.2f);
  for (size_t m = 0; m < with.size(); ++m) {
    CAPTURE(with[m].name());
    TrainJobOptions options = Options(&backend, dir.path(), with[m]);
    options.training.set_epochs(6);
    auto a = TrainJob::Create(options).value();
    auto b = TrainJob::Create(options).value();
    const TrainResult ra = a->Run().value();
    const TrainResult rb = b->Run().value();
    REQUIRE(ra.train_losses.back() < ra.train_losses.front());
    REQUIRE(ra.validation_losses.back() < ra.validation_losses.front());
    REQUIRE(ra.train_losses == rb.train_losses);
    REQUIRE(ra.validation_losses == rb.validation_losses);
    const ParameterArena& pa = a->model().parameters();
    const ParameterArena& pb = b->model().parameters();
    REQUIRE(std::equal(pa.data(), pa.data() + pa.size(), pb.data()));

    // Dropout changes the training steps (the first epoch's loss already, the same weights
    // and batches seeing dropped units).
    TrainJobOptions plain = options;
    plain.model = without[m];
    REQUIRE(RunOk(plain).train_losses.front() != ra.train_losses.front());
  }
}

TEST_CASE("A job with dropout resumed from its checkpoint continues bit for bit", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  for (const ModelConfig& model : DropoutModels(0.25f)) {
    CAPTURE(model.name());
    TrainJobOptions options = Options(&backend, dir.path(), model);
    options.training.mutable_optimizer()->set_kind(v1::OPTIMIZER_ADAM);
    const TrainResult straight = RunOk(options);

    options.checkpoint_path = (dir.path() / (model.name() + ".ckpt")).string();
    TrainJob* raw = nullptr;
    options.on_progress = [&](const TrainProgress& p) {
      if (p.kind == TrainProgress::Kind::kEpoch && p.epoch == 2) raw->Cancel();
    };
    auto interrupted = TrainJob::Create(options).value();
    raw = interrupted.get();
    REQUIRE(interrupted->Run().status().code() == absl::StatusCode::kCancelled);
    REQUIRE(ReadCheckpoint(options.checkpoint_path).value().epochs_done == 2);

    options.on_progress = nullptr;
    auto resumed = TrainJob::Create(options).value();
    const TrainResult result = resumed->Run().value();
    REQUIRE(result.resumed_from_epoch == 2);
    REQUIRE(result.train_losses == straight.train_losses);
    REQUIRE(result.validation_losses == straight.validation_losses);
    REQUIRE(result.steps == straight.steps);
  }
}

TEST_CASE("Fine-tuning starts from a published version and keeps its normalisation",
          "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.publish = true;
  REQUIRE(RunOk(options).version == 1);
  const std::vector<float> base = Weights(options, 1);

  TrainJobOptions tune = options;
  tune.training.set_base_version(1);
  tune.training.set_epochs(1);
  // Shifted data: a fresh fit would move the normaliser; fine-tuning must not.
  tune.training.mutable_data()->mutable_inline_series()->CopyFrom(Series(240, 50.0f));
  for (float& v : *tune.training.mutable_data()->mutable_inline_series()->mutable_values()) {
    v += 1.0f;
  }
  auto job = TrainJob::Create(tune).value();
  const Forecaster& model = job->model();
  const ParameterArena& p = model.parameters();
  REQUIRE(std::vector<float>(p.data(), p.data() + p.size()) == base);
  const TrainResult result = job->Run().value();
  REQUIRE(result.version == 2);
  const std::vector<float> tuned = Weights(tune, 2);
  REQUIRE(tuned != base);
  const auto* mean = p.Find("normalizer.mean").value();
  REQUIRE(std::equal(tuned.begin() + mean->offset, tuned.begin() + mean->offset + 2,
                     base.begin() + mean->offset));

  TrainJobOptions missing = tune;
  missing.training.set_base_version(5);
  REQUIRE(TrainJob::Create(missing).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE("Progress reports steps, epochs, losses, rate and ETA", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  FakeClock clock;
  TrainJobOptions options = Options(&backend, dir.path(), Lstm());
  options.clock = &clock;
  options.progress_every_steps = 5;
  std::vector<TrainProgress> events;
  options.on_progress = [&](const TrainProgress& p) {
    events.push_back(p);
    clock.Advance(absl::Seconds(1));
  };
  auto job = TrainJob::Create(options).value();
  const int64_t steps_per_epoch = job->steps_per_epoch();
  const TrainResult result = job->Run().value();
  int epochs = 0, steps = 0;
  for (const TrainProgress& p : events) {
    REQUIRE(p.epochs == 4);
    REQUIRE(p.total_steps == 4 * steps_per_epoch);
    REQUIRE(std::isfinite(p.train_loss));
    if (p.kind == TrainProgress::Kind::kEpoch) {
      ++epochs;
      REQUIRE(p.epoch == epochs);
      REQUIRE(p.validation_loss == result.validation_losses[static_cast<size_t>(epochs - 1)]);
      REQUIRE(p.step == epochs * steps_per_epoch);
    } else {
      ++steps;
      REQUIRE(p.step % 5 == 0);
      REQUIRE(std::isnan(p.validation_loss));
    }
    if (&p != &events.front()) {
      REQUIRE(p.samples_per_second > 0.0);
      REQUIRE(p.eta_seconds >= 0.0);
    }
  }
  REQUIRE(epochs == 4);
  REQUIRE(steps == 4 * steps_per_epoch / 5);
  REQUIRE(events.back().eta_seconds == 0.0);
}

TEST_CASE("Quantile and transformer models train too", "[unit][train]") {
  ScratchDir dir;
  auto backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  ModelConfig quantile = Lstm();
  quantile.add_quantiles(0.1f);
  quantile.add_quantiles(0.5f);
  quantile.add_quantiles(0.9f);
  TrainResult q = RunOk(Options(backend->get(), dir.path(), quantile));
  REQUIRE(q.validation_losses.back() < q.validation_losses.front());

  ModelConfig transformer = Lstm();
  transformer.clear_lstm();
  auto* t = transformer.mutable_transformer();
  t->set_d_model(8);
  t->set_num_heads(2);
  t->set_num_layers(1);
  t->set_dim_feedforward(16);
  t->set_norm_first(true);
  TrainResult tr = RunOk(Options(backend->get(), dir.path(), transformer));
  REQUIRE(tr.validation_losses.back() < tr.validation_losses.front());
}

TEST_CASE("A stateful job (truncated BPTT) learns, checkpoints and publishes a version that loads",
          "[unit][train]") {
  ScratchDir dir;
  auto backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  for (const bool lstm : {true, false}) {
    CAPTURE(lstm);
    ModelConfig config = Lstm();
    config.set_name(lstm ? "stateful_lstm" : "stateful_gru");
    v1::RecurrentConfig rnn;
    rnn.set_hidden_size(8);
    rnn.set_num_layers(2);
    rnn.set_dropout(0.1f);  // between the layers, as in window training
    if (lstm) {
      *config.mutable_lstm() = rnn;
    } else {
      config.clear_lstm();
      *config.mutable_gru() = rnn;
    }
    TrainJobOptions options = Options(backend->get(), dir.path(), config);
    options.publish = true;
    options.checkpoint_path = (dir.path() / (config.name() + ".ckpt")).string();
    options.training.set_batch_size(4);
    options.training.set_epochs(5);
    options.training.mutable_stateful()->set_chunk_length(8);
    auto job = TrainJob::Create(options);
    INFO(job.status().ToString());
    REQUIRE(job.ok());
    // 192 training rows: 4 streams of 48 rows, 45 steps each (3 rows forecast), chunks of 8.
    REQUIRE((*job)->steps_per_epoch() == 6);
    const TrainResult result = (*job)->Run().value();
    REQUIRE(result.epochs_run == 5);
    REQUIRE(result.steps == 5 * 6);
    REQUIRE(result.validation_losses.size() == 5);
    REQUIRE(std::isfinite(result.validation_losses.back()));
    REQUIRE(result.validation_losses.back() < result.validation_losses.front());
    REQUIRE(result.version == 1);
    REQUIRE_FALSE(fs::exists(options.checkpoint_path));  // removed once published

    // The published version loads and forecasts with the job's weights.
    const ParameterArena& trained = (*job)->model().parameters();
    REQUIRE(Weights(options, 1) ==
            std::vector<float>(trained.data(), trained.data() + trained.size()));
    auto loaded = LoadForecaster(options.model_dir, 1);
    REQUIRE(loaded.ok());
    const Forecaster& model = **loaded;
    Workspace workspace;
    const std::vector<float> windows = model.NeutralWindows(2);
    std::vector<float> forecast(static_cast<size_t>(2 * model.num_outputs()));
    REQUIRE(model.Forward(**backend, forecast.data(), windows.data(), 2, workspace).ok());
    for (const float v : forecast) REQUIRE(std::isfinite(v));
  }
}

TEST_CASE("Stateful training refuses bidirectional and transformer models and bad chunks",
          "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  TrainJobOptions good = Options(&backend, dir.path(), Lstm());
  good.training.mutable_stateful()->set_chunk_length(8);
  good.training.set_batch_size(4);
  REQUIRE(TrainJob::Create(good).ok());
  const auto refused = [](const TrainJobOptions& o, absl::string_view what) {
    const absl::Status status = TrainJob::Create(o).status();
    CAPTURE(status.ToString());
    REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE_THAT(std::string(status.message()), Catch::Contains(std::string(what)));
  };

  TrainJobOptions o = good;
  o.model.mutable_lstm()->set_bidirectional(true);
  refused(o, "bidirectional");
  o = good;
  o.model.clear_lstm();
  o.model.mutable_gru()->set_hidden_size(4);
  o.model.mutable_gru()->set_num_layers(1);
  o.model.mutable_gru()->set_bidirectional(true);
  refused(o, "unidirectional LSTM or GRU");
  o = good;
  o.model.clear_lstm();
  o.model.mutable_transformer()->set_d_model(8);
  o.model.mutable_transformer()->set_num_heads(2);
  o.model.mutable_transformer()->set_num_layers(1);
  o.model.mutable_transformer()->set_dim_feedforward(16);
  refused(o, "transformer");
  // The same models train on windows.
  o.training.mutable_stateful()->set_chunk_length(0);
  REQUIRE(TrainJob::Create(o).ok());

  o = good;
  o.training.mutable_stateful()->set_chunk_length(-1);
  refused(o, "chunk_length");
  // 192 training rows in 100 streams leave 1 row each; a step needs horizon + 1 = 4.
  o = good;
  o.training.set_batch_size(100);
  refused(o, "streams");
}

TEST_CASE("Bad requests fail at Create with a clear error", "[unit][train]") {
  ScratchDir dir;
  ReferenceBackend backend;
  const TrainJobOptions good = Options(&backend, dir.path(), Lstm());
  const auto code = [](const TrainJobOptions& o) { return TrainJob::Create(o).status().code(); };
  const auto message = [](const TrainJobOptions& o) {
    return std::string(TrainJob::Create(o).status().message());
  };

  TrainJobOptions o = good;
  o.training.set_epochs(0);
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);

  o = good;
  o.model.mutable_lstm()->set_dropout(1.0f);
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);
  REQUIRE_THAT(message(o), Catch::Contains("dropout"));

  o = good;
  o.training.mutable_loss()->set_kind(v1::LOSS_QUANTILE);
  REQUIRE_THAT(message(o), Catch::Contains("quantiles"));

  o = good;
  o.training.mutable_optimizer()->set_learning_rate(-1.0f);
  REQUIRE_THAT(message(o), Catch::Contains("learning_rate"));

  o = good;
  o.training.mutable_data()->mutable_inline_series()->CopyFrom(Series(10));
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);

  o = good;
  o.backend = nullptr;
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);

  // A CSV inside the data directory, with a bad cell on line 4.
  {
    std::ofstream csv(dir.path() / "series.csv");
    csv << "time,a,b\n1,1.0,2.0\n2,1.5,2.5\n3,oops,3.0\n";
  }
  o = good;
  o.training.mutable_data()->set_csv_path("series.csv");
  o.training.mutable_data()->set_timestamp_column("time");
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);
  REQUIRE_THAT(message(o), Catch::Contains("line 4"));

  o.training.mutable_data()->set_csv_path("../outside.csv");
  REQUIRE(code(o) == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace forecastd
