// The bearer tokens forecastd accepts and the roles each grants, read from the file that
// --token-file names and read again by Reload (main() calls it on SIGHUP). Only SHA-256
// digests of the tokens are kept, and Authenticate compares the presented token's digest with
// every stored digest without stopping at a match or a mismatch, so its running time says
// nothing about which token or which bytes matched. Nothing here logs or returns a token.
// Thread-safe: Authenticate runs on every gRPC thread while Reload swaps the set.
#ifndef FORECASTD_SERVER_TOKEN_STORE_H_
#define FORECASTD_SERVER_TOKEN_STORE_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "server/access_policy.h"

namespace forecastd {

// The token file, one token per line:
//
//   # comments start with '#' at the beginning of a line; blank lines are ignored
//   predict                 <token>   [name]
//   predict,train,admin     <token>   [name]
//
// Fields are separated by spaces or tabs. Roles are predict, train and admin, comma-separated,
// without spaces. A token is 16 to 1024 printable ASCII characters without spaces (for example
// `openssl rand -hex 32`); the same token may appear once. The optional name (letters, digits,
// '.', '_', '-') is what logs say about the caller instead of the token; it defaults to
// "line <n>". A file without tokens is valid: every call then needs one and none is accepted.
// The file must not be readable or writable by other users (chmod 600; in Kubernetes, mount
// the Secret with defaultMode 0400), and is at most 1 MiB. Errors name the line, never its
// text.
inline constexpr size_t kMinTokenLength = 16;
inline constexpr size_t kMaxTokenLength = 1024;
inline constexpr size_t kMaxTokenFileBytes = 1 << 20;

using TokenDigest = std::array<uint8_t, 32>;  // SHA-256

// SHA-256 of `token`.
TokenDigest DigestToken(absl::string_view token);
// Whether `a` and `b` are equal, touching every byte of both whatever they hold.
bool DigestsEqual(const TokenDigest& a, const TokenDigest& b);

// Who presented a token that matched.
struct TokenIdentity {
  RoleSet roles;
  std::string name;
};

struct TokenEntry {
  TokenDigest digest;
  TokenIdentity identity;
};

// The entries of a token file's text; INVALID_ARGUMENT "line <n>: ..." for the first bad line.
absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text);

class TokenStore {
 public:
  struct Options {
    std::string path;  // the token file; required
  };

  // Reads the file; its errors (NOT_FOUND, PERMISSION_DENIED for a file other users may read,
  // INVALID_ARGUMENT for its contents) name the path.
  static absl::StatusOr<std::unique_ptr<TokenStore>> Create(const Options& options);

  // Reads the file again and, when it is valid, replaces the tokens; otherwise returns the
  // error and keeps the tokens it had, so a bad edit never locks everyone out.
  absl::Status Reload();

  // The identity `token` belongs to, or nullopt. Constant time in the token's contents: every
  // stored digest is compared in full.
  std::optional<TokenIdentity> Authenticate(absl::string_view token) const;

  size_t size() const;
  const std::string& path() const { return options_.path; }

 private:
  using Entries = std::vector<TokenEntry>;

  TokenStore(Options options, std::shared_ptr<const Entries> entries);

  // Constant after construction.
  const Options options_;

  mutable absl::Mutex mu_;
  // Swapped whole by Reload; readers hold their own reference while they compare.
  std::shared_ptr<const Entries> entries_ ABSL_GUARDED_BY(mu_);
};

// The token of an `authorization: Bearer <token>` header value ("bearer" in any case);
// INVALID_ARGUMENT for another scheme or an empty token.
absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_TOKEN_STORE_H_
