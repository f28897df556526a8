#include "engine/models/workspace.h"

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "spdlog/spdlog.h"

namespace forecastd {

absl::Status Workspace::Reserve(int64_t n) {
  if (n <= capacity()) return absl::OkStatus();
  if (external_ != nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "workspace needs ", n, " floats; its external memory holds ", external_floats_));
  }
  buffer_.resize(static_cast<size_t>(n));
  return absl::OkStatus();
}

float* Workspace::Alloc(int64_t n) {
  if (used_ + n > capacity()) {
    // A model asked for more than its WorkspaceFloats() promised: a bug, not bad input.
    spdlog::critical("Workspace::Alloc: {} floats requested with {} of {} used", n, used_,
                     capacity());
    std::abort();
  }
  float* p = data() + used_;
  // Keep every allocation 64-byte aligned for vectorised kernels.
  used_ += (n + 15) / 16 * 16;
  return p;
}

}  // namespace forecastd
