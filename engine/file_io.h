// Whole-file reads and atomic file replacement for everything forecastd persists (model
// weights, configs, checkpoints). A write goes to a hidden temp file in the target's
// directory, which is fsynced, renamed over the target, and then the directory is fsynced: a
// reader, or a restart after a crash at any moment, sees the old file or the new one, never a
// part. Stateless; thread-safe (concurrent writers of one path: the last rename wins).
#ifndef FORECASTD_ENGINE_FILE_IO_H_
#define FORECASTD_ENGINE_FILE_IO_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace forecastd {

// The whole regular file at `path`. NOT_FOUND when it is missing; INVALID_ARGUMENT for a
// directory or another non-regular file; DATA_LOSS when it shrinks while being read;
// RESOURCE_EXHAUSTED when it does not fit in memory. `what` names the file's role in errors
// ("model config", "safetensors file").
absl::StatusOr<std::string> ReadFileBytes(const std::string& path, absl::string_view what);

// What forecastd writes is readable by its owner and group only: model weights and training
// checkpoints are the operator's property, and nothing else on the host needs them.
inline constexpr int kFileMode = 0640;
inline constexpr int kDirectoryMode = 0750;

// Writes the concatenation of `pieces` to `path` atomically, mode kFileMode. The directory must
// exist. On error the temp file is removed and `path` is untouched; the error names the
// step (create, write, fsync, rename) and the path.
absl::Status WriteFileAtomically(const std::string& path,
                                 absl::Span<const absl::string_view> pieces);

inline absl::Status WriteFileAtomically(const std::string& path, absl::string_view bytes) {
  return WriteFileAtomically(path, absl::MakeConstSpan(&bytes, 1));
}

// fsyncs the directory `dir`, making renames and creations inside it durable.
absl::Status SyncDirectory(const std::string& dir);

// Creates `dir` and any missing parents, each new one with mode kDirectoryMode; existing ones
// are left as they are. PERMISSION_DENIED (or the errno's code) naming the directory.
absl::Status CreateDirectories(const std::string& dir);

// `path` with every symlink, "." and ".." resolved, when it lies inside the directory `root`
// (resolved the same way; `path` itself need not exist yet, its existing prefix is resolved).
// NOT_FOUND when `root` cannot be resolved, INVALID_ARGUMENT when `path` cannot be, and
// PERMISSION_DENIED "<path> leads outside <root>" when the resolved path is not below it: how
// a symlink out of the model repository or the data directory is refused.
absl::StatusOr<std::string> ResolveInside(const std::string& root, const std::string& path);

// Creates a fresh hidden directory `<parent>/.<prefix>.XXXXXX` (mode kDirectoryMode) for staging a
// whole directory's contents before PublishDirectory. Returns its path.
absl::StatusOr<std::string> MakeStagingDirectory(const std::string& parent,
                                                 absl::string_view prefix);

// Renames the staged directory to `target` (in the same parent) and fsyncs the parent, so the
// directory appears whole or not at all. ALREADY_EXISTS when `target` exists (as anything but
// an empty directory); the staging directory is then left for the caller to remove.
absl::Status PublishDirectory(const std::string& staging, const std::string& target);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_FILE_IO_H_
