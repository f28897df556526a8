// What is loaded and serving. The registry owns, per model of the repository, its state and
// its loaded versions; each loaded version owns its Forecaster, one ModelInstance per worker
// of the device it runs on, and its Batcher. The server calls Enqueue (predict path),
// GetLoadedModel (input validation, metadata, benchmark) and the admin methods; training jobs call
// OnVersionPublished. Thread-safe: every method may be called from any thread; admin
// operations on one model are serialised, on different models they run concurrently.
#ifndef FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_H_
#define FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "backends/backend.h"
#include "engine/clock.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/serving/batcher.h"
#include "engine/serving/batching_config.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_instance.h"
#include "engine/serving/model_repository.h"
#include "engine/serving/predict_task.h"
#include "engine/serving/tick_engine.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

enum class ModelState {
  kUnavailable,  // in the repository, never loaded (not asked for at start)
  kLoading,      // its first version is loading; nothing serves yet
  kReady,        // a version serves (also while another loads beside it)
  kUnloading,    // Unload is draining it; requests are refused
  kUnloaded,     // unloaded by Unload or Shutdown
  kFailed,       // the last load failed and nothing serves; see last_error
};
absl::string_view ModelStateName(ModelState state);  // "READY", "FAILED", ...

// Hooks for the server's metrics and logs. Called from the thread running the admin
// operation, with no registry lock held; must not call the registry's admin methods for the
// same model (they would wait for themselves). Every method has a no-op default.
class RegistryObserver {
 public:
  virtual ~RegistryObserver() = default;
  // The BatcherObserver of a version about to load (nullptr: none). The registry owns it and
  // destroys it after that version's Batcher.
  virtual std::unique_ptr<BatcherObserver> NewBatcherObserver(const std::string& /*model*/,
                                                              int64_t /*version*/) {
    return nullptr;
  }
  // `version` was loaded, warmed up and now serves.
  virtual void OnVersionLoaded(const std::string& /*model*/, int64_t /*version*/) {}
  // Loading `version` failed (0 when it failed before a version was chosen).
  virtual void OnLoadFailed(const std::string& /*model*/, int64_t /*version*/,
                            const absl::Status& /*error*/) {}
  // `version` stopped serving and has drained. A reload of the serving version (its config
  // changed) reports OnVersionLoaded for the new instance before this for the old one.
  virtual void OnVersionUnloaded(const std::string& /*model*/, int64_t /*version*/) {}
};

// One loaded version, as the admin API reports it.
struct LoadedVersionStatus {
  int64_t version = 0;
  std::string device;     // where its instances run: "cpu", "cuda:0", ...
  std::string compute;    // how: ModelInstance::compute()
  bool serving = false;   // requests for version 0 go here
  bool draining = false;  // replaced or being unloaded; in-flight work finishing
  int64_t in_flight_tasks = 0;
  int64_t queued_tasks = 0;
};

struct ModelStatus {
  std::string name;
  ModelState state = ModelState::kUnavailable;
  int64_t serving_version = 0;              // 0 when nothing serves
  std::vector<int64_t> versions_on_disk;    // ascending, as of the last scan
  std::vector<LoadedVersionStatus> loaded;  // serving first, then draining ones
  absl::Status last_error;                  // why the last load failed; OK after a success
  std::optional<ModelConfig> config;        // the serving config, else the last one read
  // The lineage of each version on disk that training published (model_files.h ReadLineage).
  std::map<int64_t, v1::VersionLineage> lineage;
};

namespace registry_internal {
struct LoadedVersion;  // the registry's own record of a loaded version
}  // namespace registry_internal

// One loaded version, pinned for one request: the admission step resolves a request's model
// and version once into this, validates the input against `model` and `max_batch_size`, and
// enqueues to it (ModelRegistry::Enqueue), so a version switch in between cannot pair a
// request with limits of another version. Also what metadata reads. Holding it keeps the
// version's Forecaster valid even after the version is unloaded (its batcher may drain
// meanwhile; Enqueue then follows a switch). A value; copies share the pin.
struct LoadedModel {
  std::shared_ptr<const Forecaster> model;
  int64_t version = 0;
  std::string device;  // where it runs: "cpu", "cuda:0", ...
  // The batching config's limits, parsed once when the version loaded.
  int64_t max_batch_size = 0;           // rows per request at most
  uint32_t default_priority_level = 1;  // the level a task of priority 0 runs at
  // What the request asked for: 0 (the serving version, whichever it is when the task
  // enqueues) or `version` itself.
  int64_t requested_version = 0;
  // The registry's record of the version; opaque to callers.
  std::shared_ptr<registry_internal::LoadedVersion> pinned;
};

class ModelRegistry {
 public:
  struct Options {
    // The repository's root directory.
    std::string repository_path;
    // The devices versions run on. A version runs on the first device of its config's
    // instances.devices that is here (none of them here: the load fails with
    // FAILED_PRECONDITION), or on devices[0] when its config names none. Not owned; each
    // must outlive the registry (shut the registry down before the devices). Empty: the CPU,
    // with `backend` and `scheduler` below.
    std::vector<ExecutionDevice*> devices;
    // Without `devices`: runs every forward pass on the CPU. Not owned; must outlive the
    // registry.
    Backend* backend = nullptr;
    // Without `devices`: where the batchers send their batches. Not owned; must outlive the
    // registry (shut the registry down before the scheduler).
    DeviceScheduler* scheduler = nullptr;
    // Without `devices`: instances (CPU workspaces) per loaded version, one per scheduler
    // worker; 0: scheduler->num_workers(). When set, it must be at least that.
    int num_workers = 0;
    // Not owned; nullptr: the real clock. Passed to every Batcher.
    Clock* clock = nullptr;
    // Batcher::Options::max_enqueued_batches of every version (0: unbounded); the scheduler's
    // num_workers lets batches grow while every worker is busy.
    int64_t max_enqueued_batches = 0;
    // Batcher::Options::run_inline_when_idle of every version: a request for an idle model on
    // an idle device runs on the thread that enqueued it, without the batching delay.
    bool run_inline_when_idle = false;
    // TickEngine::Options::max_concurrent_batches of every version: tick batches of one
    // version computing at once, at most (0: one per worker; kTickBatchesByDevice: 1 on the
    // CPU, whose one-thread steps then take ticks in batches of hundreds instead of a worker
    // per few ticks, and no limit on a GPU, whose instances overlap one batch's copies with
    // another's kernels).
    static constexpr int64_t kTickBatchesByDevice = -1;
    int64_t max_tick_batches = kTickBatchesByDevice;
    // Batcher::Options::min_spread_rows of every version on the CPU (>= 0); 0: the rows its
    // instances compute a row cheapest from (ModelInstance::efficient_batch_rows).
    int64_t cpu_min_batch_rows = 0;
    // Caps the max_queue_size of every priority level's queue policy of every version (a
    // config's own smaller, nonzero size stays; 0 in a config becomes this). 0: no cap.
    uint32_t max_queue_size = 0;
    // The models Start loads; empty: every model of the repository. The others are listed
    // as UNAVAILABLE until Load asks for them.
    std::vector<std::string> models_to_load;
    // Before a version serves, run one forward pass per instance at batch sizes 1 and
    // max_batch_size (inputs at the normaliser's mean), so workspaces are allocated and a
    // version whose weights give non-finite forecasts fails to load instead of serving them.
    bool warm_up = true;
    // How long Unload, a reload and SetServingVersion wait for a retired version's in-flight
    // work (those still queued after it complete UNAVAILABLE).
    absl::Duration drain_timeout = absl::Seconds(30);
    // Not owned; may be nullptr; must outlive the registry.
    RegistryObserver* observer = nullptr;
  };

  // INVALID_ARGUMENT for missing pointers (neither devices nor backend and scheduler), a bad
  // name in models_to_load, num_workers below the scheduler's or a negative drain_timeout. Reads
  // nothing from disk; see Start.
  static absl::StatusOr<std::unique_ptr<ModelRegistry>> Create(const Options& options);
  // Shutdown(options.drain_timeout) unless done.
  ~ModelRegistry();

  ModelRegistry(const ModelRegistry&) = delete;
  ModelRegistry& operator=(const ModelRegistry&) = delete;

  // Scans the repository and loads the models asked for, one after the other, on this
  // thread. A model that fails to load is recorded as FAILED (with its error, logged) and the
  // others still load; the status is an error only when the repository cannot be listed or
  // Start was already called. A name in models_to_load with no model directory is FAILED.
  absl::Status Start();

  // --- Predict path: cheap; no disk access.

  // Pins the version a request for `version` of `model` (0: the serving version) runs on.
  // NOT_FOUND: no such model, or no such version on disk (as of the last scan); UNAVAILABLE:
  // the model is not READY (the message says its state and, when FAILED, its load error), the
  // version is on disk but not loaded, or the registry is shut down.
  absl::StatusOr<LoadedModel> GetLoadedModel(const std::string& model, int64_t version = 0) const;

  // Hands `task`, validated against `pinned`, to the Batcher of the pinned version.
  // Ownership of the task moves iff OK, as Batcher::Enqueue (whose codes it returns). When a
  // switch retired the pinned version meanwhile, a request for the serving version moves to
  // the new one if that takes the same inputs and outputs (else, and for a request of an
  // explicit version, UNAVAILABLE saying so), so a version switch never fails a request with
  // anything but a clean UNAVAILABLE or NOT_FOUND.
  absl::Status Enqueue(const LoadedModel& pinned, std::unique_ptr<PredictTask>& task);

  // The tick path of the pinned version (never null for a pin GetLoadedModel returned), and
  // whether that version has stopped taking work (replaced or unloaded): a stream that follows
  // the serving version then moves to the new one.
  static TickEngine& Ticks(const LoadedModel& pinned);
  static bool Retired(const LoadedModel& pinned);

  // GetLoadedModel, then Enqueue: for callers that validated against nothing version-specific.
  absl::Status Enqueue(const std::string& model, int64_t version,
                       std::unique_ptr<PredictTask>& task);

  // --- Admin. Each refreshes what it reports from disk; none blocks the predict path.

  // Every model of the repository, loaded or not (and those that failed or were unloaded
  // whose directory has gone), sorted by name.
  std::vector<ModelStatus> ListModels();
  // NOT_FOUND when the repository has no such model and the registry never knew it.
  absl::StatusOr<ModelStatus> GetModel(const std::string& model);

  // Loads the model, or reloads it: re-reads config.json and the versions, picks the serving
  // version (the one SetServingVersion pinned while it is on disk, else config.serving_version,
  // else the highest), and when that version and the config are what already serves, does
  // nothing. Otherwise loads and warms up the version beside the serving one, switches
  // requests to it, and drains the replaced one (waiting up to drain_timeout). On failure the
  // serving version, if any, keeps serving (state READY, last_error set); with none the model
  // is FAILED. NOT_FOUND when the model has no directory; INVALID_ARGUMENT for a bad name.
  absl::Status Load(const std::string& model);

  // Refuses new requests (UNAVAILABLE) at once, drains every loaded version (waiting up to
  // drain_timeout), then the model is UNLOADED. OK for a model that is not loaded.
  absl::Status Unload(const std::string& model);

  // Serves `version` (> 0) from now on, with no downtime: loads and warms it up beside the
  // serving version, switches, then drains the old one (waiting up to drain_timeout) before
  // returning. The choice is pinned: later reloads keep it while the version is on disk;
  // `version` 0 removes the pin and reloads by the config's rule. Loads the model when it is
  // not loaded. NOT_FOUND when the version is not on disk; a failed load leaves the old
  // version serving and returns the error.
  absl::Status SetServingVersion(const std::string& model, int64_t version);

  // Removes version `version` (> 0) of `model` from disk: its directory (weights, lineage) is
  // renamed out of the model's view at once, then deleted. FAILED_PRECONDITION for the version
  // that serves, or that would serve were the model loaded now (the pinned one while on disk,
  // else the config's serving_version, else the highest: the last version is never deleted),
  // and for a version still loaded (draining); NOT_FOUND when it is not on disk.
  absl::Status DeleteVersion(const std::string& model, int64_t version);

  // A training job published `version` of `model`: refreshes the model's versions; with
  // `promote`, serves it (SetServingVersion); a model the registry did not have loaded
  // before (such as a new directory the job created) is loaded. NOT_FOUND when the version is
  // not on disk.
  absl::Status OnVersionPublished(const std::string& model, int64_t version, bool promote);

  // Refuses every new request and admin operation (UNAVAILABLE), waits for running admin
  // operations, then drains every loaded version; all within `drain_timeout` in total (work
  // still queued then completes UNAVAILABLE). Idempotent.
  void Shutdown(absl::Duration drain_timeout);

  // --- Counters for the server's status page and metrics.
  int64_t total_queued_tasks() const;     // waiting in every loaded version's queue
  int64_t total_in_flight_tasks() const;  // queued or computing
  int loaded_model_count() const;         // models READY

 private:
  using LoadedVersion = registry_internal::LoadedVersion;
  struct ModelEntry;

  explicit ModelRegistry(const Options& options);

  // The entry for `model`, creating it (UNAVAILABLE) when the repository has the model.
  // nullptr when neither knows it.
  std::shared_ptr<ModelEntry> FindOrAddEntry(const std::string& model);
  // FindOrAddEntry, with NOT_FOUND (naming the repository) where it returns nullptr.
  absl::StatusOr<std::shared_ptr<ModelEntry>> GetOrAddEntry(const std::string& model);
  std::shared_ptr<ModelEntry> FindEntry(const std::string& model) const;
  std::vector<std::shared_ptr<ModelEntry>> AllEntries() const;
  // The loaded version a request for `version` goes to, or the error Enqueue returns.
  absl::StatusOr<std::shared_ptr<LoadedVersion>> FindVersion(const std::string& model,
                                                             int64_t version) const;
  ModelStatus StatusOf(const ModelEntry& entry) const;
  // The sum of `count` over the batchers of every loaded version, serving or draining.
  int64_t SumOverBatchers(int64_t (Batcher::*count)() const) const;
  void RefreshVersions(ModelEntry& entry) const;

  // With entry.admin_mu held: the version a load picks without an explicit pin, the one
  // SetServingVersion pinned while it is on disk, else `config`'s choice (ChooseServingVersion);
  // without a readable config (nullptr), the highest.
  absl::StatusOr<int64_t> VersionToLoad(const ModelEntry& entry, const ModelConfig* config,
                                        const std::vector<int64_t>& versions) const;
  // With entry.admin_mu held: reads the config, loads `pin` (0: by the pin/config rule) unless
  // it already serves, switches to it and drains the replaced version.
  absl::Status LoadAndSwitch(ModelEntry& entry, int64_t pin);
  absl::StatusOr<std::shared_ptr<LoadedVersion>> LoadVersion(const ModelConfig& config,
                                                             int64_t version) const;
  // The device a version of `config` runs on (see Options::devices).
  absl::StatusOr<ExecutionDevice*> DeviceFor(const ModelConfig& config) const;
  absl::Status WarmUp(LoadedVersion& loaded) const;
  absl::Status RecordLoadFailure(ModelEntry& entry, int64_t version, absl::Status error);
  // Drains `retired` (already unreachable for new requests) and forgets it.
  void Retire(ModelEntry& entry, std::shared_ptr<LoadedVersion> retired, absl::Duration timeout);
  bool shut_down() const;

  // Constant after construction.
  const Options options_;
  const ModelRepository repository_;
  // The CPU device made of options.backend and options.scheduler when options.devices is
  // empty; devices_ is options.devices or that one.
  const std::unique_ptr<CpuExecutionDevice> own_cpu_device_;
  const std::vector<ExecutionDevice*> devices_;

  // Serialises Start and Shutdown.
  absl::Mutex lifecycle_mu_;
  bool started_ ABSL_GUARDED_BY(lifecycle_mu_) = false;

  // Lock order: a ModelEntry's admin_mu, then mu_, then a ModelEntry's mu.
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<ModelEntry>> models_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_H_
