#include "tests/golden/golden_dir.h"

#include <cstdlib>
#include <filesystem>
#include <system_error>

#include "tests/testing/catch.h"

namespace forecastd {

std::string GoldenDir() {
  const char* dir = std::getenv(kGoldenDirVariable);
  if (dir == nullptr || *dir == '\0') {
    FAIL(kGoldenDirVariable << " is not set: set it to the tests/golden folder of a forecastd "
                               "checkout (ctest and bench/gpu_session.sh set it)");
    return "";
  }
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    FAIL(kGoldenDirVariable << "=" << dir << " is not a folder: set it to the tests/golden "
                            << "folder of a forecastd checkout");
    return "";
  }
  return dir;
}

std::string GoldenCaseDir(const std::string& name) {
  const std::string dir = GoldenDir() + "/" + name;
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) {
    FAIL("golden case '" << name << "' not found: " << kGoldenDirVariable << "=" << GoldenDir()
                         << " has no folder " << name
                         << "; set it to the tests/golden folder of a forecastd checkout");
  }
  return dir;
}

}  // namespace forecastd
