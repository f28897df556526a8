// What checkpoint_writer (checkpoint_writer_main.cc) writes at iteration i, and so what
// checkpoint_test expects to read back after killing it: every value is a function of i alone,
// so that a whole write of some iteration can be told from a part of one. Included by those
// two files only. Thread-safe: pure functions.
#ifndef FORECASTD_TESTS_ENGINE_TRAIN_CHECKPOINT_FORMULA_H_
#define FORECASTD_TESTS_ENGINE_TRAIN_CHECKPOINT_FORMULA_H_

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/model_config.h"
#include "engine/train/checkpoint.h"

namespace forecastd {

// 4 MiB per array, four arrays: writing and fsyncing them takes most of an iteration, so most
// kills land inside a write.
inline constexpr int64_t kCheckpointFloats = int64_t{1} << 20;

// Element j of array `k` of iteration i. Integer maths, one exact division and one rounded
// addition: the test recomputes the same bits whatever the compiler contracts or vectorises.
inline float ValueOf(int64_t i, int k, int64_t j) {
  return static_cast<float>(i * 8 + k) + static_cast<float>(j) / 4096.0f;
}

// offsets[j] = j / 4096 for j < n: the part of ValueOf(i, k, j) that does not depend on i.
inline std::vector<float> ValueOffsets(int64_t n) {
  std::vector<float> offsets(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) offsets[static_cast<size_t>(j)] = static_cast<float>(j) / 4096.0f;
  return offsets;
}

// ValueOf(i, k, j) for j < offsets.size(), given offsets from ValueOffsets. Reuses `out`'s
// memory: the less time the writer spends outside a write, the more kills land inside one.
inline void FillArray(int64_t i, int k, const std::vector<float>& offsets,
                      std::vector<float>& out) {
  out.resize(offsets.size());
  const float base = static_cast<float>(i * 8 + k);
  for (size_t j = 0; j < offsets.size(); ++j) out[j] = base + offsets[j];
}

// The fields that do not change from one iteration to the next.
inline TrainCheckpoint NewCheckpoint() {
  TrainCheckpoint c;
  c.fingerprint = std::string("job");
  c.optimizer_state = {{std::string("m"), {}}, {std::string("v"), {}}};
  return c;
}

// Makes `c`, a checkpoint from NewCheckpoint(), iteration i's checkpoint, its arrays as long as
// `offsets` (from ValueOffsets).
inline void FillCheckpoint(int64_t i, const std::vector<float>& offsets, TrainCheckpoint& c) {
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

// The model whose versions the writer publishes, its parameter j of version i + 1 being
// ValueOf(i, 0, j): an LSTM of about 1.7 MB of weights (4H(F+H+2) + head + normaliser floats).
inline ModelConfig VersionModelConfig() {
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

}  // namespace forecastd

#endif  // FORECASTD_TESTS_ENGINE_TRAIN_CHECKPOINT_FORMULA_H_
