#include "engine/models/parameters.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace forecastd {

int64_t ParameterArena::Add(absl::string_view name, std::vector<int64_t> shape) {
  ParameterSpec spec;
  spec.name = std::string(name);
  spec.numel = 1;
  for (int64_t d : shape) spec.numel *= d;
  spec.shape = std::move(shape);
  spec.offset = size_;
  size_ += spec.numel;
  index_.emplace(spec.name, specs_.size());
  specs_.push_back(std::move(spec));
  return specs_.back().offset;
}

absl::StatusOr<const ParameterSpec*> ParameterArena::Find(absl::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end())
    return absl::NotFoundError(absl::StrCat("no parameter named '", name, "'"));
  return &specs_[it->second];
}

float* ParameterArena::at(absl::string_view name) {
  return const_cast<float*>(static_cast<const ParameterArena*>(this)->at(name));
}

const float* ParameterArena::at(absl::string_view name) const {
  const auto it = index_.find(name);
  if (it == index_.end()) {
    spdlog::critical("ParameterArena::at: no parameter named '{}'", std::string(name));
    std::abort();
  }
  return data_.data() + specs_[it->second].offset;
}

}  // namespace forecastd
