// A training or fine-tuning job: windows from a series, a forecaster initialised fresh or
// from an existing version, epochs of shuffled mini-batches with an optimiser, a learning-rate
// schedule and a loss (or, with TrainingConfig.stateful, epochs of chunks of parallel streams
// with states carried between chunks: stream_chunks.h), validation after every epoch with
// early stopping, checkpoints after
// every epoch (a restarted job resumes from the last), and finally the best weights published
// as a new model version. Run() does the work on the caller's thread and reports progress
// through a callback; Cancel() may come from any thread.
// Thread-safety: Run() once, from one thread; Cancel() and cancelled() are thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_TRAIN_JOB_H_
#define FORECASTD_ENGINE_TRAIN_TRAIN_JOB_H_

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "engine/clock.h"
#include "engine/models/forecaster.h"
#include "engine/serving/device_scheduler.h"
#include "engine/train/checkpoint.h"
#include "engine/train/dataset.h"
#include "engine/train/loss.h"
#include "engine/train/lr_schedule.h"
#include "engine/train/optimizer.h"
#include "engine/train/stream_chunks.h"
#include "engine/train/training_engine.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

// One progress event. Step events come every TrainJobOptions::progress_every_steps steps;
// an epoch event closes each epoch with its validation loss.
struct TrainProgress {
  enum class Kind { kStep, kEpoch };
  Kind kind = Kind::kStep;
  int64_t epoch = 0;             // 1-based, the epoch running or just finished
  int64_t epochs = 0;            // the configured number
  int64_t step = 0;              // optimiser steps taken so far in the job
  int64_t total_steps = 0;       // steps of the whole job if it runs every epoch
  double train_loss = 0.0;       // mean over the epoch's batches so far (the epoch's, for kEpoch)
  double validation_loss = 0.0;  // kEpoch only; NaN when there is no validation part
  double best_validation_loss = 0.0;
  float learning_rate = 0.0f;       // of the last step
  double samples_per_second = 0.0;  // training windows per second in this run so far
  double eta_seconds = 0.0;         // at that rate, until the last epoch ends
};

struct TrainJobOptions {
  // The model to train: its architecture, windows (lookback, horizon), features and targets.
  ModelConfig model;
  v1::TrainingConfig training;

  // `<repository>/<model name>`: where the new version is published and, when fine-tuning,
  // where training.base_version is read from.
  std::string model_dir;
  // The directory training.data.csv_path is resolved in.
  std::filesystem::path data_dir;
  // The checkpoint file: resumed from when it exists and belongs to this job, rewritten after
  // every epoch, removed when the job publishes its version. "": no checkpoints.
  std::string checkpoint_path;
  // The version to publish; 0: one above the highest present when the job finishes.
  int64_t output_version = 0;
  // false: train and keep the result in memory only (tests, benchmarks).
  bool publish = true;
  // The job's id, recorded in the published version's lineage (v1::VersionLineage).
  std::string job_id;

  // Where the steps run: the engine this makes (e.g. a GPU's), or without one the host
  // engine on `backend` (not owned; must outlive the job). One of the two is needed.
  TrainingEngineFactory engine_factory;
  // Make the engine when Run() starts rather than in Create: for an engine whose ranks span
  // processes, whose making waits for the other processes' ranks to join.
  bool make_engine_in_run = false;
  // This process runs some of the ranks of a job that another process (the one with the
  // group's rank 0) coordinates: the job starts where the coordinator's does (its epoch, step,
  // weights and optimiser state, shared over the engine's collectives), takes each epoch's
  // validation loss from it instead of validating, keeps no checkpoint and publishes nothing.
  // Early stopping then decides alike everywhere. Needs publish = false and no checkpoint_path.
  bool worker = false;
  Backend* backend = nullptr;
  // Every optimiser step runs under a TrainingLease of each of these schedulers (the devices
  // the steps use), taken in this order, so training takes a worker of each only while no
  // inference waits there. Not owned; empty: steps run unscheduled.
  std::vector<DeviceScheduler*> schedulers;
  Clock* clock = nullptr;  // not owned; nullptr: the real clock

  int64_t progress_every_steps = 10;  // > 0
  // Rows the training series (inline or CSV) may have at most; more: INVALID_ARGUMENT before
  // any window is built. 0: no limit.
  int64_t max_series_rows = 0;
  // Estimated memory of one training step (EstimateTrainStepBytes) at most; more:
  // RESOURCE_EXHAUSTED before the series is read (with DataConfig.series_column, whose series
  // size the model, right after). 0: no limit.
  int64_t max_step_bytes = 0;
  // Called on the thread running Run(); must not call back into the job except Cancel().
  std::function<void(const TrainProgress&)> on_progress;
};

struct TrainResult {
  int64_t epochs_run = 0;  // including epochs resumed from a checkpoint
  int64_t steps = 0;
  bool stopped_early = false;
  int64_t best_epoch = 0;                 // 1-based; the epoch whose weights were kept
  double best_validation_loss = 0.0;      // NaN without a validation part
  std::vector<double> train_losses;       // per epoch
  std::vector<double> validation_losses;  // per epoch
  int64_t version = 0;                    // published version; 0 when not published
  int64_t resumed_from_epoch = 0;         // epochs taken from a checkpoint (0: fresh start)
  std::string device;                     // where the steps ran ("cpu", "cuda:0")
};

class TrainJob {
 public:
  // Validates everything and loads the data and (when fine-tuning) the base weights, so a bad
  // request fails here with INVALID_ARGUMENT / NOT_FOUND before any work. With
  // DataConfig.series_column the model trained is options.model with ModelConfig.series set
  // to the data's series in order of first appearance when it lists none (model() has it);
  // the data's series are mapped by name to the model's, an unknown one is INVALID_ARGUMENT
  // (and, training afresh, so is a listed series without rows), and the model's per-series
  // statistics and static covariates are fitted on the data, or kept from the base version.
  static absl::StatusOr<std::unique_ptr<TrainJob>> Create(TrainJobOptions options);

  // Runs to the end (every epoch, or early stopping), then restores the best weights and
  // publishes them. CANCELLED when Cancel() was called (the last checkpoint is kept, nothing
  // is published).
  absl::StatusOr<TrainResult> Run();

  // Between steps; a worker's (TrainJobOptions::worker) also ends the collective it may be
  // waiting in, since the coordinator it waits for may be gone.
  void Cancel();
  bool cancelled() const { return cancelled_.load(std::memory_order_relaxed); }

  // The model being trained (after Run(): the weights kept).
  const Forecaster& model() const { return *model_; }
  const WindowedDataset& dataset() const { return *dataset_; }
  // Where the steps run ("cpu", "cuda:0").
  // Runs ranks of another process's job (TrainJobOptions::worker).
  bool worker() const { return options_.worker; }
  // "" before the engine is made (TrainJobOptions::make_engine_in_run).
  std::string device() const { return engine_ != nullptr ? engine_->device() : ""; }
  int64_t steps_per_epoch() const;

 private:
  explicit TrainJob(TrainJobOptions options);

  // What the steps of one Run() share.
  struct RunState {
    // The state a checkpoint saves: resumed from one, or fresh; updated after every epoch.
    TrainCheckpoint checkpoint;
    absl::Time start;              // when this Run() began stepping
    int64_t samples_this_run = 0;  // training windows stepped over since `start`
    float learning_rate = 0.0f;    // of the last step
    std::vector<float> x, y;       // the batch being stepped: (B, input_floats()) and (B, P, K)
    std::vector<int64_t> ids;      // its window indices
  };

  // The state Run() starts from: the checkpoint at checkpoint_path when it holds this job
  // (its weights and optimiser state restored into the model and optimiser), else a fresh
  // one. FAILED_PRECONDITION for another job's checkpoint, DATA_LOSS for a mismatched one.
  absl::StatusOr<TrainCheckpoint> Resume();
  // The optimiser steps of epoch `epoch` (0-based) over the shuffled training windows, with
  // step progress events; the epoch's mean training loss. CANCELLED after Cancel().
  absl::StatusOr<double> RunEpoch(int64_t epoch, RunState& run);
  // RunEpoch for stateful training: one step per chunk of the training streams, in order,
  // from zero states; the epoch's mean loss over its scored steps.
  absl::StatusOr<double> RunStatefulEpoch(int64_t epoch, RunState& run);
  // What every optimiser step does first: CANCELLED after Cancel(); else the schedulers'
  // leases, to be held through the step.
  absl::StatusOr<std::vector<DeviceScheduler::TrainingLease>> BeginStep(int64_t epoch);
  // FAILED_PRECONDITION for a non-finite loss at `step` (0-based) of epoch `epoch`.
  absl::Status CheckLoss(double loss, int64_t epoch, int64_t step) const;
  // After epoch `epoch`: validates, pulls the weights, keeps the best ones, writes the
  // checkpoint and reports the epoch event.
  absl::Status CloseEpoch(int64_t epoch, double train_loss, RunState& run);
  // The checksums of the engine's replicas (the ranks of a data-parallel job in this process;
  // none for one engine) after epoch `epoch` (0-based), logged at debug level; INTERNAL when
  // they differ.
  absl::StatusOr<std::vector<uint64_t>> CheckReplicas(int64_t epoch);
  // Restores the best weights into the model and summarises the run.
  TrainResult Finish(const TrainCheckpoint& state, bool stopped_early);
  // Publishes the model (the best weights of `result`) as a new version in model_dir with its
  // lineage, and removes the checkpoint; the version published.
  absl::StatusOr<int64_t> Publish(const TrainResult& result);
  // A progress event at the current step, with the rate and ETA of this run so far.
  TrainProgress Progress(TrainProgress::Kind kind, int64_t epoch, double train_loss,
                         double validation_loss, const RunState& run) const;
  void Report(const TrainProgress& progress) const;

  // Makes engine_ from the options.
  absl::Status MakeEngine();
  // The run's start agreed with the coordinator: a worker takes its epoch and step count (the
  // weights and optimiser state follow in the engine's Push). Nothing for a job of one process.
  absl::Status AgreeOnStart(TrainCheckpoint& state);
  // The epoch's validation loss and rank 0's weight checksum as the coordinator has them; a
  // worker's own weights are checked against that checksum. Nothing for one process.
  absl::Status AgreeOnEpoch(int64_t epoch, const std::vector<uint64_t>& sums,
                            double& validation_loss);
  // The mean validation loss of the current weights; NaN without validation windows.
  absl::StatusOr<double> Validate();
  // Validate for stateful training: over the validation streams from zero states.
  absl::StatusOr<double> ValidateStateful();
  std::string Fingerprint() const;

  // Constant after Create.
  const TrainJobOptions options_;
  int64_t epochs_ = 0;
  int64_t batch_size_ = 0;
  std::unique_ptr<Forecaster> model_;
  std::unique_ptr<WindowedDataset> dataset_;
  // The training series as read (both splits), for the published version's lineage.
  int64_t data_rows_ = 0;
  uint64_t data_digest_ = 0;
  // Stateful training only (TrainingConfig.stateful.chunk_length > 0): the streams of each
  // part; no validation_chunks_ without a validation part.
  std::optional<StreamChunks> train_chunks_, validation_chunks_;
  // Samples (windows, or stream steps when stateful) one full optimiser step covers.
  int64_t samples_per_step_ = 0;
  std::unique_ptr<Optimizer> optimizer_;
  std::unique_ptr<LearningRateSchedule> schedule_;
  std::unique_ptr<TrainingLoss> loss_;
  std::unique_ptr<TrainingEngine> engine_;  // declared last: it refers to the members above
  // engine_ once made, for Cancel() from other threads.
  std::atomic<TrainingEngine*> abortable_{nullptr};

  std::atomic<bool> cancelled_{false};
};

}  // namespace forecastd

namespace forecastd {

// What one optimiser step of `model` on `batch` windows may hold, in bytes: the weights with
// their gradients and two optimiser moments; per layer plus the head and the loss, a forward
// workspace's worth of saved activations and backward scratch; and for a transformer each
// layer's full (B, NH, T, T) attention weights, mask and gradient. An upper-side estimate for
// refusing requests before they allocate, not an accounting.
int64_t EstimateTrainStepBytes(const Forecaster& model, int64_t batch);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_TRAIN_JOB_H_
