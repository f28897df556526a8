#include "engine/models/training_tape.h"

#include "engine/random.h"
#include "kernels/base/status.h"

namespace forecastd {

TrainingTape::~TrainingTape() {
  for (const Buffer& buffer : device_buffers_) placement_.memory->Free(buffer.data);
}

absl::StatusOr<float*> TrainingTape::Alloc(int64_t n) {
  if (placement_.memory == nullptr) {
    if (next_ == host_buffers_.size()) host_buffers_.emplace_back();
    std::vector<float>& buffer = host_buffers_[next_++];
    if (static_cast<int64_t>(buffer.size()) < n) buffer.resize(static_cast<size_t>(n));
    return buffer.data();
  }
  if (next_ == device_buffers_.size()) device_buffers_.emplace_back();
  Buffer& buffer = device_buffers_[next_];
  if (buffer.floats < n) {
    // The slot's old contents are dead (Reset() came before), so it is replaced, not grown.
    ASSIGN_OR_RETURN(float* const grown, placement_.memory->Allocate(n));
    if (buffer.data != nullptr) placement_.memory->Free(buffer.data);
    buffer = {grown, n};
  }
  ++next_;
  return buffer.data;
}

absl::StatusOr<float*> TrainingTape::DropoutMask(int64_t n, float p, uint64_t site) {
  if (!dropout_seed.has_value() || !(p > 0.0f)) return nullptr;
  ASSIGN_OR_RETURN(float* const mask, Alloc(n));
  // The site index is mixed into the seed rather than passed as PCG's stream selector, whose
  // streams from one seed are known to be correlated.
  RETURN_IF_ERROR(data().DropoutMask(mask, n, p, SplitMix64(*dropout_seed ^ SplitMix64(site))));
  return mask;
}

}  // namespace forecastd
