#include "client/forecastd_client.h"

#include <algorithm>
#include <chrono>
#include <utility>

#include "absl/strings/str_cat.h"

namespace forecastd {
namespace {

// What one benchmark point may take beyond its measured duration: warm-up requests and the
// switch between points.
constexpr absl::Duration kBenchmarkPointAllowance = absl::Seconds(5);

// Runs one unary RPC and returns its response or its status.
template <typename Response, typename Call>
absl::StatusOr<Response> Unary(Call&& call) {
  Response response;
  const grpc::Status status = call(&response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()), status.error_message());
}

absl::StatusOr<std::unique_ptr<ForecastdClient>> ForecastdClient::Create(const Options& options) {
  if (options.address.empty()) return absl::InvalidArgumentError("the address is empty");
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the timeout must be positive, not ", absl::FormatDuration(options.timeout)));
  }
  if (options.max_message_bytes < 1024) {
    return absl::InvalidArgumentError("max_message_bytes must be at least 1024");
  }
  return std::unique_ptr<ForecastdClient>(new ForecastdClient(options));
}

ForecastdClient::ForecastdClient(const Options& options) : options_(options) {
  grpc::ChannelArguments arguments;
  arguments.SetMaxReceiveMessageSize(options_.max_message_bytes);
  arguments.SetMaxSendMessageSize(options_.max_message_bytes);
  channel_ = grpc::CreateCustomChannel(
      options_.address,
      options_.credentials != nullptr ? options_.credentials : grpc::InsecureChannelCredentials(),
      arguments);
  forecaster_ = v1::Forecaster::NewStub(channel_);
  admin_ = v1::Admin::NewStub(channel_);
}

void ForecastdClient::AddToken(grpc::ClientContext& context) const {
  if (!options_.bearer_token.empty()) {
    context.AddMetadata("authorization", absl::StrCat("Bearer ", options_.bearer_token));
  }
}

std::unique_ptr<grpc::ClientContext> ForecastdClient::UnaryContext(absl::Duration extra) {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() +
                        absl::ToChronoMilliseconds(options_.timeout + extra));
  AddToken(*context);
  return context;
}

absl::StatusOr<v1::ServerStatus> ForecastdClient::GetServerStatus() {
  return Unary<v1::ServerStatus>([&](v1::ServerStatus* response) {
    return admin_->GetServerStatus(UnaryContext().get(), v1::GetServerStatusRequest(), response);
  });
}

absl::StatusOr<v1::ListModelsResponse> ForecastdClient::ListModels() {
  return Unary<v1::ListModelsResponse>([&](v1::ListModelsResponse* response) {
    return admin_->ListModels(UnaryContext().get(), v1::ListModelsRequest(), response);
  });
}

absl::StatusOr<v1::ModelStatus> ForecastdClient::GetModel(const std::string& name) {
  v1::GetModelRequest request;
  request.set_name(name);
  return Unary<v1::ModelStatus>([&](v1::ModelStatus* response) {
    return admin_->GetModel(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::ModelStatus> ForecastdClient::LoadModel(const std::string& name) {
  v1::LoadModelRequest request;
  request.set_name(name);
  return Unary<v1::ModelStatus>([&](v1::ModelStatus* response) {
    return admin_->LoadModel(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::ModelStatus> ForecastdClient::UnloadModel(const std::string& name) {
  v1::UnloadModelRequest request;
  request.set_name(name);
  return Unary<v1::ModelStatus>([&](v1::ModelStatus* response) {
    return admin_->UnloadModel(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::ModelStatus> ForecastdClient::SetServingVersion(const std::string& name,
                                                                   int64_t version) {
  v1::SetServingVersionRequest request;
  request.set_name(name);
  request.set_version(version);
  return Unary<v1::ModelStatus>([&](v1::ModelStatus* response) {
    return admin_->SetServingVersion(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::DeleteModelVersionResponse> ForecastdClient::DeleteModelVersion(
    const std::string& name, int64_t version) {
  v1::DeleteModelVersionRequest request;
  request.set_name(name);
  request.set_version(version);
  return Unary<v1::DeleteModelVersionResponse>([&](v1::DeleteModelVersionResponse* response) {
    return admin_->DeleteModelVersion(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::ListStreamsResponse> ForecastdClient::ListStreams(const std::string& model) {
  v1::ListStreamsRequest request;
  request.set_model(model);
  return Unary<v1::ListStreamsResponse>([&](v1::ListStreamsResponse* response) {
    return admin_->ListStreams(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::PredictResponse> ForecastdClient::Predict(const v1::PredictRequest& request) {
  return Unary<v1::PredictResponse>([&](v1::PredictResponse* response) {
    return forecaster_->Predict(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::TrainResponse> ForecastdClient::Train(const v1::TrainRequest& request) {
  return Unary<v1::TrainResponse>([&](v1::TrainResponse* response) {
    return forecaster_->Train(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::JoinTrainJobResponse> ForecastdClient::JoinTrainJob(
    const v1::JoinTrainJobRequest& request) {
  return Unary<v1::JoinTrainJobResponse>([&](v1::JoinTrainJobResponse* response) {
    return admin_->JoinTrainJob(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::TrainJobInfo> ForecastdClient::GetTrainJob(const std::string& job_id) {
  v1::GetTrainJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::TrainJobInfo>([&](v1::TrainJobInfo* response) {
    return forecaster_->GetTrainJob(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::ListTrainJobsResponse> ForecastdClient::ListTrainJobs(const std::string& model) {
  v1::ListTrainJobsRequest request;
  request.set_model(model);
  return Unary<v1::ListTrainJobsResponse>([&](v1::ListTrainJobsResponse* response) {
    return forecaster_->ListTrainJobs(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::TrainJobInfo> ForecastdClient::CancelTrainJob(const std::string& job_id) {
  v1::CancelTrainJobRequest request;
  request.set_job_id(job_id);
  return Unary<v1::TrainJobInfo>([&](v1::TrainJobInfo* response) {
    return forecaster_->CancelTrainJob(UnaryContext().get(), request, response);
  });
}

absl::StatusOr<v1::BenchmarkResponse> ForecastdClient::Benchmark(
    const v1::BenchmarkRequest& request) {
  const int64_t points =
      std::max(1, request.batch_sizes_size()) * int64_t{std::max(1, request.concurrency_size())};
  const absl::Duration per_point =
      absl::Milliseconds(request.duration_ms() == 0 ? 1000 : request.duration_ms()) +
      kBenchmarkPointAllowance;
  return Unary<v1::BenchmarkResponse>([&](v1::BenchmarkResponse* response) {
    return forecaster_->Benchmark(UnaryContext(points * per_point).get(), request, response);
  });
}

absl::StatusOr<v1::TrainJobInfo> ForecastdClient::WatchTrainJob(
    const std::string& job_id, grpc::ClientContext& context,
    const std::function<void(const v1::TrainProgressEvent&)>& on_progress) {
  v1::WatchTrainJobRequest request;
  request.set_job_id(job_id);
  AddToken(context);
  std::unique_ptr<grpc::ClientReader<v1::TrainJobEvent>> reader =
      forecaster_->WatchTrainJob(&context, request);
  v1::TrainJobEvent event;
  v1::TrainJobInfo finished;
  bool have_finished = false;
  while (reader->Read(&event)) {
    if (event.has_progress()) {
      on_progress(event.progress());
    } else if (event.has_finished()) {
      finished = event.finished();
      have_finished = true;
    }
  }
  const grpc::Status status = reader->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  if (!have_finished) {
    return absl::UnknownError(
        absl::StrCat("the watch of job ", job_id, " ended without the job's final state"));
  }
  return finished;
}

std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>>
ForecastdClient::Stream(grpc::ClientContext& context) {
  AddToken(context);
  return forecaster_->Stream(&context);
}

}  // namespace forecastd
