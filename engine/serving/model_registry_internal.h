// The registry's own records, shared by its .cc files only (model_registry.cc: lifecycle,
// predict path and status; model_registry_admin.cc: loading, switching and unloading
// versions). Include it nowhere else: callers see LoadedModel and ModelStatus.
// Thread-safety: as each member's comment and ABSL_GUARDED_BY annotation say.
#ifndef FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_INTERNAL_H_
#define FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_INTERNAL_H_

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "engine/serving/model_registry.h"

namespace forecastd {
namespace registry_internal {

inline bool Contains(const std::vector<int64_t>& sorted, int64_t value) {
  return std::binary_search(sorted.begin(), sorted.end(), value);
}

}  // namespace registry_internal

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
  // Tick streams of this version (engine/serving/stream_hub.h): its state slab lives with the
  // instances; destroyed before them.
  std::unique_ptr<TickEngine> ticks;
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

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_MODEL_REGISTRY_INTERNAL_H_
