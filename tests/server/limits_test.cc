// The request limits of the real forecastd binary, each with the code and the flag its refusal
// names: --max-batch-rows (INVALID_ARGUMENT) and --max-request-memory-bytes
// (RESOURCE_EXHAUSTED) on Predict and KServe ModelInfer alike, --max-train-series-rows
// (INVALID_ARGUMENT), --max-training-jobs (RESOURCE_EXHAUSTED) and --max-queue-per-model
// (RESOURCE_EXHAUSTED). --max-message-bytes is covered by forecastd_api_test.
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/predict_input.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::TempDir;

inference::ModelInferRequest InferRequest(int64_t B, uint32_t seed) {
  const std::vector<float> x = Windows(B, kT, seed);
  inference::ModelInferRequest request;
  request.set_model_name("toy");
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t d : {B, int64_t{kT}, int64_t{kF}}) input->add_shape(d);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(x.data()), x.size() * sizeof(float)));
  return request;
}

// The first `rows` rows of Training(epochs)'s series.
v1::TrainingConfig ShortTraining(int epochs, int rows) {
  v1::TrainingConfig training = Training(epochs);
  v1::InlineSeries* series = training.mutable_data()->mutable_inline_series();
  series->set_rows(rows);
  series->mutable_values()->Truncate(rows * kF);
  return training;
}

TEST_CASE("Limits: batch rows and request memory refuse Predict and ModelInfer alike",
          "[integration][limits]") {
  Repository repository;
  // Two toy windows fit in the memory limit, three do not; five are above the row limit.
  const int64_t two = EstimatePredictBytes(*repository.toy_v2, 2);
  REQUIRE(two >= 1024);
  REQUIRE(EstimatePredictBytes(*repository.toy_v2, 3) > two);
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.dir.path(),
                  {"--max-batch-rows", "4", "--max-request-memory-bytes", absl::StrCat(two)});
  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());

  v1::PredictResponse response;
  const v1::PredictRequest fits = ToyRequest(2, 301);
  grpc::Status status = Predict(*daemon, fits, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()), Expected(*repository.toy_v2, Floats(fits.inputs())));
  RequireError(Predict(*daemon, ToyRequest(3, 302), &response),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "batch of 3 windows needs an estimated");
  RequireError(Predict(*daemon, ToyRequest(3, 302), &response),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "(--max-request-memory-bytes)");
  RequireError(Predict(*daemon, ToyRequest(5, 303), &response), grpc::StatusCode::INVALID_ARGUMENT,
               "batch of 5 windows is above this server's limit of 4 per request "
               "(--max-batch-rows)");
  // The model's own max_batch_size (8) still applies where it is the smaller.
  RequireError(Predict(*daemon, ToyRequest(9, 304), &response), grpc::StatusCode::INVALID_ARGUMENT,
               "max_batch_size 8 of model 'toy'");

  inference::ModelInferResponse infer;
  status = kserve->ModelInfer(Context().get(), InferRequest(2, 305), &infer);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireError(kserve->ModelInfer(Context().get(), InferRequest(3, 306), &infer),
               grpc::StatusCode::RESOURCE_EXHAUSTED, "(--max-request-memory-bytes)");
  RequireError(kserve->ModelInfer(Context().get(), InferRequest(5, 307), &infer),
               grpc::StatusCode::INVALID_ARGUMENT, "(--max-batch-rows)");

  v1::BenchmarkRequest benchmark;
  benchmark.set_model("toy");
  benchmark.add_batch_sizes(5);
  v1::BenchmarkResponse points;
  RequireError(daemon->forecaster().Benchmark(Context().get(), benchmark, &points),
               grpc::StatusCode::INVALID_ARGUMENT, "(--max-batch-rows)");
  REQUIRE(daemon->process().Running());
}

TEST_CASE("Limits: training series rows and concurrent training jobs", "[integration][limits]") {
  TempDir repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--max-train-series-rows", "60", "--max-training-jobs", "1"});
  const ModelConfig long_config = TrainedConfig("long");
  const ModelConfig other_config = TrainedConfig("other");

  RequireError(Train(*daemon, TrainRequest("long", &long_config, ShortTraining(1, 61)), nullptr),
               grpc::StatusCode::INVALID_ARGUMENT,
               "the training series has 61 rows; this server takes at most 60 "
               "(--max-train-series-rows)");

  std::string id;
  const grpc::Status started =
      Train(*daemon, TrainRequest("long", &long_config, ShortTraining(100000, 60)), &id);
  INFO(started.error_message());
  REQUIRE(started.ok());
  RequireError(Train(*daemon, TrainRequest("other", &other_config, ShortTraining(1, 40)), nullptr),
               grpc::StatusCode::RESOURCE_EXHAUSTED,
               "1 training jobs are running, the most this server runs at once");

  v1::CancelTrainJobRequest cancel;
  cancel.set_job_id(id);
  v1::TrainJobInfo info;
  REQUIRE(daemon->forecaster().CancelTrainJob(Context().get(), cancel, &info).ok());
}

TEST_CASE("Limits: --max-queue-per-model caps a model's queue", "[integration][limits]") {
  TempDir repository;
  // A model whose batches wait a minute for more rows: a request stays queued until then.
  ModelConfig config = BaseConfig("slow", kT, {"load"});
  config.mutable_lstm()->set_hidden_size(8);
  config.mutable_lstm()->set_num_layers(1);
  config.mutable_batching()->set_max_queue_delay_us(60'000'000);
  const std::shared_ptr<Forecaster> slow = MakeModel(config, 7);
  Publish(repository, *slow, 1);
  // Batched even when idle: inline, the lone request would run at once instead of queueing.
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--max-queue-per-model", "1", "--no-inline-when-idle"});

  const v1::PredictRequest request = Request("slow", {1, kT, kF}, Windows(1, kT, 401));
  grpc::ClientContext first_context;
  first_context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcBound));
  grpc::Status first;
  std::thread first_call([&] {
    v1::PredictResponse response;
    first = daemon->forecaster().Predict(&first_context, request, &response);
  });
  const absl::Time give_up = absl::Now() + kRpcBound;
  int64_t queued = 0;
  do {
    const v1::ModelStatus model = GetModel(*daemon, "slow");
    queued = model.loaded_size() > 0 ? model.loaded(0).queued() : 0;
    if (queued == 0) absl::SleepFor(absl::Milliseconds(10));
  } while (queued == 0 && absl::Now() < give_up);
  REQUIRE(queued == 1);

  v1::PredictResponse response;
  RequireError(Predict(*daemon, request, &response), grpc::StatusCode::RESOURCE_EXHAUSTED,
               "queue is full (max_queue_size 1");
  first_context.TryCancel();
  first_call.join();
  REQUIRE(first.error_code() == grpc::StatusCode::CANCELLED);
}

}  // namespace
}  // namespace forecastd::api_test
