// forecastd.v1.Forecaster: Predict goes through the admission step (server/predict_call.h)
// to the model's batcher without blocking a gRPC thread (callback API); the training-job methods
// call the TrainJobManager; Stream carries tick streams to the StreamHub; Benchmark drives a model
// through the same engine path with synthetic windows. Handlers validate, convert, enqueue and
// convert back; errors leave through ToGrpcStatus. Thread-safe: gRPC calls every handler
// concurrently.
#ifndef FORECASTD_SERVER_FORECASTER_SERVICE_H_
#define FORECASTD_SERVER_FORECASTER_SERVICE_H_

#include <atomic>
#include <functional>
#include <memory>
#include <string>

#include "engine/clock.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/stream_hub.h"
#include "engine/train/train_job_manager.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "server/predict_call.h"
#include "server/serving_metrics.h"

namespace forecastd {

class ForecasterService final
    : public v1::Forecaster::WithCallbackMethod_Predict<
          v1::Forecaster::WithCallbackMethod_Stream<v1::Forecaster::Service>> {
 public:
  struct Options {
    ModelRegistry* registry = nullptr;  // not owned
    TrainJobManager* jobs = nullptr;    // not owned
    ServingMetrics* metrics = nullptr;  // not owned; may be nullptr
    StreamHub* streams = nullptr;       // not owned; nullptr: Stream answers UNAVAILABLE
    Clock* clock = nullptr;             // not owned; nullptr: real clock
    bool allow_non_finite_inputs = false;
    // False once the server drains: new Predict, Train and Benchmark calls get UNAVAILABLE.
    std::function<bool()> accepting;
    // Called first by every handler; a call it refuses gets its status and is not counted in
    // the request metrics. Empty: every call is allowed. (CheckAuthorized when tokens are on.)
    std::function<absl::Status(const grpc::ServerContextBase&)> authorize = nullptr;
    // Called for a Train with promote set, after `authorize`: promoting changes what serves,
    // which is the admin role's. Empty: allowed. (CheckRole(.., kAdmin, ..) when tokens are on.)
    std::function<absl::Status(const grpc::ServerContextBase&)> authorize_promote = nullptr;
    // The server's limits on one Predict (WindowLimits); 0: none. max_batch_rows also bounds
    // Benchmark's batch sizes.
    int64_t max_batch_rows = 0;
    int64_t max_request_memory_bytes = 0;
  };

  explicit ForecasterService(Options options);

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const v1::PredictRequest* request,
                                    v1::PredictResponse* response) override;
  grpc::Status Train(grpc::ServerContext* context, const v1::TrainRequest* request,
                     v1::TrainResponse* response) override;
  grpc::Status WatchTrainJob(grpc::ServerContext* context, const v1::WatchTrainJobRequest* request,
                             grpc::ServerWriter<v1::TrainJobEvent>* writer) override;
  grpc::Status GetTrainJob(grpc::ServerContext* context, const v1::GetTrainJobRequest* request,
                           v1::TrainJobInfo* response) override;
  grpc::Status ListTrainJobs(grpc::ServerContext* context, const v1::ListTrainJobsRequest* request,
                             v1::ListTrainJobsResponse* response) override;
  grpc::Status CancelTrainJob(grpc::ServerContext* context,
                              const v1::CancelTrainJobRequest* request,
                              v1::TrainJobInfo* response) override;
  grpc::Status Benchmark(grpc::ServerContext* context, const v1::BenchmarkRequest* request,
                         v1::BenchmarkResponse* response) override;
  // Tick streams: server/stream_call.h.
  grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse>* Stream(
      grpc::CallbackServerContext* context) override;

  // Predict calls taken into a model's queue so far, and those of them answered (with a
  // forecast or an error); equal once the server has drained. The shutdown log reports both.
  struct PredictCounts {
    int64_t accepted = 0;
    int64_t answered = 0;
  };
  PredictCounts predict_counts() const {
    return {counts_->accepted.load(), counts_->answered.load()};
  }

 private:
  struct Counters {
    std::atomic<int64_t> accepted{0};
    std::atomic<int64_t> answered{0};
  };

  bool accepting() const { return !options_.accepting || options_.accepting(); }
  absl::Status Authorize(const grpc::ServerContextBase& context) const {
    return options_.authorize ? options_.authorize(context) : absl::OkStatus();
  }

  const Options options_;
  const PredictAdmission admission_;
  // Shared with the callbacks of queued work, which may outlive a handler's return.
  const std::shared_ptr<Counters> counts_ = std::make_shared<Counters>();
};

// The job as the API reports it.
v1::TrainJobInfo ToTrainJobInfo(const JobSnapshot& job);
v1::TrainProgressEvent ToProgressEvent(const TrainProgress& progress);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_FORECASTER_SERVICE_H_
