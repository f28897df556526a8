#include "engine/serving/model_registry.h"

#include <algorithm>
#include <atomic>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/models/model_files.h"
#include "engine/serving/model_registry_internal.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

using registry_internal::Contains;

namespace {

// How often a request for the serving version follows a switch before giving up; a switch
// takes a load and a warm-up, so more than one during one Enqueue is already unlikely.
constexpr int kMaxEnqueueAttempts = 4;

// Whether a request validated against `a` can run on `b` and be answered as `a` describes:
// the same inputs, and input records that mean the same to both (the same future-known and
// calendar features, and the same series at the same indices).
bool SameInputsAndOutputs(const Forecaster& a, const Forecaster& b) {
  if (a.lookback() != b.lookback() || a.num_features() != b.num_features() ||
      a.input_floats() != b.input_floats() || a.horizon() != b.horizon() ||
      a.num_targets() != b.num_targets() || a.num_quantiles() != b.num_quantiles() ||
      a.num_outputs() != b.num_outputs()) {
    return false;
  }
  const ModelConfig& x = a.config();
  const ModelConfig& y = b.config();
  return NumInputColumns(x) == NumInputColumns(y) &&
         std::equal(x.covariates().future().begin(), x.covariates().future().end(),
                    y.covariates().future().begin(), y.covariates().future().end()) &&
         std::equal(x.covariates().calendar().begin(), x.covariates().calendar().end(),
                    y.covariates().calendar().begin(), y.covariates().calendar().end()) &&
         std::equal(x.series().begin(), x.series().end(), y.series().begin(), y.series().end());
}

}  // namespace

absl::string_view ModelStateName(ModelState state) {
  switch (state) {
    case ModelState::kUnavailable:
      return "UNAVAILABLE";
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
    case ModelState::kUnloaded:
      return "UNLOADED";
    case ModelState::kFailed:
      return "FAILED";
  }
  return "UNKNOWN";
}

absl::StatusOr<std::unique_ptr<ModelRegistry>> ModelRegistry::Create(const Options& options) {
  if (options.repository_path.empty()) {
    return absl::InvalidArgumentError("ModelRegistry: repository_path is empty");
  }
  for (const ExecutionDevice* device : options.devices) {
    if (device == nullptr) return absl::InvalidArgumentError("ModelRegistry: a null device");
  }
  if (options.devices.empty() && options.backend == nullptr) {
    return absl::InvalidArgumentError("ModelRegistry: no devices and no backend");
  }
  if (options.devices.empty() && options.scheduler == nullptr) {
    return absl::InvalidArgumentError("ModelRegistry: no devices and no scheduler");
  }
  if (options.num_workers < 0 || (options.num_workers > 0 && options.scheduler != nullptr &&
                                  options.num_workers < options.scheduler->num_workers())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ModelRegistry: num_workers is ", options.num_workers,
        "; it must be 0 or at least the scheduler's ", options.scheduler->num_workers()));
  }
  if (options.max_enqueued_batches < 0) {
    return absl::InvalidArgumentError("ModelRegistry: max_enqueued_batches is negative");
  }
  if (options.drain_timeout < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("ModelRegistry: drain_timeout is negative");
  }
  for (const std::string& name : options.models_to_load) {
    if (absl::Status status = ValidateModelName(name); !status.ok()) {
      return WithContext(status, "ModelRegistry: models_to_load");
    }
  }
  return std::unique_ptr<ModelRegistry>(new ModelRegistry(options));
}

ModelRegistry::ModelRegistry(const Options& options)
    : options_(options),
      repository_(options.repository_path),
      own_cpu_device_(options.devices.empty()
                          ? std::make_unique<CpuExecutionDevice>(options.backend, options.scheduler,
                                                                 options.num_workers)
                          : nullptr),
      devices_(options.devices.empty() ? std::vector<ExecutionDevice*>{own_cpu_device_.get()}
                                       : options.devices) {}

ModelRegistry::~ModelRegistry() { Shutdown(options_.drain_timeout); }

absl::Status ModelRegistry::Start() {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  if (started_) return absl::FailedPreconditionError("ModelRegistry: Start was already called");
  if (shut_down()) return absl::UnavailableError("model registry is shut down");
  ASSIGN_OR_RETURN(const std::vector<std::string> names, repository_.ListModels());
  started_ = true;
  for (const std::string& name : names) FindOrAddEntry(name);

  const std::vector<std::string>& to_load =
      options_.models_to_load.empty() ? names : options_.models_to_load;
  int ready = 0;
  for (const std::string& name : to_load) {
    absl::StatusOr<std::shared_ptr<ModelEntry>> entry = GetOrAddEntry(name);
    if (!entry.ok()) {
      auto failed = std::make_shared<ModelEntry>(name);
      {
        absl::MutexLock l(&mu_);
        models_.emplace(name, failed);
      }
      absl::MutexLock admin(&failed->admin_mu);
      RecordLoadFailure(*failed, 0, entry.status()).IgnoreError();
      continue;
    }
    absl::MutexLock admin(&(*entry)->admin_mu);
    if (LoadAndSwitch(**entry, 0).ok()) ++ready;
  }
  spdlog::info("model registry: {} models in {}, {} loaded, {} failed", names.size(),
               repository_.root(), ready, to_load.size() - ready);
  return absl::OkStatus();
}

bool ModelRegistry::shut_down() const {
  absl::ReaderMutexLock l(&mu_);
  return shut_down_;
}

std::shared_ptr<ModelRegistry::ModelEntry> ModelRegistry::FindEntry(
    const std::string& model) const {
  absl::ReaderMutexLock l(&mu_);
  auto it = models_.find(model);
  return it == models_.end() ? nullptr : it->second;
}

std::shared_ptr<ModelRegistry::ModelEntry> ModelRegistry::FindOrAddEntry(const std::string& model) {
  if (std::shared_ptr<ModelEntry> entry = FindEntry(model)) return entry;
  if (!repository_.HasModel(model)) return nullptr;
  std::shared_ptr<ModelEntry> entry;
  {
    absl::MutexLock l(&mu_);
    std::shared_ptr<ModelEntry>& slot = models_[model];
    if (slot == nullptr) slot = std::make_shared<ModelEntry>(model);
    entry = slot;
  }
  RefreshVersions(*entry);
  return entry;
}

absl::StatusOr<std::shared_ptr<ModelRegistry::ModelEntry>> ModelRegistry::GetOrAddEntry(
    const std::string& model) {
  std::shared_ptr<ModelEntry> entry = FindOrAddEntry(model);
  if (entry == nullptr) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' is not in the repository ", repository_.root()));
  }
  return entry;
}

std::vector<std::shared_ptr<ModelRegistry::ModelEntry>> ModelRegistry::AllEntries() const {
  absl::ReaderMutexLock l(&mu_);
  std::vector<std::shared_ptr<ModelEntry>> entries;
  entries.reserve(models_.size());
  for (const auto& [name, entry] : models_) entries.push_back(entry);
  return entries;
}

void ModelRegistry::RefreshVersions(ModelEntry& entry) const {
  std::vector<int64_t> versions = repository_.ListVersions(entry.name);
  absl::MutexLock l(&entry.mu);
  entry.versions_on_disk = std::move(versions);
}

// --- Predict path

absl::StatusOr<std::shared_ptr<registry_internal::LoadedVersion>> ModelRegistry::FindVersion(
    const std::string& model, int64_t version) const {
  absl::ReaderMutexLock l(&mu_);
  if (shut_down_) return absl::UnavailableError("model registry is shut down");
  auto it = models_.find(model);
  if (it == models_.end()) {
    return absl::NotFoundError(absl::StrCat("model '", model, "' is not in the repository"));
  }
  if (version < 0) {
    return absl::InvalidArgumentError(absl::StrCat("version ", version, " of model '", model,
                                                   "': versions are positive; 0 asks for the ",
                                                   "serving version"));
  }
  const ModelEntry& entry = *it->second;
  absl::ReaderMutexLock entry_lock(&entry.mu);
  const bool is_serving =
      entry.serving != nullptr && (version == 0 || version == entry.serving->version);
  if (version > 0 && !is_serving && !Contains(entry.versions_on_disk, version)) {
    return absl::NotFoundError(
        absl::StrCat("model '", model, "' has no version ", version,
                     " (versions: ", absl::StrJoin(entry.versions_on_disk, ", "), ")"));
  }
  if (entry.state != ModelState::kReady) {
    switch (entry.state) {
      case ModelState::kFailed:
        return absl::UnavailableError(
            absl::StrCat("model '", model, "' failed to load: ", entry.last_error.message()));
      case ModelState::kUnavailable:
        return absl::UnavailableError(absl::StrCat("model '", model, "' is not loaded"));
      default:
        return absl::UnavailableError(
            absl::StrCat("model '", model, "' is ", ModelStateName(entry.state)));
    }
  }
  if (!is_serving) {
    return absl::UnavailableError(absl::StrCat("version ", version, " of model '", model,
                                               "' is not loaded (serving version ",
                                               entry.serving->version, ")"));
  }
  return entry.serving;
}

absl::StatusOr<LoadedModel> ModelRegistry::GetLoadedModel(const std::string& model,
                                                          int64_t version) const {
  ASSIGN_OR_RETURN(std::shared_ptr<LoadedVersion> loaded, FindVersion(model, version));
  LoadedModel out;
  out.model = loaded->model;
  out.version = loaded->version;
  out.device = loaded->device->id();
  out.max_batch_size = loaded->max_batch_size;
  out.default_priority_level = loaded->default_priority_level;
  out.requested_version = version;
  out.pinned = std::move(loaded);
  return out;
}

absl::Status ModelRegistry::Enqueue(const LoadedModel& pinned, std::unique_ptr<PredictTask>& task) {
  if (task == nullptr) return absl::InvalidArgumentError("Enqueue: no task");
  if (pinned.pinned == nullptr) return absl::InvalidArgumentError("Enqueue: no pinned version");
  std::shared_ptr<LoadedVersion> loaded = pinned.pinned;
  const Forecaster& validated = *pinned.model;
  for (int attempt = 1;; ++attempt) {
    absl::Status status = loaded->batcher->Enqueue(task);
    // A switch retired the version between the pin and the enqueue (its batcher is
    // draining): a lookup now finds its successor, or says why there is none.
    if (!absl::IsUnavailable(status) || !loaded->retired.load(std::memory_order_acquire) ||
        attempt >= kMaxEnqueueAttempts) {
      return status;
    }
    const std::string& name = validated.config().name();
    ASSIGN_OR_RETURN(loaded, FindVersion(name, pinned.requested_version));
    if (!SameInputsAndOutputs(validated, *loaded->model) || task->rows > loaded->max_batch_size) {
      const std::string to = loaded->version == pinned.version
                                 ? absl::StrCat("was reloaded (version ", pinned.version, ")")
                                 : absl::StrCat("switched from version ", pinned.version,
                                                " to version ", loaded->version);
      return absl::UnavailableError(absl::StrCat("model '", name, "' ", to,
                                                 " with other inputs, outputs or batch limits ",
                                                 "while the request was admitted; send it again"));
    }
  }
}

absl::Status ModelRegistry::Enqueue(const std::string& model, int64_t version,
                                    std::unique_ptr<PredictTask>& task) {
  ASSIGN_OR_RETURN(const LoadedModel pinned, GetLoadedModel(model, version));
  return Enqueue(pinned, task);
}

// --- Status

ModelStatus ModelRegistry::StatusOf(const ModelEntry& entry) const {
  ModelStatus status;
  status.name = entry.name;
  {
    absl::ReaderMutexLock l(&entry.mu);
    status.state = entry.state;
    status.versions_on_disk = entry.versions_on_disk;
    status.last_error = entry.last_error;
    status.config = entry.config;
    auto report = [&status](const LoadedVersion& loaded, bool serving) {
      LoadedVersionStatus version;
      version.version = loaded.version;
      version.device = loaded.device->id();
      if (!loaded.instances.empty()) version.compute = loaded.instances.front()->compute();
      version.serving = serving;
      version.draining = !serving;
      version.in_flight_tasks = loaded.batcher->in_flight_tasks();
      version.queued_tasks = loaded.batcher->queued_tasks();
      status.loaded.push_back(version);
    };
    if (entry.serving != nullptr) {
      status.serving_version = entry.serving->version;
      report(*entry.serving, true);
    }
    for (const std::shared_ptr<LoadedVersion>& loaded : entry.draining) report(*loaded, false);
  }
  // Read outside the entry's lock: a few small files, one per version on disk.
  const std::string dir = repository_.ModelDir(status.name);
  for (const int64_t version : status.versions_on_disk) {
    absl::StatusOr<v1::VersionLineage> lineage = ReadLineage(dir, version);
    if (lineage.ok()) status.lineage[version] = *std::move(lineage);
  }
  return status;
}

std::vector<ModelStatus> ModelRegistry::ListModels() {
  std::set<std::string> on_disk;
  if (absl::StatusOr<std::vector<std::string>> names = repository_.ListModels(); names.ok()) {
    on_disk.insert(names->begin(), names->end());
  } else {
    spdlog::warn("model registry: {}", names.status().ToString());
  }
  for (const std::string& name : on_disk) FindOrAddEntry(name);
  std::vector<ModelStatus> statuses;
  for (const std::shared_ptr<ModelEntry>& entry : AllEntries()) {
    RefreshVersions(*entry);
    ModelStatus status = StatusOf(*entry);
    const bool idle =
        status.state == ModelState::kUnavailable || status.state == ModelState::kUnloaded;
    if (idle && !on_disk.count(status.name)) continue;  // its directory has gone
    statuses.push_back(std::move(status));
  }
  return statuses;
}

absl::StatusOr<ModelStatus> ModelRegistry::GetModel(const std::string& model) {
  RETURN_IF_ERROR(ValidateModelName(model));
  ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry, GetOrAddEntry(model));
  RefreshVersions(*entry);
  return StatusOf(*entry);
}

int64_t ModelRegistry::SumOverBatchers(int64_t (Batcher::*count)() const) const {
  int64_t total = 0;
  for (const std::shared_ptr<ModelEntry>& entry : AllEntries()) {
    absl::ReaderMutexLock l(&entry->mu);
    if (entry->serving != nullptr) total += ((*entry->serving->batcher).*count)();
    for (const auto& loaded : entry->draining) total += ((*loaded->batcher).*count)();
  }
  return total;
}

int64_t ModelRegistry::total_queued_tasks() const {
  return SumOverBatchers(&Batcher::queued_tasks);
}

int64_t ModelRegistry::total_in_flight_tasks() const {
  return SumOverBatchers(&Batcher::in_flight_tasks);
}

int ModelRegistry::loaded_model_count() const {
  int count = 0;
  for (const std::shared_ptr<ModelEntry>& entry : AllEntries()) {
    absl::ReaderMutexLock l(&entry->mu);
    if (entry->state == ModelState::kReady) ++count;
  }
  return count;
}

TickEngine& ModelRegistry::Ticks(const LoadedModel& pinned) { return *pinned.pinned->ticks; }

bool ModelRegistry::Retired(const LoadedModel& pinned) { return pinned.pinned->retired.load(); }

}  // namespace forecastd
