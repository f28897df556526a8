// The admission step (server/predict_call.h) over a real ModelRegistry (reference backend,
// 2-worker scheduler) on a repository in a temp dir: the forecasts land in the caller's reply
// buffer, limits come from the pinned version as parsed at load, and requests raced against
// version switches, promotions, reloads that change the inputs and unloads end OK or with a
// clean UNAVAILABLE / NOT_FOUND.
#include "server/predict_call.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "backends/reference_backend.h"
#include "engine/file_io.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "engine/serving/device_scheduler.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

constexpr int64_t T = 4;  // lookback
constexpr int64_t kMaxBatch = 4;

ModelConfig GruConfig() {
  ModelConfig c = testing::SmallGruConfig("m", T, 2);
  v1::BatchingConfig* b = c.mutable_batching();
  b->set_max_batch_size(kMaxBatch);
  b->set_max_queue_delay_us(100);
  b->set_priority_levels(2);
  b->set_default_priority_level(2);
  return c;
}

// A registry serving versions 1 and 2 of "m" (version 2 at start).
struct Env {
  Env() {
    root = dir.path() + "/models";
    fs::create_directories(root);
    models[1] = testing::RandomModel(GruConfig(), 1);
    models[2] = testing::RandomModel(GruConfig(), 2);
    for (const auto& [version, model] : models) {
      REQUIRE(PublishVersion(*model, root + "/m", version).ok());
    }
    ModelRegistry::Options registry_options;
    registry_options.repository_path = root;
    registry_options.drain_timeout = absl::Seconds(30);
    registry = testing::StartCpuRegistry(registry_options, backend, scheduler);
  }
  ~Env() { registry->Shutdown(absl::Seconds(30)); }

  testing::TempDir dir;
  std::string root;
  std::map<int64_t, std::unique_ptr<Forecaster>> models;
  ReferenceBackend backend;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::unique_ptr<ModelRegistry> registry;
};

// One call through the admission step, waited for: its status, the version that answered,
// the reply buffer's floats and what the result itself carried.
struct Answer {
  absl::Status status;
  int64_t version = 0;
  int64_t lookback = 0;  // of the pinned version
  std::vector<float> forecasts;
  size_t result_floats = 0;
};

// `inputs` maps a lookback to `rows` windows of it; the call sends those the pinned version
// takes, as a client that read the model's metadata does.
Answer Call(const PredictAdmission& admission, int64_t version,
            const std::map<int64_t, std::vector<float>>& inputs, int64_t rows) {
  Answer answer;
  absl::StatusOr<LoadedModel> pinned = admission.Pin("m", version);
  if (!pinned.ok()) {
    answer.status = pinned.status();
    return answer;
  }
  answer.lookback = pinned->model->lookback();
  const std::vector<float>& input = inputs.at(answer.lookback);
  const int64_t shape[] = {rows, answer.lookback, 2};
  PredictCall call;
  call.shape = shape;
  call.values = input;
  std::string reply;
  absl::Notification finished;
  PredictResult result;
  answer.status = admission.Admit(
      *pinned, call,
      [&](int64_t n) {
        reply.resize(static_cast<size_t>(n * pinned->model->num_outputs()) * sizeof(float));
        return reply.data();
      },
      [&](PredictResult r) {
        result = std::move(r);
        finished.Notify();
      });
  if (!answer.status.ok()) return answer;
  finished.WaitForNotification();
  answer.status = result.status;
  answer.version = result.version;
  answer.result_floats = result.output.size();
  answer.forecasts.resize(reply.size() / sizeof(float));
  std::memcpy(answer.forecasts.data(), reply.data(), reply.size());
  return answer;
}

TEST_CASE("Admission writes the forecasts into the caller's reply buffer", "[unit][predict_call]") {
  Env env;
  const PredictAdmission admission({.registry = env.registry.get()});
  const std::vector<float> input = testing::RandomWindows(3, T, 7);
  const Answer answer = Call(admission, 0, {{T, input}}, 3);
  REQUIRE(answer.status.ok());
  REQUIRE(answer.version == 2);
  REQUIRE(answer.result_floats == 0);  // nothing travels in the result itself
  const std::vector<float> expected = testing::ReferenceForward(*env.models[2], input, 3);
  REQUIRE(answer.forecasts == expected);
}

TEST_CASE("Admission checks the request against the pinned version's limits",
          "[unit][predict_call]") {
  Env env;
  const PredictAdmission admission({.registry = env.registry.get(), .max_batch_rows = 3});
  const LoadedModel pinned = admission.Pin("m", 0).value();
  // Parsed once, when the version loaded.
  REQUIRE(pinned.max_batch_size == kMaxBatch);
  REQUIRE(pinned.default_priority_level == 2);
  REQUIRE(PredictAdmission::LevelOf(pinned, 0) == 2);
  REQUIRE(PredictAdmission::LevelOf(pinned, 1) == 1);

  const std::vector<float> four = testing::RandomWindows(4, T, 8);
  const Answer too_many = Call(admission, 0, {{T, four}}, 4);
  REQUIRE(too_many.status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(too_many.status.message().find("--max-batch-rows") != std::string::npos);

  const std::vector<float> one = testing::RandomWindows(1, T, 9);
  const int64_t shape[] = {1, T, 2};
  PredictCall call;
  call.shape = shape;
  call.values = one;
  call.input_context = "input 'INPUT': ";
  const std::vector<float> short_input(one.begin(), one.end() - 1);
  call.values = short_input;
  const absl::Status status = admission.Admit(
      pinned, call, [](int64_t) -> char* { return nullptr; }, [](PredictResult) {});
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(status.message().rfind("input 'INPUT': ", 0) == 0);

  REQUIRE(admission.Pin("nope", 0).status().code() == absl::StatusCode::kNotFound);
  REQUIRE(admission.Pin("m", 9).status().code() == absl::StatusCode::kNotFound);
}

TEST_CASE(
    "10,000 requests raced against version switches, promotions, reloads and unloads end OK, "
    "UNAVAILABLE or NOT_FOUND",
    "[integration][predict_call]") {
  Env env;
  const PredictAdmission admission({.registry = env.registry.get()});
  constexpr int kClients = 8;
  constexpr int kPerClient = 1250;  // 10,000 in all
  // A reload that re-reads config.json switches the lookback between T and kLongT (the
  // recurrent weights do not depend on it), so a request validated against one version's
  // inputs may meet another's.
  constexpr int64_t kLongT = 6;
  const std::map<int64_t, std::vector<float>> inputs = {
      {T, testing::RandomWindows(2, T, 11)}, {kLongT, testing::RandomWindows(2, kLongT, 12)}};
  std::map<int64_t, std::vector<float>> expected;  // per version, of inputs[T]
  for (const auto& [version, model] : env.models) {
    expected[version] = testing::ReferenceForward(*model, inputs.at(T), 2);
  }
  // Runs on the admin thread, so it returns its status instead of asserting.
  const auto write_config = [&](int64_t lookback) -> absl::Status {
    ModelConfig config = GruConfig();
    config.set_lookback(lookback);
    absl::StatusOr<std::string> json = ModelConfigToJson(config);
    if (!json.ok()) return json.status();
    return WriteFileAtomically(env.root + "/m/config.json", *json);
  };

  // The admin operations are spread over the run by the clients' progress, not by time:
  // each waits for kOkPerOperation more forecasts (a Load follows its Unload at once), and
  // for fewer once every request has completed.
  constexpr int kOperations = 18;
  constexpr int kOkPerOperation = 300;
  absl::Mutex mu;
  int completed = 0;  // guarded by mu, as are the counts below
  int ok = 0;
  absl::Status admin_error;
  std::thread admin([&] {
    int due = 0;
    for (int i = 0; i < kOperations; ++i) {
      if (i % 6 != 5) {
        due += kOkPerOperation;
        absl::MutexLock lock(&mu);
        auto reached = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
          return ok >= due || completed == kClients * kPerClient;
        };
        mu.Await(absl::Condition(&reached));
      }
      absl::Status status;
      switch (i % 6) {
        case 0:
          status = env.registry->SetServingVersion("m", 1);
          break;
        case 1:
          status = env.registry->SetServingVersion("m", 2);
          break;
        case 2:
          status = env.registry->OnVersionPublished("m", 1 + i % 2, /*promote=*/true);
          break;
        case 3:
          status = write_config(i % 12 == 3 ? kLongT : T);
          if (status.ok()) status = env.registry->Load("m");
          break;
        case 4:
          status = env.registry->Unload("m");
          break;
        case 5:
          status = env.registry->Load("m");
          break;
      }
      if (!status.ok() && admin_error.ok()) admin_error = status;
    }
  });

  std::map<absl::StatusCode, int> codes;
  std::map<int64_t, int> answered_by;           // version -> forecasts
  std::map<int64_t, int> answered_by_lookback;  // lookback -> forecasts
  std::vector<std::string> unexpected;
  int wrong_forecasts = 0;
  std::vector<std::thread> clients;
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c] {
      for (int i = 0; i < kPerClient; ++i) {
        // Three in four ask for the serving version, the others for an explicit one.
        const int64_t version = (i + c) % 4 != 0 ? 0 : 1 + i % 2;
        const Answer answer = Call(admission, version, inputs, 2);
        absl::MutexLock lock(&mu);
        ++completed;
        ++codes[answer.status.code()];
        if (answer.status.ok()) {
          ++ok;
          ++answered_by[answer.version];
          ++answered_by_lookback[answer.lookback];
          // Forecasts of the long windows are checked for their count alone.
          if (answer.lookback == T ? answer.forecasts != expected[answer.version]
                                   : answer.forecasts.size() != expected[answer.version].size()) {
            ++wrong_forecasts;
          }
        } else if (!absl::IsUnavailable(answer.status) && !absl::IsNotFound(answer.status)) {
          if (unexpected.size() < 5) unexpected.push_back(answer.status.ToString());
        }
      }
    });
  }
  for (std::thread& t : clients) t.join();
  admin.join();

  WARN("OK " << codes[absl::StatusCode::kOk] << ", UNAVAILABLE "
             << codes[absl::StatusCode::kUnavailable] << ", NOT_FOUND "
             << codes[absl::StatusCode::kNotFound]);
  INFO("unexpected: " << (unexpected.empty() ? "" : unexpected.front()));
  REQUIRE(unexpected.empty());
  REQUIRE(wrong_forecasts == 0);
  int total = 0;
  for (const auto& [code, n] : codes) total += n;
  REQUIRE(total == kClients * kPerClient);
  REQUIRE(answered_by[1] > 0);  // both versions served during the run
  REQUIRE(answered_by[2] > 0);
  REQUIRE(answered_by_lookback[T] > 0);  // and both configs
  REQUIRE(answered_by_lookback[kLongT] > 0);
  REQUIRE(admin_error.ok());
}

}  // namespace
}  // namespace forecastd
