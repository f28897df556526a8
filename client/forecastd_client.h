// A client of one forecastd: the Forecaster and Admin stubs over one channel, each call
// bounded by the options' timeout and its gRPC status turned into an absl::Status with the
// same code and message. forecastctl and the integration tests use it.
// Thread-safe: the stubs are, and every call makes its own ClientContext.
#ifndef FORECASTD_CLIENT_FORECASTD_CLIENT_H_
#define FORECASTD_CLIENT_FORECASTD_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace forecastd {

// The absl::Status of a gRPC status: same code (the two enums share their values), same
// message.
absl::Status FromGrpcStatus(const grpc::Status& status);

class ForecastdClient {
 public:
  struct Options {
    // host:port of the daemon's gRPC port.
    std::string address = "127.0.0.1:8001";
    // Deadline of each unary call. Benchmark gets its measuring time on top.
    absl::Duration timeout = absl::Seconds(30);
    // Largest message sent or received; the daemon's --max-message-bytes default.
    int max_message_bytes = 64 << 20;
    // How the channel is secured (MakeChannelCredentials in client/client_security.h);
    // nullptr: plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials;
    // Sent as `authorization: Bearer <token>` with every call; "": none.
    std::string bearer_token;
  };

  // INVALID_ARGUMENT for an empty address or a non-positive timeout. Connects lazily: an
  // unreachable daemon shows as UNAVAILABLE on the first call.
  static absl::StatusOr<std::unique_ptr<ForecastdClient>> Create(const Options& options);

  const Options& options() const { return options_; }

  // --- Admin
  absl::StatusOr<v1::ServerStatus> GetServerStatus();
  absl::StatusOr<v1::ListModelsResponse> ListModels();
  absl::StatusOr<v1::ModelStatus> GetModel(const std::string& name);
  absl::StatusOr<v1::ModelStatus> LoadModel(const std::string& name);
  absl::StatusOr<v1::ModelStatus> UnloadModel(const std::string& name);
  absl::StatusOr<v1::ModelStatus> SetServingVersion(const std::string& name, int64_t version);
  absl::StatusOr<v1::DeleteModelVersionResponse> DeleteModelVersion(const std::string& name,
                                                                    int64_t version);
  // The tick streams of `model` ("": of every model).
  absl::StatusOr<v1::ListStreamsResponse> ListStreams(const std::string& model);
  // Hands this daemon ranks of another daemon's training job (what a coordinating forecastd
  // calls on its workers).
  absl::StatusOr<v1::JoinTrainJobResponse> JoinTrainJob(const v1::JoinTrainJobRequest& request);

  // --- Forecaster
  absl::StatusOr<v1::PredictResponse> Predict(const v1::PredictRequest& request);
  absl::StatusOr<v1::TrainResponse> Train(const v1::TrainRequest& request);
  absl::StatusOr<v1::TrainJobInfo> GetTrainJob(const std::string& job_id);
  absl::StatusOr<v1::ListTrainJobsResponse> ListTrainJobs(const std::string& model);
  absl::StatusOr<v1::TrainJobInfo> CancelTrainJob(const std::string& job_id);
  // The deadline is the timeout plus, per (batch size, concurrency) point, its duration and
  // a warm-up allowance.
  absl::StatusOr<v1::BenchmarkResponse> Benchmark(const v1::BenchmarkRequest& request);

  // Streams the job's progress (earlier events replayed first) to `on_progress` and returns
  // its final state once it has ended. No deadline: it lasts as long as the job. Another
  // thread may end it early with `context.TryCancel()`, which makes it return CANCELLED.
  // `context` must be fresh (a ClientContext serves one call); the token is added to it.
  absl::StatusOr<v1::TrainJobInfo> WatchTrainJob(
      const std::string& job_id, grpc::ClientContext& context,
      const std::function<void(const v1::TrainProgressEvent&)>& on_progress);

  // Starts a Forecaster.Stream call on `context` (fresh; the token is added to it, no
  // deadline: a stream lasts as long as its caller keeps it).
  std::unique_ptr<grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>> Stream(
      grpc::ClientContext& context);

 private:
  explicit ForecastdClient(const Options& options);
  // A context whose deadline is `timeout` (plus `extra`) from now.
  std::unique_ptr<grpc::ClientContext> UnaryContext(absl::Duration extra = absl::ZeroDuration());
  void AddToken(grpc::ClientContext& context) const;

  const Options options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Forecaster::Stub> forecaster_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_FORECASTD_CLIENT_H_
