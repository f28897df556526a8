// Training checkpoints and published model versions: exact round trips, damaged files refused
// with the documented codes, and writers SIGKILLed at random moments (checkpoint_writer_main.cc)
// leaving only whole files and whole versions behind.
#include "engine/train/checkpoint.h"

#include <signal.h>
#include <stdlib.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "engine/file_io.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/engine/train/checkpoint_formula.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;
using forecastd::testing::ChildProcess;

// --- what checkpoint_writer writes (checkpoint_formula.h)

std::vector<float> ArrayOf(int64_t i, int k, int64_t n) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) values[static_cast<size_t>(j)] = ValueOf(i, k, j);
  return values;
}

TrainCheckpoint ExpectedCheckpoint(int64_t i) {
  TrainCheckpoint c = NewCheckpoint();
  FillCheckpoint(i, ValueOffsets(kCheckpointFloats), c);
  return c;
}

// --- helpers

// A fresh directory under the system temp dir, removed with everything in it at scope exit.
class ScopedTempDir {
 public:
  ScopedTempDir() {
    std::string path = (fs::temp_directory_path() / "checkpoint_test.XXXXXX").string();
    REQUIRE(mkdtemp(path.data()) != nullptr);
    path_ = path;
  }
  ScopedTempDir(const ScopedTempDir&) = delete;
  ScopedTempDir& operator=(const ScopedTempDir&) = delete;
  ~ScopedTempDir() {
    std::error_code ignored;
    if (!path_.empty()) fs::remove_all(path_, ignored);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  // An empty vector's data() may be null, which memcmp may not be given even for 0 bytes.
  return a.size() == b.size() &&
         (a.empty() || std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0);
}

bool SameBits(double a, double b) {
  return std::bit_cast<uint64_t>(a) == std::bit_cast<uint64_t>(b);
}

bool SameBits(const std::vector<double>& a, const std::vector<double>& b) {
  if (a.size() != b.size()) return false;
  for (size_t k = 0; k < a.size(); ++k) {
    if (!SameBits(a[k], b[k])) return false;
  }
  return true;
}

// The first field in which `got` differs from `want` (floats compared bit for bit), or "".
std::string Mismatch(const TrainCheckpoint& got, const TrainCheckpoint& want) {
  if (got.fingerprint != want.fingerprint) return "fingerprint";
  if (got.epochs_done != want.epochs_done) return "epochs_done";
  if (got.optimizer_steps != want.optimizer_steps) return "optimizer_steps";
  if (!SameBits(got.params, want.params)) return "params";
  if (got.best_epoch != want.best_epoch) return "best_epoch";
  if (!SameBits(got.best_validation_loss, want.best_validation_loss)) {
    return "best_validation_loss";
  }
  if (got.epochs_without_improvement != want.epochs_without_improvement) {
    return "epochs_without_improvement";
  }
  if (!SameBits(got.best_params, want.best_params)) return "best_params";
  if (got.optimizer_state.size() != want.optimizer_state.size()) return "optimizer_state size";
  for (size_t k = 0; k < got.optimizer_state.size(); ++k) {
    if (got.optimizer_state[k].first != want.optimizer_state[k].first ||
        !SameBits(got.optimizer_state[k].second, want.optimizer_state[k].second)) {
      return absl::StrCat("optimizer_state[", k, "]");
    }
  }
  if (!SameBits(got.train_losses, want.train_losses)) return "train_losses";
  if (!SameBits(got.validation_losses, want.validation_losses)) return "validation_losses";
  return "";
}

bool IsDamageCode(const absl::Status& status) {
  return absl::IsDataLoss(status) || absl::IsInvalidArgument(status);
}

// Names in `dir` starting with `prefix` that are not in `seen`; adds them to it.
int CountNew(const std::string& dir, absl::string_view prefix, std::set<std::string>& seen) {
  int fresh = 0;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (absl::StartsWith(name, prefix) && seen.insert(name).second) ++fresh;
  }
  return fresh;
}

// The largest N of the complete "done N" lines in a writer's output; -1 when there is none.
int64_t LastDone(const std::string& output) {
  int64_t last = -1;
  const std::string complete = output.substr(0, output.rfind('\n') + 1);
  for (absl::string_view line : absl::StrSplit(complete, '\n', absl::SkipEmpty())) {
    int64_t n = 0;
    if (absl::ConsumePrefix(&line, "done ") && absl::SimpleAtoi(line, &n)) last = n;
  }
  return last;
}

// The seed of the kill delays: FORECASTD_KILL_SEED to replay a failure, else a fresh one.
uint32_t KillSeed() {
  uint32_t seed = 0;
  const char* text = std::getenv("FORECASTD_KILL_SEED");
  if (text != nullptr && absl::SimpleAtoi(text, &seed)) return seed;
  return std::random_device{}();
}

constexpr int kKills = 25;
constexpr int kMaxKillDelayMs = 120;

// Starts the writer at iteration `first`, waits for its first completed write (so the kill
// lands in the write loop, not in start-up), lets it run `delay_ms` more and SIGKILLs it.
// Returns the last iteration it reported complete.
int64_t RunAndKill(const std::string& dir, const std::string& mode, int64_t first, int delay_ms) {
  absl::StatusOr<ChildProcess> child =
      ChildProcess::Start({FORECASTD_CHECKPOINT_WRITER, dir, mode, absl::StrCat(first)});
  REQUIRE(child.ok());
  // A safety bound for a loaded machine, not a measurement.
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  for (std::string output = child->Output(); LastDone(output) < first; output = child->Output()) {
    INFO("writer output: " << output);
    REQUIRE(child->Running());
    REQUIRE(absl::Now() < give_up);
    absl::SleepFor(absl::Milliseconds(1));
  }
  absl::SleepFor(absl::Milliseconds(delay_ms));
  REQUIRE(child->Signal(SIGKILL));
  const absl::StatusOr<int> code = child->WaitForExit(absl::Seconds(60));
  REQUIRE(code.ok());
  INFO("writer output: " << child->Output());
  REQUIRE(*code == 128 + SIGKILL);  // killed while writing, not stopped by an error
  return LastDone(child->Output());
}

// --- round trip

TEST_CASE("A checkpoint reads back bit for bit", "[unit][checkpoint]") {
  ScopedTempDir dir;
  const std::string path = dir.path() + "/job.ckpt";

  SECTION("before any validated epoch") {
    TrainCheckpoint c;
    c.fingerprint = "lstm h=8 | adam lr=0.001 \"quoted\" \\ ünïcode";
    c.params = {0.0f,
                -0.0f,
                1.0f / 3.0f,
                std::numeric_limits<float>::denorm_min(),
                std::numeric_limits<float>::max(),
                -std::numeric_limits<float>::infinity(),
                std::bit_cast<float>(uint32_t{0x7fc01234}),   // a NaN with a payload
                std::bit_cast<float>(uint32_t{0xff800001})};  // a signalling NaN
    c.optimizer_state = {{"m", std::vector<float>(c.params.size(), 0.5f)},
                         {"v", std::vector<float>(c.params.size(), 1e-30f)}};
    REQUIRE(c.best_epoch == -1);
    REQUIRE(std::isinf(c.best_validation_loss));
    REQUIRE(WriteCheckpoint(path, c).ok());
    const absl::StatusOr<TrainCheckpoint> read = ReadCheckpoint(path);
    REQUIRE(read.ok());
    REQUIRE(Mismatch(*read, c) == "");
    REQUIRE(read->best_validation_loss == std::numeric_limits<double>::infinity());
  }

  SECTION("after some epochs, with NaN and awkward losses") {
    TrainCheckpoint c;
    c.fingerprint = "job";
    c.epochs_done = 4;
    c.optimizer_steps = 1234567890123;
    c.params = ArrayOf(3, 0, 1000);
    c.best_epoch = 1;
    c.best_validation_loss = 0.1;  // not exact in binary: the text must carry all 17 digits
    c.epochs_without_improvement = 2;
    c.best_params = ArrayOf(3, 1, 1000);
    c.optimizer_state = {{"m", ArrayOf(3, 2, 1000)}, {"v", ArrayOf(3, 3, 1000)}};
    c.train_losses = {1.0 / 3.0, std::numeric_limits<double>::denorm_min(),
                      std::numeric_limits<double>::max(), -0.0};
    c.validation_losses = {std::nan(""), 0.1, 1e-310, std::numeric_limits<double>::infinity()};
    REQUIRE(WriteCheckpoint(path, c).ok());
    const absl::StatusOr<TrainCheckpoint> read = ReadCheckpoint(path);
    REQUIRE(read.ok());
    REQUIRE(Mismatch(*read, c) == "");
    REQUIRE(std::isnan(read->validation_losses[0]));

    // Overwriting replaces the whole content and leaves no temp file behind.
    const TrainCheckpoint next = ExpectedCheckpoint(5);
    REQUIRE(WriteCheckpoint(path, next).ok());
    REQUIRE(Mismatch(ReadCheckpoint(path).value(), next) == "");
    int files = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(dir.path())) {
      REQUIRE(entry.path().filename() == "job.ckpt");
      ++files;
    }
    REQUIRE(files == 1);
  }

  SECTION("a NaN with the sign bit set, as 0.0 / 0.0 makes on x86") {
    TrainCheckpoint c;
    c.fingerprint = "job";
    c.epochs_done = 1;
    c.params = {1.0f};
    c.train_losses = {0.5};
    c.validation_losses = {-std::nan("")};
    REQUIRE(WriteCheckpoint(path, c).ok());
    const absl::StatusOr<TrainCheckpoint> read = ReadCheckpoint(path);
    REQUIRE(read.ok());
    REQUIRE(Mismatch(*read, c) == "");
    REQUIRE(std::signbit(read->validation_losses[0]));
  }
}

// --- damaged files

// A checkpoint file taken apart, to be changed and written back.
struct Parts {
  std::map<std::string, std::string> metadata;
  std::vector<std::pair<std::string, std::vector<int64_t>>> shapes;
  std::map<std::string, std::vector<float>> data;
};

Parts TakeApart(const std::string& path) {
  const SafetensorsFile file = SafetensorsFile::Read(path).value();
  Parts parts;
  parts.metadata = file.metadata();
  for (const auto& [name, info] : file.tensors()) {
    parts.shapes.emplace_back(name, info.shape);
    parts.data[name] = file.ReadF32(name, info.shape).value();
  }
  return parts;
}

void PutTogether(const Parts& parts, const std::string& path) {
  std::vector<NamedTensor> tensors;
  for (const auto& [name, shape] : parts.shapes) {
    tensors.push_back({name, shape, parts.data.at(name)});
  }
  REQUIRE(WriteSafetensors(path, tensors, parts.metadata).ok());
}

void DropTensor(Parts& parts, const std::string& name) {
  std::erase_if(parts.shapes, [&](const auto& entry) { return entry.first == name; });
}

TEST_CASE("Damaged or foreign checkpoint files are refused with a code, not a crash",
          "[unit][checkpoint]") {
  ScopedTempDir dir;
  const std::string good = dir.path() + "/good.ckpt";
  const std::string path = dir.path() + "/job.ckpt";
  TrainCheckpoint c;
  c.fingerprint = "job";
  c.epochs_done = 2;
  c.optimizer_steps = 20;
  c.params = ArrayOf(2, 0, 6);
  c.best_epoch = 1;
  c.best_validation_loss = 0.25;
  c.best_params = ArrayOf(2, 1, 6);
  c.optimizer_state = {{"m", ArrayOf(2, 2, 6)}, {"v", ArrayOf(2, 3, 6)}};
  c.train_losses = {1.0, 0.5};
  c.validation_losses = {std::nan(""), 0.25};
  REQUIRE(WriteCheckpoint(good, c).ok());
  REQUIRE(ReadCheckpoint(good).ok());

  SECTION("a missing file or directory is NOT_FOUND") {
    REQUIRE(absl::IsNotFound(ReadCheckpoint(path).status()));
    REQUIRE(absl::IsNotFound(ReadCheckpoint(dir.path() + "/no/such/job.ckpt").status()));
  }

  SECTION("every truncation of a good file") {
    const std::string bytes = ReadFileBytes(good, "checkpoint").value();
    for (size_t length = 0; length < bytes.size(); ++length) {
      INFO("truncated to " << length << " of " << bytes.size() << " bytes");
      REQUIRE(WriteFileAtomically(path, absl::string_view(bytes).substr(0, length)).ok());
      const absl::Status status = ReadCheckpoint(path).status();
      INFO(status);
      REQUIRE(IsDamageCode(status));
    }
  }

  SECTION("bytes that are not a safetensors file, and a directory") {
    std::mt19937 gen(7);
    std::string garbage(256, '\0');
    for (char& ch : garbage) ch = static_cast<char>(gen());
    REQUIRE(WriteFileAtomically(path, garbage).ok());
    REQUIRE(IsDamageCode(ReadCheckpoint(path).status()));
    REQUIRE(WriteFileAtomically(path, "{\"params\": 1}").ok());
    REQUIRE(IsDamageCode(ReadCheckpoint(path).status()));
    REQUIRE(fs::create_directory(dir.path() + "/a_directory"));
    REQUIRE(IsDamageCode(ReadCheckpoint(dir.path() + "/a_directory").status()));
  }

  SECTION("safetensors files that are not checkpoints") {
    const std::vector<float> params = ArrayOf(0, 0, 6);
    REQUIRE(WriteSafetensors(path, {{"params", {6}, params}}, {}).ok());
    REQUIRE(absl::IsInvalidArgument(ReadCheckpoint(path).status()));
    // Model weights, as SaveWeights writes them.
    REQUIRE(WriteSafetensors(path, {{"params", {6}, params}}, {{"format", "pt"}}).ok());
    REQUIRE(absl::IsInvalidArgument(ReadCheckpoint(path).status()));
  }

  SECTION("a changed field or a missing tensor") {
    struct Damage {
      const char* what;
      void (*apply)(Parts&);
    };
    const Damage damages[] = {
        {"another format version",
         [](Parts& p) { p.metadata["format"] = "forecastd-train-checkpoint-2"; }},
        {"no format", [](Parts& p) { p.metadata.erase("format"); }},
        {"no fingerprint", [](Parts& p) { p.metadata.erase("fingerprint"); }},
        {"no best_validation_loss", [](Parts& p) { p.metadata.erase("best_validation_loss"); }},
        {"more epochs than losses", [](Parts& p) { p.metadata["epochs_done"] = "3"; }},
        {"fewer epochs than losses", [](Parts& p) { p.metadata["epochs_done"] = "1"; }},
        {"negative epochs", [](Parts& p) { p.metadata["epochs_done"] = "-2"; }},
        {"negative steps", [](Parts& p) { p.metadata["optimizer_steps"] = "-5"; }},
        {"validation losses missing one",
         [](Parts& p) { p.metadata["validation_losses"] = "nan"; }},
        {"epochs not a number", [](Parts& p) { p.metadata["epochs_done"] = "two"; }},
        {"best_epoch not a number", [](Parts& p) { p.metadata["best_epoch"] = "1.5"; }},
        {"a loss not a number", [](Parts& p) { p.metadata["train_losses"] = "1,abc"; }},
        {"an empty loss", [](Parts& p) { p.metadata["train_losses"] = "1,"; }},
        {"no params", [](Parts& p) { DropTensor(p, "params"); }},
        {"no best_params after a validated epoch", [](Parts& p) { DropTensor(p, "best_params"); }},
        {"an optimiser array missing", [](Parts& p) { DropTensor(p, "optimizer.v"); }},
        {"an optimiser array listed but absent",
         [](Parts& p) { p.metadata["optimizer_state"] = "m,v,w"; }},
        {"best_params shorter than params",
         [](Parts& p) {
           p.data["best_params"].pop_back();
           for (auto& [name, shape] : p.shapes) {
             if (name == "best_params") shape = {5};
           }
         }},
        {"two-dimensional params",
         [](Parts& p) {
           for (auto& [name, shape] : p.shapes) {
             if (name == "params") shape = {2, 3};
           }
         }},
    };
    for (const Damage& damage : damages) {
      INFO(damage.what);
      Parts parts = TakeApart(good);
      damage.apply(parts);
      PutTogether(parts, path);
      const absl::Status status = ReadCheckpoint(path).status();
      INFO(status);
      REQUIRE(IsDamageCode(status));
    }
  }
}

// --- PublishVersion

ModelConfig SmallConfig(int H) {
  ModelConfig c;
  c.set_name("small");
  c.set_lookback(4);
  c.set_horizon(2);
  c.add_feature_names("f0");
  c.add_feature_names("f1");
  c.add_target_names("f1");
  c.mutable_gru()->set_hidden_size(H);
  c.mutable_gru()->set_num_layers(1);
  return c;
}

TEST_CASE("PublishVersion adds whole versions of one architecture", "[unit][checkpoint]") {
  ScopedTempDir dir;
  const std::string model_dir = dir.path() + "/models/small";
  std::unique_ptr<Forecaster> model = Forecaster::Create(SmallConfig(4)).value();
  ParameterArena& params = model->parameters();
  for (int64_t j = 0; j < params.size(); ++j) params.data()[j] = ValueOf(1, 0, j);

  REQUIRE(ListVersions(model_dir).empty());
  REQUIRE(PublishVersion(*model, model_dir, 1).ok());
  // A fresh model directory gets the config, equal to the model's.
  const absl::StatusOr<ModelConfig> config =
      ReadModelConfig(absl::StrCat(model_dir, "/", kModelConfigFile));
  REQUIRE(config.ok());
  REQUIRE(google::protobuf::util::MessageDifferencer::Equals(*config, model->config()));
  REQUIRE(ListVersions(model_dir) == std::vector<int64_t>{1});
  std::unique_ptr<Forecaster> loaded = LoadForecaster(model_dir, 1).value();
  REQUIRE(std::memcmp(loaded->parameters().data(), params.data(),
                      static_cast<size_t>(params.size()) * sizeof(float)) == 0);

  SECTION("an existing version is ALREADY_EXISTS and stays as it was") {
    for (int64_t j = 0; j < params.size(); ++j) params.data()[j] = ValueOf(2, 0, j);
    REQUIRE(absl::IsAlreadyExists(PublishVersion(*model, model_dir, 1)));
    loaded = LoadForecaster(model_dir, 1).value();
    REQUIRE(loaded->parameters().data()[3] == ValueOf(1, 0, 3));
    REQUIRE(PublishVersion(*model, model_dir, 2).ok());
    REQUIRE(ListVersions(model_dir) == std::vector<int64_t>{1, 2});
    REQUIRE(LoadForecaster(model_dir, 2).value()->parameters().data()[3] == ValueOf(2, 0, 3));
  }

  SECTION("another architecture is FAILED_PRECONDITION and changes nothing") {
    std::unique_ptr<Forecaster> other = Forecaster::Create(SmallConfig(8)).value();
    REQUIRE(absl::IsFailedPrecondition(PublishVersion(*other, model_dir, 2)));
    REQUIRE(ListVersions(model_dir) == std::vector<int64_t>{1});
    REQUIRE(google::protobuf::util::MessageDifferencer::Equals(
        ReadModelConfig(absl::StrCat(model_dir, "/", kModelConfigFile)).value(), model->config()));
  }

  SECTION("version numbers must be positive") {
    REQUIRE(absl::IsInvalidArgument(PublishVersion(*model, model_dir, 0)));
    REQUIRE(absl::IsInvalidArgument(PublishVersion(*model, model_dir, -3)));
  }

  SECTION("only positive decimal directory names are versions") {
    for (const char* name : {".7.staging.abcdef", "007", "-1", "x", "0"}) {
      REQUIRE(fs::create_directory(absl::StrCat(model_dir, "/", name)));
    }
    REQUIRE(WriteFileAtomically(model_dir + "/3", "a file, not a version").ok());
    REQUIRE(ListVersions(model_dir) == std::vector<int64_t>{1});
  }

  // Nothing was left behind by the refused publications.
  for (const fs::directory_entry& entry : fs::directory_iterator(model_dir)) {
    const std::string name = entry.path().filename().string();
    REQUIRE((!absl::StrContains(name, ".staging.") || name == ".7.staging.abcdef"));
  }
}

// --- writers killed at random moments

TEST_CASE("A checkpoint writer SIGKILLed at random moments leaves a whole checkpoint",
          "[integration][checkpoint]") {
  const uint32_t seed = KillSeed();
  INFO("seed " << seed << " (replay with FORECASTD_KILL_SEED=" << seed << ")");
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> delay_ms(0, kMaxKillDelayMs);
  ScopedTempDir dir;
  const std::string path = dir.path() + "/job.ckpt";
  const absl::Time start = absl::Now();

  int64_t next = 0;
  int interrupted = 0;
  // Leftover temp files are never read: a write makes a fresh one (mkstemp) and reads nothing,
  // so they accumulate here, one per interrupted write, and every later run ignores them.
  std::set<std::string> leftovers;
  // kKills kills, and more (up to 4x) until three have landed inside a write: on a slow or
  // instrumented build fewer random moments fall inside one.
  int kills = 0;
  for (; kills < kKills || (interrupted < 3 && kills < 4 * kKills); ++kills) {
    const int kill = kills;
    INFO("kill " << kill << ", writer started at iteration " << next);
    const int64_t done = RunAndKill(dir.path(), "checkpoint", next, delay_ms(gen));
    INFO("last write reported done: " << done);
    const absl::StatusOr<TrainCheckpoint> read = ReadCheckpoint(path);
    INFO(read.status());
    REQUIRE(read.ok());
    const int64_t i = read->epochs_done;
    INFO("the file holds iteration " << i);
    // The last reported write, or one more whose report the kill cut off after the rename.
    REQUIRE((i == done || i == done + 1));
    REQUIRE(Mismatch(*read, ExpectedCheckpoint(i)) == "");
    const int fresh = CountNew(dir.path(), ".job.ckpt.tmp.", leftovers);
    REQUIRE(fresh <= 1);
    if (fresh == 1) {
      // The kill landed inside the write of iteration done + 1, which left no trace in job.ckpt.
      REQUIRE(i == done);
      ++interrupted;
    }
    next = i + 1;
  }
  std::cout << "checkpoint kill test: seed " << seed << ", " << kills << " kills, " << interrupted
            << " inside a write, " << next << " checkpoints, "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  // Otherwise the test would prove nothing about atomicity.
  REQUIRE(interrupted >= 3);
}

TEST_CASE("A version publisher SIGKILLed at random moments leaves only whole versions",
          "[integration][checkpoint]") {
  const uint32_t seed = KillSeed();
  INFO("seed " << seed << " (replay with FORECASTD_KILL_SEED=" << seed << ")");
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int> delay_ms(0, kMaxKillDelayMs);
  ScopedTempDir dir;
  const std::string model_dir = dir.path() + "/model";
  const ModelConfig config = VersionModelConfig();
  const absl::Time start = absl::Now();

  int64_t next = 0;  // iteration i publishes version i + 1
  int interrupted = 0;
  int64_t checked = 0;
  std::set<std::string> leftovers;  // hidden staging directories and temp files
  for (int kill = 0; kill < kKills; ++kill) {
    INFO("kill " << kill << ", writer started at version " << next + 1);
    const int64_t done = RunAndKill(dir.path(), "version", next, delay_ms(gen));
    INFO("last version reported published: " << done + 1);

    const absl::StatusOr<ModelConfig> read_config =
        ReadModelConfig(absl::StrCat(model_dir, "/", kModelConfigFile));
    INFO(read_config.status());
    REQUIRE(read_config.ok());
    REQUIRE(google::protobuf::util::MessageDifferencer::Equals(*read_config, config));

    const std::vector<int64_t> versions = ListVersions(model_dir);
    REQUIRE(!versions.empty());
    REQUIRE((versions.back() == done + 1 || versions.back() == done + 2));
    for (size_t k = 0; k < versions.size(); ++k) {
      // Published one after the other; a gap would be a version that vanished.
      REQUIRE(versions[k] == versions.front() + static_cast<int64_t>(k));
      INFO("version " << versions[k]);
      const absl::StatusOr<std::unique_ptr<Forecaster>> model =
          LoadForecaster(model_dir, versions[k]);
      INFO(model.status());
      REQUIRE(model.ok());
      const ParameterArena& params = (*model)->parameters();
      bool exact = true;
      for (int64_t j = 0; j < params.size(); ++j) {
        exact = exact && std::bit_cast<uint32_t>(params.data()[j]) ==
                             std::bit_cast<uint32_t>(ValueOf(versions[k] - 1, 0, j));
      }
      REQUIRE(exact);
      ++checked;
    }

    int fresh = 0;
    for (const fs::directory_entry& entry : fs::directory_iterator(model_dir)) {
      const std::string name = entry.path().filename().string();
      INFO("model directory entry " << name);
      if (name == kModelConfigFile) continue;
      if (name[0] == '.') {
        // A publication cut short: a staging directory, or config.json's temp file.
        REQUIRE((absl::StrContains(name, ".staging.") ||
                 absl::StartsWith(name, absl::StrCat(".", kModelConfigFile, ".tmp."))));
        if (leftovers.insert(name).second) ++fresh;
        continue;
      }
      int64_t version = 0;
      REQUIRE(absl::SimpleAtoi(name, &version));
      REQUIRE(version >= versions.front());
      REQUIRE(version <= versions.back());
    }
    REQUIRE(fresh <= 1);
    if (fresh == 1) {
      REQUIRE(versions.back() == done + 1);
      ++interrupted;
    }
    // Keep the newest version only, so that the directory does not grow with every run.
    for (size_t k = 0; k + 1 < versions.size(); ++k) {
      fs::remove_all(absl::StrCat(model_dir, "/", versions[k]));
    }
    next = versions.back();
  }
  std::cout << "version kill test: seed " << seed << ", " << kKills << " kills, " << interrupted
            << " inside a publication, " << next << " versions, " << checked << " loads, "
            << absl::FormatDuration(absl::Now() - start) << "\n";
  REQUIRE(interrupted >= 3);
}

}  // namespace
}  // namespace forecastd
