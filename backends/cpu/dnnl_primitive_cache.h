// The oneDNN backend's cache of what it builds once per op and shape (primitives, reorders,
// masks), keyed by the op and all of its dims and flags, bounded, least recently used first out.
// A shape that oneDNN rejects is cached too, as a null entry, so the rejection is found, and
// logged, once; the caller then runs the reference. Entries are shared_ptrs, so a primitive
// that is running survives its eviction. Owned by DnnlBackend. Thread-safe.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_CACHE_H_
#define FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_CACHE_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <list>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/dnnl_status.h"

namespace forecastd {

class DnnlPrimitiveCache {
 public:
  // The op first (an enum value of the caller's, which also fixes the entry's type), then
  // every dim and flag the built primitive depends on.
  using Key = std::vector<int64_t>;

  // A float that a primitive depends on (LayerNorm's eps), as a key element: its bits, so that
  // any two different floats give different keys.
  static int64_t FloatKey(float x) { return std::bit_cast<int32_t>(x); }

  struct Stats {
    int64_t native = 0;    // entries holding a built primitive
    int64_t rejected = 0;  // entries for shapes oneDNN rejected
    int64_t builds = 0;    // successful builds since construction, evicted ones included
  };

  // `capacity` > 0: the most entries kept, rejected ones included.
  explicit DnnlPrimitiveCache(size_t capacity) : capacity_(capacity) {}

  DnnlPrimitiveCache(const DnnlPrimitiveCache&) = delete;
  DnnlPrimitiveCache& operator=(const DnnlPrimitiveCache&) = delete;

  // The entry for `key`; on a miss, built by `build()`, which returns std::shared_ptr<T> and may
  // throw dnnl::error. Every caller of one key must ask for the same T. When the build fails
  // with out-of-memory, that error is returned and nothing is cached; any other failure means
  // oneDNN rejects the shape: it is logged once at debug level (naming `op_name`), cached, and
  // this call and later ones return nullptr. Two threads that miss together may both build;
  // the first to finish is kept and returned to both.
  template <typename T, typename Build>
  absl::StatusOr<std::shared_ptr<const T>> GetOrBuild(const Key& key, absl::string_view op_name,
                                                      Build&& build) {
    std::shared_ptr<const void> entry;
    if (Lookup(key, &entry)) return std::static_pointer_cast<const T>(std::move(entry));

    std::shared_ptr<const T> built;
    const absl::Status status = [&]() -> absl::Status {
      DNNL_TRY(built = build());
      return absl::OkStatus();
    }();
    if (status.code() == absl::StatusCode::kResourceExhausted) return status;
    bool inserted = false;
    std::shared_ptr<const void> held = Insert(key, std::move(built), &inserted);
    if (!status.ok() && inserted) LogRejected(key, op_name, status);
    return std::static_pointer_cast<const T>(std::move(held));
  }

  Stats stats() const;

 private:
  using Lru = std::list<std::pair<Key, std::shared_ptr<const void>>>;  // most recent first

  // True on a hit, with *entry set (null for a rejected shape); marks the entry recently used.
  bool Lookup(const Key& key, std::shared_ptr<const void>* entry);
  // Inserts `entry` (null: rejected) unless another thread inserted the key first; returns the
  // entry the cache holds and sets *inserted to whether it is this one.
  std::shared_ptr<const void> Insert(const Key& key, std::shared_ptr<const void> entry,
                                     bool* inserted);
  static void LogRejected(const Key& key, absl::string_view op_name, const absl::Status& why);
  void EvictLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const size_t capacity_;

  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);
  std::map<Key, Lru::iterator> index_ ABSL_GUARDED_BY(mu_);
  int64_t rejected_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t builds_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CPU_DNNL_PRIMITIVE_CACHE_H_
