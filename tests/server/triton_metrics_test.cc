// Triton's metric names on the real forecastd binary's /metrics: requests through every front
// door (forecastd Predict, KServe ModelInfer over gRPC and REST, ModelStreamInfer) and tick
// streams (forecastd Stream and Triton sequence requests) counted in nv_inference_* per model
// and version, with forecastd's own series agreeing, and no nv_gpu_* series without a GPU.
#include <algorithm>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::SumSamples;
using Labels = std::map<std::string, std::string>;

constexpr int B = 3;  // rows of every inference request here

// A KServe ModelInfer for toy (the serving version) with B raw windows; `T` other than kT makes
// it a request the model refuses.
inference::ModelInferRequest ToyInfer(uint32_t seed, int T = kT) {
  const std::vector<float> x = Windows(B, T, seed);
  inference::ModelInferRequest request;
  request.set_model_name("toy");
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t dim : {int64_t{B}, int64_t{T}, int64_t{kF}}) input->add_shape(dim);
  request.add_raw_input_contents(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float));
  return request;
}

// The same as KServe REST JSON.
std::string ToyJson(uint32_t seed, int T = kT) {
  return absl::StrCat(R"({"inputs":[{"name":"INPUT","datatype":"FP32","shape":[)", B, ",", T, ",",
                      kF, R"(],"data":[)", absl::StrJoin(Windows(B, T, seed), ","), "]}]}");
}

inference::ModelInferRequest SequenceTick(int64_t id, bool start, const std::vector<float>& row) {
  inference::ModelInferRequest request;
  request.set_model_name("ticks");
  (*request.mutable_parameters())["sequence_id"].set_int64_param(id);
  if (start) (*request.mutable_parameters())["sequence_start"].set_bool_param(true);
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t dim : {int64_t{1}, int64_t{1}, int64_t{kF}}) input->add_shape(dim);
  request.add_raw_input_contents(reinterpret_cast<const char*>(row.data()),
                                 row.size() * sizeof(float));
  return request;
}

// The standard repository plus "ticks", a state-mode tick-stream model (version 1).
struct Fixture {
  Fixture() {
    ModelConfig config = BaseConfig("ticks", kT, {"load"});
    config.mutable_lstm()->set_hidden_size(8);
    config.mutable_lstm()->set_num_layers(1);
    config.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
    Publish(repository.dir, *MakeModel(config, 5), 1);
    daemon = StartDaemon(repository.dir.path());
    kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  }
  // The change of `name`{match} from `before` to now.
  double Delta(const std::string& before, const std::string& now, const std::string& name,
               const Labels& match) const {
    return SumSamples(now, name, match).sum - SumSamples(before, name, match).sum;
  }

  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon;
  std::unique_ptr<inference::GRPCInferenceService::Stub> kserve;
};

TEST_CASE("Triton's nv_inference series count every front door's requests, rows and batches",
          "[integration][api][metrics]") {
  Fixture f;
  ForecastdDaemon& daemon = *f.daemon;
  httplib::Client rest("127.0.0.1", daemon.http_port());
  const Labels toy = {{"model", "toy"}, {"version", "2"}};  // toy serves version 2
  const std::string before = Metrics(daemon);

  // N successful requests of B rows, one after another, through every front door.
  int successes = 0;
  v1::PredictResponse predicted;
  for (uint32_t seed : {1u, 2u}) {
    const grpc::Status status = Predict(daemon, ToyRequest(B, seed), &predicted);
    INFO(status.error_message());
    REQUIRE(status.ok());
    ++successes;
  }
  for (uint32_t seed : {3u, 4u}) {
    inference::ModelInferResponse response;
    const grpc::Status status = f.kserve->ModelInfer(Context().get(), ToyInfer(seed), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    ++successes;
  }
  for (uint32_t seed : {5u, 6u}) {
    const httplib::Result result =
        rest.Post("/v2/models/toy/infer", ToyJson(seed), "application/json");
    REQUIRE(result);
    INFO(result->body);
    REQUIRE(result->status == 200);
    ++successes;
  }
  {
    auto context = Context();
    auto stream = f.kserve->ModelStreamInfer(context.get());
    REQUIRE(stream->Write(ToyInfer(7)));
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    INFO(reply.error_message());
    REQUIRE(reply.error_message().empty());
    REQUIRE(stream->WritesDone());
    REQUIRE(stream->Finish().ok());
    ++successes;
  }

  // M requests that reach toy's serving version and fail there (a window of the wrong length).
  int failures = 0;
  REQUIRE(Predict(daemon, Request("toy", {B, kT - 1, kF}, Windows(B, kT - 1, 8)), &predicted)
              .error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  ++failures;
  inference::ModelInferResponse refused;
  REQUIRE(f.kserve->ModelInfer(Context().get(), ToyInfer(9, kT - 1), &refused).error_code() ==
          grpc::StatusCode::INVALID_ARGUMENT);
  ++failures;
  const httplib::Result bad_rest =
      rest.Post("/v2/models/toy/infer", ToyJson(10, kT - 1), "application/json");
  REQUIRE(bad_rest);
  REQUIRE(bad_rest->status == 400);
  ++failures;
  // Requests that never find a model version are not Triton requests of any model.
  v1::PredictRequest unknown_version = ToyRequest(B, 11);
  unknown_version.set_version(9);
  REQUIRE(Predict(daemon, unknown_version, &predicted).error_code() == grpc::StatusCode::NOT_FOUND);
  inference::ModelInferRequest unknown_model = ToyInfer(12);
  unknown_model.set_model_name("nope");
  REQUIRE(f.kserve->ModelInfer(Context().get(), unknown_model, &refused).error_code() ==
          grpc::StatusCode::NOT_FOUND);

  const std::string after = Metrics(daemon);
  CAPTURE(after);
  REQUIRE(SumSamples(after, "nv_inference_request_success", toy).series == 1);
  REQUIRE(f.Delta(before, after, "nv_inference_request_success", toy) == successes);
  REQUIRE(f.Delta(before, after, "nv_inference_request_failure", toy) == failures);
  // Refused before running: Triton's OTHER.
  REQUIRE(f.Delta(before, after, "nv_inference_request_failure",
                  {{"model", "toy"}, {"version", "2"}, {"reason", "OTHER"}}) == failures);
  REQUIRE(f.Delta(before, after, "nv_inference_count", toy) == successes * B);
  // Each request is alone in its batch here, but a batch may hold several.
  const double executions = f.Delta(before, after, "nv_inference_exec_count", toy);
  REQUIRE(executions >= (successes * B + kMaxBatch - 1) / kMaxBatch);
  REQUIRE(executions <= successes);
  // Durations are summed over the successful requests only; a request's time covers its queue
  // and compute time (a little slack for the sums of fractional microseconds).
  const double request_us = f.Delta(before, after, "nv_inference_request_duration_us", toy);
  const double queue_us = f.Delta(before, after, "nv_inference_queue_duration_us", toy);
  const double compute_us = f.Delta(before, after, "nv_inference_compute_infer_duration_us", toy);
  REQUIRE(compute_us > 0);
  REQUIRE(queue_us >= 0);
  REQUIRE(request_us >= queue_us + compute_us - 1e-3);
  // Triton's series carry exactly Triton's labels.
  for (const auto& sample : ::forecastd::testing::ParsePrometheusText(after)) {
    if (sample.name.rfind("nv_inference_", 0) != 0) continue;
    CAPTURE(sample.name);
    REQUIRE(sample.labels.size() == (sample.name == "nv_inference_request_failure" ? 3u : 2u));
    REQUIRE(sample.labels.count("model") == 1);
    REQUIRE(sample.labels.count("version") == 1);
    REQUIRE(sample.labels.at("model") != "nope");
  }
  // forecastd's own series count the same successful requests.
  const Labels toy_ok = {{"model", "toy"}, {"version", "2"}, {"code", "OK"}};
  REQUIRE(f.Delta(before, after, "forecastd_requests_total", toy_ok) == successes);
  REQUIRE(f.Delta(before, after, "forecastd_requests_total",
                  {{"model", "toy"}, {"version", "2"}, {"code", "INVALID_ARGUMENT"}}) == failures);
  REQUIRE(f.Delta(before, after, "forecastd_batch_size_count", {{"model", "toy"}}) == executions);
  REQUIRE(f.Delta(before, after, "forecastd_batch_size_sum", {{"model", "toy"}}) == successes * B);
}

TEST_CASE("Tick messages and Triton sequence requests count as Triton requests of one inference",
          "[integration][api][metrics][stream]") {
  Fixture f;
  ForecastdDaemon& daemon = *f.daemon;
  const Labels ticks = {{"model", "ticks"}, {"version", "1"}};
  const std::string before = Metrics(daemon);
  const std::vector<float> row = Windows(1, 1, 21);

  // Forecaster.Stream: K tick messages of one tick each, then one malformed message.
  constexpr int K = 4;
  {
    auto context = Context();
    auto stream = daemon.forecaster().Stream(context.get());
    v1::StreamRequest open;
    open.set_key("AAPL");
    open.mutable_open()->set_model("ticks");
    REQUIRE(stream->Write(open));
    v1::StreamResponse reply;
    REQUIRE(stream->Read(&reply));
    REQUIRE(reply.has_status());
    for (int i = 0; i < K; ++i) {
      v1::StreamRequest tick;
      tick.set_key("AAPL");
      tick.mutable_ticks()->mutable_values()->Add(row.begin(), row.end());
      REQUIRE(stream->Write(tick));
      REQUIRE(stream->Read(&reply));
      INFO(reply.DebugString());
      REQUIRE(reply.has_forecast());
    }
    v1::StreamRequest bad;
    bad.set_key("AAPL");
    for (float v : {1.0f, 2.0f, 3.0f}) bad.mutable_ticks()->add_values(v);
    REQUIRE(stream->Write(bad));
    REQUIRE(stream->Read(&reply));
    REQUIRE(reply.error().code() == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
    REQUIRE(stream->WritesDone());
    REQUIRE(stream->Finish().ok());
  }
  // Two requests of one Triton sequence.
  for (const bool start : {true, false}) {
    inference::ModelInferResponse response;
    const grpc::Status status =
        f.kserve->ModelInfer(Context().get(), SequenceTick(5, start, row), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
  }

  const std::string after = Metrics(daemon);
  CAPTURE(after);
  REQUIRE(f.Delta(before, after, "nv_inference_request_success", ticks) == K + 2);
  REQUIRE(f.Delta(before, after, "nv_inference_request_failure", ticks) == 1);
  REQUIRE(f.Delta(before, after, "nv_inference_count", ticks) == K + 2);
  REQUIRE(f.Delta(before, after, "nv_inference_compute_infer_duration_us", ticks) > 0);
  REQUIRE(f.Delta(before, after, "nv_inference_request_duration_us", ticks) >=
          f.Delta(before, after, "nv_inference_queue_duration_us", ticks) +
              f.Delta(before, after, "nv_inference_compute_infer_duration_us", ticks) - 1e-3);
  // The same ticks in forecastd's own stream series.
  REQUIRE(f.Delta(before, after, "forecastd_stream_ticks_total",
                  {{"model", "ticks"}, {"code", "OK"}}) == K + 2);
}

TEST_CASE("Without a GPU no nv_gpu series are exported", "[integration][api][metrics]") {
  Fixture f;  // --devices cpu
  const std::string metrics = Metrics(*f.daemon);
  CAPTURE(metrics);
  REQUIRE(metrics.find("nv_gpu_") == std::string::npos);
  REQUIRE(metrics.find("forecastd_gpu_") == std::string::npos);
  // A loaded version's inference and execution counts are there, at zero, from the start.
  const Labels toy = {{"model", "toy"}, {"version", "2"}};
  REQUIRE(SumSamples(metrics, "nv_inference_count", toy).series == 1);
  REQUIRE(SumSamples(metrics, "nv_inference_exec_count", toy).series == 1);
}

}  // namespace
}  // namespace forecastd::api_test
