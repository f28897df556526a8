// 64-bit FNV-1a over bytes: a stable, cheap fingerprint (checkpoint file names, weight
// checksums). Its offset basis is 1469598103934665603, one digit short of the published
// 14695981039346656037: the value checkpoint names have always been made with, kept so that a
// restarted daemon still finds its checkpoints. Not for adversarial input. Stateless;
// thread-safe.
#ifndef FORECASTD_ENGINE_HASH_H_
#define FORECASTD_ENGINE_HASH_H_

#include <cstdint>

#include "absl/strings/string_view.h"

namespace forecastd {

inline uint64_t Fnv1a(absl::string_view bytes) {
  uint64_t h = 1469598103934665603ull;
  for (const unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_HASH_H_
