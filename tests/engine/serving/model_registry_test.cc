// ModelRegistry over small repositories built in temp dirs: start with good and bad models,
// the predict path against a direct forward pass, its status codes, unload draining in-flight
// work, zero-downtime version switches (also under concurrent requests), reloads, training's
// OnVersionPublished and shutdown.
#include "engine/serving/model_registry.h"

#include <atomic>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/file_io.h"
#include "engine/models/model_files.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kLookback = 4;  // T
constexpr int64_t kFeatures = 2;  // F
constexpr int64_t kOutputs = 2;   // P * targets

ModelConfig SmallConfig(const std::string& name, int hidden = 3) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(kLookback);
  c.set_horizon(2);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.mutable_gru()->set_hidden_size(hidden);
  c.mutable_gru()->set_num_layers(1);
  c.mutable_batching()->set_max_batch_size(4);
  return c;
}

bool Near(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f + 1e-5f * std::fabs(b[i]))) return false;
  }
  return true;
}

// Waits (in real time, as a synchronisation point, not a timeout under test) until `cond`.
bool WaitUntil(const std::function<bool()>& cond) {
  for (int i = 0; i < 60000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

std::unique_ptr<PredictTask> MakeTask(const std::vector<float>& input, int64_t rows,
                                      std::function<void(PredictResult)> done) {
  auto task = std::make_unique<PredictTask>();
  task->input = input;
  task->rows = rows;
  task->done = std::move(done);
  return task;
}

struct Pending {
  absl::Status enqueue;
  std::future<PredictResult> result;  // valid when enqueue is OK
};

Pending PredictAsync(ModelRegistry& registry, const std::string& model, int64_t version,
                     const std::vector<float>& input, int64_t rows) {
  auto promise = std::make_shared<std::promise<PredictResult>>();
  Pending pending;
  pending.result = promise->get_future();
  std::unique_ptr<PredictTask> task =
      MakeTask(input, rows, [promise](PredictResult r) { promise->set_value(std::move(r)); });
  pending.enqueue = registry.Enqueue(model, version, task);
  // Ownership moves iff OK.
  REQUIRE((task == nullptr) == pending.enqueue.ok());
  return pending;
}

PredictResult Await(Pending& pending) {
  REQUIRE(pending.enqueue.ok());
  // A bound against a hang, not a measurement.
  REQUIRE(pending.result.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  return pending.result.get();
}

// Runs one request and returns its result; the enqueue must succeed.
PredictResult Predict(ModelRegistry& registry, const std::string& model, int64_t version,
                      const std::vector<float>& input, int64_t rows) {
  Pending pending = PredictAsync(registry, model, version, input, rows);
  INFO(pending.enqueue.ToString());
  return Await(pending);
}

absl::Status EnqueueStatus(ModelRegistry& registry, const std::string& model, int64_t version) {
  return PredictAsync(registry, model, version, testing::RandomWindows(1, kLookback, 1), 1).enqueue;
}

class CountingObserver : public RegistryObserver {
 public:
  std::unique_ptr<BatcherObserver> NewBatcherObserver(const std::string&, int64_t) override {
    ++batcher_observers;
    return std::make_unique<BatcherObserver>();
  }
  void OnVersionLoaded(const std::string&, int64_t) override { ++loaded; }
  void OnLoadFailed(const std::string&, int64_t, const absl::Status&) override { ++failed; }
  void OnVersionUnloaded(const std::string&, int64_t) override { ++unloaded; }

  std::atomic<int> batcher_observers{0}, loaded{0}, failed{0}, unloaded{0};
};

// A repository in a temp dir, a 2-worker scheduler and a registry over them (destroyed
// before the scheduler).
struct Env {
  Env() : root(dir.path() + "/models") {
    fs::create_directories(root);
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = 2;
    scheduler = DeviceScheduler::Create(scheduler_options).value();
  }

  std::string ModelDir(const std::string& name) const { return root + "/" + name; }

  void Publish(const Forecaster& model, int64_t version) const {
    const absl::Status status = PublishVersion(model, ModelDir(model.config().name()), version);
    INFO(status.ToString());
    REQUIRE(status.ok());
  }

  void WriteConfig(const std::string& dir_name, const ModelConfig& config) const {
    fs::create_directories(ModelDir(dir_name));
    REQUIRE(WriteFileAtomically(ModelDir(dir_name) + "/" + kModelConfigFile,
                                ModelConfigToJson(config).value())
                .ok());
  }

  ModelRegistry::Options Options() {
    ModelRegistry::Options options;
    options.repository_path = root;
    options.backend = &backend;
    options.scheduler = scheduler.get();
    options.observer = &observer;
    return options;
  }

  ModelRegistry& Start(ModelRegistry::Options options) {
    registry = ModelRegistry::Create(options).value();
    const absl::Status status = registry->Start();
    INFO(status.ToString());
    REQUIRE(status.ok());
    return *registry;
  }
  ModelRegistry& Start() { return Start(Options()); }

  ModelStatus Status(const std::string& name) {
    absl::StatusOr<ModelStatus> status = registry->GetModel(name);
    INFO(status.status().ToString());
    REQUIRE(status.ok());
    return *status;
  }

  testing::TempDir dir;
  const std::string root;
  ReferenceBackend backend;
  CountingObserver observer;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::unique_ptr<ModelRegistry> registry;
};

TEST_CASE("Start loads the good models and records each bad one as FAILED with its reason",
          "[unit][registry]") {
  Env env;
  const auto good = testing::RandomModel(SmallConfig("good"), 1);
  env.Publish(*good, 1);

  fs::create_directories(env.ModelDir("bad_json"));
  REQUIRE(WriteFileAtomically(env.ModelDir("bad_json") + "/config.json", "{ not json").ok());

  // Published under another name than its directory's.
  REQUIRE(
      PublishVersion(*testing::RandomModel(SmallConfig("other"), 2), env.ModelDir("mismatch"), 1)
          .ok());

  env.WriteConfig("no_weights", SmallConfig("no_weights"));
  fs::create_directories(env.ModelDir("no_weights") + "/1");

  env.WriteConfig("no_versions", SmallConfig("no_versions"));

  // Weights of a 3-wide GRU under a config that says 5.
  env.Publish(*testing::RandomModel(SmallConfig("wrong_shapes", 3), 3), 1);
  env.WriteConfig("wrong_shapes", SmallConfig("wrong_shapes", 5));

  // Not models: a hidden directory and a plain file.
  REQUIRE(
      PublishVersion(*testing::RandomModel(SmallConfig(".hidden"), 4), env.ModelDir(".hidden"), 1)
          .ok());
  REQUIRE(WriteFileAtomically(env.root + "/README", "notes").ok());

  ModelRegistry& registry = env.Start();

  std::vector<std::string> names;
  for (const ModelStatus& s : registry.ListModels()) names.push_back(s.name);
  REQUIRE(names == std::vector<std::string>{"bad_json", "good", "mismatch", "no_versions",
                                            "no_weights", "wrong_shapes"});

  const ModelStatus ok = env.Status("good");
  REQUIRE(ok.state == ModelState::kReady);
  REQUIRE(ok.serving_version == 1);
  REQUIRE(ok.versions_on_disk == std::vector<int64_t>{1});
  REQUIRE(ok.loaded.size() == 1);
  REQUIRE(ok.loaded[0].serving);
  REQUIRE(ok.last_error.ok());
  REQUIRE(ok.config.has_value());
  REQUIRE(ok.config->name() == "good");

  const auto failed_with = [&](const std::string& name, const std::string& part) {
    const ModelStatus s = env.Status(name);
    INFO(name << ": " << s.last_error.ToString());
    REQUIRE(s.state == ModelState::kFailed);
    REQUIRE(s.serving_version == 0);
    REQUIRE(s.loaded.empty());
    REQUIRE(absl::StrContains(s.last_error.message(), part));
    // Requests to it say why it is not serving.
    const absl::Status enqueue = EnqueueStatus(registry, name, 0);
    REQUIRE(enqueue.code() == absl::StatusCode::kUnavailable);
    REQUIRE(absl::StrContains(enqueue.message(), part));
  };
  failed_with("bad_json", "not a valid ModelConfig JSON");
  failed_with("mismatch", "name is 'other' but the model's directory is 'mismatch'");
  failed_with("no_weights", "model.safetensors");
  failed_with("no_versions", "has no versions");
  failed_with("wrong_shapes", "rnn.weight_ih_l0");

  REQUIRE(registry.loaded_model_count() == 1);
  REQUIRE(env.observer.loaded == 1);
  REQUIRE(env.observer.failed == 5);
  REQUIRE(env.observer.batcher_observers == 1);

  // The good one serves.
  const std::vector<float> input = testing::RandomWindows(2, kLookback, 5);
  const PredictResult result = Predict(registry, "good", 0, input, 2);
  REQUIRE(result.status.ok());
  REQUIRE(Near(result.output, testing::ReferenceForward(*good, input, 2)));
}

TEST_CASE("Models reached through a symlink out of the repository fail to load",
          "[unit][registry]") {
  Env env;
  // Outside the repository: a whole model, and the weights of another.
  const std::string outside = env.dir.path() + "/outside";
  REQUIRE(PublishVersion(*testing::RandomModel(SmallConfig("escaped"), 1), outside + "/escaped", 1)
              .ok());
  fs::create_directory_symlink(outside + "/escaped", env.ModelDir("escaped"));

  env.WriteConfig("stolen_weights", SmallConfig("stolen_weights"));
  fs::create_directories(env.ModelDir("stolen_weights") + "/1");
  fs::create_symlink(outside + "/escaped/1/model.safetensors",
                     env.ModelDir("stolen_weights") + "/1/model.safetensors");

  // Inside the repository, a symlink is fine: version 2 is version 1.
  const auto linked = testing::RandomModel(SmallConfig("linked"), 2);
  env.Publish(*linked, 1);
  fs::create_directory_symlink(env.ModelDir("linked") + "/1", env.ModelDir("linked") + "/2");

  ModelRegistry& registry = env.Start();
  for (const std::string name : {"escaped", "stolen_weights"}) {
    const ModelStatus s = env.Status(name);
    INFO(name << ": " << s.last_error.ToString());
    REQUIRE(s.state == ModelState::kFailed);
    REQUIRE(s.last_error.code() == absl::StatusCode::kPermissionDenied);
    REQUIRE(absl::StrContains(s.last_error.message(), "leads outside"));
  }
  const ModelStatus ok = env.Status("linked");
  REQUIRE(ok.state == ModelState::kReady);
  REQUIRE(ok.serving_version == 2);
  REQUIRE(registry.loaded_model_count() == 1);
}

TEST_CASE("Start refuses a missing repository and honours models_to_load", "[unit][registry]") {
  Env env;
  ModelRegistry::Options missing = env.Options();
  missing.repository_path = env.root + "/absent";
  auto registry = ModelRegistry::Create(missing).value();
  REQUIRE(registry->Start().code() == absl::StatusCode::kNotFound);

  const auto a = testing::RandomModel(SmallConfig("a"), 1);
  const auto b = testing::RandomModel(SmallConfig("b"), 2);
  env.Publish(*a, 1);
  env.Publish(*b, 1);
  ModelRegistry::Options options = env.Options();
  options.models_to_load = {"a", "ghost"};
  ModelRegistry& r = env.Start(options);
  REQUIRE(r.Start().code() == absl::StatusCode::kFailedPrecondition);

  REQUIRE(env.Status("a").state == ModelState::kReady);
  REQUIRE(env.Status("b").state == ModelState::kUnavailable);
  const ModelStatus ghost = env.Status("ghost");
  REQUIRE(ghost.state == ModelState::kFailed);
  REQUIRE(ghost.last_error.code() == absl::StatusCode::kNotFound);
  REQUIRE(r.ListModels().size() == 3);

  const absl::Status not_loaded = EnqueueStatus(r, "b", 0);
  REQUIRE(not_loaded.code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(not_loaded.message(), "not loaded"));

  REQUIRE(r.Load("b").ok());
  REQUIRE(env.Status("b").state == ModelState::kReady);
  const std::vector<float> input = testing::RandomWindows(1, kLookback, 9);
  REQUIRE(Near(Predict(r, "b", 0, input, 1).output, testing::ReferenceForward(*b, input, 1)));
  REQUIRE(r.loaded_model_count() == 2);
}

TEST_CASE("Enqueue computes what Forecaster::Forward computes", "[unit][registry]") {
  Env env;
  const auto model = testing::RandomModel(SmallConfig("m"), 11);
  env.Publish(*model, 1);
  ModelRegistry& registry = env.Start();

  for (const int64_t rows : {1, 3, 4}) {
    const std::vector<float> input =
        testing::RandomWindows(rows, kLookback, static_cast<uint32_t>(rows));
    const PredictResult result = Predict(registry, "m", 0, input, rows);
    INFO(result.status.ToString());
    REQUIRE(result.status.ok());
    REQUIRE(result.version == 1);
    REQUIRE(result.output.size() == static_cast<size_t>(rows * kOutputs));
    REQUIRE(Near(result.output, testing::ReferenceForward(*model, input, rows)));
  }
  // By explicit version too, and through the model GetLoadedModel hands out.
  const std::vector<float> input = testing::RandomWindows(2, kLookback, 77);
  REQUIRE(Near(Predict(registry, "m", 1, input, 2).output,
               testing::ReferenceForward(*model, input, 2)));
  const LoadedModel loaded = registry.GetLoadedModel("m").value();
  REQUIRE(loaded.version == 1);
  REQUIRE(loaded.model->lookback() == kLookback);
  REQUIRE(loaded.model->num_features() == kFeatures);
  REQUIRE(Near(testing::ReferenceForward(*loaded.model, input, 2),
               testing::ReferenceForward(*model, input, 2)));
}

TEST_CASE("Enqueue returns NOT_FOUND and UNAVAILABLE as the model's state says",
          "[unit][registry]") {
  Env env;
  const auto v1 = testing::RandomModel(SmallConfig("m"), 1);
  env.Publish(*v1, 1);
  env.Publish(*testing::RandomModel(SmallConfig("m"), 2), 2);
  ModelRegistry& registry = env.Start();
  REQUIRE(env.Status("m").serving_version == 2);

  const absl::Status unknown = EnqueueStatus(registry, "nope", 0);
  REQUIRE(unknown.code() == absl::StatusCode::kNotFound);
  REQUIRE(absl::StrContains(unknown.message(), "'nope'"));
  REQUIRE(registry.GetLoadedModel("nope").status().code() == absl::StatusCode::kNotFound);

  const absl::Status no_version = EnqueueStatus(registry, "m", 7);
  REQUIRE(no_version.code() == absl::StatusCode::kNotFound);
  REQUIRE(absl::StrContains(no_version.message(), "no version 7"));

  const absl::Status not_loaded = EnqueueStatus(registry, "m", 1);
  REQUIRE(not_loaded.code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(not_loaded.message(), "version 1"));
  REQUIRE(registry.GetLoadedModel("m", 1).status().code() == absl::StatusCode::kUnavailable);

  REQUIRE(EnqueueStatus(registry, "m", -1).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(EnqueueStatus(registry, "m", 2).ok());

  std::unique_ptr<PredictTask> none;
  REQUIRE(registry.Enqueue("m", 0, none).code() == absl::StatusCode::kInvalidArgument);

  REQUIRE(registry.Unload("m").ok());
  REQUIRE(env.Status("m").state == ModelState::kUnloaded);
  const absl::Status unloaded = EnqueueStatus(registry, "m", 0);
  REQUIRE(unloaded.code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(unloaded.message(), "UNLOADED"));
  // Unknown versions stay NOT_FOUND whatever the state.
  REQUIRE(EnqueueStatus(registry, "m", 7).code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.Unload("m").ok());  // already unloaded: nothing to do
  REQUIRE(registry.Unload("nope").code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.Load("../m").code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(env.observer.unloaded == 1);
}

TEST_CASE("Unload refuses new requests at once and lets in-flight ones finish",
          "[unit][registry]") {
  Env env;
  const auto model = testing::RandomModel(SmallConfig("m"), 3);
  env.Publish(*model, 1);
  ModelRegistry& registry = env.Start();

  // Hold both scheduler workers so the request stays in flight until the gate opens.
  absl::Notification gate;
  std::atomic<int> holding{0};
  for (int w = 0; w < 2; ++w) {
    env.scheduler->Submit(1, absl::InfiniteFuture(), [&](int, bool) {
      ++holding;
      gate.WaitForNotification();
    });
  }
  REQUIRE(WaitUntil([&] { return holding.load() == 2; }));

  const std::vector<float> input = testing::RandomWindows(2, kLookback, 21);
  Pending pending = PredictAsync(registry, "m", 0, input, 2);
  REQUIRE(pending.enqueue.ok());
  REQUIRE(registry.total_in_flight_tasks() == 1);

  absl::Status unload_status = absl::UnknownError("not run");
  std::thread unloader([&] { unload_status = registry.Unload("m"); });
  REQUIRE(WaitUntil([&] { return env.Status("m").state == ModelState::kUnloading; }));

  const ModelStatus unloading = env.Status("m");
  REQUIRE(unloading.serving_version == 0);
  REQUIRE(unloading.loaded.size() == 1);
  REQUIRE(unloading.loaded[0].draining);
  REQUIRE(unloading.loaded[0].in_flight_tasks == 1);
  const absl::Status refused = EnqueueStatus(registry, "m", 0);
  REQUIRE(refused.code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(refused.message(), "UNLOADING"));
  REQUIRE(pending.result.wait_for(std::chrono::seconds(0)) == std::future_status::timeout);

  gate.Notify();
  unloader.join();
  REQUIRE(unload_status.ok());
  const PredictResult result = Await(pending);
  INFO(result.status.ToString());
  REQUIRE(result.status.ok());
  REQUIRE(Near(result.output, testing::ReferenceForward(*model, input, 2)));
  const ModelStatus unloaded = env.Status("m");
  REQUIRE(unloaded.state == ModelState::kUnloaded);
  REQUIRE(unloaded.loaded.empty());
  REQUIRE(registry.loaded_model_count() == 0);

  // Load brings it back.
  REQUIRE(registry.Load("m").ok());
  REQUIRE(Near(Predict(registry, "m", 0, input, 2).output,
               testing::ReferenceForward(*model, input, 2)));
}

TEST_CASE("DeleteVersion removes a version from disk, never the one that serves or would serve",
          "[unit][registry]") {
  Env env;
  for (int64_t v = 1; v <= 3; ++v) env.Publish(*testing::RandomModel(SmallConfig("m"), v), v);
  ModelRegistry& registry = env.Start();
  REQUIRE(env.Status("m").serving_version == 3);

  // The serving version, an absent one and a bad number are refused, with what to do.
  const absl::Status serving = registry.DeleteVersion("m", 3);
  REQUIRE(serving.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(serving.message(), "is serving"));
  REQUIRE(registry.DeleteVersion("m", 9).code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.DeleteVersion("m", 0).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.DeleteVersion("nope", 1).code() == absl::StatusCode::kNotFound);

  REQUIRE(registry.DeleteVersion("m", 2).ok());
  REQUIRE(!fs::exists(env.ModelDir("m") + "/2"));
  REQUIRE(env.Status("m").versions_on_disk == std::vector<int64_t>{1, 3});
  // Nothing of it is left beside the versions, not even hidden.
  for (const auto& entry : fs::directory_iterator(env.ModelDir("m"))) {
    REQUIRE(!absl::StartsWith(entry.path().filename().string(), ".deleted-"));
  }
  // Serving goes on.
  const std::vector<float> input = testing::RandomWindows(1, kLookback, 5);
  REQUIRE(Predict(registry, "m", 0, input, 1).version == 3);

  // Unloaded, the version a load would pick (the pinned one) is refused all the same.
  REQUIRE(registry.SetServingVersion("m", 1).ok());
  REQUIRE(registry.Unload("m").ok());
  const absl::Status pinned = registry.DeleteVersion("m", 1);
  REQUIRE(pinned.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(absl::StrContains(pinned.message(), "serves when the model loads"));
  REQUIRE(registry.DeleteVersion("m", 3).ok());
  REQUIRE(registry.Load("m").ok());
  REQUIRE(env.Status("m").serving_version == 1);
  REQUIRE(registry.DeleteVersion("m", 1).code() == absl::StatusCode::kFailedPrecondition);
}

TEST_CASE("SetServingVersion switches weights and a version that fails to load changes nothing",
          "[unit][registry]") {
  Env env;
  const auto v1 = testing::RandomModel(SmallConfig("m"), 1);
  const auto v2 = testing::RandomModel(SmallConfig("m"), 2);
  env.Publish(*v1, 1);
  ModelRegistry& registry = env.Start();
  env.Publish(*v2, 2);
  const std::vector<float> input = testing::RandomWindows(3, kLookback, 4);
  const std::vector<float> out1 = testing::ReferenceForward(*v1, input, 3),
                           out2 = testing::ReferenceForward(*v2, input, 3);
  REQUIRE(!Near(out1, out2));

  PredictResult r = Predict(registry, "m", 0, input, 3);
  REQUIRE((r.version == 1 && Near(r.output, out1)));

  REQUIRE(registry.SetServingVersion("m", 2).ok());
  r = Predict(registry, "m", 0, input, 3);
  REQUIRE((r.version == 2 && Near(r.output, out2)));
  ModelStatus s = env.Status("m");
  REQUIRE(s.serving_version == 2);
  REQUIRE(s.versions_on_disk == std::vector<int64_t>{1, 2});
  REQUIRE(s.loaded.size() == 1);  // the old version has drained and gone
  REQUIRE(EnqueueStatus(registry, "m", 1).code() == absl::StatusCode::kUnavailable);

  // Roll back; the choice is pinned, so a reload keeps it although 2 is the highest.
  REQUIRE(registry.SetServingVersion("m", 1).ok());
  const std::shared_ptr<const Forecaster> pinned = registry.GetLoadedModel("m").value().model;
  REQUIRE(registry.Load("m").ok());
  REQUIRE(registry.GetLoadedModel("m").value().model == pinned);  // a no-op
  REQUIRE(Near(Predict(registry, "m", 0, input, 3).output, out1));
  // Version 0 removes the pin: the config's rule (the highest) applies again.
  REQUIRE(registry.SetServingVersion("m", 0).ok());
  REQUIRE(env.Status("m").serving_version == 2);

  // A broken version 3 fails to load and leaves version 2 serving.
  fs::create_directories(env.ModelDir("m") + "/3");
  REQUIRE(WriteFileAtomically(env.ModelDir("m") + "/3/model.safetensors", "garbage").ok());
  const int failures = env.observer.failed;
  const absl::Status broken = registry.SetServingVersion("m", 3);
  REQUIRE(!broken.ok());
  s = env.Status("m");
  REQUIRE(s.state == ModelState::kReady);
  REQUIRE(s.serving_version == 2);
  REQUIRE(!s.last_error.ok());
  REQUIRE(absl::StrContains(s.last_error.message(), "version 3"));
  REQUIRE(env.observer.failed == failures + 1);
  REQUIRE(Near(Predict(registry, "m", 0, input, 3).output, out2));

  REQUIRE(registry.SetServingVersion("m", 9).code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.SetServingVersion("m", -1).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.SetServingVersion("nope", 1).code() == absl::StatusCode::kNotFound);
  REQUIRE(env.Status("m").serving_version == 2);
}

TEST_CASE("Load re-reads config.json and reloads only when something changed", "[unit][registry]") {
  Env env;
  const auto model = testing::RandomModel(SmallConfig("m"), 5);
  env.Publish(*model, 1);
  ModelRegistry& registry = env.Start();
  const std::shared_ptr<const Forecaster> first = registry.GetLoadedModel("m").value().model;
  REQUIRE(registry.Load("m").ok());
  REQUIRE(registry.GetLoadedModel("m").value().model == first);

  ModelConfig bigger = SmallConfig("m");
  bigger.mutable_batching()->set_max_batch_size(8);
  env.WriteConfig("m", bigger);
  REQUIRE(registry.Load("m").ok());
  const LoadedModel reloaded = registry.GetLoadedModel("m").value();
  REQUIRE(reloaded.model != first);
  REQUIRE(reloaded.version == 1);
  REQUIRE(reloaded.model->config().batching().max_batch_size() == 8);
  const std::vector<float> input = testing::RandomWindows(8, kLookback, 6);
  REQUIRE(Near(Predict(registry, "m", 0, input, 8).output,
               testing::ReferenceForward(*model, input, 8)));

  // A config that no longer parses fails the reload; the loaded version keeps serving.
  REQUIRE(WriteFileAtomically(env.ModelDir("m") + "/config.json", "{").ok());
  REQUIRE(registry.Load("m").code() == absl::StatusCode::kInvalidArgument);
  const ModelStatus s = env.Status("m");
  REQUIRE(s.state == ModelState::kReady);
  REQUIRE(!s.last_error.ok());
  REQUIRE(Near(Predict(registry, "m", 0, input, 8).output,
               testing::ReferenceForward(*model, input, 8)));
}

TEST_CASE("OnVersionPublished refreshes versions, promotes, and loads a new model",
          "[unit][registry]") {
  Env env;
  const auto v1 = testing::RandomModel(SmallConfig("m"), 1);
  const auto v2 = testing::RandomModel(SmallConfig("m"), 2);
  const auto v3 = testing::RandomModel(SmallConfig("m"), 3);
  env.Publish(*v1, 1);
  ModelRegistry& registry = env.Start();
  const std::vector<float> input = testing::RandomWindows(1, kLookback, 8);

  env.Publish(*v2, 2);
  REQUIRE(registry.OnVersionPublished("m", 2, /*promote=*/false).ok());
  ModelStatus s = env.Status("m");
  REQUIRE(s.versions_on_disk == std::vector<int64_t>{1, 2});
  REQUIRE(s.serving_version == 1);
  REQUIRE(
      Near(Predict(registry, "m", 0, input, 1).output, testing::ReferenceForward(*v1, input, 1)));

  env.Publish(*v3, 3);
  REQUIRE(registry.OnVersionPublished("m", 3, /*promote=*/true).ok());
  REQUIRE(env.Status("m").serving_version == 3);
  const PredictResult r = Predict(registry, "m", 0, input, 1);
  REQUIRE((r.version == 3 && Near(r.output, testing::ReferenceForward(*v3, input, 1))));

  // A model directory the training job created after Start.
  const auto fresh = testing::RandomModel(SmallConfig("fresh"), 4);
  env.Publish(*fresh, 1);
  REQUIRE(registry.OnVersionPublished("fresh", 1, /*promote=*/false).ok());
  REQUIRE(env.Status("fresh").state == ModelState::kReady);
  REQUIRE(Near(Predict(registry, "fresh", 0, input, 1).output,
               testing::ReferenceForward(*fresh, input, 1)));

  REQUIRE(registry.OnVersionPublished("m", 9, true).code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.OnVersionPublished("nope", 1, false).code() == absl::StatusCode::kNotFound);
  REQUIRE(env.Status("m").serving_version == 3);
}

TEST_CASE("Requests during repeated version switches all succeed", "[unit][registry]") {
  Env env;
  const auto v1 = testing::RandomModel(SmallConfig("m"), 1);
  const auto v2 = testing::RandomModel(SmallConfig("m"), 2);
  env.Publish(*v1, 1);
  env.Publish(*v2, 2);
  ModelRegistry& registry = env.Start();

  const std::vector<float> input = testing::RandomWindows(1, kLookback, 3);
  const std::vector<float> out1 = testing::ReferenceForward(*v1, input, 1),
                           out2 = testing::ReferenceForward(*v2, input, 1);

  // Each client keeps one request in flight, sending the next when the last completes,
  // until the switches are over (and at least kMinPerThread times).
  constexpr int kThreads = 4, kMinPerThread = 20;
  std::atomic<bool> switching{true};
  std::atomic<int> submitted{0}, enqueue_failures{0}, done{0}, wrong{0}, not_ok{0};
  std::atomic<bool> saw_v1{false}, saw_v2{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < kThreads; ++t) {
    clients.emplace_back([&] {
      for (int i = 0; i < kMinPerThread || switching.load(); ++i) {
        auto completed = std::make_shared<std::promise<void>>();
        std::future<void> completion = completed->get_future();
        std::unique_ptr<PredictTask> task = MakeTask(input, 1, [&, completed](PredictResult r) {
          if (!r.status.ok()) {
            ++not_ok;
          } else if (r.version == 1 && Near(r.output, out1)) {
            saw_v1 = true;
          } else if (r.version == 2 && Near(r.output, out2)) {
            saw_v2 = true;
          } else {
            ++wrong;
          }
          ++done;
          completed->set_value();
        });
        ++submitted;
        if (!registry.Enqueue("m", 0, task).ok()) {
          ++enqueue_failures;
          ++done;
          continue;
        }
        // A bound against a hang, not a measurement.
        if (completion.wait_for(std::chrono::seconds(60)) != std::future_status::ready) return;
      }
    });
  }
  std::vector<absl::Status> switches;
  for (int i = 0; i < 6; ++i) switches.push_back(registry.SetServingVersion("m", 1 + i % 2));
  switching = false;
  for (std::thread& c : clients) c.join();
  REQUIRE(WaitUntil([&] { return done.load() == submitted.load(); }));

  for (const absl::Status& s : switches) REQUIRE(s.ok());
  REQUIRE(enqueue_failures == 0);
  REQUIRE(not_ok == 0);
  REQUIRE(wrong == 0);
  REQUIRE((saw_v1 || saw_v2));
  REQUIRE(env.Status("m").serving_version == 2);
  REQUIRE(env.observer.unloaded == 6);
}

TEST_CASE("Shutdown drains everything and then refuses requests and admin calls",
          "[unit][registry]") {
  Env env;
  const auto a = testing::RandomModel(SmallConfig("a"), 1);
  env.Publish(*a, 1);
  env.Publish(*testing::RandomModel(SmallConfig("b"), 2), 1);
  ModelRegistry& registry = env.Start();
  REQUIRE(registry.loaded_model_count() == 2);
  REQUIRE(registry.total_queued_tasks() == 0);

  const std::vector<float> input = testing::RandomWindows(2, kLookback, 1);
  Pending pending = PredictAsync(registry, "a", 0, input, 2);
  registry.Shutdown(absl::Seconds(30));
  const PredictResult result = Await(pending);
  REQUIRE(result.status.ok());  // accepted before the shutdown: completed
  REQUIRE(Near(result.output, testing::ReferenceForward(*a, input, 2)));

  const absl::Status refused = EnqueueStatus(registry, "a", 0);
  REQUIRE(refused.code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(refused.message(), "shut down"));
  REQUIRE(registry.Load("a").code() == absl::StatusCode::kUnavailable);
  REQUIRE(registry.SetServingVersion("a", 1).code() == absl::StatusCode::kUnavailable);
  REQUIRE(registry.loaded_model_count() == 0);
  for (const ModelStatus& s : registry.ListModels()) {
    REQUIRE(s.state == ModelState::kUnloaded);
    REQUIRE(s.loaded.empty());
  }
  registry.Shutdown(absl::Seconds(1));  // idempotent
}

// A second device for routing tests: CPU instances under another id and a scheduler of its
// own, counting the instances it makes and the batches they run.
class CountingDevice final : public ExecutionDevice {
 public:
  CountingDevice(std::string id, Backend* backend)
      : id_(std::move(id)),
        scheduler_(DeviceScheduler::Create(DeviceScheduler::Options{}).value()),
        cpu_(backend, scheduler_.get()) {}
  ~CountingDevice() override { scheduler_->Shutdown(); }

  const std::string& id() const override { return id_; }
  DeviceScheduler& scheduler() override { return *scheduler_; }
  absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CreateInstances(
      std::shared_ptr<const Forecaster> model, const InstanceOptions& options) override {
    ++instances_made;
    return cpu_.CreateInstances(std::move(model), options);
  }

  std::atomic<int> instances_made{0};

 private:
  const std::string id_;
  std::unique_ptr<DeviceScheduler> scheduler_;
  CpuExecutionDevice cpu_;
};

TEST_CASE("Each version runs on the first device its config names that the server has",
          "[unit][registry]") {
  Env env;
  CpuExecutionDevice cpu(&env.backend, env.scheduler.get());
  CountingDevice gpu("cuda:1", &env.backend);

  ModelConfig on_gpu = SmallConfig("on_gpu");
  on_gpu.mutable_instances()->add_devices("cuda:0");  // not here: the next one is used
  on_gpu.mutable_instances()->add_devices("cuda:1");
  const auto on_gpu_model = testing::RandomModel(on_gpu, 21);
  env.Publish(*on_gpu_model, 1);
  const auto anywhere = testing::RandomModel(SmallConfig("anywhere"), 22);
  env.Publish(*anywhere, 1);
  ModelConfig missing = SmallConfig("missing");
  missing.mutable_instances()->add_devices("cuda:7");
  env.Publish(*testing::RandomModel(missing, 23), 1);

  ModelRegistry::Options options = env.Options();
  options.devices = {&cpu, &gpu};
  ModelRegistry& registry = env.Start(options);

  REQUIRE(gpu.instances_made == 1);
  REQUIRE(registry.GetLoadedModel("on_gpu").value().device == "cuda:1");
  REQUIRE(env.Status("on_gpu").loaded.at(0).device == "cuda:1");
  // No devices in the config: the first of the server's.
  REQUIRE(registry.GetLoadedModel("anywhere").value().device == "cpu");
  REQUIRE(env.Status("anywhere").loaded.at(0).device == "cpu");

  const ModelStatus failed = env.Status("missing");
  REQUIRE(failed.state == ModelState::kFailed);
  REQUIRE(failed.last_error.code() == absl::StatusCode::kFailedPrecondition);
  INFO(failed.last_error.ToString());
  REQUIRE(absl::StrContains(failed.last_error.message(), "[cuda:7]"));
  REQUIRE(absl::StrContains(failed.last_error.message(), "[cpu, cuda:1]"));

  // Both compute what the reference computes, each on its own device's scheduler.
  const std::vector<float> input = testing::RandomWindows(3, kLookback, 5);
  REQUIRE(Near(Predict(registry, "on_gpu", 0, input, 3).output,
               testing::ReferenceForward(*on_gpu_model, input, 3)));
  REQUIRE(Near(Predict(registry, "anywhere", 0, input, 3).output,
               testing::ReferenceForward(*anywhere, input, 3)));
  env.registry.reset();  // before the devices its versions run on
}

TEST_CASE("FixedBatchSizes: powers of two below the maximum, the preferred sizes, the maximum",
          "[unit][registry]") {
  ExecutionDevice::InstanceOptions o;
  o.max_batch_size = 1;
  REQUIRE(FixedBatchSizes(o) == std::vector<int64_t>{1});
  o.max_batch_size = 32;
  REQUIRE(FixedBatchSizes(o) == std::vector<int64_t>{1, 2, 4, 8, 16, 32});
  o.max_batch_size = 48;
  o.preferred_batch_sizes = {24, 4, 48};
  REQUIRE(FixedBatchSizes(o) == std::vector<int64_t>{1, 2, 4, 8, 16, 24, 32, 48});
}

TEST_CASE("A CPU instance of a recurrent model batches from its backend's row tile",
          "[unit][registry]") {
  Env env;
  std::unique_ptr<DnnlBackend> dnnl = DnnlBackend::Create({}).value();
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  REQUIRE(dnnl->recurrent_row_tile() == (avx2_fma ? 4 : 1));
  REQUIRE(env.backend.recurrent_row_tile() == 1);
  ExecutionDevice::InstanceOptions o;
  o.max_batch_size = 4;
  const std::shared_ptr<const Forecaster> gru = testing::RandomModel(SmallConfig("gru"), 33);
  ModelConfig mlp_config = SmallConfig("mlp");
  mlp_config.mutable_mlp()->set_hidden_size(4);
  mlp_config.mutable_mlp()->set_num_layers(1);
  const std::shared_ptr<const Forecaster> mlp = testing::RandomModel(mlp_config, 34);
  CpuExecutionDevice on_dnnl(dnnl.get(), env.scheduler.get(), 1);
  REQUIRE(on_dnnl.CreateInstances(gru, o).value().front()->efficient_batch_rows() ==
          dnnl->recurrent_row_tile());
  REQUIRE(on_dnnl.CreateInstances(mlp, o).value().front()->efficient_batch_rows() == 1);
  CpuExecutionDevice on_reference(&env.backend, env.scheduler.get(), 1);
  REQUIRE(on_reference.CreateInstances(gru, o).value().front()->efficient_batch_rows() == 1);
}

TEST_CASE("A CPU instance refuses batches outside [1, max_batch_size]", "[unit][registry]") {
  Env env;
  CpuExecutionDevice cpu(&env.backend, env.scheduler.get(), 3);
  std::shared_ptr<const Forecaster> model = testing::RandomModel(SmallConfig("m"), 31);
  ExecutionDevice::InstanceOptions o;
  o.max_batch_size = 2;
  std::vector<std::unique_ptr<ModelInstance>> instances = cpu.CreateInstances(model, o).value();
  REQUIRE(instances.size() == 3);  // as asked, above the scheduler's 2 workers
  const std::vector<float> input = testing::RandomWindows(3, kLookback, 6);
  std::vector<float> output(3 * kOutputs);
  REQUIRE(instances[0]->Run(input.data(), 3, output.data()).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(instances[0]->Run(input.data(), 0, output.data()).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(instances[2]->Run(input.data(), 2, output.data()).ok());
  output.resize(2 * kOutputs);
  REQUIRE(Near(output, testing::ReferenceForward(*model, input, 2)));
  REQUIRE(instances[2]->ComputedRows(2) == 2);
}

// Which backend a CPU version runs on follows its config's precision: bf16 on the device's
// bf16 backend where it has one (here a oneDNN backend stands in for it, so that the two are
// told apart by compute()), else fp32 on the main one, saying why; the registry reports it.
TEST_CASE("A CPU device runs bf16 models on its bf16 backend and says how each version computes",
          "[unit][registry]") {
  Env env;
  std::unique_ptr<DnnlBackend> second = DnnlBackend::Create({}).value();
  ModelConfig bf16 = SmallConfig("bf16");
  bf16.set_precision(v1::PRECISION_BF16);
  ModelConfig fp16 = SmallConfig("fp16");
  fp16.set_precision(v1::PRECISION_FP16);
  const std::shared_ptr<const Forecaster> bf16_model = testing::RandomModel(bf16, 41);
  const std::shared_ptr<const Forecaster> fp16_model = testing::RandomModel(fp16, 42);
  const std::shared_ptr<const Forecaster> fp32_model =
      testing::RandomModel(SmallConfig("fp32"), 43);
  ExecutionDevice::InstanceOptions o;
  o.max_batch_size = 2;
  const auto compute_of = [&](CpuExecutionDevice& cpu, std::shared_ptr<const Forecaster> model) {
    return cpu.CreateInstances(std::move(model), o).value().at(0)->compute();
  };

  CpuExecutionDevice with_bf16(&env.backend, env.scheduler.get(), 0, second.get());
  REQUIRE(compute_of(with_bf16, bf16_model) == second->compute());
  REQUIRE(compute_of(with_bf16, fp32_model) == env.backend.compute());
  std::vector<std::unique_ptr<ModelInstance>> instances =
      with_bf16.CreateInstances(bf16_model, o).value();
  const std::vector<float> input = testing::RandomWindows(2, kLookback, 7);
  std::vector<float> output(2 * kOutputs);
  REQUIRE(instances[1]->Run(input.data(), 2, output.data()).ok());
  REQUIRE(Near(output, testing::ReferenceForward(*bf16_model, input, 2)));

  CpuExecutionDevice without(&env.backend, env.scheduler.get());
  REQUIRE(compute_of(without, bf16_model) ==
          "fp32 (bf16 asked: bf16 needs a CPU with AVX512-BF16 or AMX)");
  REQUIRE(compute_of(without, fp16_model) == "fp32 (fp16 asked: the CPU computes it in fp32)");
  REQUIRE(compute_of(without, fp32_model) == "fp32");

  env.Publish(*bf16_model, 1);
  ModelRegistry::Options options = env.Options();
  options.devices = {&with_bf16};
  env.Start(options);
  REQUIRE(env.Status("bf16").loaded.at(0).compute == second->compute());
  env.registry.reset();
}

TEST_CASE("Create validates its options", "[unit][registry]") {
  Env env;
  ModelRegistry::Options o = env.Options();
  o.backend = nullptr;
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o = env.Options();
  o.scheduler = nullptr;
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o = env.Options();
  o.num_workers = 1;  // fewer than the scheduler's 2
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o = env.Options();
  o.models_to_load = {"a/b"};
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o = env.Options();
  o.devices = {nullptr};
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  o = env.Options();
  o.repository_path.clear();
  REQUIRE(ModelRegistry::Create(o).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(ModelRegistry::Create(env.Options()).ok());
}

}  // namespace
}  // namespace forecastd
