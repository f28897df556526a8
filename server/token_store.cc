#include "server/token_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <tuple>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "openssl/crypto.h"
#include "openssl/sha.h"

namespace forecastd {
namespace {

absl::Status LineError(int line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("line ", line, ": ", what));
}

bool IsTokenChar(char c) { return c > ' ' && c < 0x7f; }

bool IsNameChar(char c) {
  return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-';
}

// Reads the token file through one descriptor, so the checks and the read see the same file.
absl::StatusOr<std::string> ReadTokenFile(const std::string& path) {
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int error = errno;
    const std::string why = absl::StrCat("cannot open token file '", path, "': ", strerror(error));
    if (error == ENOENT) return absl::NotFoundError(why);
    if (error == EACCES) return absl::PermissionDeniedError(why);
    return absl::FailedPreconditionError(why);
  }
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("cannot stat token file '", path, "': ", strerror(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is not a file"));
  }
  if ((st.st_mode & S_IRWXO) != 0) {
    return absl::PermissionDeniedError(absl::StrFormat(
        "token file '%s' has mode %04o: other users may read or change it; chmod 600 it "
        "(Kubernetes: mount the Secret with defaultMode 0400)",
        path, st.st_mode & 07777));
  }
  if (st.st_size > static_cast<off_t>(kMaxTokenFileBytes)) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' is larger than ", kMaxTokenFileBytes, " bytes"));
  }
  std::string text(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (got < text.size()) {
    const ssize_t n = read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read token file '", path, "': ", strerror(errno)));
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  if (got > kMaxTokenFileBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", path, "' is larger than ", kMaxTokenFileBytes, " bytes"));
  }
  text.resize(got);
  return text;
}

}  // namespace

TokenDigest DigestToken(absl::string_view token) {
  static_assert(SHA256_DIGEST_LENGTH == std::tuple_size<TokenDigest>::value);
  TokenDigest digest{};
  SHA256(reinterpret_cast<const unsigned char*>(token.data()), token.size(), digest.data());
  return digest;
}

bool DigestsEqual(const TokenDigest& a, const TokenDigest& b) {
  return CRYPTO_memcmp(a.data(), b.data(), a.size()) == 0;
}

absl::StatusOr<std::vector<TokenEntry>> ParseTokenFile(absl::string_view text) {
  std::vector<TokenEntry> entries;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    const absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (trimmed.empty() || trimmed.front() == '#') continue;
    const std::vector<absl::string_view> fields =
        absl::StrSplit(trimmed, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (fields.size() < 2 || fields.size() > 3) {
      return LineError(line_number, "expected '<roles> <token> [name]'");
    }
    TokenEntry entry;
    for (absl::string_view role_name : absl::StrSplit(fields[0], ',')) {
      absl::StatusOr<Role> role = ParseRole(role_name);
      if (!role.ok()) return LineError(line_number, role.status().message());
      entry.identity.roles.Add(*role);
    }
    const absl::string_view token = fields[1];
    if (token.size() < kMinTokenLength || token.size() > kMaxTokenLength) {
      return LineError(line_number, absl::StrCat("a token has ", kMinTokenLength, " to ",
                                                 kMaxTokenLength, " characters"));
    }
    for (char c : token) {
      if (!IsTokenChar(c)) {
        return LineError(line_number, "a token is printable ASCII without spaces");
      }
    }
    if (fields.size() == 3) {
      const absl::string_view name = fields[2];
      if (name.size() > 64) return LineError(line_number, "the name is longer than 64 characters");
      for (char c : name) {
        if (!IsNameChar(c)) {
          return LineError(line_number,
                           "a name has letters, digits, '.', '_' and '-' only (is the name "
                           "before the token? the order is '<roles> <token> [name]')");
        }
      }
      entry.identity.name = std::string(name);
    } else {
      entry.identity.name = absl::StrCat("line ", line_number);
    }
    entry.digest = DigestToken(token);
    for (const TokenEntry& other : entries) {
      if (DigestsEqual(other.digest, entry.digest)) {
        return LineError(line_number,
                         absl::StrCat("the token of ", other.identity.name, " appears again"));
      }
    }
    entries.push_back(std::move(entry));
  }
  return entries;
}

absl::StatusOr<absl::string_view> BearerToken(absl::string_view authorization) {
  constexpr absl::string_view kScheme = "bearer ";
  if (authorization.size() <= kScheme.size() ||
      !absl::EqualsIgnoreCase(authorization.substr(0, kScheme.size()), kScheme)) {
    return absl::InvalidArgumentError("the authorization header is not 'Bearer <token>'");
  }
  const absl::string_view token = absl::StripAsciiWhitespace(authorization.substr(kScheme.size()));
  if (token.empty()) return absl::InvalidArgumentError("the bearer token is empty");
  return token;
}

absl::StatusOr<std::unique_ptr<TokenStore>> TokenStore::Create(const Options& options) {
  if (options.path.empty()) return absl::InvalidArgumentError("no token file given");
  absl::StatusOr<std::string> text = ReadTokenFile(options.path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Entries> entries = ParseTokenFile(*text);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", options.path, "': ", entries.status().message()));
  }
  return std::unique_ptr<TokenStore>(
      new TokenStore(options, std::make_shared<const Entries>(*std::move(entries))));
}

TokenStore::TokenStore(Options options, std::shared_ptr<const Entries> entries)
    : options_(std::move(options)), entries_(std::move(entries)) {}

absl::Status TokenStore::Reload() {
  absl::StatusOr<std::string> text = ReadTokenFile(options_.path);
  if (!text.ok()) return text.status();
  absl::StatusOr<Entries> entries = ParseTokenFile(*text);
  if (!entries.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("token file '", options_.path, "': ", entries.status().message()));
  }
  auto fresh = std::make_shared<const Entries>(*std::move(entries));
  absl::MutexLock lock(&mu_);
  entries_ = std::move(fresh);
  return absl::OkStatus();
}

std::optional<TokenIdentity> TokenStore::Authenticate(absl::string_view token) const {
  std::shared_ptr<const Entries> entries;
  {
    absl::ReaderMutexLock lock(&mu_);
    entries = entries_;
  }
  const TokenDigest presented = DigestToken(token);
  // No early exit and no branch on a comparison: the index of the (at most one, since the
  // file has no duplicates) match is accumulated through masks.
  size_t found = 0;
  size_t index = 0;
  for (size_t i = 0; i < entries->size(); ++i) {
    const size_t equal = static_cast<size_t>(DigestsEqual((*entries)[i].digest, presented));
    const size_t mask = size_t{0} - equal;
    index |= mask & i;
    found |= equal;
  }
  if (found == 0) return std::nullopt;
  return (*entries)[index].identity;
}

size_t TokenStore::size() const {
  absl::ReaderMutexLock lock(&mu_);
  return entries_->size();
}

}  // namespace forecastd
