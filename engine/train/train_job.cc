#include "engine/train/train_job.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/hash.h"
#include "engine/models/input_record.h"
#include "engine/models/model_files.h"
#include "engine/random.h"
#include "engine/train/checkpoint.h"
#include "engine/train/csv_series.h"
#include "engine/train/data_source.h"
#include "engine/train/initializer.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

constexpr int64_t kMaxBatchSize = 1 << 16;
constexpr int64_t kMaxEpochs = 1 << 20;
constexpr int64_t kMaxChunkLength = 1 << 16;

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.always_print_primitive_fields = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

// For each of the data's series, the model's index of the series of that name
// (ModelConfig.series). INVALID_ARGUMENT naming a series the model does not know, and with
// `every_model_series` (statistics fitted afresh), one of the model's that the data lacks.
absl::StatusOr<std::vector<int>> ModelSeriesRows(const std::vector<std::string>& data_series,
                                                 const ModelConfig& model,
                                                 bool every_model_series) {
  std::vector<int> rows;
  std::vector<bool> covered(static_cast<size_t>(model.series_size()), false);
  for (const std::string& name : data_series) {
    absl::StatusOr<int> row = SeriesIndex(model, name);
    if (!row.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "training data: series ", QuoteForMessage(name), ": ", row.status().message()));
    }
    covered[static_cast<size_t>(*row)] = true;
    rows.push_back(*row);
  }
  for (int s = 0; s < model.series_size() && every_model_series; ++s) {
    if (!covered[static_cast<size_t>(s)]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "series ", QuoteForMessage(model.series(s)), " of model '", model.name(),
          "' (ModelConfig.series) has no rows in the training data; each series' statistics are "
          "fitted on its own rows"));
    }
  }
  return rows;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainJob>> TrainJob::Create(TrainJobOptions options) {
  if (options.backend == nullptr && !options.engine_factory) {
    return absl::InvalidArgumentError("TrainJob needs a backend or a training engine factory");
  }
  if (options.clock == nullptr) options.clock = Clock::Real();
  if (options.progress_every_steps <= 0) {
    return absl::InvalidArgumentError("progress_every_steps must be > 0");
  }
  const v1::TrainingConfig& t = options.training;
  if (t.epochs() < 1 || t.epochs() > kMaxEpochs) {
    return absl::InvalidArgumentError(
        absl::StrCat("epochs = ", t.epochs(), ": must be in [1, ", kMaxEpochs, "]"));
  }
  const int64_t batch_size = t.batch_size() == 0 ? 32 : t.batch_size();
  if (batch_size < 1 || batch_size > kMaxBatchSize) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size = ", t.batch_size(), ": must be in [1, ", kMaxBatchSize, "]"));
  }
  if (t.early_stopping_patience() < 0) {
    return absl::InvalidArgumentError("early_stopping_patience must be >= 0");
  }
  if (!(t.min_delta() >= 0.0f) || !std::isfinite(t.min_delta())) {
    return absl::InvalidArgumentError("min_delta must be finite and >= 0");
  }
  if (t.base_version() < 0) return absl::InvalidArgumentError("base_version must be >= 0");
  const int64_t chunk_length = t.stateful().chunk_length();
  if (chunk_length < 0 || chunk_length > kMaxChunkLength) {
    return absl::InvalidArgumentError(absl::StrCat("stateful.chunk_length = ", chunk_length,
                                                   ": must be in [0, ", kMaxChunkLength,
                                                   "] (0: window training)"));
  }
  if (options.output_version < 0) return absl::InvalidArgumentError("output_version must be >= 0");
  RETURN_IF_ERROR(ValidateModelConfig(options.model));

  std::unique_ptr<TrainJob> job(new TrainJob(std::move(options)));
  const TrainJobOptions& o = job->options_;
  const v1::TrainingConfig& config = o.training;  // `options` has been moved into the job
  job->epochs_ = config.epochs();
  job->batch_size_ = batch_size;
  const auto check_rows = [&o](int64_t rows) {
    if (o.max_series_rows > 0 && rows > o.max_series_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat("the training series has ", rows, " rows; this server takes at most ",
                       o.max_series_rows, " (--max-train-series-rows)"));
    }
    return absl::OkStatus();
  };
  const auto read_series = [&]() -> absl::StatusOr<Series> {
    // Inline rows are checked before they are copied, CSV rows once the file is parsed.
    if (config.data().has_inline_series()) {
      RETURN_IF_ERROR(check_rows(config.data().inline_series().rows()));
    }
    ASSIGN_OR_RETURN(Series series, LoadSeries(config.data(), o.model, o.data_dir));
    RETURN_IF_ERROR(check_rows(series.rows));
    return series;
  };

  // A model trained on several series is sized by them (its per-series tables), so their
  // names come first: from the data for a model that lists none yet, else the config's.
  ModelConfig model_config = o.model;
  const bool several_series = !config.data().series_column().empty();
  std::optional<Series> series;
  if (!several_series && NumSeries(model_config) > 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", model_config.name(), "' was trained on ", NumSeries(model_config),
                     " series (ModelConfig.series): set data.series_column to train it"));
  }
  if (several_series) {
    ASSIGN_OR_RETURN(series, read_series());
    if (NumSeries(model_config) == 0) {
      if (config.base_version() > 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "base version ", config.base_version(), " of '", model_config.name(),
            "' was trained on one series; fine-tuning keeps that, so data.series_column cannot "
            "be set"));
      }
      for (const std::string& name : series->series_names) model_config.add_series(name);
    }
  }

  ASSIGN_OR_RETURN(job->model_, Forecaster::Create(model_config));
  Forecaster& model = *job->model_;
  if (chunk_length > 0) RETURN_IF_ERROR(model.SupportsStatefulTraining());
  if (o.max_step_bytes > 0) {
    // A chunk keeps what about ceil(k / T) windows per stream would.
    const int64_t T = model.lookback();
    const int64_t windows =
        chunk_length > 0 ? batch_size * ((chunk_length + T - 1) / T) : batch_size;
    const int64_t bytes = EstimateTrainStepBytes(model, windows);
    if (bytes > o.max_step_bytes) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "a training step of this model at batch_size ", batch_size, " needs an estimated ", bytes,
          " bytes; this server allows ", o.max_step_bytes,
          " (--max-train-memory-bytes): use a smaller batch, lookback or model"));
    }
  }

  ASSIGN_OR_RETURN(WindowedDatasetOptions data_options,
                   OptionsFromConfig(config.data(), model_config));
  // For each of the data's series, the model's row of it.
  std::vector<int> model_row;
  if (several_series) {
    ASSIGN_OR_RETURN(model_row, ModelSeriesRows(series->series_names, model_config,
                                                /*every_model_series=*/config.base_version() == 0));
    data_options.record_series_index = model_row;
  }
  if (config.base_version() > 0) {
    // Fine-tuning keeps the base version's weights and its scaling of the inputs.
    ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> base,
                     LoadForecaster(o.model_dir, config.base_version()));
    if (ToJson(base->config()) != ToJson(model_config)) {
      return absl::InvalidArgumentError(absl::StrCat("base version ", config.base_version(), " in ",
                                                     o.model_dir,
                                                     " has another configuration than the model to "
                                                     "train; fine-tuning keeps the architecture"));
    }
    std::copy_n(base->parameters().data(), base->parameters().size(), model.parameters().data());
    if (model.standardized()) {
      // Each of the data's series is scaled by the base version's statistics of it.
      const size_t F = static_cast<size_t>(model.num_features());
      const float* mean = model.parameters().at("normalizer.mean");
      const float* std = model.parameters().at("normalizer.std");
      data_options.normalization = NormalizationMode::kGiven;
      const std::vector<int> rows = several_series ? model_row : std::vector<int>{0};
      for (const int row : rows) {
        const size_t at = static_cast<size_t>(row) * F;
        data_options.given_stats.mean.insert(data_options.given_stats.mean.end(), mean + at,
                                             mean + at + F);
        data_options.given_stats.std.insert(data_options.given_stats.std.end(), std + at,
                                            std + at + F);
      }
    }
  } else {
    InitializeParameters(model, config.seed());
  }
  if (!series.has_value()) {
    ASSIGN_OR_RETURN(series, read_series());
  }
  job->data_rows_ = series->rows;
  job->data_digest_ = Fnv1a(absl::string_view(reinterpret_cast<const char*>(series->values.data()),
                                              series->values.size() * sizeof(float)));
  ASSIGN_OR_RETURN(job->dataset_, WindowedDataset::Create(*std::move(series), data_options));
  if (config.base_version() == 0) {
    // The statistics fitted on the data, each series' into the model's row of it.
    const WindowedDataset& data = *job->dataset_;
    const auto row_of = [&model_row](int s) {
      return static_cast<size_t>(model_row.empty() ? s : model_row[static_cast<size_t>(s)]);
    };
    const size_t F = static_cast<size_t>(data.num_features());
    const size_t Fs = static_cast<size_t>(data.num_static_features());
    for (int s = 0; s < data.num_series(); ++s) {
      const size_t from = static_cast<size_t>(s);
      if (model.standardized()) {
        std::copy_n(data.mean().begin() + from * F, F,
                    model.parameters().at("normalizer.mean") + row_of(s) * F);
        std::copy_n(data.std().begin() + from * F, F,
                    model.parameters().at("normalizer.std") + row_of(s) * F);
      }
      if (Fs > 0) {
        std::copy_n(data.static_values().begin() + from * Fs, Fs,
                    model.parameters().at("series.static") + row_of(s) * Fs);
      }
    }
  }
  job->samples_per_step_ = batch_size;
  if (chunk_length > 0) {
    const WindowedDataset& data = *job->dataset_;
    ASSIGN_OR_RETURN(job->train_chunks_,
                     StreamChunks::Create(data, Split::kTrain, batch_size, chunk_length));
    if (data.num_validation_windows() > 0) {
      ASSIGN_OR_RETURN(
          job->validation_chunks_,
          StreamChunks::Create(data, Split::kValidation,
                               StreamChunks::StreamsFor(data, Split::kValidation, batch_size),
                               chunk_length));
    }
    job->samples_per_step_ = batch_size * chunk_length;
  }

  ASSIGN_OR_RETURN(job->optimizer_, Optimizer::Create(config.optimizer(), model.parameters()));
  ASSIGN_OR_RETURN(
      LearningRateSchedule schedule,
      LearningRateSchedule::Create(config.schedule(), job->optimizer_->peak_learning_rate(),
                                   job->epochs_ * job->steps_per_epoch()));
  job->schedule_ = std::make_unique<LearningRateSchedule>(schedule);
  ASSIGN_OR_RETURN(TrainingLoss loss, TrainingLoss::Create(config.loss(), o.model));
  job->loss_ = std::make_unique<TrainingLoss>(std::move(loss));
  if (o.worker && (o.publish || !o.checkpoint_path.empty())) {
    return absl::InvalidArgumentError(
        "a worker of another process's job neither publishes nor keeps a checkpoint");
  }
  if (!o.make_engine_in_run) RETURN_IF_ERROR(job->MakeEngine());
  return job;
}

absl::Status TrainJob::MakeEngine() {
  const TrainJobOptions& o = options_;
  if (o.engine_factory) {
    ASSIGN_OR_RETURN(engine_, o.engine_factory(*model_, *optimizer_, *loss_, o.training));
  } else {
    ASSIGN_OR_RETURN(engine_,
                     MakeHostTrainingEngine(*o.backend, *model_, *optimizer_, *loss_, o.training));
  }
  abortable_.store(engine_.get());
  // A Cancel() that came before the engine existed could not end its collectives.
  if (cancelled() && o.worker) engine_->Abort();
  return absl::OkStatus();
}

void TrainJob::Cancel() {
  cancelled_.store(true, std::memory_order_relaxed);
  if (!options_.worker) return;
  if (TrainingEngine* engine = abortable_.load(); engine != nullptr) engine->Abort();
}

namespace {

// Doubles and 64-bit counts as the 32-bit words ShareFromFirstRank carries.
void PutWords(std::vector<uint32_t>& words, uint64_t bits) {
  words.push_back(static_cast<uint32_t>(bits >> 32));
  words.push_back(static_cast<uint32_t>(bits));
}
uint64_t GetWords(const std::vector<uint32_t>& words, size_t at) {
  return (static_cast<uint64_t>(words[at]) << 32) | words[at + 1];
}
uint64_t DoubleBits(double value) {
  uint64_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
double BitsDouble(uint64_t bits) {
  double value = 0.0;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

}  // namespace

absl::Status TrainJob::AgreeOnStart(TrainCheckpoint& state) {
  std::vector<uint32_t> words;
  PutWords(words, static_cast<uint64_t>(state.epochs_done));
  PutWords(words, static_cast<uint64_t>(optimizer_->steps_taken()));
  RETURN_IF_ERROR(engine_->ShareFromFirstRank(words));
  if (!options_.worker) return absl::OkStatus();
  state.epochs_done = static_cast<int64_t>(GetWords(words, 0));
  const auto steps = static_cast<int64_t>(GetWords(words, 2));
  // The coordinator's moments arrive with the weights in Push; the count is the optimiser's.
  std::vector<std::pair<std::string, std::vector<float>>> zeros;
  for (const auto& [name, values] : optimizer_->state()) {
    zeros.emplace_back(name, std::vector<float>(values->size(), 0.0f));
  }
  return optimizer_->Restore(zeros, steps);
}

absl::Status TrainJob::AgreeOnEpoch(int64_t epoch, const std::vector<uint64_t>& sums,
                                    double& validation_loss) {
  std::vector<uint32_t> words;
  PutWords(words, DoubleBits(validation_loss));
  PutWords(words, sums.empty() ? 0 : sums.front());
  RETURN_IF_ERROR(engine_->ShareFromFirstRank(words));
  if (!options_.worker) return absl::OkStatus();
  validation_loss = BitsDouble(GetWords(words, 0));
  const uint64_t first = GetWords(words, 2);
  if (!sums.empty() && sums.front() != first) {
    return absl::InternalError(absl::StrCat("training of '", model_->config().name(),
                                            "': this worker's weights differ from rank 0's "
                                            "after epoch ",
                                            epoch + 1, " (checksums ",
                                            absl::Hex(sums.front(), absl::kZeroPad16), " and ",
                                            absl::Hex(first, absl::kZeroPad16), ")"));
  }
  return absl::OkStatus();
}

TrainJob::TrainJob(TrainJobOptions options) : options_(std::move(options)) {}

int64_t TrainJob::steps_per_epoch() const {
  if (train_chunks_.has_value()) return train_chunks_->num_chunks();
  return (dataset_->num_train_windows() + batch_size_ - 1) / batch_size_;
}

std::string TrainJob::Fingerprint() const {
  // Where the steps run is not part of the job: a checkpoint resumes on other devices too.
  v1::TrainingConfig training = options_.training;
  training.clear_devices();
  training.clear_workers();
  training.clear_resume_on_failure();
  // The model as trained: with the series the data named (ModelConfig.series).
  return absl::StrCat(ToJson(model_->config()), "\n", ToJson(training));
}

absl::StatusOr<double> TrainJob::Validate() {
  if (train_chunks_.has_value()) return ValidateStateful();
  const int64_t n = dataset_->num_validation_windows();
  if (n == 0) return std::nan("");
  const Forecaster& model = *model_;
  const int64_t R = model.input_floats();
  const int64_t per_target = int64_t{model.horizon()} * model.num_targets();
  std::vector<float> x, y;
  std::vector<int64_t> ids;
  double total = 0.0;
  for (int64_t first = 0; first < n; first += batch_size_) {
    const int64_t B = std::min(batch_size_, n - first);
    ids.resize(static_cast<size_t>(B));
    for (int64_t i = 0; i < B; ++i) ids[static_cast<size_t>(i)] = first + i;
    x.resize(static_cast<size_t>(B * R));
    y.resize(static_cast<size_t>(B * per_target));
    RETURN_IF_ERROR(
        dataset_->FillBatch(Split::kValidation, ids, absl::MakeSpan(x), absl::MakeSpan(y)));
    // Without dropout, as in eval mode.
    ASSIGN_OR_RETURN(const double loss, engine_->Evaluate(x.data(), y.data(), B));
    total += loss * static_cast<double>(B);
  }
  return total / static_cast<double>(n);
}

absl::StatusOr<double> TrainJob::ValidateStateful() {
  if (!validation_chunks_.has_value()) return std::nan("");
  const StreamChunks& chunks = *validation_chunks_;
  const int64_t B = chunks.streams(), F = model_->num_features();
  const int64_t per_target = int64_t{model_->horizon()} * model_->num_targets();
  std::vector<float> x, y;
  RETURN_IF_ERROR(engine_->ResetStates(B));
  double total = 0.0;
  for (int64_t c = 0; c < chunks.num_chunks(); ++c) {
    const int64_t K = chunks.chunk_steps(c);
    x.resize(static_cast<size_t>(B * K * F));
    y.resize(static_cast<size_t>(B * K * per_target));
    RETURN_IF_ERROR(chunks.FillChunk(c, absl::MakeSpan(x), absl::MakeSpan(y)));
    ASSIGN_OR_RETURN(const double loss, engine_->EvaluateChunk(x.data(), y.data(), B, K));
    total += loss * static_cast<double>(K);
  }
  return total / static_cast<double>(chunks.steps());
}

absl::StatusOr<TrainResult> TrainJob::Run() {
  RunState run;
  if (engine_ == nullptr) RETURN_IF_ERROR(MakeEngine());
  ASSIGN_OR_RETURN(run.checkpoint, Resume());
  RETURN_IF_ERROR(AgreeOnStart(run.checkpoint));
  const int64_t resumed_from_epoch = run.checkpoint.epochs_done;
  // The engine starts from the arena and optimiser state: fresh, fine-tuned or resumed.
  RETURN_IF_ERROR(engine_->Push());
  spdlog::info("training '{}' on {}", model_->config().name(), engine_->device());
  run.start = options_.clock->Now();

  bool stopped_early = false;
  for (int64_t epoch = run.checkpoint.epochs_done; epoch < epochs_; ++epoch) {
    ASSIGN_OR_RETURN(const double train_loss, RunEpoch(epoch, run));
    RETURN_IF_ERROR(CloseEpoch(epoch, train_loss, run));
    const int64_t patience = options_.training.early_stopping_patience();
    if (patience > 0 && run.checkpoint.epochs_without_improvement >= patience) {
      stopped_early = true;
      break;
    }
  }

  TrainResult result = Finish(run.checkpoint, stopped_early);
  result.resumed_from_epoch = resumed_from_epoch;
  if (options_.publish) {
    ASSIGN_OR_RETURN(result.version, Publish(result));
  }
  return result;
}

absl::StatusOr<TrainCheckpoint> TrainJob::Resume() {
  TrainCheckpoint state;
  state.fingerprint = Fingerprint();
  if (options_.checkpoint_path.empty()) return state;
  absl::StatusOr<TrainCheckpoint> saved = ReadCheckpoint(options_.checkpoint_path);
  if (absl::IsNotFound(saved.status())) return state;
  if (!saved.ok()) return saved.status();
  if (saved->fingerprint != state.fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrCat(options_.checkpoint_path, " is the checkpoint of another job (model or ",
                     "training configuration differ); remove it or use another path"));
  }
  ParameterArena& params = model_->parameters();
  if (static_cast<int64_t>(saved->params.size()) != params.size()) {
    return absl::DataLossError(
        absl::StrCat(options_.checkpoint_path, ": parameter count does not match the model"));
  }
  RETURN_IF_ERROR(optimizer_->Restore(saved->optimizer_state, saved->optimizer_steps));
  std::copy(saved->params.begin(), saved->params.end(), params.data());
  spdlog::info("training '{}': resumed from {} after epoch {}", model_->config().name(),
               options_.checkpoint_path, saved->epochs_done);
  return *std::move(saved);
}

absl::StatusOr<double> TrainJob::RunEpoch(int64_t epoch, RunState& run) {
  if (train_chunks_.has_value()) return RunStatefulEpoch(epoch, run);
  const Forecaster& model = *model_;
  const uint64_t seed = options_.training.seed();
  const int64_t R = model.input_floats();
  const int64_t per_target = int64_t{model.horizon()} * model.num_targets();
  const std::vector<int64_t> order = dataset_->TrainOrder(seed, epoch);
  const int64_t n = static_cast<int64_t>(order.size());
  double loss_sum = 0.0;
  int64_t loss_count = 0;
  for (int64_t first = 0; first < n; first += batch_size_) {
    ASSIGN_OR_RETURN(const std::vector<DeviceScheduler::TrainingLease> leases, BeginStep(epoch));
    const int64_t B = std::min(batch_size_, n - first);
    run.ids.assign(order.begin() + first, order.begin() + first + B);
    run.x.resize(static_cast<size_t>(B * R));
    run.y.resize(static_cast<size_t>(B * per_target));
    RETURN_IF_ERROR(
        dataset_->FillBatch(Split::kTrain, run.ids, absl::MakeSpan(run.x), absl::MakeSpan(run.y)));
    // Dropout masks depend on the seed and the step alone, so a resumed job (whose optimiser
    // restores its step count) draws the ones an uninterrupted job would.
    const int64_t step = engine_->steps_taken();
    run.learning_rate = schedule_->At(step, epoch);
    ASSIGN_OR_RETURN(
        const double loss,
        engine_->Step(run.x.data(), run.y.data(), B, run.learning_rate,
                      DeriveSeed(seed, SeedPurpose::kDropout, static_cast<uint64_t>(step))));
    RETURN_IF_ERROR(CheckLoss(loss, epoch, step));
    loss_sum += loss * static_cast<double>(B);
    loss_count += B;
    run.samples_this_run += B;
    if (engine_->steps_taken() % options_.progress_every_steps == 0) {
      Report(Progress(TrainProgress::Kind::kStep, epoch, loss_sum / static_cast<double>(loss_count),
                      std::nan(""), run));
    }
  }
  return loss_count > 0 ? loss_sum / static_cast<double>(loss_count) : 0.0;
}

absl::StatusOr<double> TrainJob::RunStatefulEpoch(int64_t epoch, RunState& run) {
  const StreamChunks& chunks = *train_chunks_;
  const int64_t B = chunks.streams(), F = model_->num_features();
  const int64_t per_target = int64_t{model_->horizon()} * model_->num_targets();
  // Every epoch walks the streams from their start, from zero states.
  RETURN_IF_ERROR(engine_->ResetStates(B));
  double loss_sum = 0.0;
  int64_t loss_count = 0;
  for (int64_t c = 0; c < chunks.num_chunks(); ++c) {
    ASSIGN_OR_RETURN(const std::vector<DeviceScheduler::TrainingLease> leases, BeginStep(epoch));
    const int64_t K = chunks.chunk_steps(c);
    run.x.resize(static_cast<size_t>(B * K * F));
    run.y.resize(static_cast<size_t>(B * K * per_target));
    RETURN_IF_ERROR(chunks.FillChunk(c, absl::MakeSpan(run.x), absl::MakeSpan(run.y)));
    const int64_t step = engine_->steps_taken();
    run.learning_rate = schedule_->At(step, epoch);
    ASSIGN_OR_RETURN(const double loss,
                     engine_->StepChunk(run.x.data(), run.y.data(), B, K, run.learning_rate,
                                        DeriveSeed(options_.training.seed(), SeedPurpose::kDropout,
                                                   static_cast<uint64_t>(step))));
    RETURN_IF_ERROR(CheckLoss(loss, epoch, step));
    loss_sum += loss * static_cast<double>(B * K);
    loss_count += B * K;
    run.samples_this_run += B * K;
    if (engine_->steps_taken() % options_.progress_every_steps == 0) {
      Report(Progress(TrainProgress::Kind::kStep, epoch, loss_sum / static_cast<double>(loss_count),
                      std::nan(""), run));
    }
  }
  return loss_count > 0 ? loss_sum / static_cast<double>(loss_count) : 0.0;
}

absl::StatusOr<std::vector<DeviceScheduler::TrainingLease>> TrainJob::BeginStep(int64_t epoch) {
  if (cancelled()) {
    return absl::CancelledError(
        absl::StrCat("training of '", model_->config().name(), "' cancelled in epoch ", epoch + 1));
  }
  std::vector<DeviceScheduler::TrainingLease> leases;
  leases.reserve(options_.schedulers.size());
  for (DeviceScheduler* scheduler : options_.schedulers) {
    ASSIGN_OR_RETURN(DeviceScheduler::TrainingLease granted, scheduler->AcquireTrainingLease());
    leases.push_back(std::move(granted));
  }
  return leases;
}

absl::Status TrainJob::CheckLoss(double loss, int64_t epoch, int64_t step) const {
  if (std::isfinite(loss)) return absl::OkStatus();
  return absl::FailedPreconditionError(absl::StrCat(
      "training of '", model_->config().name(), "' diverged: the loss is ", loss, " at epoch ",
      epoch + 1, ", step ", step + 1, "; lower the learning rate or clip gradients"));
}

absl::Status TrainJob::CloseEpoch(int64_t epoch, double train_loss, RunState& run) {
  const ParameterArena& params = model_->parameters();
  TrainCheckpoint& state = run.checkpoint;
  // Workers take the coordinator's validation loss (AgreeOnEpoch): computed once per job.
  double validation_loss = std::nan("");
  if (!options_.worker) {
    ASSIGN_OR_RETURN(validation_loss, Validate());
  }
  // The arena and the optimiser's state are what the best weights and checkpoints copy.
  RETURN_IF_ERROR(engine_->Pull());
  ASSIGN_OR_RETURN(const std::vector<uint64_t> sums, CheckReplicas(epoch));
  RETURN_IF_ERROR(AgreeOnEpoch(epoch, sums, validation_loss));
  state.train_losses.push_back(train_loss);
  state.validation_losses.push_back(validation_loss);
  state.epochs_done = epoch + 1;
  state.optimizer_steps = engine_->steps_taken();
  if (!std::isnan(validation_loss)) {
    const double min_delta = static_cast<double>(options_.training.min_delta());
    if (state.best_epoch < 0 || validation_loss < state.best_validation_loss - min_delta) {
      state.best_epoch = epoch;
      state.best_validation_loss = validation_loss;
      state.epochs_without_improvement = 0;
      state.best_params.assign(params.data(), params.data() + params.size());
    } else {
      ++state.epochs_without_improvement;
    }
  }
  if (!options_.checkpoint_path.empty()) {
    state.params.assign(params.data(), params.data() + params.size());
    state.optimizer_state.clear();
    for (const auto& [name, values] : optimizer_->state()) {
      state.optimizer_state.emplace_back(name, *values);
    }
    RETURN_IF_ERROR(WriteCheckpoint(options_.checkpoint_path, state));
  }
  const TrainProgress progress =
      Progress(TrainProgress::Kind::kEpoch, epoch, train_loss, validation_loss, run);
  spdlog::info("training '{}': epoch {}/{} train loss {:.6g} validation loss {:.6g}",
               model_->config().name(), epoch + 1, epochs_, train_loss, validation_loss);
  Report(progress);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<uint64_t>> TrainJob::CheckReplicas(int64_t epoch) {
  ASSIGN_OR_RETURN(const std::vector<uint64_t> sums, engine_->WeightChecksums());
  if (sums.empty()) return sums;
  const std::string listed = absl::StrJoin(sums, ", ", [](std::string* out, uint64_t sum) {
    absl::StrAppend(out, absl::Hex(sum, absl::kZeroPad16));
  });
  spdlog::debug("training '{}': epoch {} weight checksums per rank: {}", model_->config().name(),
                epoch + 1, listed);
  if (std::adjacent_find(sums.begin(), sums.end(), std::not_equal_to<>()) == sums.end()) {
    return sums;
  }
  return absl::InternalError(absl::StrCat("training of '", model_->config().name(),
                                          "': the ranks' weights differ after epoch ", epoch + 1,
                                          " (checksums per rank: ", listed, ")"));
}

TrainResult TrainJob::Finish(const TrainCheckpoint& state, bool stopped_early) {
  ParameterArena& params = model_->parameters();
  if (state.best_epoch >= 0) {
    std::copy(state.best_params.begin(), state.best_params.end(), params.data());
  }
  TrainResult result;
  result.epochs_run = state.epochs_done;
  result.steps = engine_->steps_taken();
  result.device = engine_->device();
  result.stopped_early = stopped_early;
  result.best_epoch = state.best_epoch >= 0 ? state.best_epoch + 1 : state.epochs_done;
  result.best_validation_loss = state.best_epoch >= 0 ? state.best_validation_loss : std::nan("");
  result.train_losses = state.train_losses;
  result.validation_losses = state.validation_losses;
  return result;
}

absl::StatusOr<int64_t> TrainJob::Publish(const TrainResult& result) {
  const int64_t best_epoch = result.best_epoch;
  int64_t version = options_.output_version;
  if (version == 0) {
    const std::vector<int64_t> versions = ListVersions(options_.model_dir);
    version = versions.empty() ? 1 : versions.back() + 1;
  }
  v1::VersionLineage lineage;
  lineage.set_job_id(options_.job_id);
  *lineage.mutable_training() = options_.training;
  // The series is in the lineage by its size and digest, not again in full.
  if (lineage.training().data().has_inline_series()) {
    lineage.mutable_training()->mutable_data()->clear_inline_series();
  }
  lineage.set_data_rows(data_rows_);
  lineage.set_data_digest(absl::StrCat(absl::Hex(data_digest_, absl::kZeroPad16)));
  lineage.set_seed(options_.training.seed());
  lineage.set_best_epoch(best_epoch);
  if (!std::isnan(result.best_validation_loss)) {
    lineage.set_best_validation_loss(result.best_validation_loss);
  }
  lineage.set_base_version(options_.training.base_version());
  lineage.set_forecastd_version(kForecastdVersion);
  lineage.set_published_unix_ms(absl::ToUnixMillis(options_.clock->Now()));
  RETURN_IF_ERROR(PublishVersion(*model_, options_.model_dir, version, &lineage));
  spdlog::info("training '{}': published version {} (best epoch {})", model_->config().name(),
               version, best_epoch);
  if (!options_.checkpoint_path.empty()) {
    std::error_code error;
    std::filesystem::remove(options_.checkpoint_path, error);
  }
  return version;
}

TrainProgress TrainJob::Progress(TrainProgress::Kind kind, int64_t epoch, double train_loss,
                                 double validation_loss, const RunState& run) const {
  TrainProgress progress;
  progress.kind = kind;
  progress.epoch = epoch + 1;
  progress.epochs = epochs_;
  progress.step = engine_->steps_taken();
  progress.total_steps = epochs_ * steps_per_epoch();
  progress.train_loss = train_loss;
  progress.validation_loss = validation_loss;
  progress.best_validation_loss = run.checkpoint.best_validation_loss;
  progress.learning_rate = run.learning_rate;
  const double seconds = absl::ToDoubleSeconds(options_.clock->Now() - run.start);
  progress.samples_per_second =
      seconds > 0.0 ? static_cast<double>(run.samples_this_run) / seconds : 0.0;
  const double remaining_samples = static_cast<double>(progress.total_steps - progress.step) *
                                   static_cast<double>(samples_per_step_);
  progress.eta_seconds =
      progress.samples_per_second > 0.0 ? remaining_samples / progress.samples_per_second : 0.0;
  return progress;
}

void TrainJob::Report(const TrainProgress& progress) const {
  if (options_.on_progress) options_.on_progress(progress);
}

int64_t EstimateTrainStepBytes(const Forecaster& model, int64_t batch) {
  const ModelConfig& c = model.config();
  const int64_t layers = c.has_transformer() ? c.transformer().num_layers()
                         : c.has_mlp()       ? c.mlp().num_layers()
                         : c.has_gru()       ? c.gru().num_layers()
                                             : c.lstm().num_layers();
  int64_t floats = 4 * model.parameters().size() +
                   (std::max<int64_t>(layers, 1) + 2) * model.WorkspaceFloats(batch);
  if (c.has_transformer()) {
    // Training attends from every step, not only the last as forecasting does: each layer
    // keeps its (B, NH, T, T) attention weights, their dropout mask and their gradient (T the
    // rows the body reads: the window's, then the forecast steps' with future-known features).
    const int64_t T = model.lookback() + (model.num_future_features() > 0 ? model.horizon() : 0);
    floats += 3 * layers * batch * c.transformer().num_heads() * T * T;
  }
  return floats * static_cast<int64_t>(sizeof(float));
}

}  // namespace forecastd
