// Scratch memory for a forecaster's forward call (Forecaster::Forward), in host memory or in a
// caller's device buffer. Owned by one thread at a time.
#ifndef FORECASTD_ENGINE_MODELS_WORKSPACE_H_
#define FORECASTD_ENGINE_MODELS_WORKSPACE_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"

namespace forecastd {

// Scratch memory for one forward call; grows to the largest request and is then reused.
// Owned by one thread at a time. The default one owns host memory; one made over external
// memory (a GPU caller's device buffer) hands that out instead and never grows.
class Workspace {
 public:
  Workspace() = default;
  // Hands out `external` (n floats, 64-byte aligned, any memory space; borrowed, must outlive
  // the workspace) instead of memory of its own.
  Workspace(float* external, int64_t n) : external_(external), external_floats_(n) {}

  // Forgets earlier allocations (keeps the memory).
  void Reset() { used_ = 0; }
  // `n` floats, valid until the next Reset(). Growing invalidates nothing handed out since the
  // last Reset() because memory is reserved up front by Reserve().
  float* Alloc(int64_t n);
  // Makes room for `n` floats: grows owned memory; RESOURCE_EXHAUSTED when external memory
  // is smaller.
  absl::Status Reserve(int64_t n);
  int64_t capacity() const {
    return external_ != nullptr ? external_floats_ : static_cast<int64_t>(buffer_.size());
  }

 private:
  float* data() { return external_ != nullptr ? external_ : buffer_.data(); }

  float* external_ = nullptr;
  int64_t external_floats_ = 0;
  std::vector<float> buffer_;
  int64_t used_ = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_WORKSPACE_H_
