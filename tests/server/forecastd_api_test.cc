// Starts the real forecastd binary on a temporary model repository and drives every RPC of
// forecastd.v1.Forecaster and forecastd.v1.Admin through the generated C++ stubs: forecasts
// checked against the engine's own forward pass on the same weights, every refusal with its
// code and message, deadlines, model management, training jobs, benchmarks, the metrics they
// leave behind, and the SIGTERM drain. ctest runs each TEST_CASE in its own process; the
// test cases that only read share one daemon per process, the others start their own.
// The models, the reference forecasts and the helpers are in tests/testing/forecastd_api_fixture.h.
#include <signal.h>

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/health_client.h"
#include "engine/models/model_files.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::SampleSum;
using ::forecastd::testing::SumSamples;
using ::forecastd::testing::TempDir;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

// --- Predict

TEST_CASE("Predict returns the engine's forecasts for values and raw inputs",
          "[integration][api]") {
  SharedDaemon& shared = Shared();
  ForecastdDaemon& daemon = *shared.daemon;

  SECTION("values, point forecasts (B, P, targets)") {
    const v1::PredictRequest request = ToyRequest(3, 11);
    v1::PredictResponse response;
    const grpc::Status status = Predict(daemon, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(response.model() == "toy");
    REQUIRE(response.version() == 2);  // the highest version serves when the config pins none
    REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{3, kP, 2});
    REQUIRE(response.forecasts().raw().empty());
    REQUIRE(response.target_names_size() == 2);
    REQUIRE(response.target_names(0) == "temp");
    REQUIRE(response.target_names(1) == "load");
    REQUIRE(response.quantiles().empty());
    RequireClose(Floats(response.forecasts()),
                 Expected(*shared.repository.toy_v2, Floats(request.inputs())));
    const v1::Timing& timing = response.timing();
    REQUIRE(timing.batch_size() >= 3);
    REQUIRE(timing.batch_size() <= kMaxBatch);
    REQUIRE(timing.total_us() > 0);
    REQUIRE(timing.total_us() >= timing.queue_us());
    REQUIRE(timing.total_us() >= timing.compute_us());
  }

  SECTION("raw bytes in, raw bytes out; explicit version and priority") {
    const std::vector<float> x = Windows(2, kT, 12);
    v1::PredictRequest request = Request("toy", {2, kT, kF}, x, Encoding::kRaw);
    request.set_version(2);
    request.set_priority(1);
    v1::PredictResponse response;
    const grpc::Status status = Predict(daemon, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(response.version() == 2);
    REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{2, kP, 2});
    REQUIRE(response.forecasts().values().empty());
    REQUIRE(response.forecasts().raw().size() == 2 * kP * 2 * sizeof(float));
    RequireClose(Floats(response.forecasts()), Expected(*shared.repository.toy_v2, x));
    REQUIRE(response.timing().batch_size() >= 2);
    REQUIRE(response.timing().total_us() > 0);
  }

  SECTION("quantile forecasts (B, P, targets, Q)") {
    const std::vector<float> x = Windows(2, kT, 13);
    const v1::PredictRequest request = Request("quant", {2, kT, kF}, x);
    v1::PredictResponse response;
    const grpc::Status status = Predict(daemon, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(response.model() == "quant");
    REQUIRE(response.version() == 1);
    REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{2, kP, 1, 3});
    REQUIRE(response.target_names_size() == 1);
    REQUIRE(response.target_names(0) == "load");
    REQUIRE(std::vector<float>(response.quantiles().begin(), response.quantiles().end()) ==
            std::vector<float>{0.1f, 0.5f, 0.9f});
    RequireClose(Floats(response.forecasts()), Expected(*shared.repository.quant, x));
    REQUIRE(response.timing().batch_size() >= 2);
    REQUIRE(response.timing().total_us() > 0);
  }

  SECTION("a full batch of max_batch_size windows") {
    const v1::PredictRequest request = ToyRequest(kMaxBatch, 14);
    v1::PredictResponse response;
    REQUIRE(Predict(daemon, request, &response).ok());
    REQUIRE(response.timing().batch_size() == kMaxBatch);
    RequireClose(Floats(response.forecasts()),
                 Expected(*shared.repository.toy_v2, Floats(request.inputs())));
  }
}

// On a quiet server a request borrows idle workers' threads for its recurrent layers
// (--cpu-helpers; 16 workers: up to 7 helpers, so a one-row stack of H=128 runs as one
// wavefront), and its forecasts are the engine's, as without helpers. GetServerStatus counts
// the teams lent.
TEST_CASE("A recurrent forecast on a quiet server borrows idle workers and forecasts as one core",
          "[integration][daemon]") {
  TempDir repository;
  constexpr int kWideT = 24;
  ModelConfig config = BaseConfig("wide", kWideT, {"load"});
  config.mutable_lstm()->set_hidden_size(128);
  config.mutable_lstm()->set_num_layers(2);
  const std::shared_ptr<Forecaster> model = MakeModel(config, 21);
  Publish(repository, *model, 1);
  for (const std::string helpers : {"-1", "0"}) {
    INFO("--cpu-helpers " << helpers);
    ForecastdDaemon::Options options;
    options.binary = FORECASTD_BINARY;
    options.repository = repository.path();
    options.extra_flags = {"--cpu-workers", "16", "--cpu-helpers", helpers};
    absl::StatusOr<std::unique_ptr<ForecastdDaemon>> started = ForecastdDaemon::Start(options);
    INFO(started.status().ToString());
    REQUIRE(started.ok());
    ForecastdDaemon& daemon = **started;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      const std::vector<float> x = Windows(1, kWideT, seed);
      v1::PredictResponse response;
      const grpc::Status status = Predict(daemon, Request("wide", {1, kWideT, kF}, x), &response);
      INFO(status.error_message());
      REQUIRE(status.ok());
      RequireClose(Floats(response.forecasts()), Expected(*model, x));
    }
    v1::ServerStatus server;
    REQUIRE(daemon.admin().GetServerStatus(Context().get(), {}, &server).ok());
    REQUIRE(server.devices(0).id() == "cpu");
    REQUIRE(server.devices(0).workers() == 16);
    if (helpers == "0") {
      REQUIRE(server.devices(0).lent_teams() == 0);
    } else {
      REQUIRE(server.devices(0).lent_teams() > 0);
    }
  }
}

TEST_CASE("Predict refuses malformed inputs with INVALID_ARGUMENT and says why",
          "[integration][api]") {
  ForecastdDaemon& daemon = *Shared().daemon;
  v1::PredictResponse response;
  const auto predict = [&](const v1::PredictRequest& request) {
    return Predict(daemon, request, &response);
  };
  const grpc::StatusCode kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
  const std::vector<float> one = Windows(1, kT, 21);

  RequireError(predict(Request("toy", {1, kT * kF}, one)), kInvalid,
               "inputs have shape [1, 16]; model 'toy' takes [B, 8, 2]");
  RequireError(predict(Request("toy", {1, 7, kF}, Windows(1, 7, 21))), kInvalid,
               "inputs have shape [1, 7, 2]");
  RequireError(predict(Request("toy", {1, kT, 3}, std::vector<float>(kT * 3, 1.0f))), kInvalid,
               "inputs have shape [1, 8, 3]");

  std::vector<float> nan = one;
  nan[5] = std::numeric_limits<float>::quiet_NaN();  // window 0, step 2, feature 1
  RequireError(predict(Request("toy", {1, kT, kF}, nan)), kInvalid,
               "input [0, 2, 1] (feature 'temp') is nan; only finite values are accepted");
  std::vector<float> inf = one;
  inf[0] = std::numeric_limits<float>::infinity();
  RequireError(predict(Request("toy", {1, kT, kF}, inf, Encoding::kRaw)), kInvalid,
               "only finite values are accepted");

  RequireError(predict(Request("toy", {0, kT, kF}, {})), kInvalid,
               "inputs are empty: the batch dimension is 0");
  RequireError(predict(Request("toy", {-1, kT, kF}, {})), kInvalid, "batch dimension");

  v1::PredictRequest short_raw = Request("toy", {1, kT, kF}, one, Encoding::kRaw);
  short_raw.mutable_inputs()->mutable_raw()->resize(60);
  RequireError(predict(short_raw), kInvalid,
               "raw inputs hold 60 bytes; shape [1, 8, 2] of float32 needs 64");
  RequireError(predict(Request("toy", {2, kT, kF}, one)), kInvalid,
               "16 input values; shape [2, 8, 2] needs 32");
  v1::PredictRequest both = Request("toy", {1, kT, kF}, one, Encoding::kRaw);
  both.mutable_inputs()->mutable_values()->Assign(one.begin(), one.end());
  RequireError(predict(both), kInvalid, "either as raw bytes or as values, not both");

  RequireError(predict(ToyRequest(kMaxBatch + 1, 22)), kInvalid,
               "batch of 9 windows is above the max_batch_size 8 of model 'toy'");
  RequireError(predict(ToyRequest(kMaxBatch + 1, 22)), kInvalid, "max_batch_size 8");

  v1::PredictRequest priority = ToyRequest(1, 23);
  priority.set_priority(3);
  RequireError(predict(priority), kInvalid, "priority 3 is not in [0, 2]");

  v1::PredictRequest negative = ToyRequest(1, 24);
  negative.set_version(-1);
  RequireError(predict(negative), kInvalid, "versions are positive");

  // The refusals left the server serving.
  REQUIRE(predict(ToyRequest(1, 25)).ok());
}

TEST_CASE("Predict names unknown models and versions NOT_FOUND, unservable ones UNAVAILABLE",
          "[integration][api]") {
  ForecastdDaemon& daemon = *Shared().daemon;
  v1::PredictResponse response;

  v1::PredictRequest unknown_model = ToyRequest(1, 31);
  unknown_model.set_model("nope");
  RequireError(Predict(daemon, unknown_model, &response), grpc::StatusCode::NOT_FOUND,
               "model 'nope' is not in the repository");

  v1::PredictRequest unknown_version = ToyRequest(1, 32);
  unknown_version.set_version(7);
  RequireError(Predict(daemon, unknown_version, &response), grpc::StatusCode::NOT_FOUND,
               "model 'toy' has no version 7 (versions: 1, 2)");

  // Version 1 is on disk but only the serving version is loaded.
  v1::PredictRequest not_loaded = ToyRequest(1, 33);
  not_loaded.set_version(1);
  RequireError(Predict(daemon, not_loaded, &response), grpc::StatusCode::UNAVAILABLE,
               "version 1 of model 'toy' is not loaded (serving version 2)");

  v1::PredictRequest broken = ToyRequest(1, 34);
  broken.set_model("broken");
  RequireError(Predict(daemon, broken, &response), grpc::StatusCode::UNAVAILABLE,
               "model 'broken' failed to load");
}

TEST_CASE("Predict past its deadline fails DEADLINE_EXCEEDED and the server stays healthy",
          "[integration][api]") {
  SharedDaemon& shared = Shared();
  ForecastdDaemon& daemon = *shared.daemon;
  const v1::PredictRequest request = ToyRequest(2, 41);
  v1::PredictResponse response;

  // Expired before it is sent. (A positive deadline shorter than a round trip is no test: gRPC
  // sends a timeout below a millisecond rounded up, and an idle server runs a small model's
  // request at once, inside it. A deadline that passes while a request is queued or waits for
  // a worker is the batcher's unit tests'.)
  for (const absl::Duration timeout : {absl::Seconds(-1)}) {
    for (int i = 0; i < 5; ++i) {
      grpc::ClientContext context;
      context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
      const grpc::Status status = daemon.forecaster().Predict(&context, request, &response);
      CAPTURE(absl::FormatDuration(timeout), status.error_message());
      REQUIRE(status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED);
    }
  }

  response.Clear();
  const grpc::Status status = Predict(daemon, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()),
               Expected(*shared.repository.toy_v2, Floats(request.inputs())));
  REQUIRE(CheckHealth(daemon.grpc_address(), "", absl::Seconds(30)).value() ==
          HealthResponse::SERVING);
  REQUIRE(daemon.process().Running());
}

TEST_CASE("grpc.health.v1 reports SERVING for the server and each forecastd service",
          "[integration][api]") {
  ForecastdDaemon& daemon = *Shared().daemon;
  for (const char* service : {"", "forecastd.v1.Forecaster", "forecastd.v1.Admin"}) {
    CAPTURE(service);
    const auto status = CheckHealth(daemon.grpc_address(), service, absl::Seconds(30));
    INFO(status.status().ToString());
    REQUIRE(status.ok());
    REQUIRE(*status == HealthResponse::SERVING);
  }
}

// --- Benchmark and metrics

TEST_CASE("Benchmark measures every (batch size, concurrency) point", "[integration][api]") {
  ForecastdDaemon& daemon = *Shared().daemon;
  v1::BenchmarkRequest request;
  request.set_model("toy");
  request.add_batch_sizes(1);
  request.add_batch_sizes(4);
  request.add_concurrency(1);
  request.add_concurrency(2);
  request.set_duration_ms(300);
  v1::BenchmarkResponse response;
  const grpc::Status status = daemon.forecaster().Benchmark(Context().get(), request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(response.model() == "toy");
  REQUIRE(response.version() == 2);
  REQUIRE(response.device() == "cpu");
  REQUIRE(response.points_size() == 4);
  const std::vector<std::pair<int, int>> points = {{1, 1}, {1, 2}, {4, 1}, {4, 2}};
  for (int i = 0; i < 4; ++i) {
    const v1::BenchmarkPoint& p = response.points(i);
    CAPTURE(i, p.DebugString());
    REQUIRE(p.batch_size() == points[static_cast<size_t>(i)].first);
    REQUIRE(p.concurrency() == points[static_cast<size_t>(i)].second);
    REQUIRE(p.requests() > 0);
    REQUIRE(p.requests_per_second() > 0);
    REQUIRE(p.windows_per_second() == Approx(p.requests_per_second() * p.batch_size()));
    REQUIRE(p.p50_us() > 0);
    REQUIRE(p.p50_us() <= p.p90_us());
    REQUIRE(p.p90_us() <= p.p99_us());
    REQUIRE(p.mean_batch_size() >= p.batch_size());
    REQUIRE(p.mean_batch_size() <= kMaxBatch);
  }

  v1::BenchmarkRequest too_big = request;
  too_big.clear_batch_sizes();
  too_big.add_batch_sizes(kMaxBatch + 1);
  RequireError(daemon.forecaster().Benchmark(Context().get(), too_big, &response),
               grpc::StatusCode::INVALID_ARGUMENT, "batch size 9 is outside [1, 8]");
  v1::BenchmarkRequest zero = request;
  zero.clear_batch_sizes();
  zero.add_batch_sizes(0);
  RequireError(daemon.forecaster().Benchmark(Context().get(), zero, &response),
               grpc::StatusCode::INVALID_ARGUMENT, "batch size 0 is outside [1, 8]");
  v1::BenchmarkRequest unknown = request;
  unknown.set_model("nope");
  RequireError(daemon.forecaster().Benchmark(Context().get(), unknown, &response),
               grpc::StatusCode::NOT_FOUND, "model 'nope' is not in the repository");
}

TEST_CASE("Metrics count predictions, errors and batches per model", "[integration][api]") {
  ForecastdDaemon& daemon = *Shared().daemon;
  const std::map<std::string, std::string> ok = {
      {"model", "toy"}, {"method", "Predict"}, {"code", "OK"}};
  const std::map<std::string, std::string> toy = {{"model", "toy"}};
  const std::string before = Metrics(daemon);

  constexpr int kRequests = 6;
  v1::PredictResponse response;
  for (int i = 0; i < kRequests; ++i)
    REQUIRE(Predict(daemon, ToyRequest(1 + i % 3, 50 + i), &response).ok());
  v1::PredictRequest unknown_version = ToyRequest(1, 60);
  unknown_version.set_version(9);
  REQUIRE(Predict(daemon, unknown_version, &response).error_code() == grpc::StatusCode::NOT_FOUND);
  REQUIRE(Predict(daemon, Request("toy", {1, 3, kF}, std::vector<float>(3 * kF, 1.0f)), &response)
              .error_code() == grpc::StatusCode::INVALID_ARGUMENT);

  const std::string after = Metrics(daemon);
  CAPTURE(after);
  // Counted before the reply is sent, so every finished call is in the scrape.
  REQUIRE(SumSamples(after, "forecastd_requests_total", ok).sum -
              SumSamples(before, "forecastd_requests_total", ok).sum ==
          kRequests);
  REQUIRE(SumSamples(after, "forecastd_requests_total", {{"model", "toy"}, {"code", "NOT_FOUND"}})
              .sum >= 1);
  REQUIRE(SumSamples(after, "forecastd_requests_total",
                     {{"model", "toy"}, {"code", "INVALID_ARGUMENT"}})
              .sum >= 1);
  REQUIRE(SumSamples(after, "forecastd_request_duration_seconds_count", toy).sum -
              SumSamples(before, "forecastd_request_duration_seconds_count", toy).sum ==
          kRequests);
  REQUIRE(SumSamples(after, "forecastd_queue_duration_seconds_count", toy).sum >= kRequests);
  REQUIRE(SumSamples(after, "forecastd_compute_duration_seconds_count", toy).sum >= kRequests);
  REQUIRE(SumSamples(after, "forecastd_batch_size_count", toy).sum > 0);
  REQUIRE(SumSamples(after, "forecastd_batch_size_sum", toy).sum >= 1 + 2 + 3);
  const SampleSum loaded = SumSamples(after, "forecastd_models_loaded");
  REQUIRE(loaded.series == 1);
  REQUIRE(loaded.sum == 2);  // toy and quant; broken failed
  REQUIRE(SumSamples(after, "forecastd_queue_depth", toy).series == 1);
  REQUIRE(SumSamples(after, "forecastd_model_load_failures_total", {{"model", "broken"}}).sum >= 1);
  REQUIRE(SumSamples(after, "forecastd_train_jobs_running").series == 1);
}

// --- Limits

TEST_CASE("Daemon flags: a small max message size, non-finite inputs allowed, one model loaded",
          "[integration][api]") {
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(
      repository.dir.path(),
      {"--max-message-bytes", "4096", "--allow-non-finite-inputs", "--load-model", "toy"});
  v1::PredictResponse response;

  // 64 windows are 4096 bytes of floats alone: refused by gRPC before any handler runs.
  RequireError(Predict(*daemon, ToyRequest(64, 71, Encoding::kRaw), &response),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max");

  // Window 0 holds a NaN and an Inf; window 1, computed in the same batch, is unaffected.
  std::vector<float> x = Windows(2, kT, 72);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[8] = std::numeric_limits<float>::infinity();
  grpc::Status status = Predict(*daemon, Request("toy", {2, kT, kF}, x), &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{2, kP, 2});
  const std::vector<float> forecasts = Floats(response.forecasts());
  RequireClose(std::vector<float>(forecasts.begin() + kP * 2, forecasts.end()),
               Expected(*repository.toy_v2, std::vector<float>(x.begin() + kT * kF, x.end())));

  const v1::PredictRequest request = ToyRequest(2, 73);
  status = Predict(*daemon, request, &response);
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()),
               Expected(*repository.toy_v2, Floats(request.inputs())));

  // --load-model toy left the others on disk, unloaded.
  REQUIRE(GetModel(*daemon, "quant").state() == v1::MODEL_UNLOADED);
  RequireError(Predict(*daemon, Request("quant", {1, kT, kF}, Windows(1, kT, 74)), &response),
               grpc::StatusCode::UNAVAILABLE, "model 'quant' is not loaded");
}

// --- Admin

TEST_CASE("Admin lists models, unloads, reloads and switches serving versions",
          "[integration][api]") {
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.dir.path());
  v1::Admin::Stub& admin = daemon->admin();
  const v1::PredictRequest request = ToyRequest(2, 81);
  const std::vector<float> x = Floats(request.inputs());
  v1::PredictResponse response;
  const auto predict_version = [&]() {
    response.Clear();
    const grpc::Status status = Predict(*daemon, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return response.version();
  };

  v1::ListModelsResponse list;
  REQUIRE(admin.ListModels(Context().get(), {}, &list).ok());
  REQUIRE(list.models_size() == 3);
  const v1::ModelStatus& broken = list.models(0);
  const v1::ModelStatus& quant = list.models(1);
  const v1::ModelStatus& toy = list.models(2);
  REQUIRE(broken.name() == "broken");
  REQUIRE(broken.state() == v1::MODEL_FAILED);
  CAPTURE(broken.last_error());
  REQUIRE(broken.last_error().find("model 'broken' version 1") != std::string::npos);
  REQUIRE(broken.last_error().find("has shape [32, 2], expected [48, 2]") != std::string::npos);
  REQUIRE(broken.loaded().empty());
  REQUIRE(quant.name() == "quant");
  REQUIRE(quant.state() == v1::MODEL_READY);
  REQUIRE(quant.serving_version() == 1);
  REQUIRE(toy.name() == "toy");
  REQUIRE(toy.state() == v1::MODEL_READY);
  REQUIRE(std::vector<int64_t>(toy.versions().begin(), toy.versions().end()) ==
          std::vector<int64_t>{1, 2});
  REQUIRE(toy.serving_version() == 2);
  REQUIRE(toy.loaded_size() == 1);
  REQUIRE(toy.loaded(0).version() == 2);
  REQUIRE(toy.loaded(0).serving());
  REQUIRE(toy.last_error().empty());
  REQUIRE(toy.config().name() == "toy");
  REQUIRE(toy.config().lookback() == kT);
  REQUIRE(toy.device() == "cpu");

  const v1::ModelStatus got = GetModel(*daemon, "toy");
  REQUIRE(got.serving_version() == 2);
  REQUIRE(got.state() == v1::MODEL_READY);
  v1::GetModelRequest get_unknown;
  get_unknown.set_name("nope");
  v1::ModelStatus status;
  RequireError(admin.GetModel(Context().get(), get_unknown, &status), grpc::StatusCode::NOT_FOUND,
               "model 'nope' is not in the repository");

  v1::ServerStatus server;
  REQUIRE(admin.GetServerStatus(Context().get(), {}, &server).ok());
  REQUIRE(server.ready());
  REQUIRE(server.version().rfind("0.", 0) == 0);
  REQUIRE(server.devices_size() >= 1);
  REQUIRE(server.devices(0).id() == "cpu");
  REQUIRE(server.devices(0).workers() == 2);
  REQUIRE(server.devices(0).memory_used_bytes() > 0);
  REQUIRE(server.models_loaded() == 2);
  REQUIRE(server.uptime_ms() >= 0);

  SECTION("unload, then load again") {
    v1::UnloadModelRequest unload;
    unload.set_name("toy");
    REQUIRE(admin.UnloadModel(Context().get(), unload, &status).ok());
    REQUIRE(status.state() == v1::MODEL_UNLOADED);
    REQUIRE(status.loaded().empty());
    RequireError(Predict(*daemon, request, &response), grpc::StatusCode::UNAVAILABLE,
                 "model 'toy' is UNLOADED");
    REQUIRE(admin.GetServerStatus(Context().get(), {}, &server).ok());
    REQUIRE(server.models_loaded() == 1);

    v1::LoadModelRequest load;
    load.set_name("toy");
    REQUIRE(admin.LoadModel(Context().get(), load, &status).ok());
    REQUIRE(status.state() == v1::MODEL_READY);
    REQUIRE(status.serving_version() == 2);
    REQUIRE(predict_version() == 2);
    RequireClose(Floats(response.forecasts()), Expected(*repository.toy_v2, x));

    v1::UnloadModelRequest unload_unknown;
    unload_unknown.set_name("nope");
    RequireError(admin.UnloadModel(Context().get(), unload_unknown, &status),
                 grpc::StatusCode::NOT_FOUND, "model 'nope' is not in the repository");
    load.set_name("nope");
    RequireError(admin.LoadModel(Context().get(), load, &status), grpc::StatusCode::NOT_FOUND,
                 "model 'nope' is not in the repository");
    load.set_name("broken");
    const grpc::Status failed = admin.LoadModel(Context().get(), load, &status);
    CAPTURE(failed.error_message());
    REQUIRE_FALSE(failed.ok());
    REQUIRE(failed.error_message().find("broken") != std::string::npos);
    REQUIRE(GetModel(*daemon, "broken").state() == v1::MODEL_FAILED);
  }

  SECTION("roll back to version 1, refuse version 99, then follow a new version") {
    v1::SetServingVersionRequest set;
    set.set_name("toy");
    set.set_version(1);
    REQUIRE(admin.SetServingVersion(Context().get(), set, &status).ok());
    REQUIRE(status.serving_version() == 1);
    REQUIRE(status.state() == v1::MODEL_READY);
    REQUIRE(predict_version() == 1);
    RequireClose(Floats(response.forecasts()), Expected(*repository.toy_v1, x));

    set.set_version(99);
    RequireError(admin.SetServingVersion(Context().get(), set, &status),
                 grpc::StatusCode::NOT_FOUND, "model 'toy' has no version 99");
    REQUIRE(predict_version() == 1);
    set.set_version(-1);
    RequireError(admin.SetServingVersion(Context().get(), set, &status),
                 grpc::StatusCode::INVALID_ARGUMENT, "version must be >= 0");

    // A reload keeps the pin; version 0 removes it, and then the highest version serves.
    const std::shared_ptr<Forecaster> toy_v3 = MakeModel(ToyConfig(), 5);
    Publish(repository.dir, *toy_v3, 3);
    v1::LoadModelRequest load;
    load.set_name("toy");
    REQUIRE(admin.LoadModel(Context().get(), load, &status).ok());
    REQUIRE(status.serving_version() == 1);
    REQUIRE(std::vector<int64_t>(status.versions().begin(), status.versions().end()) ==
            std::vector<int64_t>{1, 2, 3});
    set.set_version(0);
    REQUIRE(admin.SetServingVersion(Context().get(), set, &status).ok());
    REQUIRE(status.serving_version() == 3);
    REQUIRE(predict_version() == 3);
    RequireClose(Floats(response.forecasts()), Expected(*toy_v3, x));
  }
}

// --- Training

TEST_CASE("Train publishes and promotes a version that WatchTrainJob streams to its end",
          "[integration][api]") {
  TempDir repository;
  TempDir scratch;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--data-dir", scratch.path(), "--checkpoint-dir",
                                      absl::StrCat(scratch.path(), "/checkpoints")});
  v1::Forecaster::Stub& forecaster = daemon->forecaster();
  const ModelConfig config = TrainedConfig("trained");
  std::string id;
  v1::TrainRequest request = TrainRequest("trained", &config, Training(3));
  request.set_promote(true);
  const grpc::Status started = Train(*daemon, request, &id);
  INFO(started.error_message());
  REQUIRE(started.ok());
  REQUIRE_FALSE(id.empty());

  v1::WatchTrainJobRequest watch;
  watch.set_job_id(id);
  auto context = Context();
  std::unique_ptr<grpc::ClientReader<v1::TrainJobEvent>> reader =
      forecaster.WatchTrainJob(context.get(), watch);
  std::vector<v1::TrainProgressEvent> progress;
  std::vector<v1::TrainJobInfo> finished;
  v1::TrainJobEvent event;
  while (reader->Read(&event)) {
    if (event.has_progress()) {
      REQUIRE(finished.empty());  // nothing follows the final item
      progress.push_back(event.progress());
    } else {
      REQUIRE(event.has_finished());
      finished.push_back(event.finished());
    }
  }
  const grpc::Status end = reader->Finish();
  INFO(end.error_message());
  REQUIRE(end.ok());

  REQUIRE_FALSE(progress.empty());
  std::vector<int64_t> epochs_closed;
  for (size_t i = 0; i < progress.size(); ++i) {
    const v1::TrainProgressEvent& e = progress[i];
    CAPTURE(i, e.DebugString());
    REQUIRE(e.epochs() == 3);
    REQUIRE(e.epoch() >= 1);
    REQUIRE(e.epoch() <= 3);
    REQUIRE(std::isfinite(e.train_loss()));
    if (i > 0) {
      REQUIRE(e.epoch() >= progress[i - 1].epoch());
      REQUIRE(e.step() >= progress[i - 1].step());
    }
    if (e.kind() == v1::TrainProgressEvent::EPOCH) epochs_closed.push_back(e.epoch());
  }
  REQUIRE(epochs_closed == std::vector<int64_t>{1, 2, 3});
  REQUIRE(finished.size() == 1);
  const v1::TrainJobInfo& info = finished[0];
  CAPTURE(info.DebugString());
  REQUIRE(info.job_id() == id);
  REQUIRE(info.model() == "trained");
  REQUIRE(info.state() == v1::TRAIN_JOB_SUCCEEDED);
  REQUIRE(info.published_version() == 1);
  REQUIRE(info.promoted());
  REQUIRE(info.epochs_run() == 3);
  REQUIRE(info.error().empty());
  REQUIRE(info.created_unix_ms() > 0);
  REQUIRE(info.finished_unix_ms() >= info.created_unix_ms());

  v1::GetTrainJobRequest get;
  get.set_job_id(id);
  v1::TrainJobInfo got;
  REQUIRE(forecaster.GetTrainJob(Context().get(), get, &got).ok());
  REQUIRE(got.state() == v1::TRAIN_JOB_SUCCEEDED);
  REQUIRE(got.published_version() == 1);
  REQUIRE(got.latest().kind() == v1::TrainProgressEvent::EPOCH);
  REQUIRE(got.latest().epoch() == 3);
  v1::ListTrainJobsRequest list_request;
  v1::ListTrainJobsResponse list;
  REQUIRE(forecaster.ListTrainJobs(Context().get(), list_request, &list).ok());
  REQUIRE(list.jobs_size() == 1);
  REQUIRE(list.jobs(0).job_id() == id);
  list_request.set_model("trained");
  REQUIRE(forecaster.ListTrainJobs(Context().get(), list_request, &list).ok());
  REQUIRE(list.jobs_size() == 1);
  list_request.set_model("other");
  list.Clear();
  REQUIRE(forecaster.ListTrainJobs(Context().get(), list_request, &list).ok());
  REQUIRE(list.jobs_size() == 0);

  // The promoted version serves, with the weights the job wrote.
  const v1::ModelStatus model = GetModel(*daemon, "trained");
  REQUIRE(model.state() == v1::MODEL_READY);
  REQUIRE(model.serving_version() == 1);
  absl::StatusOr<std::unique_ptr<Forecaster>> published =
      LoadForecaster(absl::StrCat(repository.path(), "/trained"), 1);
  REQUIRE(published.ok());
  const std::vector<float> x = Windows(3, kT, 91);
  v1::PredictResponse response;
  const grpc::Status predicted = Predict(*daemon, Request("trained", {3, kT, kF}, x), &response);
  INFO(predicted.error_message());
  REQUIRE(predicted.ok());
  REQUIRE(response.version() == 1);
  REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{3, kP, 1});
  RequireClose(Floats(response.forecasts()), Expected(**published, x));

  const std::string metrics = Metrics(*daemon);
  CAPTURE(metrics);
  REQUIRE(SumSamples(metrics, "forecastd_train_loss",
                     {{"job_id", id}, {"model", "trained"}, {"split", "train"}})
              .series == 1);
  REQUIRE(SumSamples(metrics, "forecastd_train_loss", {{"job_id", id}, {"split", "validation"}})
              .series == 1);
  REQUIRE(SumSamples(metrics, "forecastd_train_steps_total", {{"model", "trained"}}).sum > 0);
  REQUIRE(SumSamples(metrics, "forecastd_train_epoch", {{"job_id", id}}).sum == 3);

  v1::ServerStatus server;
  REQUIRE(daemon->admin().GetServerStatus(Context().get(), {}, &server).ok());
  REQUIRE(server.train_jobs_total() == 1);
  REQUIRE(server.train_jobs_running() == 0);
  REQUIRE(server.models_loaded() == 1);
}

TEST_CASE("Train refuses bad requests and CancelTrainJob stops a running job",
          "[integration][api]") {
  TempDir repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.path());
  v1::Forecaster::Stub& forecaster = daemon->forecaster();
  const ModelConfig config = TrainedConfig("long");

  RequireError(Train(*daemon, TrainRequest("long", &config, Training(0)), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "epochs = 0");
  RequireError(Train(*daemon, TrainRequest("ghost", nullptr, Training(1)), nullptr),
               grpc::StatusCode::NOT_FOUND, "give its `config` to train a new model");
  RequireError(Train(*daemon, TrainRequest("../up", &config, Training(1)), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "invalid model name");
  const ModelConfig other = TrainedConfig("other");
  RequireError(Train(*daemon, TrainRequest("long", &other, Training(1)), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "differs from the model 'long'");
  // Devices the server does not use are refused before any work.
  v1::TrainingConfig elsewhere = Training(1);
  elsewhere.add_devices("cuda:3");
  RequireError(Train(*daemon, TrainRequest("long", &config, elsewhere), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "cuda:3 is not a GPU this server uses");
  elsewhere.set_devices(0, "all");
  RequireError(Train(*daemon, TrainRequest("long", &config, elsewhere), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "\"all\" names every GPU");
  // Ranks in other daemons: a worker nobody answers at is UNAVAILABLE at submission, named.
  v1::TrainingConfig spread = Training(1);
  const std::string nowhere = absl::StrCat("127.0.0.1:", testing::PickFreePort());
  spread.add_workers()->set_address(nowhere);
  RequireError(Train(*daemon, TrainRequest("long", &config, spread), nullptr),
               grpc::StatusCode::UNAVAILABLE,
               absl::StrCat("training worker ", nowhere, " cannot be reached"));
  // A worker that answers (this daemon itself), but ranks across daemons run on GPUs.
  spread.mutable_workers(0)->set_address(daemon->grpc_address());
  RequireError(Train(*daemon, TrainRequest("long", &config, spread), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "trains on GPUs");
  spread.mutable_workers(0)->add_devices("all");
  RequireError(Train(*daemon, TrainRequest("long", &config, spread), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "name worker");
  // Asked to run ranks itself: refused before anything runs, with what is wrong.
  v1::JoinTrainJobRequest join;
  join.set_model("long");
  *join.mutable_config() = config;
  *join.mutable_training() = Training(1);
  join.set_group_id(std::string(128, 'x'));
  join.set_world_size(2);
  join.set_first_rank(0);
  v1::JoinTrainJobResponse joined;
  RequireError(daemon->admin().JoinTrainJob(Context().get(), join, &joined),
               grpc::StatusCode::INVALID_ARGUMENT, "after the coordinator's");
  join.set_first_rank(1);
  RequireError(daemon->admin().JoinTrainJob(Context().get(), join, &joined),
               grpc::StatusCode::INVALID_ARGUMENT, "trains on GPUs");

  std::string id;
  const grpc::Status started = Train(*daemon, TrainRequest("long", &config, Training(100000)), &id);
  INFO(started.error_message());
  REQUIRE(started.ok());
  RequireError(Train(*daemon, TrainRequest("long", &config, Training(1)), nullptr),
               grpc::StatusCode::FAILED_PRECONDITION, "is already training model 'long'");

  v1::CancelTrainJobRequest cancel;
  cancel.set_job_id(id);
  v1::TrainJobInfo info;
  REQUIRE(forecaster.CancelTrainJob(Context().get(), cancel, &info).ok());
  REQUIRE(info.job_id() == id);
  REQUIRE((info.state() == v1::TRAIN_JOB_RUNNING || info.state() == v1::TRAIN_JOB_CANCELLED));

  v1::GetTrainJobRequest get;
  get.set_job_id(id);
  const absl::Time give_up = absl::Now() + absl::Seconds(60);
  do {
    REQUIRE(forecaster.GetTrainJob(Context().get(), get, &info).ok());
    if (info.state() != v1::TRAIN_JOB_RUNNING) break;
    absl::SleepFor(absl::Milliseconds(20));
  } while (absl::Now() < give_up);
  CAPTURE(info.DebugString());
  REQUIRE(info.state() == v1::TRAIN_JOB_CANCELLED);
  REQUIRE(info.error().find("cancelled") != std::string::npos);
  REQUIRE(info.published_version() == 0);
  REQUIRE(info.finished_unix_ms() > 0);

  // A late watcher gets the history and the end state.
  v1::WatchTrainJobRequest watch;
  watch.set_job_id(id);
  auto context = Context();
  auto reader = forecaster.WatchTrainJob(context.get(), watch);
  v1::TrainJobEvent event, last;
  while (reader->Read(&event)) last = event;
  REQUIRE(reader->Finish().ok());
  REQUIRE(last.has_finished());
  REQUIRE(last.finished().state() == v1::TRAIN_JOB_CANCELLED);

  // Cancelling a job that ended is a no-op.
  REQUIRE(forecaster.CancelTrainJob(Context().get(), cancel, &info).ok());
  REQUIRE(info.state() == v1::TRAIN_JOB_CANCELLED);

  cancel.set_job_id("train-999");
  RequireError(forecaster.CancelTrainJob(Context().get(), cancel, &info),
               grpc::StatusCode::NOT_FOUND, "no training job 'train-999'");
  get.set_job_id("train-999");
  RequireError(forecaster.GetTrainJob(Context().get(), get, &info), grpc::StatusCode::NOT_FOUND,
               "no training job 'train-999'");
  watch.set_job_id("train-999");
  auto unknown_context = Context();
  auto unknown = forecaster.WatchTrainJob(unknown_context.get(), watch);
  REQUIRE_FALSE(unknown->Read(&event));
  RequireError(unknown->Finish(), grpc::StatusCode::NOT_FOUND, "no training job 'train-999'");
}

// --- Lifecycle

TEST_CASE("Version switches and unloads under load fail no request they should not",
          "[integration][api]") {
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.dir.path());
  std::vector<v1::PredictRequest> requests;
  std::vector<std::vector<float>> v1_expected, v2_expected;
  for (int i = 0; i < 3; ++i) {
    requests.push_back(ToyRequest(2, 200 + i, i % 2 == 0 ? Encoding::kRaw : Encoding::kValues));
    const std::vector<float> x = Windows(2, kT, 200 + i);
    v1_expected.push_back(Expected(*repository.toy_v1, x));
    v2_expected.push_back(Expected(*repository.toy_v2, x));
  }
  const auto check = [&](const PredictLoad::Outcome& o) {
    CAPTURE(o.request, o.code, o.message, o.version);
    REQUIRE((o.version == 1 || o.version == 2));
    RequireClose(o.forecasts, (o.version == 1 ? v1_expected : v2_expected)[o.request]);
  };

  PredictLoad load(*daemon, requests);
  v1::SetServingVersionRequest set;
  set.set_name("toy");
  v1::ModelStatus status;
  for (const int64_t version : {1, 2, 1, 0}) {
    REQUIRE(load.AwaitAnswers(load.answered() + 6));
    set.set_version(version);
    const grpc::Status switched = daemon->admin().SetServingVersion(Context().get(), set, &status);
    INFO(switched.error_message());
    REQUIRE(switched.ok());
    REQUIRE(status.serving_version() == (version == 0 ? 2 : version));
  }
  REQUIRE(load.AwaitAnswers(load.answered() + 6));
  // A switch never fails a request: each one ran on version 1 or 2 and got its numbers.
  std::vector<PredictLoad::Outcome> outcomes = load.Stop();
  for (const PredictLoad::Outcome& o : outcomes) {
    REQUIRE(o.code == grpc::StatusCode::OK);
    check(o);
  }
  REQUIRE(
      std::any_of(outcomes.begin(), outcomes.end(), [](const auto& o) { return o.version == 1; }));

  // Unload drains what it accepted; afterwards requests are refused UNAVAILABLE.
  PredictLoad unloading(*daemon, requests);
  REQUIRE(unloading.AwaitAnswers(6));
  unloading.Mark();
  v1::UnloadModelRequest unload;
  unload.set_name("toy");
  REQUIRE(daemon->admin().UnloadModel(Context().get(), unload, &status).ok());
  REQUIRE(status.state() == v1::MODEL_UNLOADED);
  REQUIRE(unloading.AwaitAllRefused());
  outcomes = unloading.Stop();
  int refused = 0;
  for (const PredictLoad::Outcome& o : outcomes) {
    if (o.code == grpc::StatusCode::OK) {
      check(o);
      continue;
    }
    CAPTURE(o.code, o.message);
    REQUIRE(o.after_mark);
    REQUIRE(o.code == grpc::StatusCode::UNAVAILABLE);
    ++refused;
  }
  REQUIRE(refused == static_cast<int>(requests.size()));
}

TEST_CASE("SIGTERM drains in-flight predictions, refuses new ones and exits 0",
          "[integration][api]") {
  TempDir repository;
  const std::shared_ptr<Forecaster> heavy = MakeModel(HeavyConfig(), 6);
  Publish(repository, *heavy, 1);
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--drain-timeout", "60"});

  auto health = grpc::health::v1::Health::NewStub(daemon->channel());
  auto watch_context = Context();
  auto watch = health->Watch(watch_context.get(), grpc::health::v1::HealthCheckRequest());
  HealthResponse health_response;
  REQUIRE(watch->Read(&health_response));
  REQUIRE(health_response.status() == HealthResponse::SERVING);

  constexpr int kThreads = 4;
  const int T = heavy->lookback();
  std::vector<v1::PredictRequest> requests;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kThreads; ++i) {
    requests.push_back(Request("heavy", {2, T, kF}, Windows(2, T, 100 + i),
                               i % 2 == 0 ? Encoding::kRaw : Encoding::kValues));
    expected.push_back(Expected(*heavy, Windows(2, T, 100 + i)));
  }
  PredictLoad load(*daemon, requests);
  REQUIRE(load.AwaitAnswers(2 * kThreads));

  // While the workers are busy, requests with deadlines shorter than a batch expire in the
  // queue (or on the client): DEADLINE_EXCEEDED, never another code, and no harm done.
  for (int i = 0; i < 10; ++i) {
    v1::PredictResponse response;
    const grpc::Status status =
        daemon->forecaster().Predict(Context(absl::Milliseconds(2)).get(), requests[0], &response);
    CAPTURE(i, status.error_message());
    REQUIRE((status.ok() || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED));
    if (status.ok()) RequireClose(Floats(response.forecasts()), expected[0]);
  }

  load.Mark();
  REQUIRE(daemon->process().Signal(SIGTERM));
  // The health stream says NOT_SERVING, or is gone with the server.
  if (watch->Read(&health_response)) {
    REQUIRE(health_response.status() == HealthResponse::NOT_SERVING);
  }
  const absl::StatusOr<int> code = daemon->process().WaitForExit(kExitBound);
  // Each client stops at its first refusal, which comes at the latest once the server is gone.
  REQUIRE(load.AwaitAllRefused());
  const std::vector<PredictLoad::Outcome> outcomes = load.Stop();
  const std::string log = daemon->process().Output();
  INFO(log);
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  REQUIRE(log.find("received SIGTERM, shutting down") != std::string::npos);
  REQUIRE(log.find("model registry shut down (1 versions drained)") != std::string::npos);
  REQUIRE(log.find("drain timed out") == std::string::npos);
  REQUIRE(log.find("forecastd stopped") != std::string::npos);

  int ok_before = 0, refused = 0;
  for (const PredictLoad::Outcome& o : outcomes) {
    CAPTURE(o.request, o.code, o.message, o.after_mark);
    if (o.code == grpc::StatusCode::OK) {
      RequireClose(o.forecasts, expected[o.request]);
      if (!o.after_mark) ++ok_before;
      continue;
    }
    // Refusals come only once the server is stopping: UNAVAILABLE from forecastd or from a
    // closed connection; CANCELLED only from a call the closing server cut off.
    REQUIRE(o.after_mark);
    REQUIRE((o.code == grpc::StatusCode::UNAVAILABLE || o.code == grpc::StatusCode::CANCELLED));
    ++refused;
  }
  REQUIRE(ok_before >= 2 * kThreads);
  REQUIRE(refused == kThreads);
  REQUIRE(CheckHealth(daemon->grpc_address(), "", absl::Seconds(1)).status().code() ==
          absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace forecastd::api_test
