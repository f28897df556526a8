#include "engine/train/train_job_manager.h"

#include <filesystem>
#include <optional>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "engine/file_io.h"
#include "engine/hash.h"
#include "engine/models/model_files.h"
#include "engine/train/checkpoint.h"
#include "engine/train/job_records.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

struct TrainJobManager::Job {
  std::string id;
  std::string model;
  bool promote = false;
  int64_t base_version = 0;  // TrainingConfig.base_version: fine-tuned from it
  std::unique_ptr<TrainJob> job;
  JobState state = JobState::kRunning;
  std::vector<TrainProgress> events;
  std::string error;
  TrainResult result;
  bool promoted = false;
  absl::Time created;
  absl::Time finished = absl::InfinitePast();
  // A coordinated job's workers (TrainingConfig.workers): JoinedWorkers::end and unreachable.
  std::function<void()> end_workers;
  std::function<std::string()> unreachable_workers;
  // With TrainingConfig.resume_on_failure: the job on this daemon's ranks alone, to go on with
  // from the checkpoint when a worker is lost.
  std::optional<TrainJobOptions> without_workers;
  std::thread thread;
};

namespace {

absl::Status CheckModelName(const std::string& name) {
  if (name.empty() || name.size() > 128 || name[0] == '.') {
    return absl::InvalidArgumentError(absl::StrCat("invalid model name '", name, "'"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.') {
      return absl::InvalidArgumentError(
          absl::StrCat("invalid model name '", name, "': use letters, digits, '_', '-' and '.'"));
    }
  }
  return absl::OkStatus();
}

std::string Json(const google::protobuf::Message& message) {
  std::string json;
  (void)google::protobuf::util::MessageToJsonString(message, &json);
  return json;
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainJobManager>> TrainJobManager::Create(Options options) {
  if (options.backend == nullptr && !options.engine_factory)
    return absl::InvalidArgumentError(
        "TrainJobManager needs a backend or a training engine factory");
  if (options.max_running_jobs < 1)
    return absl::InvalidArgumentError("max_running_jobs must be >= 1");
  if (!options.checkpoint_dir.empty()) {
    if (absl::Status status = CreateDirectories(options.checkpoint_dir); !status.ok()) {
      return WithContext(status, "checkpoint directory");
    }
  }
  std::vector<JobSnapshot> records;
  if (!options.jobs_dir.empty()) {
    if (absl::Status status = CreateDirectories(options.jobs_dir); !status.ok()) {
      return WithContext(status, "training job records");
    }
    records = ReadJobRecords(options.jobs_dir);
  }
  auto manager = std::unique_ptr<TrainJobManager>(new TrainJobManager(std::move(options)));
  for (JobSnapshot& record : records) {
    if (record.state == JobState::kRunning) {
      // Its daemon stopped under it; a resubmission resumes from its checkpoint, if any.
      record.state = JobState::kFailed;
      record.error =
          "forecastd stopped while the job ran (resubmit it to resume from its "
          "last checkpoint)";
      if (record.finished == absl::InfinitePast()) record.finished = record.created;
      manager->Record(record);
    }
    auto job = std::make_unique<Job>();
    job->id = record.id;
    job->model = record.model;
    job->state = record.state;
    if (record.latest.has_value()) job->events.push_back(*record.latest);
    job->error = record.error;
    job->result = record.result;
    job->promoted = record.promoted;
    job->created = record.created;
    job->finished = record.finished;
    absl::MutexLock lock(&manager->mu_);
    manager->order_.push_back(job->id);
    manager->jobs_[job->id] = std::move(job);
  }
  if (!records.empty()) {
    spdlog::info("training jobs: {} read back from {}", records.size(), manager->options_.jobs_dir);
  }
  return manager;
}

TrainJobManager::TrainJobManager(Options options) : options_(std::move(options)) {}

void TrainJobManager::Record(const JobSnapshot& snapshot) const {
  if (options_.jobs_dir.empty()) return;
  if (absl::Status status = WriteJobRecord(options_.jobs_dir, snapshot); !status.ok()) {
    spdlog::warn("training job {}: its record could not be written: {}", snapshot.id,
                 std::string(status.message()));
  }
}

TrainJobManager::~TrainJobManager() { Shutdown(); }

absl::StatusOr<std::string> TrainJobManager::Start(StartRequest request) {
  RETURN_IF_ERROR(CheckModelName(request.model));
  const std::string model_dir = absl::StrCat(options_.repository, "/", request.model);
  const std::string config_path = absl::StrCat(model_dir, "/", kModelConfigFile);
  ModelConfig config;
  std::error_code error;
  if (std::filesystem::exists(config_path, error)) {
    ASSIGN_OR_RETURN(config, ReadModelConfig(config_path));
    if (request.config.has_value() &&
        !google::protobuf::util::MessageDifferencer::Equals(*request.config, config)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", request.model, "' exists with another configuration; leave `config` unset to ",
          "train it, or train a new model under another name"));
    }
  } else if (request.config.has_value()) {
    config = *request.config;
    if (config.name().empty()) config.set_name(request.model);
    if (config.name() != request.model) {
      return absl::InvalidArgumentError(absl::StrCat("config.name '", config.name(),
                                                     "' differs from the model '", request.model,
                                                     "' to train"));
    }
  } else {
    return absl::NotFoundError(absl::StrCat("model '", request.model,
                                            "' is not in the repository; ",
                                            "give its `config` to train a new model"));
  }

  RETURN_IF_ERROR(CheckAdmission(request.model));

  auto job = std::make_unique<Job>();
  job->model = request.model;
  job->promote = request.promote;
  job->base_version = request.training.base_version();
  TrainJobOptions o = CommonOptions(job.get());
  o.model = config;
  o.training = request.training;
  o.model_dir = model_dir;
  if (!options_.checkpoint_dir.empty() || options_.checkpoints_in_model_dirs) {
    // The same job on other devices resumes the same checkpoint.
    v1::TrainingConfig placed_anywhere = request.training;
    placed_anywhere.clear_devices();
    placed_anywhere.clear_workers();
    placed_anywhere.clear_resume_on_failure();
    const uint64_t hash = Fnv1a(Json(config) + "\n" + Json(placed_anywhere));
    if (!options_.checkpoint_dir.empty()) {
      o.checkpoint_path =
          absl::StrFormat("%s/%s-%016x.ckpt", options_.checkpoint_dir, request.model, hash);
    } else {
      const std::string dir = absl::StrCat(model_dir, "/.checkpoints");
      RETURN_IF_ERROR(CreateDirectories(dir));
      o.checkpoint_path = absl::StrFormat("%s/%016x.ckpt", dir, hash);
    }
  }
  if (!request.training.devices().empty()) {
    if (!options_.place) {
      return absl::InvalidArgumentError(
          "this server trains on its configured device only; leave training.devices empty");
    }
    // This daemon's own devices (with workers: where the job goes on if it loses them).
    v1::TrainingConfig here = request.training;
    here.clear_workers();
    ASSIGN_OR_RETURN(JobPlacement placement, options_.place(here));
    o.engine_factory = std::move(placement.engine_factory);
    o.schedulers = std::move(placement.schedulers);
  }
  if (!request.training.workers().empty()) {
    if (!options_.join_workers) {
      return absl::InvalidArgumentError(
          "this server does not coordinate jobs across daemons; leave training.workers empty");
    }
    if (request.training.base_version() != 0) {
      return absl::InvalidArgumentError(
          "fine-tuning (base_version) runs on one daemon: its base version is in this "
          "daemon's repository only; leave training.workers empty");
    }
    // Checked (without making an engine) before any worker is asked to start.
    o.make_engine_in_run = true;
    RETURN_IF_ERROR(TrainJob::Create(o).status());
    if (request.training.resume_on_failure()) {
      if (o.checkpoint_path.empty()) {
        return absl::InvalidArgumentError(
            "training.resume_on_failure resumes from a checkpoint, and this server keeps none");
      }
      // Where the job goes on without its workers: this daemon's ranks alone.
      TrainJobOptions alone = o;
      alone.training.clear_workers();
      alone.make_engine_in_run = false;
      job->without_workers = std::move(alone);
    }
    ASSIGN_OR_RETURN(JoinedWorkers joined,
                     options_.join_workers(request.model, config, request.training));
    o.engine_factory = std::move(joined.placement.engine_factory);
    o.schedulers = std::move(joined.placement.schedulers);
    // The ranks join when the job runs: its workers' ranks are joining meanwhile.
    o.make_engine_in_run = true;
    job->end_workers = std::move(joined.end);
    job->unreachable_workers = std::move(joined.unreachable);
  }
  return Launch(std::move(job), std::move(o));
}

absl::StatusOr<std::string> TrainJobManager::StartWorker(StartRequest request,
                                                         JobPlacement placement) {
  RETURN_IF_ERROR(CheckModelName(request.model));
  if (!request.config.has_value()) {
    return absl::InvalidArgumentError("a worker's job needs the model's config");
  }
  if (request.training.base_version() != 0) {
    return absl::InvalidArgumentError("fine-tuning (base_version) runs on one daemon");
  }
  ModelConfig config = *request.config;
  if (config.name().empty()) config.set_name(request.model);
  RETURN_IF_ERROR(CheckAdmission(request.model));
  auto job = std::make_unique<Job>();
  job->model = request.model;
  TrainJobOptions o = CommonOptions(job.get());
  o.model = config;
  o.training = request.training;
  o.model_dir = absl::StrCat(options_.repository, "/", request.model);
  o.engine_factory = std::move(placement.engine_factory);
  o.schedulers = std::move(placement.schedulers);
  o.make_engine_in_run = true;
  o.worker = true;
  o.publish = false;
  return Launch(std::move(job), std::move(o));
}

absl::Status TrainJobManager::CheckAdmission(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("the server is shutting down");
  int64_t running = 0;
  for (const auto& [id, job] : jobs_) {
    if (job->state != JobState::kRunning) continue;
    ++running;
    if (job->model == model) {
      return absl::FailedPreconditionError(absl::StrCat("job ", id, " is already training model '",
                                                        model, "'; wait for it or cancel it"));
    }
  }
  if (running >= options_.max_running_jobs) {
    return absl::ResourceExhaustedError(
        absl::StrCat(running, " training jobs are running, the most this server runs at once"));
  }
  return absl::OkStatus();
}

TrainJobOptions TrainJobManager::CommonOptions(Job* job) {
  job->created = (options_.clock ? options_.clock : Clock::Real())->Now();
  {
    // The id first: the published version's lineage names it.
    const std::string stamp = absl::FormatTime("%Y%m%d-%H%M%S", job->created, absl::UTCTimeZone());
    absl::MutexLock lock(&mu_);
    do {
      job->id = absl::StrCat("train-", stamp, "-", next_id_++);
    } while (jobs_.count(job->id) > 0);
  }
  TrainJobOptions o;
  o.job_id = job->id;
  o.data_dir = options_.data_dir;
  o.engine_factory = options_.engine_factory;
  o.backend = options_.backend;
  o.schedulers = options_.schedulers;
  o.clock = options_.clock;
  o.progress_every_steps = options_.progress_every_steps;
  o.max_series_rows = options_.max_series_rows;
  o.max_step_bytes = options_.max_step_bytes;
  o.on_progress = [this, job](const TrainProgress& progress) {
    std::string id;
    {
      absl::MutexLock lock(&mu_);
      job->events.push_back(progress);
      id = job->id;
    }
    if (options_.observer != nullptr) options_.observer->OnProgress(id, job->model, progress);
  };
  return o;
}

absl::StatusOr<std::string> TrainJobManager::Launch(std::unique_ptr<Job> job, TrainJobOptions o) {
  // A job that never starts tells its workers to stop.
  absl::Cleanup end_workers = [&job] {
    if (job != nullptr && job->end_workers) job->end_workers();
  };
  ASSIGN_OR_RETURN(job->job, TrainJob::Create(std::move(o)));
  Job* raw = job.get();
  absl::MutexLock lock(&mu_);
  if (shut_down_) return absl::UnavailableError("the server is shutting down");
  for (const auto& [id, other] : jobs_) {
    if (other->state == JobState::kRunning && other->model == raw->model) {
      return absl::FailedPreconditionError(
          absl::StrCat("job ", id, " is already training model '", raw->model, "'"));
    }
  }
  const std::string id = raw->id;
  spdlog::info("training job {} started for model '{}'{}", id, raw->model,
               raw->job->worker() ? " (ranks of another daemon's job)" : "");
  order_.push_back(id);
  jobs_[id] = std::move(job);
  // Under the lock, before the thread starts: the job's final record (RunJob) must come after
  // this one, and a job refused above must leave none.
  Record(SnapshotLocked(*raw));
  raw->thread = std::thread([this, raw] {
    if (options_.on_job_thread_start) options_.on_job_thread_start();
    RunJob(raw);
  });
  return id;
}

void TrainJobManager::RunJob(Job* job) {
  absl::StatusOr<TrainResult> result = job->job->Run();
  absl::Status status = result.status();
  if (job->end_workers) {
    const bool collective_failed =
        (absl::IsDeadlineExceeded(status) || absl::IsUnavailable(status)) && !job->job->cancelled();
    // A failure in a collective is most often a worker that is gone: name it.
    if (collective_failed && job->unreachable_workers) {
      const std::string lost = job->unreachable_workers();
      if (!lost.empty()) {
        status =
            absl::Status(status.code(), absl::StrCat("lost worker ", lost, ": ", status.message()));
      }
    }
    job->end_workers();
    if (collective_failed && job->without_workers.has_value()) {
      spdlog::warn(
          "training job {} for '{}': {}; going on from its last checkpoint on this daemon's "
          "ranks alone",
          job->id, job->model, std::string(status.message()));
      absl::StatusOr<std::unique_ptr<TrainJob>> alone =
          TrainJob::Create(*std::move(job->without_workers));
      if (!alone.ok()) {
        status = absl::Status(status.code(), absl::StrCat(status.message(),
                                                          "; it could not go on without its "
                                                          "workers: ",
                                                          alone.status().message()));
      } else {
        std::unique_ptr<TrainJob> failed;
        {
          absl::MutexLock lock(&mu_);
          failed = std::exchange(job->job, *std::move(alone));
        }
        failed.reset();
        result = job->job->Run();
        status = result.status();
      }
    }
  }
  bool promoted = false;
  if (status.ok() && result->version > 0 && options_.on_published) {
    status = options_.on_published(job->model, result->version, job->promote);
    if (!status.ok()) {
      status = absl::Status(
          status.code(),
          absl::StrCat("version ", result->version, " was published but could not be ",
                       job->promote ? "promoted" : "registered", ": ", status.message()));
    } else {
      promoted = job->promote;
    }
  }
  JobSnapshot snapshot;
  {
    absl::MutexLock lock(&mu_);
    if (result.ok()) job->result = *result;
    job->promoted = promoted;
    job->finished = (options_.clock ? options_.clock : Clock::Real())->Now();
    if (status.ok()) {
      job->state = JobState::kSucceeded;
    } else if (absl::IsCancelled(status)) {
      job->state = JobState::kCancelled;
      job->error = std::string(status.message());
    } else {
      job->state = JobState::kFailed;
      job->error = status.ToString();
    }
    snapshot = SnapshotLocked(*job);
  }
  Record(snapshot);
  if (snapshot.state == JobState::kSucceeded) {
    spdlog::info("training job {} for '{}' succeeded: version {}", snapshot.id, snapshot.model,
                 snapshot.result.version);
  } else {
    spdlog::warn("training job {} for '{}' ended: {}", snapshot.id, snapshot.model, snapshot.error);
  }
  if (options_.observer != nullptr) options_.observer->OnFinished(snapshot);
}

JobSnapshot TrainJobManager::SnapshotLocked(const Job& job) const {
  JobSnapshot s;
  s.id = job.id;
  s.model = job.model;
  s.state = job.state;
  if (!job.events.empty()) s.latest = job.events.back();
  s.error = job.error;
  s.result = job.result;
  s.promoted = job.promoted;
  s.created = job.created;
  s.finished = job.finished;
  return s;
}

absl::StatusOr<JobSnapshot> TrainJobManager::Get(const std::string& id) const {
  absl::MutexLock lock(&mu_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no training job '", id, "'"));
  return SnapshotLocked(*it->second);
}

std::vector<JobSnapshot> TrainJobManager::List(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  std::vector<JobSnapshot> list;
  for (const std::string& id : order_) {
    const Job& job = *jobs_.at(id);
    if (model.empty() || job.model == model) list.push_back(SnapshotLocked(job));
  }
  return list;
}

absl::Status TrainJobManager::CheckNoJobFrom(const std::string& model, int64_t version) const {
  absl::MutexLock l(&mu_);
  for (const auto& [id, job] : jobs_) {
    if (job->model == model && job->base_version == version && job->state == JobState::kRunning) {
      return absl::FailedPreconditionError(absl::StrCat("training job ", id, " fine-tunes model '",
                                                        model, "' from version ", version,
                                                        "; cancel it or let it finish first"));
    }
  }
  return absl::OkStatus();
}

std::vector<std::string> TrainJobManager::RemoveCheckpointsFrom(const std::string& model,
                                                                int64_t base_version) {
  // Where the model's checkpoints are (see Options::checkpoint_dir).
  std::string dir;
  std::string prefix;
  if (!options_.checkpoint_dir.empty()) {
    dir = options_.checkpoint_dir;
    prefix = model + "-";
  } else if (options_.checkpoints_in_model_dirs) {
    dir = absl::StrCat(options_.repository, "/", model, "/.checkpoints");
  } else {
    return {};
  }
  std::vector<std::string> removed;
  std::error_code error;
  for (const auto& file : std::filesystem::directory_iterator(dir, error)) {
    const std::string name = file.path().filename().string();
    if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, ".ckpt")) continue;
    const std::string path = file.path().string();
    absl::StatusOr<TrainCheckpoint> checkpoint = ReadCheckpoint(path);
    if (!checkpoint.ok()) {
      spdlog::warn("checkpoint {} is left: {}", path, checkpoint.status().ToString());
      continue;
    }
    // The fingerprint is the model's config and the job's TrainingConfig, one JSON line each
    // (TrainJob::Fingerprint); another model's file may share the prefix.
    const std::vector<std::string> lines = absl::StrSplit(checkpoint->fingerprint, '\n');
    ModelConfig config;
    v1::TrainingConfig training;
    google::protobuf::util::JsonParseOptions lenient;
    lenient.ignore_unknown_fields = true;
    if (lines.size() != 2 ||
        !google::protobuf::util::JsonStringToMessage(lines[0], &config, lenient).ok() ||
        !google::protobuf::util::JsonStringToMessage(lines[1], &training, lenient).ok() ||
        config.name() != model || training.base_version() != base_version) {
      continue;
    }
    std::error_code removing;
    if (std::filesystem::remove(file.path(), removing)) {
      removed.push_back(path);
      spdlog::info("model '{}': removed checkpoint {} (fine-tuning from version {})", model, path,
                   base_version);
    } else if (removing) {
      spdlog::warn("checkpoint {} could not be removed: {}", path, removing.message());
    }
  }
  return removed;
}

absl::Status TrainJobManager::Cancel(const std::string& id) {
  absl::MutexLock lock(&mu_);
  const auto it = jobs_.find(id);
  if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no training job '", id, "'"));
  if (it->second->state == JobState::kRunning) it->second->job->Cancel();
  return absl::OkStatus();
}

absl::StatusOr<JobSnapshot> TrainJobManager::Watch(
    const std::string& id, const std::function<bool(const TrainProgress&)>& on_event,
    const std::function<bool()>& stop) const {
  size_t next = 0;
  while (true) {
    std::vector<TrainProgress> fresh;
    bool ended = false;
    JobSnapshot snapshot;
    {
      absl::MutexLock lock(&mu_);
      const auto it = jobs_.find(id);
      if (it == jobs_.end()) return absl::NotFoundError(absl::StrCat("no training job '", id, "'"));
      const Job* job = it->second.get();
      const auto has_news = [job, next]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        return job->events.size() > next || job->state != JobState::kRunning;
      };
      // Wakes on news; the timeout only bounds how late a stop() request is noticed.
      mu_.AwaitWithTimeout(absl::Condition(&has_news), absl::Milliseconds(100));
      fresh.assign(job->events.begin() + static_cast<std::ptrdiff_t>(next), job->events.end());
      next = job->events.size();
      ended = job->state != JobState::kRunning;
      if (ended) snapshot = SnapshotLocked(*job);
    }
    for (const TrainProgress& progress : fresh) {
      if (!on_event(progress)) return absl::CancelledError("watch ended by the watcher");
    }
    if (ended) return snapshot;
    if (stop && stop()) return absl::CancelledError("watch cancelled");
  }
}

int64_t TrainJobManager::running_jobs() const {
  absl::MutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [id, job] : jobs_) n += job->state == JobState::kRunning ? 1 : 0;
  return n;
}

int64_t TrainJobManager::total_jobs() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(jobs_.size());
}

void TrainJobManager::Shutdown() {
  std::vector<std::thread> threads;
  {
    absl::MutexLock lock(&mu_);
    shut_down_ = true;
    for (auto& [id, job] : jobs_) {
      if (job->state == JobState::kRunning) job->job->Cancel();
      if (job->thread.joinable()) threads.push_back(std::move(job->thread));
    }
  }
  for (std::thread& t : threads) t.join();
}

}  // namespace forecastd
