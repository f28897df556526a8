// Starts the real forecastd binary on a temporary model repository and drives every RPC of
// forecastd.v1.Forecaster and forecastd.v1.Admin through the generated C++ stubs: forecasts
// checked against the engine's own forward pass on the same weights, every refusal with its
// code and message, deadlines, model management, training jobs, benchmarks, the metrics they
// leave behind, and the SIGTERM drain. ctest runs each TEST_CASE in its own process; the
// test cases that only read share one daemon per process, the others start their own.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/dnnl_backend.h"
#include "client/health_client.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"

namespace forecastd {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::SumSamples;
using ::forecastd::testing::TempDir;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

// Safety bounds only: a healthy run finishes far inside them on any machine.
constexpr absl::Duration kExitBound = absl::Seconds(60);
constexpr absl::Duration kRpcBound = absl::Seconds(60);

// The toy models' shapes: lookback, horizon, features.
constexpr int kT = 8, kP = 3, kF = 2;
constexpr int kMaxBatch = 8;
// Raw feature scale of every test series: per feature mean and std.
constexpr float kMean[kF] = {10.0f, 20.0f};
constexpr float kStd[kF] = {2.0f, 5.0f};

// --- Models and the repository

ModelConfig BaseConfig(const std::string& name, int T, std::vector<std::string> targets) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(T);
  c.set_horizon(kP);
  c.add_feature_names("load");
  c.add_feature_names("temp");
  for (const std::string& target : targets) c.add_target_names(target);
  v1::BatchingConfig* batching = c.mutable_batching();
  batching->set_max_batch_size(kMaxBatch);
  batching->set_max_queue_delay_us(2000);
  return c;
}

// Two point targets, two priority levels (default 2).
ModelConfig ToyConfig() {
  ModelConfig c = BaseConfig("toy", kT, {"temp", "load"});
  c.mutable_lstm()->set_hidden_size(16);
  c.mutable_lstm()->set_num_layers(1);
  c.mutable_batching()->set_priority_levels(2);
  c.mutable_batching()->set_default_priority_level(2);
  return c;
}

ModelConfig QuantileConfig() {
  ModelConfig c = BaseConfig("quant", kT, {"load"});
  c.mutable_gru()->set_hidden_size(8);
  c.mutable_gru()->set_num_layers(1);
  for (const float q : {0.1f, 0.5f, 0.9f}) c.add_quantiles(q);
  return c;
}

// Enough work per batch that requests overlap in the server (for the drain test).
ModelConfig HeavyConfig() {
  ModelConfig c = BaseConfig("heavy", 64, {"load"});
  c.mutable_lstm()->set_hidden_size(256);
  c.mutable_lstm()->set_num_layers(2);
  return c;
}

std::shared_ptr<Forecaster> MakeModel(const ModelConfig& config, uint32_t seed) {
  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(config);
  REQUIRE(model.ok());
  ParameterArena& arena = (*model)->parameters();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  for (int64_t i = 0; i < arena.size(); ++i) arena.data()[i] = dist(gen);
  if ((*model)->standardized()) {
    std::copy(kMean, kMean + kF, arena.at("normalizer.mean"));
    std::copy(kStd, kStd + kF, arena.at("normalizer.std"));
  }
  return std::shared_ptr<Forecaster>(*std::move(model));
}

void Publish(const TempDir& repository, const Forecaster& model, int64_t version) {
  const absl::Status status =
      PublishVersion(model, absl::StrCat(repository.path(), "/", model.config().name()), version);
  INFO(status.ToString());
  REQUIRE(status.ok());
}

// toy (versions 1 and 2; config.serving_version unset, so 2 serves), quant (version 1) and
// broken, whose config.json asks for a hidden size its weights do not have.
struct Repository {
  TempDir dir;
  std::shared_ptr<Forecaster> toy_v1, toy_v2, quant;

  Repository() {
    toy_v1 = MakeModel(ToyConfig(), 1);
    toy_v2 = MakeModel(ToyConfig(), 2);
    quant = MakeModel(QuantileConfig(), 3);
    Publish(dir, *toy_v1, 1);
    Publish(dir, *toy_v2, 2);
    Publish(dir, *quant, 1);
    ModelConfig broken = BaseConfig("broken", kT, {"load"});
    broken.mutable_lstm()->set_hidden_size(8);
    broken.mutable_lstm()->set_num_layers(1);
    Publish(dir, *MakeModel(broken, 4), 1);
    broken.mutable_lstm()->set_hidden_size(12);
    const absl::StatusOr<std::string> json = ModelConfigToJson(broken);
    REQUIRE(json.ok());
    std::ofstream(absl::StrCat(dir.path(), "/broken/", kModelConfigFile)) << *json;
  }
};

// --- Inputs and expected forecasts

// (B, T, F) raw windows around the normaliser's statistics.
std::vector<float> Windows(int64_t B, int T, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> x(static_cast<size_t>(B * T * kF));
  for (size_t i = 0; i < x.size(); ++i) x[i] = kMean[i % kF] + kStd[i % kF] * dist(gen);
  return x;
}

Backend& CpuBackend() {
  static DnnlBackend* backend = DnnlBackend::Create({}).value().release();
  return *backend;
}

// What the engine computes in-process for these windows: the reference for every reply.
std::vector<float> Expected(const Forecaster& model, const std::vector<float>& x) {
  const int64_t B = static_cast<int64_t>(x.size()) / (int64_t{model.lookback()} * kF);
  std::vector<float> out(static_cast<size_t>(B * model.num_outputs()));
  Workspace workspace;
  const absl::Status status = model.Forward(CpuBackend(), out.data(), x.data(), B, workspace);
  INFO(status.ToString());
  REQUIRE(status.ok());
  return out;
}

// The batch a request ran in may hold other rows, so the numbers may differ in the last bits.
bool Close(float got, float want) {
  return std::fabs(got - want) <= 1e-5f * std::fabs(want) + 1e-5f;
}

void RequireClose(const std::vector<float>& got, const std::vector<float>& want) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i, got[i], want[i]);
    REQUIRE(Close(got[i], want[i]));
  }
}

bool AllClose(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return false;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!Close(got[i], want[i])) return false;
  }
  return true;
}

// --- Requests

v1::PredictRequest Request(const std::string& model, const std::vector<int64_t>& shape,
                           const std::vector<float>& x, bool raw) {
  v1::PredictRequest request;
  request.set_model(model);
  v1::Tensor* inputs = request.mutable_inputs();
  for (const int64_t d : shape) inputs->add_shape(d);
  if (raw) {
    inputs->set_raw(std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  } else {
    inputs->mutable_values()->Assign(x.begin(), x.end());
  }
  return request;
}

v1::PredictRequest ToyRequest(int64_t B, uint32_t seed, bool raw = false) {
  return Request("toy", {B, kT, kF}, Windows(B, kT, seed), raw);
}

std::vector<float> InputsOf(const v1::PredictRequest& request) {
  return {request.inputs().values().begin(), request.inputs().values().end()};
}

std::vector<float> Floats(const v1::Tensor& tensor) {
  if (tensor.raw().empty()) return {tensor.values().begin(), tensor.values().end()};
  std::vector<float> out(tensor.raw().size() / sizeof(float));
  std::memcpy(out.data(), tensor.raw().data(), out.size() * sizeof(float));
  return out;
}

std::vector<int64_t> Shape(const v1::Tensor& tensor) {
  return {tensor.shape().begin(), tensor.shape().end()};
}

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = kRpcBound) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& phrase) {
  INFO("code " << status.error_code() << ": " << status.error_message());
  REQUIRE(status.error_code() == code);
  REQUIRE(status.error_message().find(phrase) != std::string::npos);
}

// --- The daemon

// forecastd on `repository` with two CPU workers, SERVING.
std::unique_ptr<ForecastdDaemon> StartDaemon(const std::string& repository,
                                             std::vector<std::string> extra_flags = {}) {
  extra_flags.insert(extra_flags.begin(), {"--cpu-workers", "2"});
  absl::StatusOr<std::unique_ptr<ForecastdDaemon>> daemon = ForecastdDaemon::Start(
      {.binary = FORECASTD_BINARY, .repository = repository, .extra_flags = extra_flags});
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return *std::move(daemon);
}

grpc::Status Predict(ForecastdDaemon& daemon, const v1::PredictRequest& request,
                     v1::PredictResponse* response) {
  return daemon.forecaster().Predict(Context().get(), request, response);
}

std::string Metrics(const ForecastdDaemon& daemon) {
  const absl::StatusOr<std::string> body = daemon.Metrics();
  INFO(body.status().ToString());
  REQUIRE(body.ok());
  return *body;
}

v1::ModelStatus GetModel(ForecastdDaemon& daemon, const std::string& name) {
  v1::GetModelRequest request;
  request.set_name(name);
  v1::ModelStatus status;
  const grpc::Status rpc = daemon.admin().GetModel(Context().get(), request, &status);
  INFO(rpc.error_message());
  REQUIRE(rpc.ok());
  return status;
}

// One daemon on the standard repository for the test cases that do not change what it
// serves; started on first use, killed when the process exits.
struct SharedDaemon {
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.dir.path());
};

SharedDaemon& Shared() {
  static SharedDaemon shared;
  return shared;
}

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
                 Expected(*shared.repository.toy_v2, InputsOf(request)));
    const v1::Timing& timing = response.timing();
    REQUIRE(timing.batch_size() >= 3);
    REQUIRE(timing.batch_size() <= kMaxBatch);
    REQUIRE(timing.total_us() > 0);
    REQUIRE(timing.total_us() >= timing.queue_us());
    REQUIRE(timing.total_us() >= timing.compute_us());
  }

  SECTION("raw bytes in, raw bytes out; explicit version and priority") {
    const std::vector<float> x = Windows(2, kT, 12);
    v1::PredictRequest request = Request("toy", {2, kT, kF}, x, /*raw=*/true);
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
    const v1::PredictRequest request = Request("quant", {2, kT, kF}, x, /*raw=*/false);
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
                 Expected(*shared.repository.toy_v2, InputsOf(request)));
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

  RequireError(predict(Request("toy", {1, kT * kF}, one, false)), kInvalid,
               "inputs have shape [1, 16]; model 'toy' takes [B, 8, 2]");
  RequireError(predict(Request("toy", {1, 7, kF}, Windows(1, 7, 21), false)), kInvalid,
               "inputs have shape [1, 7, 2]");
  RequireError(predict(Request("toy", {1, kT, 3}, std::vector<float>(kT * 3, 1.0f), false)),
               kInvalid, "inputs have shape [1, 8, 3]");

  std::vector<float> nan = one;
  nan[5] = std::numeric_limits<float>::quiet_NaN();  // window 0, step 2, feature 1
  RequireError(predict(Request("toy", {1, kT, kF}, nan, false)), kInvalid,
               "input [0, 2, 1] (feature 'temp') is nan; only finite values are accepted");
  std::vector<float> inf = one;
  inf[0] = std::numeric_limits<float>::infinity();
  RequireError(predict(Request("toy", {1, kT, kF}, inf, true)), kInvalid,
               "only finite values are accepted");

  RequireError(predict(Request("toy", {0, kT, kF}, {}, false)), kInvalid,
               "inputs are empty: the batch dimension is 0");

  v1::PredictRequest short_raw = Request("toy", {1, kT, kF}, one, true);
  short_raw.mutable_inputs()->mutable_raw()->resize(60);
  RequireError(predict(short_raw), kInvalid,
               "raw inputs hold 60 bytes; shape [1, 8, 2] of "
               "float32 needs 64");
  RequireError(predict(Request("toy", {2, kT, kF}, one, false)), kInvalid,
               "16 input values; shape [2, 8, 2] needs 32");
  v1::PredictRequest both = Request("toy", {1, kT, kF}, one, true);
  both.mutable_inputs()->mutable_values()->Assign(one.begin(), one.end());
  RequireError(predict(both), kInvalid, "either as raw bytes or as values, not both");

  RequireError(predict(ToyRequest(kMaxBatch + 1, 22)), kInvalid,
               "batch of 9 windows is above model 'toy'");
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

  // Expired before it is sent; then a deadline far shorter than any round trip. Either side
  // may notice: the code is the same.
  for (const absl::Duration timeout : {absl::Seconds(-1), absl::Microseconds(1)}) {
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
               Expected(*shared.repository.toy_v2, InputsOf(request)));
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
  REQUIRE(Predict(daemon, Request("toy", {1, 3, kF}, std::vector<float>(3 * kF, 1.0f), false),
                  &response)
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
  const testing::SampleSum loaded = SumSamples(after, "forecastd_models_loaded");
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
  RequireError(Predict(*daemon, ToyRequest(64, 71, /*raw=*/true), &response),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "larger than max");

  std::vector<float> x = Windows(2, kT, 72);
  x[3] = std::numeric_limits<float>::quiet_NaN();
  x[20] = std::numeric_limits<float>::infinity();
  grpc::Status status = Predict(*daemon, Request("toy", {2, kT, kF}, x, false), &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{2, kP, 2});

  const v1::PredictRequest request = ToyRequest(2, 73);
  status = Predict(*daemon, request, &response);
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()), Expected(*repository.toy_v2, InputsOf(request)));

  // --load-model toy left the others on disk, unloaded.
  REQUIRE(GetModel(*daemon, "quant").state() == v1::MODEL_UNLOADED);
  RequireError(
      Predict(*daemon, Request("quant", {1, kT, kF}, Windows(1, kT, 74), false), &response),
      grpc::StatusCode::UNAVAILABLE, "model 'quant' is not loaded");
}

// --- Admin

TEST_CASE("Admin lists models, unloads, reloads and switches serving versions",
          "[integration][api]") {
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.dir.path());
  v1::Admin::Stub& admin = daemon->admin();
  const v1::PredictRequest request = ToyRequest(2, 81);
  const std::vector<float> x = InputsOf(request);
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
  REQUIRE_FALSE(broken.last_error().empty());
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

// ~200 rows of two smooth features on the test scale.
v1::TrainingConfig Training(int epochs) {
  v1::TrainingConfig t;
  v1::InlineSeries* series = t.mutable_data()->mutable_inline_series();
  constexpr int kRows = 200;
  series->set_rows(kRows);
  for (int r = 0; r < kRows; ++r) {
    series->add_values(kMean[0] + kStd[0] * std::sin(0.2f * static_cast<float>(r)));
    series->add_values(kMean[1] + kStd[1] * std::cos(0.13f * static_cast<float>(r)));
  }
  t.set_epochs(epochs);
  t.set_batch_size(16);
  t.set_seed(1);
  return t;
}

ModelConfig TrainedConfig(const std::string& name) {
  ModelConfig c = BaseConfig(name, kT, {"load"});
  c.mutable_lstm()->set_hidden_size(8);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

grpc::Status Train(ForecastdDaemon& daemon, const std::string& model, const ModelConfig* config,
                   const v1::TrainingConfig& training, bool promote, std::string* job_id) {
  v1::TrainRequest request;
  request.set_model(model);
  if (config != nullptr) *request.mutable_config() = *config;
  *request.mutable_training() = training;
  request.set_promote(promote);
  v1::TrainResponse response;
  const grpc::Status status = daemon.forecaster().Train(Context().get(), request, &response);
  if (job_id != nullptr) *job_id = response.job_id();
  return status;
}

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
  const grpc::Status started = Train(*daemon, "trained", &config, Training(3), true, &id);
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
  const grpc::Status predicted =
      Predict(*daemon, Request("trained", {3, kT, kF}, x, false), &response);
  INFO(predicted.error_message());
  REQUIRE(predicted.ok());
  REQUIRE(response.version() == 1);
  REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{3, kP, 1});
  RequireClose(Floats(response.forecasts()), Expected(**published, x));

  const std::string metrics = Metrics(*daemon);
  CAPTURE(metrics);
  REQUIRE(SumSamples(metrics, "forecastd_train_loss",
                     {{"job", id}, {"model", "trained"}, {"split", "train"}})
              .series == 1);
  REQUIRE(
      SumSamples(metrics, "forecastd_train_loss", {{"job", id}, {"split", "validation"}}).series ==
      1);
  REQUIRE(SumSamples(metrics, "forecastd_train_steps_total", {{"model", "trained"}}).sum > 0);
  REQUIRE(SumSamples(metrics, "forecastd_train_epoch", {{"job", id}}).sum == 3);

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

  RequireError(Train(*daemon, "long", &config, Training(0), false, nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "epochs = 0");
  RequireError(Train(*daemon, "ghost", nullptr, Training(1), false, nullptr),
               grpc::StatusCode::NOT_FOUND, "give its `config` to train a new model");
  RequireError(Train(*daemon, "../up", &config, Training(1), false, nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "invalid model name");
  const ModelConfig other = TrainedConfig("other");
  RequireError(Train(*daemon, "long", &other, Training(1), false, nullptr),
               grpc::StatusCode::INVALID_ARGUMENT, "differs from the model 'long'");

  std::string id;
  const grpc::Status started = Train(*daemon, "long", &config, Training(100000), false, &id);
  INFO(started.error_message());
  REQUIRE(started.ok());
  RequireError(Train(*daemon, "long", &config, Training(1), false, nullptr),
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

  struct Outcome {
    grpc::StatusCode code;
    std::string message;
    bool after_signal;  // completed after SIGTERM was sent
    bool correct;       // OK and equal to the in-process forecast
  };
  constexpr int kThreads = 4;
  const int T = heavy->lookback();
  std::vector<v1::PredictRequest> requests;
  std::vector<std::vector<float>> expected;
  for (int i = 0; i < kThreads; ++i) {
    requests.push_back(Request("heavy", {2, T, kF}, Windows(2, T, 100 + i), i % 2 == 0));
    expected.push_back(Expected(*heavy, Windows(2, T, 100 + i)));
  }
  std::atomic<bool> signalled{false};
  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  absl::Mutex mu;
  std::vector<Outcome> outcomes;
  // Joins the clients however the test case ends (declared after the daemon: runs first).
  struct Clients {
    std::atomic<bool>& stop;
    std::vector<std::thread> threads;
    ~Clients() {
      stop.store(true);
      for (std::thread& t : threads) t.join();
    }
  } clients{stop, {}};
  for (int i = 0; i < kThreads; ++i) {
    clients.threads.emplace_back([&, i]() {
      // Until the server refuses: once it has exited every call fails at once.
      while (!stop.load()) {
        v1::PredictResponse response;
        const grpc::Status status = daemon->forecaster().Predict(
            Context().get(), requests[static_cast<size_t>(i)], &response);
        const bool after = signalled.load();
        const bool correct =
            status.ok() && AllClose(Floats(response.forecasts()), expected[static_cast<size_t>(i)]);
        {
          absl::MutexLock lock(&mu);
          outcomes.push_back({status.error_code(), status.error_message(), after, correct});
        }
        if (!status.ok()) return;
        answered.fetch_add(1);
      }
    });
  }

  const absl::Time give_up = absl::Now() + kExitBound;
  while (answered.load() < 2 * kThreads && absl::Now() < give_up && daemon->process().Running()) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  REQUIRE(answered.load() >= 2 * kThreads);

  // While the workers are busy, requests with deadlines shorter than a batch expire in the
  // queue (or on the client): DEADLINE_EXCEEDED, never another code, and no harm done.
  for (int i = 0; i < 10; ++i) {
    v1::PredictResponse response;
    const grpc::Status status =
        daemon->forecaster().Predict(Context(absl::Milliseconds(2)).get(), requests[0], &response);
    CAPTURE(i, status.error_message());
    REQUIRE((status.ok() || status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED));
    if (status.ok()) REQUIRE(AllClose(Floats(response.forecasts()), expected[0]));
  }

  signalled.store(true);
  REQUIRE(daemon->process().Signal(SIGTERM));

  // The health stream says NOT_SERVING, or is gone with the server.
  if (watch->Read(&health_response)) {
    REQUIRE(health_response.status() == HealthResponse::NOT_SERVING);
  }
  const absl::StatusOr<int> code = daemon->process().WaitForExit(kExitBound);
  for (std::thread& t : clients.threads) t.join();
  clients.threads.clear();
  const std::string log = daemon->process().Output();
  INFO(log);
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  REQUIRE(log.find("received SIGTERM, shutting down") != std::string::npos);
  REQUIRE(log.find("model registry shut down (1 versions drained)") != std::string::npos);
  REQUIRE(log.find("drain timed out") == std::string::npos);
  REQUIRE(log.find("forecastd stopped") != std::string::npos);

  std::map<grpc::StatusCode, int> codes;
  int ok_before = 0;
  for (const Outcome& o : outcomes) {
    CAPTURE(o.code, o.message, o.after_signal);
    ++codes[o.code];
    if (o.code == grpc::StatusCode::OK) {
      REQUIRE(o.correct);
      if (!o.after_signal) ++ok_before;
      continue;
    }
    // Refusals come only once the server is stopping: UNAVAILABLE from forecastd or from a
    // closed connection; CANCELLED only from a call the closing server cut off.
    REQUIRE(o.after_signal);
    REQUIRE((o.code == grpc::StatusCode::UNAVAILABLE || o.code == grpc::StatusCode::CANCELLED));
  }
  REQUIRE(ok_before >= 2 * kThreads);
  // Every client ended on a refusal once the server stopped.
  REQUIRE(static_cast<int>(outcomes.size()) - codes[grpc::StatusCode::OK] == kThreads);
  REQUIRE(CheckHealth(daemon->grpc_address(), "", absl::Seconds(1)).status().code() ==
          absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace forecastd
namespace forecastd {
namespace {
TEST_CASE("scratch shutdown time 2", "[scratch]") {
  for (int variant = 0; variant < 3; ++variant) {
    Repository repo;
    std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repo.dir.path());
    if (variant == 0) {  // sync RPC on a channel closed before SIGTERM
      auto channel = grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials());
      auto admin = v1::Admin::NewStub(channel);
      v1::ServerStatus st; REQUIRE(admin->GetServerStatus(Context().get(), {}, &st).ok());
    }
    if (variant == 1) {  // callback RPC on the kept channel
      v1::PredictResponse r; REQUIRE(Predict(*daemon, ToyRequest(1, 1), &r).ok());
    }
    if (variant == 2) {  // sync RPC on the kept channel
      v1::ServerStatus st; REQUIRE(daemon->admin().GetServerStatus(Context().get(), {}, &st).ok());
    }
    const absl::Time t0 = absl::Now();
    REQUIRE(daemon->process().Signal(SIGTERM));
    auto code = daemon->process().WaitForExit(kExitBound);
    std::string out = daemon->process().Output();
    fprintf(stderr, "DBG variant %d exit %d after %s\n%s\n", variant, code.value_or(-1), absl::FormatDuration(absl::Now() - t0).c_str(), out.substr(out.find("received")).c_str());
  }
}
}  // namespace
}  // namespace forecastd
