// The victim of checkpoint_test's kill tests: writes training checkpoints or publishes model
// versions in a loop until it is killed, each write's content fully determined by its
// iteration number so that the test can tell a whole write of some iteration from a part.
//
//   checkpoint_writer DIR checkpoint FIRST   writes DIR/job.ckpt for i = FIRST, FIRST+1, ...
//   checkpoint_writer DIR version FIRST      publishes DIR/model/<i+1> for i = FIRST, ...
//
// After each completed write it prints "done <i>" and flushes, so the test knows how far it
// got. Any error is printed and ends the process with status 1. The contents below must match
// the Expected* functions of checkpoint_test.cc.
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_files.h"
#include "engine/train/checkpoint.h"

namespace forecastd {
namespace {

// 4 MiB per array, four arrays: writing and fsyncing them takes most of an iteration, so most
// kills land inside a write.
constexpr int64_t kCheckpointFloats = int64_t{1} << 20;

// Element j of array `k` of iteration i. Integer maths, one exact division and one rounded
// addition: the test recomputes the same bits whatever the compiler contracts or vectorises.
float ValueOf(int64_t i, int k, int64_t j) {
  return static_cast<float>(i * 8 + k) + static_cast<float>(j) / 4096.0f;
}

// ValueOf(i, k, j) for j < offsets.size(), given offsets[j] = j / 4096. Reuses `out`'s memory:
// the less time an iteration spends outside the write, the more kills land inside one.
void FillArray(int64_t i, int k, const std::vector<float>& offsets, std::vector<float>& out) {
  out.resize(offsets.size());
  const float base = static_cast<float>(i * 8 + k);
  for (size_t j = 0; j < offsets.size(); ++j) out[j] = base + offsets[j];
}

// The fields that do not change from one iteration to the next.
TrainCheckpoint NewCheckpoint() {
  TrainCheckpoint c;
  c.fingerprint = std::string("job");
  c.optimizer_state = {{std::string("m"), {}}, {std::string("v"), {}}};
  return c;
}

// Makes `c`, a checkpoint from NewCheckpoint(), iteration i's checkpoint.
void FillCheckpoint(int64_t i, const std::vector<float>& offsets, TrainCheckpoint& c) {
  c.epochs_done = i;
  c.optimizer_steps = 10 * i;
  FillArray(i, 0, offsets, c.params);
  c.best_epoch = -1;
  c.best_validation_loss = std::numeric_limits<double>::infinity();
  c.best_params.clear();
  if (i > 0) {
    c.best_epoch = i - 1;
    c.best_validation_loss = 1.0 / static_cast<double>(i + 1);
    FillArray(i, 1, offsets, c.best_params);
  }
  c.epochs_without_improvement = i % 5;
  FillArray(i, 2, offsets, c.optimizer_state[0].second);
  FillArray(i, 3, offsets, c.optimizer_state[1].second);
  c.train_losses.clear();
  c.validation_losses.clear();
  for (int64_t e = 0; e < i; ++e) {
    c.train_losses.push_back(static_cast<double>(i) + static_cast<double>(e) / 8.0);
    c.validation_losses.push_back(e % 3 == 0 ? std::nan("") : -static_cast<double>(e) - 0.25);
  }
}

// An LSTM of about 1.7 MB of weights (4H(F+H+2) + head + normaliser floats).
ModelConfig VersionModelConfig() {
  ModelConfig c;
  c.set_name("victim");
  c.set_lookback(8);
  c.set_horizon(2);
  for (int f = 0; f < 4; ++f) c.add_feature_names(absl::StrCat("f", f));
  c.add_target_names("f0");
  c.mutable_lstm()->set_hidden_size(320);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

absl::Status WriteCheckpoints(const std::string& dir, int64_t first) {
  const std::string path = absl::StrCat(dir, "/job.ckpt");
  std::vector<float> offsets(static_cast<size_t>(kCheckpointFloats));
  for (int64_t j = 0; j < kCheckpointFloats; ++j) {
    offsets[static_cast<size_t>(j)] = static_cast<float>(j) / 4096.0f;
  }
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
