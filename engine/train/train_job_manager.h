// The daemon's training jobs: starts each TrainJob on its own thread, keeps every job's
// progress events for watchers (a late watcher gets the history replayed), cancels on request,
// and hands published versions to the serving side (on_published) so it can refresh or
// promote. Jobs for one model run one at a time, since each publishes the model's next version.
// Thread-safe: every method may be called from any thread (gRPC handlers).
#ifndef FORECASTD_ENGINE_TRAIN_TRAIN_JOB_MANAGER_H_
#define FORECASTD_ENGINE_TRAIN_TRAIN_JOB_MANAGER_H_

#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/train/train_job.h"

namespace forecastd {

enum class JobState { kRunning, kSucceeded, kFailed, kCancelled };

// A job as clients see it.
// Where one job trains: the engine its steps run on and the schedulers of the devices it uses.
struct JobPlacement {
  TrainingEngineFactory engine_factory;
  std::vector<DeviceScheduler*> schedulers;
};

// The ranks of a job that other daemons run (TrainingConfig.workers), once they have joined:
// where this daemon's own ranks go in the group, and how to reach the workers' jobs.
struct JoinedWorkers {
  JobPlacement placement;  // this daemon's ranks, first in the group
  // Tells every worker's job to stop (it may be waiting in a collective for this daemon's
  // ranks). Called once when the job ends, however it ends.
  std::function<void()> end;
  // The workers that cannot be reached now, named, for the message of a job that failed in a
  // collective ("" when all answer).
  std::function<std::string()> unreachable;
};

struct JobSnapshot {
  std::string id;
  std::string model;
  JobState state = JobState::kRunning;
  std::optional<TrainProgress> latest;
  std::string error;   // kFailed: the job's status message
  TrainResult result;  // when kSucceeded
  bool promoted = false;
  absl::Time created;
  absl::Time finished = absl::InfinitePast();  // until it ends
};

// What a job's progress means to metrics. Called on the job's thread.
class TrainJobObserver {
 public:
  virtual ~TrainJobObserver() = default;
  virtual void OnProgress(const std::string& /*job_id*/, const std::string& /*model*/,
                          const TrainProgress& /*progress*/) {}
  virtual void OnFinished(const JobSnapshot& /*job*/) {}
};

class TrainJobManager {
 public:
  struct Options {
    std::string repository;          // model directories live here
    std::filesystem::path data_dir;  // CSV paths resolve here
    // Checkpoints go here, one per (model, configuration), as <model>-<hash>.ckpt; "": see
    // checkpoints_in_model_dirs.
    std::string checkpoint_dir;
    // With checkpoint_dir empty: true keeps each model's checkpoints in its own directory,
    // <repository>/<model>/.checkpoints/<hash>.ckpt (deleting the model's directory deletes
    // them; the registry reads only numbered version directories there); false: no checkpoints.
    bool checkpoints_in_model_dirs = false;
    // Where every job's steps run (TrainJobOptions::engine_factory); without one, on `backend`.
    TrainingEngineFactory engine_factory;
    Backend* backend = nullptr;  // not owned
    // The schedulers of the devices the steps run on (TrainJobOptions::schedulers); not owned;
    // empty: steps run unscheduled.
    std::vector<DeviceScheduler*> schedulers;
    // Where a job trains when its TrainingConfig names devices (TrainingConfig.devices): the
    // engine factory and schedulers for them, or the error that refuses the request
    // (INVALID_ARGUMENT for a device not in use). Unset: naming devices is refused.
    std::function<absl::StatusOr<JobPlacement>(const v1::TrainingConfig&)> place;
    // Starts the workers' ranks of a job whose TrainingConfig names workers (model name, its
    // config, the job's configuration); UNAVAILABLE for a worker that cannot be reached. Unset:
    // such jobs are refused.
    std::function<absl::StatusOr<JoinedWorkers>(const std::string&, const ModelConfig&,
                                                const v1::TrainingConfig&)>
        join_workers;
    Clock* clock = nullptr;    // not owned; nullptr: real clock
    int max_running_jobs = 2;  // more at once: RESOURCE_EXHAUSTED
    int64_t progress_every_steps = 10;
    int64_t max_series_rows = 0;  // TrainJobOptions::max_series_rows of every job
    int64_t max_step_bytes = 0;   // TrainJobOptions::max_step_bytes of every job
    // A job published `version` of `model`; `promote` as the request asked. Called on the
    // job's thread; its status is recorded as the job's (a failed promotion fails the job,
    // the version stays published).
    std::function<absl::Status(const std::string& model, int64_t version, bool promote)>
        on_published;
    // Runs first on each job's thread, before the job: per-thread setup such as how many
    // OpenMP threads its steps fan out to. Empty: none.
    std::function<void()> on_job_thread_start;
    TrainJobObserver* observer = nullptr;  // not owned; may be nullptr
    // Where every job's record is kept (engine/train/job_records.h: <jobs_dir>/<id>.json,
    // written when the job starts and when it ends), so that jobs outlive the daemon: Create
    // lists the records it finds there as the jobs they describe, a job still running when its
    // daemon stopped as FAILED. "": jobs are kept in memory only.
    std::string jobs_dir;
  };

  struct StartRequest {
    std::string model;
    // The architecture for a new model; for an existing one, unset or equal to its config.
    std::optional<ModelConfig> config;
    v1::TrainingConfig training;
    bool promote = false;
  };

  static absl::StatusOr<std::unique_ptr<TrainJobManager>> Create(Options options);
  // Cancels running jobs and joins their threads.
  ~TrainJobManager();

  // Validates the request and builds the job (loading its data) before returning, so a bad
  // request fails here: INVALID_ARGUMENT / NOT_FOUND from TrainJob::Create;
  // FAILED_PRECONDITION when a job for the model is running; RESOURCE_EXHAUSTED at the
  // running-jobs limit; UNAVAILABLE after Shutdown. Returns the job id.
  absl::StatusOr<std::string> Start(StartRequest request);

  // Runs ranks of another daemon's job here (TrainJobOptions::worker): `request.config` is
  // the architecture (the model need not exist here), `placement` this daemon's ranks in the
  // job's group. Validated and its data read before returning; listed, watched and cancelled
  // like other jobs; publishes nothing. Fine-tuning (base_version) is refused: the base version
  // lives in the coordinator's repository. Errors as Start. Returns the job id.
  absl::StatusOr<std::string> StartWorker(StartRequest request, JobPlacement placement);

  absl::StatusOr<JobSnapshot> Get(const std::string& id) const;  // NOT_FOUND for an unknown id
  std::vector<JobSnapshot> List(const std::string& model = "") const;  // oldest first
  // Asks a running job to stop between steps; OK (and no-op) for a job that already ended.
  absl::Status Cancel(const std::string& id);

  // FAILED_PRECONDITION while a job of `model` runs that fine-tunes from `version`: asked
  // before that version is deleted.
  absl::Status CheckNoJobFrom(const std::string& model, int64_t version) const;
  // Removes the checkpoints kept for jobs of `model` that fine-tune from `base_version` (they
  // cannot resume once it is deleted) and returns their paths. A checkpoint that cannot be
  // read is left alone (logged).
  std::vector<std::string> RemoveCheckpointsFrom(const std::string& model, int64_t base_version);

  // Calls on_event for every progress event of the job, from the first, as they come, then
  // returns the final snapshot once the job has ended. Stops early (CANCELLED) when
  // on_event returns false or `stop()` becomes true (checked at least every 100 ms).
  absl::StatusOr<JobSnapshot> Watch(const std::string& id,
                                    const std::function<bool(const TrainProgress&)>& on_event,
                                    const std::function<bool()>& stop) const;

  int64_t running_jobs() const;
  int64_t total_jobs() const;

  // Cancels every running job and waits for them; Start fails with UNAVAILABLE afterwards.
  void Shutdown();

 private:
  struct Job;
  explicit TrainJobManager(Options options);
  void RunJob(Job* job);
  // Admits a job for `model` (FAILED_PRECONDITION when one runs for it, RESOURCE_EXHAUSTED at
  // the limit, UNAVAILABLE after Shutdown).
  absl::Status CheckAdmission(const std::string& model) const;
  // Creates the job from `o`, registers it and starts its thread; the job id.
  absl::StatusOr<std::string> Launch(std::unique_ptr<Job> job, TrainJobOptions o);
  // The TrainJobOptions every job of this manager shares; gives `job` its creation time and id.
  TrainJobOptions CommonOptions(Job* job);
  JobSnapshot SnapshotLocked(const Job& job) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Writes the job's record when options_.jobs_dir is set (a failure is logged: the job goes
  // on, it only may not be listed after a restart).
  void Record(const JobSnapshot& snapshot) const;

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  std::map<std::string, std::unique_ptr<Job>> jobs_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // ids, oldest first
  // Job ids are "train-<UTC date>-<time>-<n>", n counting jobs started in this process: in
  // order of starting, and unique across restarts (checked against the records read back).
  int64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_TRAIN_JOB_MANAGER_H_
