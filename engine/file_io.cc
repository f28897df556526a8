#include "engine/file_io.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// Closes its descriptor on scope exit unless Release()d.
class ScopedFd {
 public:
  explicit ScopedFd(int fd) : fd_(fd) {}
  ScopedFd(const ScopedFd&) = delete;
  ScopedFd& operator=(const ScopedFd&) = delete;
  ~ScopedFd() {
    if (fd_ >= 0) close(fd_);
  }
  int get() const { return fd_; }
  int Release() { return std::exchange(fd_, -1); }

 private:
  int fd_;
};

absl::Status ErrnoError(absl::string_view what, const std::string& path) {
  return absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
}

absl::Status WriteAll(int fd, absl::string_view bytes, const std::string& path) {
  while (!bytes.empty()) {
    const ssize_t n = write(fd, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot write", path);
    }
    bytes.remove_prefix(static_cast<size_t>(n));
  }
  return absl::OkStatus();
}

// Everything between creating the temp file and renaming it; the caller removes it on error.
absl::Status FillAndRename(ScopedFd& fd, const std::string& tmp, const std::string& path,
                           absl::Span<const absl::string_view> pieces) {
  // mkstemp makes 0600; the daemon's group (a backup job, a sidecar) may read what it wrote.
  if (fchmod(fd.get(), kFileMode) != 0) return ErrnoError("cannot chmod", tmp);
  for (absl::string_view piece : pieces) RETURN_IF_ERROR(WriteAll(fd.get(), piece, tmp));
  if (fsync(fd.get()) != 0) return ErrnoError("cannot fsync", tmp);
  if (close(fd.Release()) != 0) return ErrnoError("cannot close", tmp);
  if (rename(tmp.c_str(), path.c_str()) != 0) {
    return ErrnoError(absl::StrCat("cannot rename ", tmp, " to"), path);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> ReadFileBytes(const std::string& path, absl::string_view what) {
  ScopedFd fd(open(path.c_str(), O_RDONLY | O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError(absl::StrCat("cannot open ", what), path);
  struct stat st;
  if (fstat(fd.get(), &st) != 0) return ErrnoError("cannot stat", path);
  if (S_ISDIR(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is a directory, not a ", what));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": is not a regular file"));
  }
  std::string bytes;
  try {
    bytes.resize(static_cast<size_t>(st.st_size));
  } catch (const std::bad_alloc&) {
    return absl::ResourceExhaustedError(
        absl::StrCat(path, ": cannot allocate ", st.st_size, " bytes to read it"));
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = read(fd.get(), bytes.data() + done, bytes.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      return ErrnoError("cannot read", path);
    }
    if (n == 0) {
      return absl::DataLossError(absl::StrCat(path, ": file shrank from ", bytes.size(), " to ",
                                              done, " bytes while being read"));
    }
    done += static_cast<size_t>(n);
  }
  return bytes;
}

absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces) {
  const size_t slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const std::string base = slash == std::string::npos ? path : path.substr(slash + 1);
  // Hidden, so that nothing listing the directory for models picks up a half-written file.
  std::string tmp = absl::StrCat(slash == std::string::npos ? "" : dir, ".", base, ".tmp.XXXXXX");
  ScopedFd fd(mkostemp(tmp.data(), O_CLOEXEC));
  if (fd.get() < 0) return ErrnoError("cannot create a temp file for", path);
  if (absl::Status status = FillAndRename(fd, tmp, path, pieces); !status.ok()) {
    unlink(tmp.c_str());
    return status;
  }
  // The rename is durable only once the directory entry is.
  return SyncDirectory(dir);
}

absl::Status SyncDirectory(const std::string& dir) {
  ScopedFd dir_fd(open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (dir_fd.get() < 0) return ErrnoError("cannot open directory", dir);
  if (fsync(dir_fd.get()) != 0) return ErrnoError("cannot fsync directory", dir);
  return absl::OkStatus();
}

absl::Status CreateDirectories(const std::string& dir) {
  if (dir.empty()) return absl::InvalidArgumentError("cannot create a directory with no name");
  // Each prefix ending before a '/', then the whole path; mkdir of an existing one is fine.
  for (size_t end = dir.find('/', 1);; end = dir.find('/', end + 1)) {
    const std::string prefix = dir.substr(0, end);
    if (mkdir(prefix.c_str(), kDirectoryMode) != 0 && errno != EEXIST) {
      return ErrnoError("cannot create directory", prefix);
    }
    if (end == std::string::npos) break;
  }
  struct stat st;
  if (stat(dir.c_str(), &st) != 0) return ErrnoError("cannot stat", dir);
  if (!S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> ResolveInside(const std::string& root, const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code error;
  const fs::path base = fs::canonical(root, error);
  if (error) {
    return absl::NotFoundError(absl::StrCat("cannot resolve ", root, ": ", error.message()));
  }
  const fs::path full = fs::weakly_canonical(path, error);
  if (error) {
    return absl::InvalidArgumentError(absl::StrCat("cannot resolve ", path, ": ", error.message()));
  }
  // `full` has no symlinks left; it must still be below `base`, component by component.
  const auto [base_end, full_rest] =
      std::mismatch(base.begin(), base.end(), full.begin(), full.end());
  if (base_end != base.end()) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, " leads outside ", root, " (to ", full.string(), ")"));
  }
  return full.string();
}

absl::StatusOr<std::string> MakeStagingDirectory(const std::string& parent,
                                                 absl::string_view prefix) {
  std::string path = absl::StrCat(parent, "/.", prefix, ".XXXXXX");
  if (mkdtemp(path.data()) == nullptr)
    return ErrnoError("cannot create a staging directory in", parent);
  if (chmod(path.c_str(), kDirectoryMode) != 0) return ErrnoError("cannot chmod", path);
  return path;
}

absl::Status PublishDirectory(const std::string& staging, const std::string& target) {
  if (rename(staging.c_str(), target.c_str()) != 0) {
    if (errno == ENOTEMPTY || errno == EEXIST || errno == ENOTDIR) {
      return absl::AlreadyExistsError(absl::StrCat(target, " already exists"));
    }
    return ErrnoError(absl::StrCat("cannot rename ", staging, " to"), target);
  }
  const size_t slash = target.rfind('/');
  return SyncDirectory(slash == std::string::npos ? "." : target.substr(0, slash + 1));
}

}  // namespace forecastd
