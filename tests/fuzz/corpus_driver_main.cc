// main() of the fuzz targets' regression runners (<name>_fuzzer_corpus), used in builds
// without libFuzzer: feeds every file named on the command line, and every regular file
// under every directory named there (in sorted order), to LLVMFuzzerTestOneInput once, as
// libFuzzer does when given files. A crash or a failed FUZZ_CHECK ends the run; otherwise it
// prints how many inputs ran and exits 0 (1 when there were none, so an empty or misplaced
// corpus fails rather than passes). Single-threaded.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <system_error>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

namespace fs = std::filesystem;

bool ReadFile(const fs::path& path, std::string& bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return !in.bad();
}

}  // namespace

int main(int argc, char* argv[]) {
  std::vector<fs::path> inputs;
  for (int i = 1; i < argc; ++i) {
    const fs::path arg(argv[i]);
    std::error_code ec;
    if (fs::is_directory(arg, ec)) {
      for (const fs::directory_entry& entry : fs::recursive_directory_iterator(arg, ec)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else {
      inputs.push_back(arg);
    }
    if (ec) {
      std::fprintf(stderr, "%s: %s\n", argv[i], ec.message().c_str());
      return 1;
    }
  }
  std::sort(inputs.begin(), inputs.end());
  std::string bytes;
  for (const fs::path& path : inputs) {
    if (!ReadFile(path, bytes)) {
      std::fprintf(stderr, "%s: cannot read\n", path.c_str());
      return 1;
    }
    std::fprintf(stderr, "running %s (%zu bytes)\n", path.c_str(), bytes.size());
    // A copy of exactly the input's size, so that ASan sees a read past its end.
    const std::vector<uint8_t> input(bytes.begin(), bytes.end());
    LLVMFuzzerTestOneInput(input.data(), input.size());
  }
  std::fprintf(stderr, "%zu inputs ran without a crash\n", inputs.size());
  return inputs.empty() ? 1 : 0;
}
