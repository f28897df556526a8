#include "tests/testing/forecastd_api_fixture.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <random>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "tests/testing/catch.h"

#ifndef FORECASTD_BINARY
#error "FORECASTD_BINARY must name the forecastd executable"
#endif

namespace forecastd::api_test {

using ::forecastd::testing::ForecastdDaemon;

// --- Models and the repository

ModelConfig BaseConfig(const std::string& name, int T, const std::vector<std::string>& targets) {
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

ModelConfig HeavyConfig() {
  ModelConfig c = BaseConfig("heavy", 64, {"load"});
  c.mutable_lstm()->set_hidden_size(256);
  c.mutable_lstm()->set_num_layers(2);
  return c;
}

ModelConfig TrainedConfig(const std::string& name) {
  ModelConfig c = BaseConfig(name, kT, {"load"});
  c.mutable_lstm()->set_hidden_size(8);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

std::shared_ptr<Forecaster> MakeModel(const ModelConfig& config, uint32_t seed) {
  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(config);
  INFO(model.status().ToString());
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

void Publish(const testing::TempDir& repository, const Forecaster& model, int64_t version) {
  const absl::Status status =
      PublishVersion(model, absl::StrCat(repository.path(), "/", model.config().name()), version);
  INFO(status.ToString());
  REQUIRE(status.ok());
}

Repository::Repository()
    : toy_v1(MakeModel(ToyConfig(), 1)),
      toy_v2(MakeModel(ToyConfig(), 2)),
      quant(MakeModel(QuantileConfig(), 3)) {
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

// --- Inputs and expected forecasts

std::vector<float> Windows(int64_t B, int T, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-1.5f, 1.5f);
  std::vector<float> x(static_cast<size_t>(B * T * kF));
  for (size_t i = 0; i < x.size(); ++i) x[i] = kMean[i % kF] + kStd[i % kF] * dist(gen);
  return x;
}

namespace {

Backend& CpuBackend() {
  static DnnlBackend* backend = DnnlBackend::Create({}).value().release();
  return *backend;
}

}  // namespace

std::vector<float> Expected(const Forecaster& model, const std::vector<float>& x) {
  const int64_t B = static_cast<int64_t>(x.size()) / model.input_floats();
  std::vector<float> out(static_cast<size_t>(B * model.num_outputs()));
  Workspace workspace;
  const absl::Status status = model.Forward(CpuBackend(), out.data(), x.data(), B, workspace);
  INFO(status.ToString());
  REQUIRE(status.ok());
  return out;
}

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

// --- Requests

v1::PredictRequest Request(const std::string& model, const std::vector<int64_t>& shape,
                           const std::vector<float>& x, Encoding encoding) {
  v1::PredictRequest request;
  request.set_model(model);
  v1::Tensor* inputs = request.mutable_inputs();
  for (const int64_t d : shape) inputs->add_shape(d);
  if (encoding == Encoding::kRaw) {
    inputs->set_raw(std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  } else {
    inputs->mutable_values()->Assign(x.begin(), x.end());
  }
  return request;
}

v1::PredictRequest ToyRequest(int64_t B, uint32_t seed, Encoding encoding) {
  return Request("toy", {B, kT, kF}, Windows(B, kT, seed), encoding);
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

std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  return context;
}

void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& phrase) {
  INFO("code " << status.error_code() << ": " << status.error_message());
  REQUIRE(status.error_code() == code);
  REQUIRE(status.error_message().find(phrase) != std::string::npos);
}

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

v1::TrainRequest TrainRequest(const std::string& model, const ModelConfig* config,
                              const v1::TrainingConfig& training) {
  v1::TrainRequest request;
  request.set_model(model);
  if (config != nullptr) *request.mutable_config() = *config;
  *request.mutable_training() = training;
  return request;
}

// --- The daemon

std::unique_ptr<ForecastdDaemon> StartDaemon(const std::string& repository,
                                             std::vector<std::string> extra_flags) {
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

grpc::Status Train(ForecastdDaemon& daemon, const v1::TrainRequest& request, std::string* job_id) {
  v1::TrainResponse response;
  const grpc::Status status = daemon.forecaster().Train(Context().get(), request, &response);
  if (job_id != nullptr) *job_id = response.job_id();
  return status;
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

SharedDaemon& Shared() {
  static SharedDaemon shared;
  return shared;
}

// --- PredictLoad

PredictLoad::PredictLoad(ForecastdDaemon& daemon, std::vector<v1::PredictRequest> requests)
    : daemon_(daemon), requests_(std::move(requests)) {
  for (size_t i = 0; i < requests_.size(); ++i) threads_.emplace_back([this, i] { Run(i); });
}

PredictLoad::~PredictLoad() { Stop(); }

bool PredictLoad::AwaitAnswers(int n) {
  const absl::Time give_up = absl::Now() + kRpcBound;
  while (answered_.load() < n && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
  return answered_.load() >= n;
}

bool PredictLoad::AwaitAllRefused() {
  const int clients = static_cast<int>(requests_.size());
  const absl::Time give_up = absl::Now() + kRpcBound;
  while (refused_.load() < clients && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(2));
  return refused_.load() == clients;
}

std::vector<PredictLoad::Outcome> PredictLoad::Stop() {
  stop_.store(true);
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  absl::MutexLock lock(&mu_);
  return outcomes_;
}

void PredictLoad::Run(size_t i) {
  while (!stop_.load()) {
    v1::PredictResponse response;
    const grpc::Status status =
        daemon_.forecaster().Predict(Context().get(), requests_[i], &response);
    Outcome outcome{i,
                    status.error_code(),
                    status.error_message(),
                    response.version(),
                    Floats(response.forecasts()),
                    marked_.load()};
    {
      absl::MutexLock lock(&mu_);
      outcomes_.push_back(std::move(outcome));
    }
    if (!status.ok()) {
      refused_.fetch_add(1);
      return;
    }
    answered_.fetch_add(1);
  }
}

}  // namespace forecastd::api_test
