#include "server/stream_input.h"

#include <cstring>

#include "absl/strings/str_cat.h"

namespace forecastd {

absl::Status DecodeStreamTicks(const v1::StreamTicks& ticks, std::vector<float>* values,
                               bool* raw) {
  *raw = !ticks.raw().empty();
  if (*raw && ticks.values_size() > 0) {
    return absl::InvalidArgumentError("ticks carry both raw bytes and values; send one");
  }
  if (*raw) {
    if (ticks.raw().size() % sizeof(float) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("ticks.raw has ", ticks.raw().size(),
                                                     " bytes, not a whole number of float32s"));
    }
    values->resize(ticks.raw().size() / sizeof(float));
    std::memcpy(values->data(), ticks.raw().data(), ticks.raw().size());
  } else {
    values->assign(ticks.values().begin(), ticks.values().end());
  }
  if (values->empty()) return absl::InvalidArgumentError("ticks carry no values");
  return absl::OkStatus();
}

}  // namespace forecastd
