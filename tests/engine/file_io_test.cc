#include "engine/file_io.h"

#include <sys/stat.h>

#include <filesystem>
#include <string>

#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

int Mode(const std::string& path) {
  struct stat st;
  REQUIRE(stat(path.c_str(), &st) == 0);
  return static_cast<int>(st.st_mode & 07777);
}

TEST_CASE("Files and directories are written for the owner and group only", "[unit][file_io]") {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/a/b/c";
  REQUIRE(CreateDirectories(dir).ok());
  for (const std::string& d : {tmp.path() + "/a", tmp.path() + "/a/b", dir}) {
    INFO(d);
    // Never more than kDirectoryMode; the process umask may only take away.
    REQUIRE((Mode(d) & ~kDirectoryMode) == 0);
    REQUIRE((Mode(d) & 0700) == 0700);
  }
  // Again: existing directories are fine.
  REQUIRE(CreateDirectories(dir).ok());

  const std::string file = dir + "/weights";
  REQUIRE(WriteFileAtomically(file, "bytes").ok());
  REQUIRE(Mode(file) == kFileMode);
  REQUIRE((Mode(file) & 0007) == 0);

  // A file where a directory should be.
  REQUIRE(CreateDirectories(file).code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(CreateDirectories(file + "/below").code() != absl::StatusCode::kOk);

  const absl::StatusOr<std::string> staging = MakeStagingDirectory(dir, "stage");
  REQUIRE(staging.ok());
  REQUIRE(Mode(*staging) == kDirectoryMode);
}

TEST_CASE("ResolveInside follows symlinks and refuses what leaves the root", "[unit][file_io]") {
  testing::TempDir tmp;
  const std::string root = tmp.path() + "/root";
  fs::create_directories(root + "/sub");
  fs::create_directories(tmp.path() + "/outside");
  fs::create_directory_symlink(root + "/sub", root + "/inner_link");
  fs::create_directory_symlink(tmp.path() + "/outside", root + "/escape");
  fs::create_symlink("/etc/passwd", root + "/passwd");

  const absl::StatusOr<std::string> inner = ResolveInside(root, root + "/inner_link/file");
  REQUIRE(inner.ok());
  REQUIRE(*inner == fs::canonical(root).string() + "/sub/file");
  // Not existing yet is fine (a file about to be written).
  REQUIRE(ResolveInside(root, root + "/new/deeper/file").ok());
  REQUIRE(ResolveInside(root, root + "/sub/../sub/file").ok());

  for (const std::string& bad :
       {root + "/escape/file", root + "/passwd", root + "/../outside/x", root + "/sub/../../x"}) {
    INFO(bad);
    const absl::StatusOr<std::string> resolved = ResolveInside(root, bad);
    REQUIRE(resolved.status().code() == absl::StatusCode::kPermissionDenied);
    REQUIRE(resolved.status().message().find("leads outside") != std::string::npos);
  }
  REQUIRE(ResolveInside(tmp.path() + "/missing", root).status().code() ==
          absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace forecastd
