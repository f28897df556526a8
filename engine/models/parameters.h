// A model's parameters in one contiguous float arena, with a table from PyTorch state_dict
// names to (offset, shape). Gradients and optimiser moments mirror the same layout, so
// zeroing, all-reducing or checkpointing any of them is one call over one buffer.
// Thread-compatible: build it once, then readers may share it; writers need exclusion.
#ifndef FORECASTD_ENGINE_MODELS_PARAMETERS_H_
#define FORECASTD_ENGINE_MODELS_PARAMETERS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace forecastd {

struct ParameterSpec {
  std::string name;            // e.g. "rnn.weight_ih_l0"
  std::vector<int64_t> shape;  // e.g. {4*H, F}
  int64_t offset = 0;          // in floats from the start of the arena
  int64_t numel = 0;
};

class ParameterArena {
 public:
  // Declares the next parameter; returns its offset. Only before the first data() call.
  int64_t Add(absl::string_view name, std::vector<int64_t> shape);

  const std::vector<ParameterSpec>& specs() const { return specs_; }
  int64_t size() const { return size_; }  // floats

  float* data() { return data_.data(); }
  const float* data() const { return data_.data(); }
  // Allocates (zero-filled) storage for everything declared.
  void Allocate() { data_.assign(static_cast<size_t>(size_), 0.0f); }

  // NOT_FOUND naming the parameter when it is not declared.
  absl::StatusOr<const ParameterSpec*> Find(absl::string_view name) const;
  // The parameter's first float; the name must be declared (programmer error otherwise).
  float* at(absl::string_view name);
  const float* at(absl::string_view name) const;

 private:
  std::vector<ParameterSpec> specs_;
  std::map<std::string, size_t, std::less<>> index_;
  int64_t size_ = 0;
  std::vector<float> data_;
};

// Named read access to a copy of a ParameterArena's data with the arena's layout: the arena's
// own floats, or a device copy of them (same offsets). Cheap to copy; the arena must outlive it.
class ParameterView {
 public:
  ParameterView(const ParameterArena& arena, const float* base) : arena_(&arena), base_(base) {}
  // The parameter's first float in this copy; the name must be declared.
  const float* at(absl::string_view name) const {
    return base_ + (arena_->at(name) - arena_->data());
  }
  // The float at `offset` (ParameterArena::Add's result) in this copy.
  const float* AtOffset(int64_t offset) const { return base_ + offset; }

 private:
  const ParameterArena* arena_;
  const float* base_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_PARAMETERS_H_
