// ModelRegistry: loading a version (warm-up, device, batcher), switching requests to it and
// draining the one it replaces; the admin operations built on that, and Shutdown.
#include "engine/serving/model_registry.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "engine/file_io.h"
#include "engine/serving/batching_config.h"
#include "engine/serving/model_registry_internal.h"
#include "google/protobuf/util/message_differencer.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

using registry_internal::Contains;

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
    if (StreamMode(model.config()) == v1::StreamingConfig::STREAM_MODE_STATE) {
      // The first tick of a stream should not pay for the step's primitives: one step on
      // slot 0, whose state is zeroed again before any stream gets it.
      const int32_t slot = 0;
      const uint8_t zero = 1;
      const std::vector<float> tick(input.begin(), input.begin() + model.num_features());
      RETURN_IF_ERROR(instance->Step(&slot, &zero, tick.data(), 1, output.data()));
      if (absl::Status s = instance->WriteState(slot, nullptr); !s.ok()) return s;
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
  const StreamLimits streams = StreamLimitsFor(config, batcher_options->max_batch_size);
  if (streams.mode == v1::StreamingConfig::STREAM_MODE_STATE) {
    instance_options.state_slots = streams.max_streams;
    instance_options.max_step_rows = streams.max_tick_batch;
  }
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
  {
    const Forecaster& m = *loaded->model;
    TickEngine::Options tick_options;
    tick_options.version = version;
    tick_options.mode = streams.mode;
    tick_options.slots = instance_options.state_slots;
    tick_options.max_batch = streams.max_tick_batch;
    tick_options.tick_floats = m.num_features();
    tick_options.window_floats = m.input_floats();
    tick_options.output_floats = m.num_outputs();
    tick_options.state_floats = m.StateFloats();
    tick_options.instances = &loaded->instances;
    tick_options.scheduler = &loaded->device->scheduler();
    tick_options.clock = options_.clock;
    tick_options.run_inline_when_idle = options_.run_inline_when_idle;
    tick_options.max_concurrent_batches = options_.max_tick_batches != Options::kTickBatchesByDevice
                                              ? options_.max_tick_batches
                                          : loaded->device->id() == "cpu" ? 1
                                                                          : 0;
    absl::StatusOr<std::unique_ptr<TickEngine>> ticks = TickEngine::Create(tick_options);
    if (!ticks.ok()) return WithContext(ticks.status(), absl::StrCat(context, ": tick streams"));
    loaded->ticks = *std::move(ticks);
  }
  if (options_.observer != nullptr) {
    loaded->observer = options_.observer->NewBatcherObserver(config.name(), version);
  }

  const Forecaster& forecaster = *loaded->model;
  batcher_options->input_floats_per_row = forecaster.input_floats();
  batcher_options->output_floats_per_row = forecaster.num_outputs();
  batcher_options->version = version;
  batcher_options->scheduler = &loaded->device->scheduler();
  batcher_options->clock = options_.clock;
  batcher_options->max_enqueued_batches = options_.max_enqueued_batches;
  // A CPU's workers each add a core: what is queued is shared between the idle ones.
  batcher_options->spread_over_idle_workers = loaded->device->id() == "cpu";
  // ... in batches of at least the rows the kernels compute a row cheapest from, or as told.
  if (options_.cpu_min_batch_rows > 0) {
    batcher_options->min_spread_rows = options_.cpu_min_batch_rows;
  } else if (!loaded->instances.empty()) {
    batcher_options->min_spread_rows = loaded->instances.front()->efficient_batch_rows();
  }
  batcher_options->run_inline_when_idle = options_.run_inline_when_idle;
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
  // Worker w's instance, or the error that it has none.
  const auto instance_of = [raw](int worker) -> absl::StatusOr<ModelInstance*> {
    if (worker < 0 || worker >= static_cast<int>(raw->instances.size())) {
      return absl::InternalError(absl::StrCat("worker ", worker, " has no instance (",
                                              raw->instances.size(), " instances)"));
    }
    return raw->instances[static_cast<size_t>(worker)].get();
  };
  batcher_options->device_rows =
      !loaded->instances.empty() && loaded->instances.front()->takes_device_rows();
  batcher_options->run_batch = [instance_of](const float* input, int64_t rows, float* output,
                                             const DeviceRowsIo& device,
                                             int worker) -> absl::Status {
    ASSIGN_OR_RETURN(ModelInstance * instance, instance_of(worker));
    if (!device.empty()) return instance->RunWithDeviceRows(input, rows, output, device);
    return instance->Run(input, rows, output);
  };
  batcher_options->start_batch = [instance_of](const float* input, int64_t rows, float* output,
                                               const DeviceRowsIo& device, int worker,
                                               absl::AnyInvocable<void(absl::Status) &&> finish) {
    absl::StatusOr<ModelInstance*> instance = instance_of(worker);
    if (!instance.ok()) {
      std::move(finish)(instance.status());
      return;
    }
    if (!device.empty()) {
      (*instance)->StartWithDeviceRows(input, rows, output, device, std::move(finish));
      return;
    }
    (*instance)->Start(input, rows, output, std::move(finish));
  };
  batcher_options->staging = [instance_of](int worker) -> Batcher::Staging {
    absl::StatusOr<ModelInstance*> instance = instance_of(worker);
    if (!instance.ok()) return {};
    return {(*instance)->input_staging(), (*instance)->output_staging()};
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

absl::StatusOr<int64_t> ModelRegistry::VersionToLoad(const ModelEntry& entry,
                                                     const ModelConfig* config,
                                                     const std::vector<int64_t>& versions) const {
  entry.admin_mu.AssertHeld();
  if (entry.pinned_version > 0 && Contains(versions, entry.pinned_version)) {
    return entry.pinned_version;
  }
  if (config != nullptr) return ChooseServingVersion(*config, versions);
  if (versions.empty()) return absl::NotFoundError("no versions");
  return versions.back();
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
  if (version == 0) {
    absl::StatusOr<int64_t> chosen = VersionToLoad(entry, &*config, versions);
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
  const absl::Time deadline = absl::Now() + timeout;
  retired->batcher->Drain(timeout);
  retired->ticks->Drain(std::max(deadline - absl::Now(), absl::ZeroDuration()));
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

absl::Status ModelRegistry::DeleteVersion(const std::string& model, int64_t version) {
  RETURN_IF_ERROR(ValidateModelName(model));
  if (version <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("version ", version, " of model '", model, "': versions are > 0"));
  }
  ASSIGN_OR_RETURN(std::shared_ptr<ModelEntry> entry, GetOrAddEntry(model));
  absl::MutexLock admin(&entry->admin_mu);
  if (shut_down()) return absl::UnavailableError("model registry is shut down");
  const std::vector<int64_t> versions = repository_.ListVersions(model);
  if (!Contains(versions, version)) {
    return absl::NotFoundError(absl::StrCat("model '", model, "' has no version ", version,
                                            " (versions: ", absl::StrJoin(versions, ", "), ")"));
  }
  {
    absl::MutexLock l(&entry->mu);
    if (entry->serving != nullptr && entry->serving->version == version) {
      return absl::FailedPreconditionError(
          absl::StrCat("version ", version, " of model '", model,
                       "' is serving; promote another version first (forecastctl models promote)"));
    }
    for (const auto& draining : entry->draining) {
      if (draining->version == version) {
        return absl::FailedPreconditionError(absl::StrCat("version ", version, " of model '", model,
                                                          "' is still finishing requests"));
      }
    }
  }
  const absl::StatusOr<ModelConfig> config = repository_.ReadConfig(model);
  if (VersionToLoad(*entry, config.ok() ? &*config : nullptr, versions).value_or(0) == version) {
    return absl::FailedPreconditionError(absl::StrCat(
        "version ", version, " of model '", model, "' is the one that serves when the model ",
        "loads (",
        versions.size() == 1 ? "its only version" : "pinned, chosen by config.json, or the highest",
        "); promote another version first (forecastctl models promote)"));
  }
  // Out of the model's view in one rename (hidden entries are not versions), then deleted. A
  // version that is a symlink loses the link, never what it points to.
  const std::string model_dir = absl::StrCat(repository_.root(), "/", model);
  const std::string path = absl::StrCat(model_dir, "/", version);
  const std::string doomed =
      absl::StrCat(model_dir, "/.deleted-", version, "-", absl::ToUnixNanos(absl::Now()));
  std::error_code error;
  std::filesystem::rename(path, doomed, error);
  if (error) {
    return absl::InternalError(absl::StrCat("cannot remove version ", version, " of model '", model,
                                            "': rename ", path, ": ", error.message()));
  }
  std::filesystem::remove_all(doomed, error);
  if (error) {
    spdlog::warn("model '{}': version {} is deleted but {} could not be removed: {}", model,
                 version, doomed, error.message());
  }
  RETURN_IF_ERROR(SyncDirectory(model_dir));
  RefreshVersions(*entry);
  spdlog::info("model '{}': version {} deleted", model, version);
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

}  // namespace forecastd
