#include "engine/serving/model_registry.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

// How often a request for the serving version follows a switch before giving up; a switch
// takes a load and a warm-up, so more than one during one Enqueue is already unlikely.
constexpr int kMaxEnqueueAttempts = 4;

// Larger than any sane delay or timeout, small enough that absl::Duration cannot overflow.
constexpr uint64_t kMaxMicroseconds = uint64_t{1} << 50;

absl::Status InvalidBatching(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("batching.", what));
}

absl::StatusOr<PriorityQueue::Policy> PolicyFromProto(const v1::QueuePolicy& proto,
                                                      absl::string_view field) {
  PriorityQueue::Policy policy;
  switch (proto.timeout_action()) {
    case v1::QueuePolicy::REJECT:
      policy.timeout_action = PriorityQueue::Policy::TimeoutAction::kReject;
      break;
    case v1::QueuePolicy::DELAY:
      policy.timeout_action = PriorityQueue::Policy::TimeoutAction::kDelay;
      break;
    default:
      return InvalidBatching(
          absl::StrCat(field, ".timeout_action ", proto.timeout_action(), " is unknown"));
  }
  if (proto.default_timeout_us() > kMaxMicroseconds) {
    return InvalidBatching(
        absl::StrCat(field, ".default_timeout_us ", proto.default_timeout_us(), " is too large"));
  }
  policy.default_timeout = absl::Microseconds(static_cast<int64_t>(proto.default_timeout_us()));
  policy.allow_timeout_override = proto.allow_timeout_override();
  policy.max_queue_size = proto.max_queue_size();
  return policy;
}

bool Contains(const std::vector<int64_t>& sorted, int64_t value) {
  return std::binary_search(sorted.begin(), sorted.end(), value);
}

// Whether a request validated against `a` can run on `b` and be answered as `a` describes.
bool SameInputsAndOutputs(const Forecaster& a, const Forecaster& b) {
  return a.lookback() == b.lookback() && a.num_features() == b.num_features() &&
         a.horizon() == b.horizon() && a.num_targets() == b.num_targets() &&
         a.num_quantiles() == b.num_quantiles() && a.num_outputs() == b.num_outputs();
}

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
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

absl::StatusOr<Batcher::Options> BatcherOptionsFromConfig(const v1::BatchingConfig& config) {
  Batcher::Options options;
  if (config.max_batch_size() < 0) {
    return InvalidBatching(
        absl::StrCat("max_batch_size is ", config.max_batch_size(), "; it must be >= 0 (0: 32)"));
  }
  options.max_batch_size = config.max_batch_size() == 0 ? 32 : config.max_batch_size();
  for (const int32_t size : config.preferred_batch_size()) {
    if (size < 1 || size > options.max_batch_size) {
      return InvalidBatching(absl::StrCat("preferred_batch_size ", size, " is not in [1, ",
                                          options.max_batch_size, "] (max_batch_size)"));
    }
    options.preferred_batch_sizes.push_back(size);
  }
  if (config.max_queue_delay_us() > kMaxMicroseconds) {
    return InvalidBatching(
        absl::StrCat("max_queue_delay_us ", config.max_queue_delay_us(), " is too large"));
  }
  options.max_queue_delay = absl::Microseconds(static_cast<int64_t>(config.max_queue_delay_us()));

  PriorityQueue::Options& queue = options.queue;
  queue.levels = config.priority_levels() == 0 ? 1 : config.priority_levels();
  if (config.default_priority_level() == 0) {
    if (queue.levels > 1) {
      return InvalidBatching(absl::StrCat("default_priority_level must be set, in [1, ",
                                          queue.levels, "], when priority_levels is ",
                                          queue.levels));
    }
    queue.default_level = 1;
  } else if (config.default_priority_level() > queue.levels) {
    return InvalidBatching(absl::StrCat("default_priority_level ", config.default_priority_level(),
                                        " is not in [1, ", queue.levels, "] (priority_levels)"));
  } else {
    queue.default_level = config.default_priority_level();
  }
  ASSIGN_OR_RETURN(queue.default_policy,
                   PolicyFromProto(config.default_queue_policy(), "default_queue_policy"));
  for (const auto& [level, proto] : config.priority_queue_policy()) {
    if (level < 1 || level > queue.levels) {
      return InvalidBatching(absl::StrCat("priority_queue_policy has level ", level,
                                          ", not in [1, ", queue.levels, "] (priority_levels)"));
    }
    ASSIGN_OR_RETURN(queue.level_policies[level],
                     PolicyFromProto(proto, absl::StrCat("priority_queue_policy[", level, "]")));
  }
  if (absl::Status status = PriorityQueue::Validate(queue); !status.ok()) {
    return WithContext(status, "batching");
  }
  return options;
}

// One loaded version. Reached by requests through a shared_ptr, so an unload never frees it
// under a request that is still enqueueing.
struct registry_internal::LoadedVersion {
  int64_t version = 0;
  std::shared_ptr<const Forecaster> model;
  int64_t max_batch_size = 0;
  uint32_t default_priority_level = 1;
  ExecutionDevice* device = nullptr;
  // One per worker of the device's scheduler; instances[w] is used only by the batch running
  // on worker w (the scheduler runs one item per worker at a time), or by the loading thread
  // before the batcher exists.
  std::vector<std::unique_ptr<ModelInstance>> instances;
  std::unique_ptr<BatcherObserver> observer;
  // Set, under the entry's mu, before the version stops taking requests (replaced or
  // unloaded); a request that then meets its draining batcher looks the model up again.
  std::atomic<bool> retired{false};
  // Declared last, so destroyed first: no batch runs once the members above are gone.
  std::unique_ptr<Batcher> batcher;
};

struct ModelRegistry::ModelEntry {
  explicit ModelEntry(std::string model_name) : name(std::move(model_name)) {}

  const std::string name;

  // Serialises Load, Unload, SetServingVersion and Shutdown for this model; held across
  // their slow parts (reading weights, warm-up, draining), never by the predict path.
  absl::Mutex admin_mu;
  int64_t pinned_version ABSL_GUARDED_BY(admin_mu) = 0;  // by SetServingVersion; 0: none

  // Short critical sections only: what requests and status reads look at.
  mutable absl::Mutex mu;
  ModelState state ABSL_GUARDED_BY(mu) = ModelState::kUnavailable;
  std::vector<int64_t> versions_on_disk ABSL_GUARDED_BY(mu);
  std::shared_ptr<LoadedVersion> serving ABSL_GUARDED_BY(mu);
  // Replaced or unloaded versions finishing their in-flight work.
  std::vector<std::shared_ptr<LoadedVersion>> draining ABSL_GUARDED_BY(mu);
  absl::Status last_error ABSL_GUARDED_BY(mu);
  std::optional<ModelConfig> config ABSL_GUARDED_BY(mu);
};

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
      return absl::UnavailableError(absl::StrCat(
          "model '", name, "' switched from version ", pinned.version, " to version ",
          loaded->version, ", which takes other inputs or outputs, while the request was ",
          "admitted; send it again"));
    }
  }
}

absl::Status ModelRegistry::Enqueue(const std::string& model, int64_t version,
                                    std::unique_ptr<PredictTask>& task) {
  ASSIGN_OR_RETURN(const LoadedModel pinned, GetLoadedModel(model, version));
  return Enqueue(pinned, task);
}

// --- Loading

absl::Status ModelRegistry::WarmUp(LoadedVersion& loaded) const {
  const Forecaster& model = *loaded.model;
  const int64_t B = loaded.max_batch_size;
  const std::vector<float> input = model.NeutralWindows(B);
  std::vector<float> output(static_cast<size_t>(B * model.num_outputs()));
  for (const std::unique_ptr<ModelInstance>& instance : loaded.instances) {
    for (const int64_t rows : {int64_t{1}, B}) {
      RETURN_IF_ERROR(instance->Run(input.data(), rows, output.data()));
      const auto end = output.begin() + rows * model.num_outputs();
      if (!std::all_of(output.begin(), end, [](float x) { return std::isfinite(x); })) {
        return absl::InvalidArgumentError(
            absl::StrCat("warm-up forecast at batch size ", rows,
                         " is not finite (NaN or infinite weights or normaliser statistics?)"));
      }
      if (B == 1) break;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<registry_internal::LoadedVersion>> ModelRegistry::LoadVersion(
    const ModelConfig& config, int64_t version) const {
  const std::string context = absl::StrCat("model '", config.name(), "' version ", version);
  absl::StatusOr<Batcher::Options> batcher_options = BatcherOptionsFromConfig(config.batching());
  if (!batcher_options.ok()) return WithContext(batcher_options.status(), context);
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, repository_.LoadVersion(config, version));

  auto loaded = std::make_shared<LoadedVersion>();
  loaded->version = version;
  loaded->model = std::move(model);
  loaded->max_batch_size = batcher_options->max_batch_size;
  loaded->default_priority_level = batcher_options->queue.default_level;
  absl::StatusOr<ExecutionDevice*> device = DeviceFor(config);
  if (!device.ok()) return WithContext(device.status(), context);
  loaded->device = *device;
  ExecutionDevice::InstanceOptions instance_options;
  instance_options.max_batch_size = batcher_options->max_batch_size;
  instance_options.preferred_batch_sizes = batcher_options->preferred_batch_sizes;
  absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> instances =
      loaded->device->CreateInstances(loaded->model, instance_options);
  if (!instances.ok()) {
    return WithContext(instances.status(), absl::StrCat(context, " on ", loaded->device->id()));
  }
  loaded->instances = *std::move(instances);
  if (options_.warm_up) {
    if (absl::Status status = WarmUp(*loaded); !status.ok()) {
      return WithContext(status, absl::StrCat(context, ": warm-up"));
    }
  }
  if (options_.observer != nullptr) {
    loaded->observer = options_.observer->NewBatcherObserver(config.name(), version);
  }

  const Forecaster& forecaster = *loaded->model;
  batcher_options->input_floats_per_row =
      int64_t{forecaster.lookback()} * forecaster.num_features();
  batcher_options->output_floats_per_row = forecaster.num_outputs();
  batcher_options->version = version;
  batcher_options->scheduler = &loaded->device->scheduler();
  batcher_options->clock = options_.clock;
  batcher_options->max_enqueued_batches = options_.max_enqueued_batches;
  if (const uint32_t cap = options_.max_queue_size; cap > 0) {
    const auto apply_cap = [cap](PriorityQueue::Policy& policy) {
      if (policy.max_queue_size == 0 || policy.max_queue_size > cap) policy.max_queue_size = cap;
    };
    apply_cap(batcher_options->queue.default_policy);
    for (auto& [level, policy] : batcher_options->queue.level_policies) apply_cap(policy);
  }
  batcher_options->observer = loaded->observer.get();
  // The batcher is a member of `loaded`, destroyed before the rest, so the raw pointer
  // outlives every batch it runs.
  LoadedVersion* raw = loaded.get();
  batcher_options->run_batch = [raw](const float* input, int64_t rows, float* output,
                                     int worker) -> absl::Status {
    if (worker < 0 || worker >= static_cast<int>(raw->instances.size())) {
      return absl::InternalError(absl::StrCat("worker ", worker, " has no instance (",
                                              raw->instances.size(), " instances)"));
    }
    return raw->instances[static_cast<size_t>(worker)]->Run(input, rows, output);
  };
  batcher_options->staging = [raw](int worker) -> Batcher::Staging {
    if (worker < 0 || worker >= static_cast<int>(raw->instances.size())) return {};
    ModelInstance& instance = *raw->instances[static_cast<size_t>(worker)];
    return {instance.input_staging(), instance.output_staging()};
  };
  absl::StatusOr<std::unique_ptr<Batcher>> batcher = Batcher::Create(*std::move(batcher_options));
  if (!batcher.ok()) return WithContext(batcher.status(), context);
  loaded->batcher = *std::move(batcher);
  return loaded;
}

absl::StatusOr<ExecutionDevice*> ModelRegistry::DeviceFor(const ModelConfig& config) const {
  if (config.instances().devices().empty()) return devices_.front();
  for (const std::string& wanted : config.instances().devices()) {
    for (ExecutionDevice* device : devices_) {
      if (device->id() == wanted) return device;
    }
  }
  std::vector<std::string> ours;
  for (const ExecutionDevice* device : devices_) ours.push_back(device->id());
  return absl::FailedPreconditionError(absl::StrCat(
      "config.json asks for instances on [", absl::StrJoin(config.instances().devices(), ", "),
      "] but this server runs on [", absl::StrJoin(ours, ", "), "] (--devices)"));
}

absl::Status ModelRegistry::RecordLoadFailure(ModelEntry& entry, int64_t version,
                                              absl::Status error) {
  bool still_serving = false;
  {
    absl::MutexLock l(&entry.mu);
    entry.last_error = error;
    still_serving = entry.serving != nullptr;
    if (!still_serving) entry.state = ModelState::kFailed;
  }
  if (still_serving) {
    spdlog::error("model '{}': loading version {} failed, the serving version stays: {}",
                  entry.name, version, error.ToString());
  } else {
    spdlog::error("model '{}' failed to load: {}", entry.name, error.ToString());
  }
  if (options_.observer != nullptr) options_.observer->OnLoadFailed(entry.name, version, error);
  return error;
}

absl::Status ModelRegistry::LoadAndSwitch(ModelEntry& entry, int64_t pin) {
  entry.admin_mu.AssertHeld();
  const std::vector<int64_t> versions = repository_.ListVersions(entry.name);
  {
    absl::MutexLock l(&entry.mu);
    entry.versions_on_disk = versions;
  }
  if (pin > 0 && !Contains(versions, pin)) {
    return absl::NotFoundError(absl::StrCat("model '", entry.name, "' has no version ", pin,
                                            " (versions: ", absl::StrJoin(versions, ", "), ")"));
  }
  absl::StatusOr<ModelConfig> config = repository_.ReadConfig(entry.name);
  if (!config.ok()) return RecordLoadFailure(entry, pin, config.status());

  int64_t version = pin;
  if (version == 0 && entry.pinned_version > 0 && Contains(versions, entry.pinned_version)) {
    version = entry.pinned_version;
  }
  if (version == 0) {
    absl::StatusOr<int64_t> chosen = ChooseServingVersion(*config, versions);
    if (!chosen.ok()) return RecordLoadFailure(entry, 0, chosen.status());
    version = *chosen;
  }

  {
    absl::MutexLock l(&entry.mu);
    if (entry.serving != nullptr && entry.serving->version == version &&
        google::protobuf::util::MessageDifferencer::Equals(entry.serving->model->config(),
                                                           *config)) {
      if (pin > 0) entry.pinned_version = pin;
      return absl::OkStatus();
    }
    if (entry.serving == nullptr) {
      entry.state = ModelState::kLoading;
      entry.config = *config;
    }
  }

  absl::StatusOr<std::shared_ptr<LoadedVersion>> loaded = LoadVersion(*config, version);
  if (!loaded.ok()) return RecordLoadFailure(entry, version, loaded.status());

  std::shared_ptr<LoadedVersion> replaced;
  {
    absl::MutexLock l(&entry.mu);
    replaced = std::move(entry.serving);
    entry.serving = *loaded;
    if (replaced != nullptr) {
      replaced->retired.store(true, std::memory_order_release);
      entry.draining.push_back(replaced);
    }
    entry.state = ModelState::kReady;
    entry.last_error = absl::OkStatus();
    entry.config = *config;
  }
  if (pin > 0) entry.pinned_version = pin;
  if (replaced != nullptr) {
    spdlog::info("model '{}': version {} serves, replacing version {}", entry.name, version,
                 replaced->version);
  } else {
    spdlog::info("model '{}': version {} serves", entry.name, version);
  }
  if (options_.observer != nullptr) options_.observer->OnVersionLoaded(entry.name, version);
  if (replaced != nullptr) Retire(entry, std::move(replaced), options_.drain_timeout);
  return absl::OkStatus();
}

void ModelRegistry::Retire(ModelEntry& entry, std::shared_ptr<LoadedVersion> retired,
                           absl::Duration timeout) {
  retired->batcher->Drain(timeout);
  const int64_t unfinished = retired->batcher->in_flight_tasks();
  {
    absl::MutexLock l(&entry.mu);
    entry.draining.erase(std::remove(entry.draining.begin(), entry.draining.end(), retired),
                         entry.draining.end());
  }
  if (unfinished > 0) {
    spdlog::warn("model '{}' version {}: drain timed out after {} with {} tasks still computing",
                 entry.name, retired->version, absl::FormatDuration(timeout), unfinished);
  }
  spdlog::info("model '{}': version {} unloaded", entry.name, retired->version);
  if (options_.observer != nullptr) {
    options_.observer->OnVersionUnloaded(entry.name, retired->version);
  }
  // Destroys the version (its batcher first, which waits for a batch still computing) unless
  // a request thread still holds it for a moment.
  retired.reset();
}

// --- Admin

absl::Status ModelRegistry::Load(const std::string& model) {
  RETURN_IF_ERROR(ValidateModelName(model));
  ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry, GetOrAddEntry(model));
  absl::MutexLock admin(&entry->admin_mu);
  if (shut_down()) return absl::UnavailableError("model registry is shut down");
  return LoadAndSwitch(*entry, 0);
}

absl::Status ModelRegistry::SetServingVersion(const std::string& model, int64_t version) {
  RETURN_IF_ERROR(ValidateModelName(model));
  if (version < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("SetServingVersion: version ", version, " of model '", model, "' < 0"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry, GetOrAddEntry(model));
  absl::MutexLock admin(&entry->admin_mu);
  if (shut_down()) return absl::UnavailableError("model registry is shut down");
  if (version == 0) entry->pinned_version = 0;
  return LoadAndSwitch(*entry, version);
}

absl::Status ModelRegistry::Unload(const std::string& model) {
  RETURN_IF_ERROR(ValidateModelName(model));
  std::shared_ptr<ModelEntry> entry = FindEntry(model);
  if (entry == nullptr) entry = FindOrAddEntry(model);
  if (entry == nullptr) {
    return absl::NotFoundError(absl::StrCat("model '", model, "' is not in the repository"));
  }
  absl::MutexLock admin(&entry->admin_mu);
  if (shut_down()) return absl::UnavailableError("model registry is shut down");
  std::shared_ptr<LoadedVersion> serving;
  {
    absl::MutexLock l(&entry->mu);
    serving = std::move(entry->serving);
    entry->serving = nullptr;
    if (serving != nullptr) {
      serving->retired.store(true, std::memory_order_release);
      entry->draining.push_back(serving);
      entry->state = ModelState::kUnloading;
    }
  }
  if (serving != nullptr) Retire(*entry, std::move(serving), options_.drain_timeout);
  absl::MutexLock l(&entry->mu);
  entry->state = ModelState::kUnloaded;
  return absl::OkStatus();
}

absl::Status ModelRegistry::OnVersionPublished(const std::string& model, int64_t version,
                                               bool promote) {
  RETURN_IF_ERROR(ValidateModelName(model));
  if (version <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("OnVersionPublished: version ", version, " of model '", model, "' <= 0"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry, GetOrAddEntry(model));
  RefreshVersions(*entry);
  ModelState state;
  {
    absl::ReaderMutexLock l(&entry->mu);
    if (!Contains(entry->versions_on_disk, version)) {
      return absl::NotFoundError(
          absl::StrCat("model '", model, "' has no version ", version, " in the repository"));
    }
    state = entry->state;
  }
  spdlog::info("model '{}': version {} published{}", model, version,
               promote ? ", promoting it" : "");
  if (promote) return SetServingVersion(model, version);
  // A model Start would have loaded but that does not serve (new, or failed before) is
  // loaded now; one an operator unloaded or left out stays as it is.
  const bool wanted = options_.models_to_load.empty() ||
                      std::find(options_.models_to_load.begin(), options_.models_to_load.end(),
                                model) != options_.models_to_load.end();
  if (wanted && (state == ModelState::kUnavailable || state == ModelState::kFailed)) {
    return Load(model);
  }
  return absl::OkStatus();
}

void ModelRegistry::Shutdown(absl::Duration drain_timeout) {
  absl::MutexLock lifecycle(&lifecycle_mu_);
  {
    absl::MutexLock l(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  Clock* clock = options_.clock != nullptr ? options_.clock : Clock::Real();
  const absl::Time deadline = clock->Now() + std::max(drain_timeout, absl::ZeroDuration());
  const std::vector<std::shared_ptr<ModelEntry>> entries = AllEntries();
  // Stop every model first, so none keeps taking work while another drains.
  std::vector<std::pair<ModelEntry*, std::shared_ptr<LoadedVersion>>> retired;
  for (const std::shared_ptr<ModelEntry>& entry : entries) {
    absl::MutexLock admin(&entry->admin_mu);
    absl::MutexLock l(&entry->mu);
    if (entry->serving != nullptr) {
      entry->serving->retired.store(true, std::memory_order_release);
      entry->draining.push_back(entry->serving);
      retired.emplace_back(entry.get(), std::move(entry->serving));
      entry->serving = nullptr;
      entry->state = ModelState::kUnloading;
    }
  }
  for (auto& [entry, version] : retired) {
    Retire(*entry, std::move(version), std::max(deadline - clock->Now(), absl::ZeroDuration()));
  }
  for (const std::shared_ptr<ModelEntry>& entry : entries) {
    absl::MutexLock l(&entry->mu);
    if (entry->state == ModelState::kUnloading || entry->state == ModelState::kReady) {
      entry->state = ModelState::kUnloaded;
    }
  }
  spdlog::info("model registry shut down ({} versions drained)", retired.size());
}

// --- Status

ModelStatus ModelRegistry::StatusOf(const ModelEntry& entry) const {
  ModelStatus status;
  status.name = entry.name;
  absl::ReaderMutexLock l(&entry.mu);
  status.state = entry.state;
  status.versions_on_disk = entry.versions_on_disk;
  status.last_error = entry.last_error;
  status.config = entry.config;
  auto report = [&status](const LoadedVersion& loaded, bool serving) {
    LoadedVersionStatus version;
    version.version = loaded.version;
    version.device = loaded.device->id();
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

}  // namespace forecastd
