#include "backends/cpu/dnnl_primitive_cache.h"

#include <string>

#include "absl/strings/str_join.h"
#include "spdlog/spdlog.h"

namespace forecastd {

DnnlPrimitiveCache::Stats DnnlPrimitiveCache::stats() const {
  absl::MutexLock lock(&mu_);
  Stats stats;
  stats.rejected = rejected_;
  stats.native = static_cast<int64_t>(lru_.size()) - rejected_;
  stats.builds = builds_;
  return stats;
}

bool DnnlPrimitiveCache::Lookup(const Key& key, std::shared_ptr<const void>* entry) {
  absl::MutexLock lock(&mu_);
  const auto it = index_.find(key);
  if (it == index_.end()) return false;
  lru_.splice(lru_.begin(), lru_, it->second);
  *entry = it->second->second;
  return true;
}

std::shared_ptr<const void> DnnlPrimitiveCache::Insert(const Key& key,
                                                       std::shared_ptr<const void> entry,
                                                       bool* inserted) {
  absl::MutexLock lock(&mu_);
  if (entry != nullptr) ++builds_;
  const auto it = index_.find(key);
  if (it != index_.end()) {  // another thread got there first: keep theirs
    *inserted = false;
    lru_.splice(lru_.begin(), lru_, it->second);
    return it->second->second;
  }
  *inserted = true;
  if (entry == nullptr) ++rejected_;
  lru_.emplace_front(key, std::move(entry));
  index_.emplace(key, lru_.begin());
  std::shared_ptr<const void> held = lru_.front().second;
  EvictLocked();
  return held;
}

void DnnlPrimitiveCache::LogRejected(const Key& key, absl::string_view op_name,
                                     const absl::Status& why) {
  // Once per rejected shape while the cache holds it, which with a sane capacity is once.
  spdlog::debug("oneDNN rejects {} with key [{}]; it runs on the reference kernels: {}",
                std::string(op_name), absl::StrJoin(key, ", "), std::string(why.message()));
}

void DnnlPrimitiveCache::EvictLocked() {
  while (lru_.size() > capacity_) {
    if (lru_.back().second == nullptr) --rejected_;
    index_.erase(lru_.back().first);
    lru_.pop_back();
  }
}

}  // namespace forecastd
