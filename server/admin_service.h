// forecastd.v1.Admin: what is loaded and serving, loading, unloading and promoting versions,
// the tick streams kept, and the server's state. Thin: each handler converts, calls the
// ModelRegistry (or the StreamHub, or the status probes), and converts back. Thread-safe: gRPC
// calls handlers concurrently; the registry serialises admin operations per model.
#ifndef FORECASTD_SERVER_ADMIN_SERVICE_H_
#define FORECASTD_SERVER_ADMIN_SERVICE_H_

#include <functional>
#include <map>
#include <string>
#include <utility>

#include "absl/status/status.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/stream_hub.h"
#include "engine/train/train_job_manager.h"
#include "forecastd/v1/admin.grpc.pb.h"

namespace forecastd {

class AdminService final : public v1::Admin::Service {
 public:
  struct Options {
    ModelRegistry* registry = nullptr;  // not owned
    StreamHub* streams = nullptr;       // not owned; nullptr: ListStreams lists none
    // Not owned; nullptr: DeleteModelVersion checks no jobs and removes no checkpoints.
    TrainJobManager* jobs = nullptr;
    // The server's live state for GetServerStatus.
    std::function<v1::ServerStatus()> server_status;
    std::function<bool()> accepting;  // false while draining: Load and promote refused
    // Called first by every handler; a call it refuses gets its status. Empty: every call is
    // allowed. (CheckAuthorized when tokens are on.)
    std::function<absl::Status(const grpc::ServerContextBase&)> authorize = nullptr;
    // Runs ranks of another daemon's training job here (JoinAsWorker); empty: JoinTrainJob is
    // UNIMPLEMENTED.
    std::function<absl::StatusOr<v1::JoinTrainJobResponse>(const v1::JoinTrainJobRequest&)>
        join_train_job;
  };

  explicit AdminService(Options options) : options_(std::move(options)) {}

  grpc::Status ListModels(grpc::ServerContext* context, const v1::ListModelsRequest* request,
                          v1::ListModelsResponse* response) override;
  grpc::Status GetModel(grpc::ServerContext* context, const v1::GetModelRequest* request,
                        v1::ModelStatus* response) override;
  grpc::Status LoadModel(grpc::ServerContext* context, const v1::LoadModelRequest* request,
                         v1::ModelStatus* response) override;
  grpc::Status UnloadModel(grpc::ServerContext* context, const v1::UnloadModelRequest* request,
                           v1::ModelStatus* response) override;
  grpc::Status SetServingVersion(grpc::ServerContext* context,
                                 const v1::SetServingVersionRequest* request,
                                 v1::ModelStatus* response) override;
  grpc::Status DeleteModelVersion(grpc::ServerContext* context,
                                  const v1::DeleteModelVersionRequest* request,
                                  v1::DeleteModelVersionResponse* response) override;
  grpc::Status GetServerStatus(grpc::ServerContext* context,
                               const v1::GetServerStatusRequest* request,
                               v1::ServerStatus* response) override;
  // The model's tick streams and their memory, into `status`.
  static void AddStreamUsage(const std::map<std::string, StreamHub::ModelUsage>& usage,
                             v1::ModelStatus* status);
  grpc::Status JoinTrainJob(grpc::ServerContext* context, const v1::JoinTrainJobRequest* request,
                            v1::JoinTrainJobResponse* response) override;
  grpc::Status ListStreams(grpc::ServerContext* context, const v1::ListStreamsRequest* request,
                           v1::ListStreamsResponse* response) override;
  grpc::Status ExportStream(grpc::ServerContext* context, const v1::ExportStreamRequest* request,
                            v1::StreamRecord* response) override;
  grpc::Status ImportStream(grpc::ServerContext* context, const v1::StreamRecord* request,
                            v1::StreamInfo* response) override;

 private:
  // Fills `response` with the model's status after an operation that returned `done`.
  grpc::Status Reply(const std::string& model, const absl::Status& done, v1::ModelStatus* response);
  bool accepting() const { return !options_.accepting || options_.accepting(); }
  absl::Status Authorize(const grpc::ServerContextBase& context) const {
    return options_.authorize ? options_.authorize(context) : absl::OkStatus();
  }

  const Options options_;
};

v1::ModelStatus ToModelStatusProto(const ModelStatus& status);
v1::StreamInfo ToStreamInfoProto(const StreamInfo& info);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_ADMIN_SERVICE_H_
