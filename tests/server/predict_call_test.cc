// The admission step (server/predict_call.h) over a real ModelRegistry (reference backend,
// 2-worker scheduler) on a repository in a temp dir: the forecasts land in the caller's reply
// buffer, limits come from the pinned version as parsed at load, and requests raced against
// version switches, promotions, reloads that change the inputs and unloads end OK or with a
// clean UNAVAILABLE / NOT_FOUND.
#include "server/predict_call.h"

#include <atomic>
#include <cstring>
#include <filesystem>
#include <limits>
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

// A registry serving "cov" (CovariateConfig, version 1) beside "m" (GruConfig, version 1).
struct CovariateEnv {
  CovariateEnv() {
    root = dir.path() + "/models";
    fs::create_directories(root);
    ModelConfig config = testing::CovariateConfig("cov", T, 2);
    config.mutable_batching()->set_max_batch_size(kMaxBatch);
    model = testing::RandomCovariateModel(config, 31);
    plain = testing::RandomModel(GruConfig(), 32);
    REQUIRE(PublishVersion(*model, root + "/cov", 1).ok());
    REQUIRE(PublishVersion(*plain, root + "/m", 1).ok());
    ModelRegistry::Options registry_options;
    registry_options.repository_path = root;
    registry_options.drain_timeout = absl::Seconds(30);
    registry = testing::StartCpuRegistry(registry_options, backend, scheduler);
  }
  ~CovariateEnv() { registry->Shutdown(absl::Seconds(30)); }

  testing::TempDir dir;
  std::string root;
  std::unique_ptr<Forecaster> model, plain;
  ReferenceBackend backend;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::unique_ptr<ModelRegistry> registry;
};

// A call carrying `request`'s windows and extras (each dropped or replaced as the test asks).
PredictCall CovariateCall(const testing::CovariateRequest& request, const int64_t (&shape)[3],
                          const int64_t (&future_shape)[3]) {
  PredictCall call;
  call.shape = shape;
  call.values = request.windows;
  call.extras.future = FloatTensorView{.shape = future_shape, .raw = {}, .values = request.future};
  call.extras.timestamps = request.timestamps;
  call.extras.series = request.series;
  return call;
}

absl::Status AdmitAndWait(const PredictAdmission& admission, const LoadedModel& pinned,
                          const PredictCall& call, std::vector<float>* forecasts) {
  std::string reply;
  absl::Notification finished;
  PredictResult result;
  absl::Status status = admission.Admit(
      pinned, call,
      [&](int64_t n) {
        reply.resize(static_cast<size_t>(n * pinned.model->num_outputs()) * sizeof(float));
        return reply.data();
      },
      [&](PredictResult r) {
        result = std::move(r);
        finished.Notify();
      });
  if (!status.ok()) return status;
  finished.WaitForNotification();
  if (forecasts != nullptr) {
    forecasts->resize(reply.size() / sizeof(float));
    std::memcpy(forecasts->data(), reply.data(), reply.size());
  }
  return result.status;
}

TEST_CASE("Admission builds the input records of a model with covariates and series",
          "[unit][predict_call][covariates]") {
  CovariateEnv env;
  const PredictAdmission admission({.registry = env.registry.get()});
  const LoadedModel pinned = admission.Pin("cov", 0).value();
  const Forecaster& model = *env.model;
  const int64_t B = 3, P = model.horizon();
  const testing::CovariateRequest request = testing::RandomCovariateRequest(model, B, 41);
  const int64_t shape[] = {B, T, 3};
  const int64_t future_shape[] = {B, P, 1};
  const std::vector<float> expected =
      testing::ReferenceForward(model, testing::CovariateRecords(model, request), B);

  SECTION("values, and raw bytes: the forecast of BuildInputRecords' records") {
    std::vector<float> got;
    REQUIRE(
        AdmitAndWait(admission, pinned, CovariateCall(request, shape, future_shape), &got).ok());
    REQUIRE(got == expected);
    PredictCall raw = CovariateCall(request, shape, future_shape);
    const std::string window_bytes(reinterpret_cast<const char*>(request.windows.data()),
                                   request.windows.size() * sizeof(float));
    // One byte in: raw bytes need not be aligned for float.
    const std::string future_bytes =
        " " + std::string(reinterpret_cast<const char*>(request.future.data()),
                          request.future.size() * sizeof(float));
    raw.values = {};
    raw.raw = window_bytes;
    raw.extras.future->values = {};
    raw.extras.future->raw = absl::string_view(future_bytes).substr(1);
    REQUIRE(AdmitAndWait(admission, pinned, raw, &got).ok());
    REQUIRE(got == expected);
  }
  SECTION("one series name stands for every window") {
    testing::CovariateRequest one = request;
    one.series = {"MSFT"};
    testing::CovariateRequest all = request;
    all.series.assign(B, "MSFT");
    std::vector<float> got;
    REQUIRE(AdmitAndWait(admission, pinned, CovariateCall(one, shape, future_shape), &got).ok());
    REQUIRE(got == testing::ReferenceForward(model, testing::CovariateRecords(model, all), B));
    REQUIRE(got != expected);  // the series matters
  }
  SECTION("a missing, malformed or unknown extra is refused, naming it") {
    const auto refused = [&](const PredictCall& call, absl::StatusCode code,
                             const std::string& phrase) {
      const absl::Status status = AdmitAndWait(admission, pinned, call, nullptr);
      CAPTURE(status.ToString());
      REQUIRE(status.code() == code);
      REQUIRE(status.message().find(phrase) != absl::string_view::npos);
    };
    PredictCall call = CovariateCall(request, shape, future_shape);
    call.extras.future.reset();
    refused(call, absl::StatusCode::kInvalidArgument,
            "has future-known covariates (event): send future [3, 2, 1]");
    call = CovariateCall(request, shape, future_shape);
    call.extras.timestamps.reset();
    refused(call, absl::StatusCode::kInvalidArgument,
            "has calendar features: send timestamps [3, 6]");
    call = CovariateCall(request, shape, future_shape);
    call.extras.series.reset();
    refused(call, absl::StatusCode::kInvalidArgument, "was trained on 2 series: send series");
    call = CovariateCall(request, shape, future_shape);
    call.extras.series = std::vector<std::string>{"AAPL", "GOOG", "MSFT"};
    refused(call, absl::StatusCode::kNotFound, "knows no series 'GOOG'");
    call.extras.series = std::vector<std::string>{"AAPL", "MSFT"};
    refused(call, absl::StatusCode::kInvalidArgument, "series holds 2 names for 3 windows");
    const int64_t wrong_future_shape[] = {B, P + 1, 1};
    call = CovariateCall(request, shape, wrong_future_shape);
    refused(call, absl::StatusCode::kInvalidArgument,
            "future has shape [3, 3, 1]; model 'cov' takes [3, 2, 1]");
    call = CovariateCall(request, shape, future_shape);
    const std::vector<float> short_future(request.future.begin(), request.future.end() - 1);
    call.extras.future->values = short_future;
    refused(call, absl::StatusCode::kInvalidArgument,
            "future holds 5 values; shape [3, 2, 1] needs 6");
    std::vector<float> nan_future = request.future;
    nan_future[3] = std::numeric_limits<float>::quiet_NaN();
    call.extras.future->values = nan_future;
    refused(call, absl::StatusCode::kInvalidArgument,
            "future [1, 1, 0] (covariate 'event') is nan");
    call = CovariateCall(request, shape, future_shape);
    call.extras.timestamps->pop_back();
    refused(call, absl::StatusCode::kInvalidArgument,
            "timestamps holds 17 values; model 'cov' takes 18");
    call = CovariateCall(request, shape, future_shape);
    (*call.extras.timestamps)[2] = (*call.extras.timestamps)[1];
    refused(call, absl::StatusCode::kInvalidArgument,
            "timestamps: window 0: its times must increase");
    // The windows carry the model's input columns: no calendar columns.
    const int64_t calendar_shape[] = {B, T, 5};
    call = CovariateCall(request, calendar_shape, future_shape);
    refused(call, absl::StatusCode::kInvalidArgument, "takes [B, 4, 3]");
  }
  SECTION("extras for a model that takes none are refused") {
    const LoadedModel plain = admission.Pin("m", 0).value();
    const std::vector<float> windows = testing::RandomWindows(1, T, 5);
    const int64_t plain_shape[] = {1, T, 2};
    const int64_t plain_future[] = {1, 2, 1};
    const std::vector<float> future = {1.0f, 0.0f};
    PredictCall call;
    call.shape = plain_shape;
    call.values = windows;
    std::vector<float> got;
    REQUIRE(AdmitAndWait(admission, plain, call, &got).ok());
    REQUIRE(got == testing::ReferenceForward(*env.plain, windows, 1));
    call.extras.future = FloatTensorView{.shape = plain_future, .raw = {}, .values = future};
    absl::Status status = AdmitAndWait(admission, plain, call, nullptr);
    REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(status.message() == "model 'm' has no future-known covariates: send no future");
    call.extras.future.reset();
    call.extras.timestamps = std::vector<int64_t>{1, 2, 3, 4, 5, 6};
    status = AdmitAndWait(admission, plain, call, nullptr);
    REQUIRE(status.message() == "model 'm' has no calendar features: send no timestamps");
    call.extras.timestamps.reset();
    call.extras.series = std::vector<std::string>{"AAPL"};
    status = AdmitAndWait(admission, plain, call, nullptr);
    REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(status.message() == "model 'm' was trained on one series: send no series");
  }
}

TEST_CASE(
    "A request pinned before a reload that reorders the series is not computed as the new "
    "version reads it",
    "[unit][predict_call][covariates]") {
  CovariateEnv env;
  const PredictAdmission admission({.registry = env.registry.get()});
  const LoadedModel before = admission.Pin("cov", 0).value();
  ModelConfig config = env.model->config();
  config.clear_series();
  config.add_series("MSFT");
  config.add_series("AAPL");
  REQUIRE(
      WriteFileAtomically(env.root + "/cov/config.json", ModelConfigToJson(config).value()).ok());
  REQUIRE(env.registry->Load("cov").ok());
  const testing::CovariateRequest request = testing::RandomCovariateRequest(*env.model, 1, 43);
  const int64_t shape[] = {1, T, 3};
  const int64_t future_shape[] = {1, 2, 1};
  const absl::Status status =
      AdmitAndWait(admission, before, CovariateCall(request, shape, future_shape), nullptr);
  CAPTURE(status.ToString());
  REQUIRE(status.code() == absl::StatusCode::kUnavailable);
  REQUIRE(status.message().find("with other inputs") != absl::string_view::npos);
  // Pinned afresh, the request runs on the new version.
  const LoadedModel after = admission.Pin("cov", 0).value();
  REQUIRE(
      AdmitAndWait(admission, after, CovariateCall(request, shape, future_shape), nullptr).ok());
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
