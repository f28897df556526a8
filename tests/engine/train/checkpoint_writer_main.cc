// The victim of checkpoint_test's kill tests: writes training checkpoints or publishes model
// versions in a loop until it is killed, each write's content fully determined by its
// iteration number so that the test can tell a whole write of some iteration from a part.
//
//   checkpoint_writer DIR checkpoint FIRST   writes DIR/job.ckpt for i = FIRST, FIRST+1, ...
//   checkpoint_writer DIR version FIRST      publishes DIR/model/<i+1> for i = FIRST, ...
//
// After each completed write it prints "done <i>" and flushes, so the test knows how far it
// got. Any error is printed and ends the process with status 1. What each write holds is
// checkpoint_formula.h's, which checkpoint_test.cc checks against.
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_files.h"
#include "engine/train/checkpoint.h"
#include "tests/engine/train/checkpoint_formula.h"

namespace forecastd {
namespace {

absl::Status WriteCheckpoints(const std::string& dir, int64_t first) {
  const std::string path = absl::StrCat(dir, "/job.ckpt");
  const std::vector<float> offsets = ValueOffsets(kCheckpointFloats);
  TrainCheckpoint c = NewCheckpoint();
  for (int64_t i = first;; ++i) {
    FillCheckpoint(i, offsets, c);
    if (absl::Status status = WriteCheckpoint(path, c); !status.ok()) return status;
    std::printf("done %lld\n", static_cast<long long>(i));
    std::fflush(stdout);
  }
}

absl::Status PublishVersions(const std::string& dir, int64_t first) {
  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(VersionModelConfig());
  if (!model.ok()) return model.status();
  ParameterArena& params = (*model)->parameters();
  const std::string model_dir = absl::StrCat(dir, "/model");
  for (int64_t i = first;; ++i) {
    for (int64_t j = 0; j < params.size(); ++j) params.data()[j] = ValueOf(i, 0, j);
    if (absl::Status status = PublishVersion(**model, model_dir, i + 1); !status.ok()) {
      return status;
    }
    std::printf("done %lld\n", static_cast<long long>(i));
    std::fflush(stdout);
  }
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  int64_t first = 0;
  const std::string mode = argc == 4 ? argv[2] : "";
  if ((mode != "checkpoint" && mode != "version") || !absl::SimpleAtoi(argv[3], &first) ||
      first < 0) {
    std::fprintf(stderr, "usage: %s DIR checkpoint|version FIRST_ITERATION\n", argv[0]);
    return 2;
  }
  const absl::Status status = mode == "checkpoint" ? forecastd::WriteCheckpoints(argv[1], first)
                                                   : forecastd::PublishVersions(argv[1], first);
  std::fprintf(stderr, "%s\n", status.ToString().c_str());
  return 1;
}
