// A model with a future-known covariate ("event"), a calendar feature (hour of day) and two
// series through the real forecastd binary and every front door: forecastd's Predict, KServe
// ModelInfer (raw and typed contents), ModelStreamInfer and REST (JSON and binary tensors), a
// window-mode tick stream, KServe sequence requests, and a stream kept across a SIGTERM restart.
// Each forecast is held against Forecaster::Forward on the input records BuildInputRecords
// makes of the same rows; every missing or extra covariate is refused with its code, naming it.
#include <signal.h>

#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "inference/grpc_service.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::CovariateRequest;
using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::TempDir;
using nlohmann::json;
using Stream = grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;

constexpr int kFin = 3;  // price, volume, event: the columns a request's windows carry

// "cov" (testing::CovariateConfig, lookback kT, horizon kP) and "plain", a window-mode GRU over
// load and temp without covariates, in one repository.
struct Models {
  Models() {
    ModelConfig config = testing::CovariateConfig("cov", kT, kP);
    config.mutable_batching()->set_max_batch_size(kMaxBatch);
    config.mutable_batching()->set_max_queue_delay_us(2000);
    cov = testing::RandomCovariateModel(config, 7);
    Publish(dir, *cov, 1);
    ModelConfig plain_config = BaseConfig("plain", kT, {"load"});
    plain_config.mutable_gru()->set_hidden_size(8);
    plain_config.mutable_gru()->set_num_layers(1);
    plain_config.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_WINDOW);
    plain = MakeModel(plain_config, 8);
    Publish(dir, *plain, 1);
  }
  TempDir dir;
  std::shared_ptr<Forecaster> cov, plain;
};

// One series' observations (N rows of price, volume, event) with what is known ahead of them:
// the event column and the hourly times of the N rows and of kP more steps.
struct Track {
  int N = 0;
  std::vector<float> rows;     // (N, kFin)
  std::vector<float> events;   // (N + kP)
  std::vector<int64_t> times;  // (N + kP)
};

Track MakeTrack(int N, uint32_t seed) {
  Track track;
  track.N = N;
  const std::vector<float> base = testing::RandomWindows(1, N, seed);
  std::mt19937 gen(seed);
  std::bernoulli_distribution event(0.3);
  for (int n = 0; n < N + kP; ++n) track.events.push_back(event(gen) ? 1.0f : 0.0f);
  for (int n = 0; n < N; ++n) {
    track.rows.push_back(base[static_cast<size_t>(2 * n)]);
    track.rows.push_back(base[static_cast<size_t>(2 * n + 1)]);
    track.rows.push_back(track.events[static_cast<size_t>(n)]);
  }
  constexpr int64_t kStart = 1772409600 + 7 * 3600;  // 2026-03-02 07:00 UTC
  for (int n = 0; n < N + kP; ++n) track.times.push_back(kStart + int64_t{n} * 3600);
  return track;
}

// What a request for the window that ends before row n of `track` carries.
CovariateRequest WindowOf(const Track& track, int n, const std::string& series) {
  CovariateRequest r;
  r.windows.assign(track.rows.begin() + (n - kT) * kFin, track.rows.begin() + n * kFin);
  r.future.assign(track.events.begin() + n, track.events.begin() + n + kP);
  r.timestamps.assign(track.times.begin() + (n - kT), track.times.begin() + n + kP);
  r.series = {series};
  return r;
}

std::vector<float> ExpectedOf(const Forecaster& model, const CovariateRequest& request) {
  return Expected(model, testing::CovariateRecords(model, request));
}

v1::PredictRequest PredictOf(const CovariateRequest& r, Encoding encoding) {
  const int64_t B = static_cast<int64_t>(r.series.size());
  v1::PredictRequest request = Request("cov", {B, kT, kFin}, r.windows, encoding);
  v1::Tensor* future = request.mutable_future();
  for (const int64_t d : {B, int64_t{kP}, int64_t{1}}) future->add_shape(d);
  if (encoding == Encoding::kRaw) {
    future->set_raw(reinterpret_cast<const char*>(r.future.data()), r.future.size() * 4);
  } else {
    future->mutable_values()->Add(r.future.begin(), r.future.end());
  }
  request.mutable_timestamps()->Add(r.timestamps.begin(), r.timestamps.end());
  for (const std::string& name : r.series) request.add_series(name);
  return request;
}

// Triton's BYTES serialisation: each element's 4-byte little-endian length, then its bytes.
std::string BytesElements(const std::vector<std::string>& names) {
  std::string out;
  for (const std::string& name : names) {
    const uint32_t n = static_cast<uint32_t>(name.size());
    out.append(reinterpret_cast<const char*>(&n), sizeof(n));
    out += name;
  }
  return out;
}

template <typename T>
std::string RawOf(const std::vector<T>& values) {
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

enum class Contents { kRaw, kTyped };

// A KServe request for `r`'s windows, with FUTURE, TIMESTAMPS and SERIES ([B, 1]), each left out
// when its name is in `drop`.
inference::ModelInferRequest InferOf(const CovariateRequest& r, Contents contents,
                                     const std::vector<std::string>& drop = {}) {
  const int64_t B = static_cast<int64_t>(r.series.size());
  inference::ModelInferRequest request;
  request.set_model_name("cov");
  const auto add =
      [&](const std::string& name, const std::string& datatype,
          std::vector<int64_t> shape) -> inference::ModelInferRequest::InferInputTensor* {
    if (std::find(drop.begin(), drop.end(), name) != drop.end()) return nullptr;
    auto* input = request.add_inputs();
    input->set_name(name);
    input->set_datatype(datatype);
    for (const int64_t d : shape) input->add_shape(d);
    return input;
  };
  const bool raw = contents == Contents::kRaw;
  if (auto* in = add("INPUT", "FP32", {B, kT, kFin})) {
    if (raw) {
      request.add_raw_input_contents(RawOf(r.windows));
    } else {
      in->mutable_contents()->mutable_fp32_contents()->Add(r.windows.begin(), r.windows.end());
    }
  }
  if (auto* in = add("FUTURE", "FP32", {B, kP, 1})) {
    if (raw) {
      request.add_raw_input_contents(RawOf(r.future));
    } else {
      in->mutable_contents()->mutable_fp32_contents()->Add(r.future.begin(), r.future.end());
    }
  }
  if (auto* in = add("TIMESTAMPS", "INT64", {B, kT + kP})) {
    if (raw) {
      request.add_raw_input_contents(RawOf(r.timestamps));
    } else {
      in->mutable_contents()->mutable_int64_contents()->Add(r.timestamps.begin(),
                                                            r.timestamps.end());
    }
  }
  if (auto* in = add("SERIES", "BYTES", {B, 1})) {
    if (raw) {
      request.add_raw_input_contents(BytesElements(r.series));
    } else {
      for (const std::string& name : r.series) in->mutable_contents()->add_bytes_contents(name);
    }
  }
  return request;
}

std::vector<float> RawFloats(const std::string& raw) {
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

json JsonInferOf(const CovariateRequest& r) {
  const int64_t B = static_cast<int64_t>(r.series.size());
  return {
      {"inputs",
       {{{"name", "INPUT"}, {"shape", {B, kT, kFin}}, {"datatype", "FP32"}, {"data", r.windows}},
        {{"name", "FUTURE"}, {"shape", {B, kP, 1}}, {"datatype", "FP32"}, {"data", r.future}},
        {{"name", "TIMESTAMPS"},
         {"shape", {B, kT + kP}},
         {"datatype", "INT64"},
         {"data", r.timestamps}},
        {{"name", "SERIES"}, {"shape", {B, 1}}, {"datatype", "BYTES"}, {"data", r.series}}}}};
}

std::vector<float> JsonFloats(const json& data) {
  std::vector<float> out;
  for (const json& v : data) out.push_back(v.get<float>());
  return out;
}

v1::StreamRequest OpenOf(const std::string& key, const std::string& model,
                         const std::string& series, bool resume = false) {
  v1::StreamRequest request;
  request.set_key(key);
  request.mutable_open()->set_model(model);
  request.mutable_open()->set_series(series);
  request.mutable_open()->set_resume(resume);
  return request;
}

// Rows [begin, end) of `track` as one tick message, with the future events and times after
// them.
v1::StreamRequest TicksOf(const std::string& key, const Track& track, int begin, int end) {
  v1::StreamRequest request;
  request.set_key(key);
  v1::StreamTicks* ticks = request.mutable_ticks();
  ticks->mutable_values()->Add(track.rows.begin() + begin * kFin, track.rows.begin() + end * kFin);
  ticks->mutable_future()->Add(track.events.begin() + end, track.events.begin() + end + kP);
  ticks->mutable_timestamps()->Add(track.times.begin() + begin, track.times.begin() + end + kP);
  return request;
}

v1::StreamResponse Read(Stream& stream) {
  v1::StreamResponse response;
  REQUIRE(stream.Read(&response));
  return response;
}

void RequireStreamError(const v1::StreamResponse& reply, const std::string& key,
                        grpc::StatusCode code, const std::string& phrase) {
  INFO(reply.DebugString());
  REQUIRE(reply.key() == key);
  REQUIRE(reply.has_error());
  REQUIRE(reply.error().code() == static_cast<int>(code));
  REQUIRE(reply.error().message().find(phrase) != std::string::npos);
}

TEST_CASE(
    "Predict, KServe gRPC and KServe REST forecast a model with covariates and series as "
    "Forward does on its input records",
    "[integration][api][covariates]") {
  Models models;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(models.dir.path());
  const Forecaster& model = *models.cov;
  const int64_t B = 3;
  const CovariateRequest r = testing::RandomCovariateRequest(model, B, 11);
  const std::vector<float> want = ExpectedOf(model, r);

  for (const Encoding encoding : {Encoding::kValues, Encoding::kRaw}) {
    v1::PredictResponse response;
    const grpc::Status status = Predict(*daemon, PredictOf(r, encoding), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(Shape(response.forecasts()) == std::vector<int64_t>{B, kP, 1});
    RequireClose(Floats(response.forecasts()), want);
  }

  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("cov");
  inference::ModelMetadataResponse metadata;
  REQUIRE(kserve->ModelMetadata(Context().get(), metadata_request, &metadata).ok());
  std::map<std::string, std::pair<std::string, std::vector<int64_t>>> inputs;
  for (const auto& input : metadata.inputs()) {
    inputs[input.name()] = {input.datatype(),
                            std::vector<int64_t>(input.shape().begin(), input.shape().end())};
  }
  REQUIRE(metadata.inputs_size() == 4);
  REQUIRE(metadata.inputs(0).name() == "INPUT");
  REQUIRE(inputs["INPUT"] == std::pair<std::string, std::vector<int64_t>>{"FP32", {-1, kT, kFin}});
  REQUIRE(inputs["FUTURE"] == std::pair<std::string, std::vector<int64_t>>{"FP32", {-1, kP, 1}});
  REQUIRE(inputs["TIMESTAMPS"] ==
          std::pair<std::string, std::vector<int64_t>>{"INT64", {-1, kT + kP}});
  REQUIRE(inputs["SERIES"] == std::pair<std::string, std::vector<int64_t>>{"BYTES", {-1, 1}});
  inference::ModelConfigRequest config_request;
  config_request.set_name("cov");
  inference::ModelConfigResponse config;
  REQUIRE(kserve->ModelConfig(Context().get(), config_request, &config).ok());
  REQUIRE(config.config().input_size() == 4);
  REQUIRE(config.config().input(1).name() == "FUTURE");
  REQUIRE(config.config().input(2).data_type() == inference::TYPE_INT64);
  REQUIRE(config.config().input(3).data_type() == inference::TYPE_STRING);
  REQUIRE(std::vector<int64_t>(config.config().input(3).dims().begin(),
                               config.config().input(3).dims().end()) == std::vector<int64_t>{1});

  for (const Contents contents : {Contents::kRaw, Contents::kTyped}) {
    inference::ModelInferResponse response;
    const grpc::Status status =
        kserve->ModelInfer(Context().get(), InferOf(r, contents), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                 response.outputs(0).shape().end()) ==
            std::vector<int64_t>{B, kP, 1});
    RequireClose(RawFloats(response.raw_output_contents(0)), want);
  }
  {
    // One series name, [1, 1], for every window.
    CovariateRequest one = r;
    one.series = {"MSFT"};
    inference::ModelInferRequest request = InferOf(one, Contents::kTyped);
    request.mutable_inputs(0)->set_shape(0, B);
    request.mutable_inputs(1)->set_shape(0, B);
    request.mutable_inputs(2)->set_shape(0, B);
    inference::ModelInferResponse response;
    const grpc::Status status = kserve->ModelInfer(Context().get(), request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    CovariateRequest all = r;
    all.series.assign(B, "MSFT");
    RequireClose(RawFloats(response.raw_output_contents(0)), ExpectedOf(model, all));
  }
  {
    auto context = Context();
    auto stream = kserve->ModelStreamInfer(context.get());
    REQUIRE(stream->Write(InferOf(r, Contents::kRaw)));
    REQUIRE(stream->WritesDone());
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    INFO(reply.error_message());
    REQUIRE(reply.error_message().empty());
    RequireClose(RawFloats(reply.infer_response().raw_output_contents(0)), want);
    REQUIRE(stream->Finish().ok());
  }

  httplib::Client rest("127.0.0.1", daemon->http_port());
  rest.set_read_timeout(60, 0);
  {
    const httplib::Result got = rest.Get("/v2/models/cov");
    REQUIRE(got);
    REQUIRE(got->status == 200);
    const json described = json::parse(got->body);
    REQUIRE(described["inputs"].size() == 4);
    REQUIRE(described["inputs"][3]["name"] == "SERIES");
    REQUIRE(described["inputs"][3]["datatype"] == "BYTES");
    REQUIRE(described["inputs"][3]["shape"] == json({-1, 1}));
  }
  {
    const httplib::Result got =
        rest.Post("/v2/models/cov/infer", JsonInferOf(r).dump(), "application/json");
    REQUIRE(got);
    INFO(got->status << " " << got->body);
    REQUIRE(got->status == 200);
    RequireClose(JsonFloats(json::parse(got->body)["outputs"][0]["data"]), want);
  }
  {
    // Binary tensors: the JSON header, then each input's bytes in order.
    json header = JsonInferOf(r);
    const std::vector<std::string> parts = {RawOf(r.windows), RawOf(r.future), RawOf(r.timestamps),
                                            BytesElements(r.series)};
    std::string bytes;
    for (size_t i = 0; i < parts.size(); ++i) {
      header["inputs"][i].erase("data");
      header["inputs"][i]["parameters"] = {{"binary_data_size", parts[i].size()}};
      bytes += parts[i];
    }
    const std::string text = header.dump();
    const httplib::Result got = rest.Post(
        "/v2/models/cov/infer", {{"Inference-Header-Content-Length", std::to_string(text.size())}},
        text + bytes, "application/octet-stream");
    REQUIRE(got);
    INFO(got->status << " " << got->body);
    REQUIRE(got->status == 200);
    RequireClose(JsonFloats(json::parse(got->body)["outputs"][0]["data"]), want);
  }
}

TEST_CASE("Every front door refuses a missing or extra covariate, naming it",
          "[integration][api][covariates]") {
  Models models;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(models.dir.path());
  const CovariateRequest r = testing::RandomCovariateRequest(*models.cov, 2, 13);
  const auto predict_refused = [&](const v1::PredictRequest& request, grpc::StatusCode code,
                                   const std::string& phrase) {
    v1::PredictResponse response;
    RequireError(Predict(*daemon, request, &response), code, phrase);
  };

  v1::PredictRequest request = PredictOf(r, Encoding::kValues);
  request.clear_future();
  predict_refused(request, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'cov' has future-known covariates (event): send future [2, 3, 1]");
  request = PredictOf(r, Encoding::kValues);
  request.clear_timestamps();
  predict_refused(request, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'cov' has calendar features: send timestamps [2, 11]");
  request = PredictOf(r, Encoding::kValues);
  request.clear_series();
  predict_refused(request, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'cov' was trained on 2 series: send series");
  request = PredictOf(r, Encoding::kValues);
  request.set_series(1, "GOOG");
  predict_refused(request, grpc::StatusCode::NOT_FOUND, "knows no series 'GOOG'");
  request = PredictOf(r, Encoding::kValues);
  request.mutable_future()->set_shape(2, 2);
  predict_refused(request, grpc::StatusCode::INVALID_ARGUMENT, "future has shape [2, 3, 2]");
  request = PredictOf(r, Encoding::kValues);
  request.mutable_timestamps()->RemoveLast();
  predict_refused(request, grpc::StatusCode::INVALID_ARGUMENT, "timestamps holds 21 values");
  // A model without covariates or series takes none of them.
  v1::PredictRequest plain = Request("plain", {1, kT, kF}, Windows(1, kT, 3));
  *plain.mutable_future() = PredictOf(r, Encoding::kValues).future();
  predict_refused(plain, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'plain' has no future-known covariates: send no future");
  plain.clear_future();
  plain.add_timestamps(1);
  predict_refused(plain, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'plain' has no calendar features: send no timestamps");
  plain.clear_timestamps();
  plain.add_series("AAPL");
  predict_refused(plain, grpc::StatusCode::INVALID_ARGUMENT,
                  "model 'plain' was trained on one series: send no series");

  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  const auto infer_refused = [&](const inference::ModelInferRequest& infer, grpc::StatusCode code,
                                 const std::string& phrase) {
    inference::ModelInferResponse response;
    RequireError(kserve->ModelInfer(Context().get(), infer, &response), code, phrase);
  };
  for (const Contents contents : {Contents::kRaw, Contents::kTyped}) {
    infer_refused(InferOf(r, contents, {"FUTURE"}), grpc::StatusCode::INVALID_ARGUMENT,
                  "send input 'FUTURE' [2, 3, 1]");
    infer_refused(InferOf(r, contents, {"TIMESTAMPS"}), grpc::StatusCode::INVALID_ARGUMENT,
                  "send input 'TIMESTAMPS' [2, 11]");
    infer_refused(InferOf(r, contents, {"SERIES"}), grpc::StatusCode::INVALID_ARGUMENT,
                  "send input 'SERIES'");
    infer_refused(
        InferOf(r, contents, {"INPUT"}), grpc::StatusCode::INVALID_ARGUMENT,
        "input 'INPUT' is missing; model 'cov' takes the inputs 'INPUT' (FP32 [B, 8, 3]), "
        "'FUTURE' (FP32 [B, 3, 1]), 'TIMESTAMPS' (INT64 [B, 11]) and 'SERIES' (BYTES "
        "[B, 1])");
  }
  inference::ModelInferRequest infer = InferOf(r, Contents::kTyped);
  infer.mutable_inputs(3)->mutable_contents()->set_bytes_contents(0, "GOOG");
  infer_refused(infer, grpc::StatusCode::NOT_FOUND, "knows no series 'GOOG'");
  infer = InferOf(r, Contents::kTyped);
  infer.mutable_inputs(2)->set_datatype("FP32");
  infer_refused(infer, grpc::StatusCode::INVALID_ARGUMENT,
                "input 'TIMESTAMPS' has datatype 'FP32'; model 'cov' takes INT64");
  infer = InferOf(r, Contents::kTyped);
  infer.mutable_inputs(2)->set_shape(1, kT);
  infer_refused(infer, grpc::StatusCode::INVALID_ARGUMENT, "input 'TIMESTAMPS' has shape [2, 8]");
  infer = InferOf(r, Contents::kRaw);
  infer.mutable_raw_input_contents(3)->pop_back();
  infer_refused(infer, grpc::StatusCode::INVALID_ARGUMENT,
                "input 'SERIES': element 1 says 4 bytes");
  infer = InferOf(r, Contents::kRaw);
  infer.mutable_raw_input_contents()->RemoveLast();
  infer_refused(infer, grpc::StatusCode::INVALID_ARGUMENT,
                "raw_input_contents has 3 entries for 4 inputs");
  // The plain model has one input: FUTURE is not one of them.
  inference::ModelInferRequest plain_infer;
  plain_infer.set_model_name("plain");
  auto* input = plain_infer.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t d : {int64_t{1}, int64_t{kT}, int64_t{kF}}) input->add_shape(d);
  plain_infer.add_raw_input_contents(RawOf(Windows(1, kT, 3)));
  *plain_infer.add_inputs() = InferOf(r, Contents::kRaw).inputs(1);
  plain_infer.add_raw_input_contents(RawOf(r.future));
  infer_refused(plain_infer, grpc::StatusCode::INVALID_ARGUMENT,
                "unknown input 'FUTURE'; model 'plain' takes one input, 'INPUT' (FP32 [B, 8, 2])");

  httplib::Client rest("127.0.0.1", daemon->http_port());
  rest.set_read_timeout(60, 0);
  json body = JsonInferOf(r);
  body["inputs"].erase(1);
  const httplib::Result got = rest.Post("/v2/models/cov/infer", body.dump(), "application/json");
  REQUIRE(got);
  INFO(got->status << " " << got->body);
  REQUIRE(got->status == 400);
  REQUIRE(got->body.find("send input 'FUTURE'") != std::string::npos);
}

TEST_CASE(
    "A window-mode tick stream of a model with covariates and series forecasts as Predict "
    "on the same rows",
    "[integration][api][covariates][stream]") {
  Models models;
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(models.dir.path());
  auto stub = v1::Forecaster::NewStub(daemon->channel());
  const Track track = MakeTrack(kT + 4, 21);
  auto context = Context();
  std::unique_ptr<Stream> stream = stub->Stream(context.get());

  // Opening needs the model's series, one it knows, and none for a model without series.
  REQUIRE(stream->Write(OpenOf("nameless", "cov", "")));
  RequireStreamError(Read(*stream), "nameless", grpc::StatusCode::INVALID_ARGUMENT,
                     "was trained on 2 series: name the series of stream 'nameless'");
  REQUIRE(stream->Write(OpenOf("unknown", "cov", "GOOG")));
  RequireStreamError(Read(*stream), "unknown", grpc::StatusCode::NOT_FOUND,
                     "knows no series 'GOOG'");
  REQUIRE(stream->Write(OpenOf("plain", "plain", "AAPL")));
  RequireStreamError(Read(*stream), "plain", grpc::StatusCode::INVALID_ARGUMENT,
                     "model 'plain' was trained on one series");
  REQUIRE(stream->Write(OpenOf("plain", "plain", "")));
  REQUIRE(Read(*stream).has_status());
  REQUIRE(stream->Write(OpenOf("MSFT", "cov", "MSFT")));
  REQUIRE(Read(*stream).status().mode() == v1::StreamingConfig::STREAM_MODE_WINDOW);

  // Two rows in the first message, one at a time after that.
  int n = 2;
  REQUIRE(stream->Write(TicksOf("MSFT", track, 0, n)));
  REQUIRE(Read(*stream).forecast().ticks_needed() == kT - n);
  for (++n; n <= track.N; ++n) {
    REQUIRE(stream->Write(TicksOf("MSFT", track, n - 1, n)));
    const v1::StreamResponse reply = Read(*stream);
    INFO(reply.DebugString());
    REQUIRE(reply.has_forecast());
    REQUIRE(reply.forecast().sequence() == n);
    if (n < kT) {
      REQUIRE(reply.forecast().ticks_needed() == kT - n);
      continue;
    }
    const CovariateRequest window = WindowOf(track, n, "MSFT");
    v1::PredictResponse predicted;
    REQUIRE(Predict(*daemon, PredictOf(window, Encoding::kValues), &predicted).ok());
    RequireClose(Floats(reply.forecast().forecast()), Floats(predicted.forecasts()));
    RequireClose(Floats(reply.forecast().forecast()), ExpectedOf(*models.cov, window));
  }

  // A tick message without its future values or times, with too many, or out of time order is
  // refused on its key alone.
  Track more = track;
  for (int64_t& t : more.times) t += 24 * 3600;
  v1::StreamRequest ticks = TicksOf("MSFT", more, 0, 1);
  ticks.mutable_ticks()->clear_future();
  REQUIRE(stream->Write(ticks));
  RequireStreamError(Read(*stream), "MSFT", grpc::StatusCode::INVALID_ARGUMENT,
                     "ticks carry 0 future values; the model's future-known covariates need 3");
  ticks = TicksOf("MSFT", more, 0, 1);
  ticks.mutable_ticks()->clear_timestamps();
  REQUIRE(stream->Write(ticks));
  RequireStreamError(Read(*stream), "MSFT", grpc::StatusCode::INVALID_ARGUMENT,
                     "ticks carry 0 timestamps; the model's calendar features need 4");
  ticks = TicksOf("MSFT", more, 0, 1);
  ticks.mutable_ticks()->add_future(1.0f);
  REQUIRE(stream->Write(ticks));
  RequireStreamError(Read(*stream), "MSFT", grpc::StatusCode::INVALID_ARGUMENT,
                     "ticks carry 4 future values");
  REQUIRE(stream->Write(TicksOf("MSFT", track, 0, 1)));  // an hour the stream has passed
  RequireStreamError(Read(*stream), "MSFT", grpc::StatusCode::INVALID_ARGUMENT,
                     "does not follow the last tick's");
  v1::StreamRequest plain_ticks;
  plain_ticks.set_key("plain");
  for (const float v : Windows(1, 1, 5)) plain_ticks.mutable_ticks()->add_values(v);
  plain_ticks.mutable_ticks()->add_timestamps(7);
  REQUIRE(stream->Write(plain_ticks));
  RequireStreamError(Read(*stream), "plain", grpc::StatusCode::INVALID_ARGUMENT,
                     "the model has no calendar features: send none");
  // The key goes on where it was. (The tick out of time order was received, and counts; the
  // malformed messages were not.)
  REQUIRE(stream->Write(TicksOf("MSFT", more, 0, 1)));
  const v1::StreamResponse next = Read(*stream);
  INFO(next.DebugString());
  REQUIRE(next.forecast().sequence() == track.N + 2);
  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());

  // KServe sequence requests on the same model: SERIES on the first, FUTURE and TIMESTAMPS on
  // every one.
  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  for (int end = 1; end <= kT + 1; ++end) {
    const bool start = end == 1;
    CovariateRequest rows;
    rows.windows.assign(track.rows.begin() + (end - 1) * kFin, track.rows.begin() + end * kFin);
    rows.future.assign(track.events.begin() + end, track.events.begin() + end + kP);
    rows.timestamps.assign(track.times.begin() + end - 1, track.times.begin() + end + kP);
    rows.series = {"AAPL"};
    inference::ModelInferRequest infer =
        InferOf(rows, Contents::kTyped,
                start ? std::vector<std::string>{} : std::vector<std::string>{"SERIES"});
    infer.mutable_inputs(0)->set_shape(1, 1);
    infer.mutable_inputs(2)->set_shape(1, 1 + kP);
    (*infer.mutable_parameters())["sequence_id"].set_int64_param(5);
    if (start) (*infer.mutable_parameters())["sequence_start"].set_bool_param(true);
    inference::ModelInferResponse response;
    const grpc::Status status = kserve->ModelInfer(Context().get(), infer, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    if (end < kT) {
      REQUIRE(response.parameters().at("ticks_needed").int64_param() == kT - end);
      continue;
    }
    RequireClose(RawFloats(response.raw_output_contents(0)),
                 ExpectedOf(*models.cov, WindowOf(track, end, "AAPL")));
  }
  CovariateRequest rows = WindowOf(track, kT, "AAPL");
  inference::ModelInferRequest unnamed = InferOf(rows, Contents::kTyped, {"SERIES"});
  (*unnamed.mutable_parameters())["sequence_id"].set_int64_param(6);
  (*unnamed.mutable_parameters())["sequence_start"].set_bool_param(true);
  inference::ModelInferResponse response;
  RequireError(kserve->ModelInfer(Context().get(), unnamed, &response),
               grpc::StatusCode::INVALID_ARGUMENT, "input 'SERIES' is missing");
}

TEST_CASE(
    "A stream of a model with series and calendar features keeps both across a SIGTERM "
    "restart",
    "[integration][api][covariates][stream]") {
  Models models;
  const Track track = MakeTrack(2 * kT, 31);
  const int k = kT + 2;  // ticks before the restart
  // Feeds rows [begin, end) one message each; the raw forecasts of the full windows.
  const auto feed = [&](ForecastdDaemon& daemon, const std::string& key, bool resume, int begin,
                        int end) {
    auto stub = v1::Forecaster::NewStub(daemon.channel());
    auto context = Context();
    std::unique_ptr<Stream> stream = stub->Stream(context.get());
    REQUIRE(stream->Write(OpenOf(key, "cov", resume ? "" : "AAPL", resume)));
    const v1::StreamResponse opened = Read(*stream);
    INFO(opened.DebugString());
    REQUIRE(opened.status().resumed() == resume);
    std::vector<std::vector<float>> forecasts;
    for (int n = begin + 1; n <= end; ++n) {
      REQUIRE(stream->Write(TicksOf(key, track, n - 1, n)));
      const v1::StreamResponse reply = Read(*stream);
      INFO(reply.DebugString());
      REQUIRE(reply.has_forecast());
      if (n >= kT) forecasts.push_back(Floats(reply.forecast().forecast()));
    }
    if (resume) {
      // The stream remembers its last tick's time: an earlier one is refused.
      REQUIRE(stream->Write(TicksOf(key, track, 0, 1)));
      RequireStreamError(Read(*stream), key, grpc::StatusCode::INVALID_ARGUMENT,
                         "does not follow the last tick's");
    }
    REQUIRE(stream->WritesDone());
    REQUIRE(stream->Finish().ok());
    return forecasts;
  };

  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(models.dir.path());
  feed(*daemon, "straight", false, 0, k);
  const std::vector<std::vector<float>> want = feed(*daemon, "straight", true, k, track.N);
  feed(*daemon, "restarted", false, 0, k);
  REQUIRE(daemon->process().Signal(SIGTERM));
  const absl::StatusOr<int> code = daemon->process().WaitForExit(kExitBound);
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  daemon = StartDaemon(models.dir.path());
  const std::vector<std::vector<float>> got = feed(*daemon, "restarted", true, k, track.N);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i] == want[i]);
    RequireClose(got[i],
                 ExpectedOf(*models.cov, WindowOf(track, k + 1 + static_cast<int>(i), "AAPL")));
  }
  REQUIRE(daemon->process().Output().find("2 restored from") != std::string::npos);
}

}  // namespace
}  // namespace forecastd::api_test
