// inference.GRPCInferenceService: the KServe v2 / Open Inference Protocol with Triton's
// statistics, model-configuration and model-repository extensions
// (proto/inference/grpc_service.proto), so Triton's clients (tritonclient.grpc,
// perf_analyzer) drive forecastd's models unchanged. Works against the ModelRegistry only:
// handlers validate, convert, enqueue and convert back; errors leave through ToGrpcStatus.
//
// How a forecaster looks as a KServe model:
//   input  "INPUT"     FP32 [B, T, F]  (metadata shape [-1, T, F]; config dims [T, F])
//   output "FORECAST"  FP32 [B, P, K] or [B, P, K, Q] with quantiles (config dims without B)
// with T the lookback, F the features, P the horizon, K the targets, Q the quantiles, and
// max_batch_size the model's batching limit (BatchingConfig.max_batch_size, 0 -> 32).
// The input comes as raw_input_contents (little-endian float32, as tritonclient sends it) or
// as contents.fp32_contents; the forecast always goes back as raw_output_contents, which is
// what Triton returns and the only form tritonclient's InferResult.as_numpy() decodes.
// Request parameters, as Triton's: "priority" (int64 or uint64; 1 the highest level, 0 the
// model's default) and "timeout" (int64 or uint64 microseconds: a queue timeout that may only
// shorten the level's policy); the gRPC deadline becomes the task's deadline.
//
// ModelInfer uses the callback API: the handler enqueues and returns, and the engine thread
// that completes the task finishes the call, so no gRPC thread waits on compute.
// ModelStreamInfer is a callback stream (server/kserve_stream.h): each request read goes
// through DispatchStreamRequest, which sends an ordinary request through the same admission
// as ModelInfer; its answer, or its error as error_message, is written back in completion
// order with the request's id, and the stream stays open after a failed request. The other
// methods are synchronous (RepositoryModelLoad waits for a load and its warm-up). LogSettings
// reads and changes the log level (server/kserve_log_settings.h).
// System shared memory (Triton's extension; server/shared_memory.h): a caller registers
// regions of its POSIX shared-memory objects, then an input with the parameters
// "shared_memory_region", "shared_memory_byte_size" and optionally "shared_memory_offset" is
// read from its region (the same checks as raw bytes), and an output with them has the forecast
// written into its region instead of raw_output_contents (the reply's output then carries
// those parameters, as Triton's does). Regions belong to the caller's identity. CUDA shared
// memory and trace answer UNIMPLEMENTED, saying why.
// Thread-safe: gRPC calls every handler concurrently. The statistics live in shared state
// that completion callbacks keep alive, so the service may be destroyed before the registry
// has drained; the registry and metrics must outlive every call in flight.
#ifndef FORECASTD_SERVER_KSERVE_SERVICE_H_
#define FORECASTD_SERVER_KSERVE_SERVICE_H_

#include <functional>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "engine/clock.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/stream_hub.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/kserve_request.h"
#include "server/kserve_sequences.h"
#include "server/kserve_stream.h"
#include "server/predict_call.h"
#include "server/serving_metrics.h"
#include "server/shared_memory.h"
#include "server/triton_model_config.h"

namespace forecastd {

class KServeStatistics;

// The generated service with ModelInfer and ModelStreamInfer on the callback API.
using KServeServiceBase = inference::GRPCInferenceService::WithCallbackMethod_ModelInfer<
    inference::GRPCInferenceService::WithCallbackMethod_ModelStreamInfer<
        inference::GRPCInferenceService::Service>>;

class KServeService final : public KServeServiceBase {
 public:
  struct Options {
    // What serves the models. Not owned; required; must outlive every call in flight.
    ModelRegistry* registry = nullptr;
    // Where requests are counted (method "ModelInfer", or "ModelStreamInfer" for each request
    // on a stream). Not owned; may be nullptr.
    ServingMetrics* metrics = nullptr;
    // The engine's clock, which task deadlines and the statistics' durations are read on.
    // Not owned; nullptr: the real clock.
    Clock* clock = nullptr;
    // Whether the server is ready: false while it starts or drains. ServerReady reports it,
    // ModelReady answers false and ModelInfer refuses new calls (UNAVAILABLE) while it is
    // false, as a stream refuses new requests. Empty: always ready.
    std::function<bool()> ready;
    // Accept NaN and infinite input values (refused with INVALID_ARGUMENT by default).
    bool allow_non_finite_inputs = false;
    // Called first by every handler; a call it refuses gets its status and is counted neither
    // in the statistics nor in the request metrics. Empty: every call is allowed.
    // (CheckAuthorized when tokens are on.)
    std::function<absl::Status(const grpc::ServerContextBase&)> authorize = nullptr;
    // The server's limits on one ModelInfer (WindowLimits in server/predict_input.h); 0: none.
    int64_t max_batch_rows = 0;
    int64_t max_request_memory_bytes = 0;
    // Who owns what a call registers (system shared-memory regions): the caller's identity
    // (CallerIdentity when tokens are on). Empty: every caller is the same owner.
    std::function<std::string(const grpc::ServerContextBase&)> identify = nullptr;
    // Where requests carrying Triton's sequence_id go (server/kserve_sequences.h). Not owned;
    // must outlive the service; nullptr: such requests are refused.
    StreamHub* tick_streams = nullptr;
  };

  // INVALID_ARGUMENT without a registry.
  static absl::StatusOr<std::unique_ptr<KServeService>> Create(Options options);

  grpc::Status ServerLive(grpc::ServerContext* context, const inference::ServerLiveRequest* request,
                          inference::ServerLiveResponse* response) override;
  grpc::Status ServerReady(grpc::ServerContext* context,
                           const inference::ServerReadyRequest* request,
                           inference::ServerReadyResponse* response) override;
  grpc::Status ModelReady(grpc::ServerContext* context, const inference::ModelReadyRequest* request,
                          inference::ModelReadyResponse* response) override;
  grpc::Status ServerMetadata(grpc::ServerContext* context,
                              const inference::ServerMetadataRequest* request,
                              inference::ServerMetadataResponse* response) override;
  grpc::Status ModelMetadata(grpc::ServerContext* context,
                             const inference::ModelMetadataRequest* request,
                             inference::ModelMetadataResponse* response) override;
  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* context,
                                       const inference::ModelInferRequest* request,
                                       inference::ModelInferResponse* response) override;
  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* context) override;
  grpc::Status ModelConfig(grpc::ServerContext* context,
                           const inference::ModelConfigRequest* request,
                           inference::ModelConfigResponse* response) override;
  grpc::Status ModelStatistics(grpc::ServerContext* context,
                               const inference::ModelStatisticsRequest* request,
                               inference::ModelStatisticsResponse* response) override;
  grpc::Status RepositoryIndex(grpc::ServerContext* context,
                               const inference::RepositoryIndexRequest* request,
                               inference::RepositoryIndexResponse* response) override;
  grpc::Status RepositoryModelLoad(grpc::ServerContext* context,
                                   const inference::RepositoryModelLoadRequest* request,
                                   inference::RepositoryModelLoadResponse* response) override;
  grpc::Status RepositoryModelUnload(grpc::ServerContext* context,
                                     const inference::RepositoryModelUnloadRequest* request,
                                     inference::RepositoryModelUnloadResponse* response) override;

  // System shared memory (server/shared_memory.h), regions owned by the caller's identity.
  grpc::Status SystemSharedMemoryStatus(
      grpc::ServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
      inference::SystemSharedMemoryStatusResponse* response) override;
  grpc::Status SystemSharedMemoryRegister(
      grpc::ServerContext* context, const inference::SystemSharedMemoryRegisterRequest* request,
      inference::SystemSharedMemoryRegisterResponse* response) override;
  grpc::Status SystemSharedMemoryUnregister(
      grpc::ServerContext* context, const inference::SystemSharedMemoryUnregisterRequest* request,
      inference::SystemSharedMemoryUnregisterResponse* response) override;
  // Not supported: UNIMPLEMENTED, saying so (but unregistering all CUDA regions is OK).
  grpc::Status CudaSharedMemoryStatus(grpc::ServerContext* context,
                                      const inference::CudaSharedMemoryStatusRequest* request,
                                      inference::CudaSharedMemoryStatusResponse* response) override;
  grpc::Status CudaSharedMemoryRegister(
      grpc::ServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
      inference::CudaSharedMemoryRegisterResponse* response) override;
  grpc::Status CudaSharedMemoryUnregister(
      grpc::ServerContext* context, const inference::CudaSharedMemoryUnregisterRequest* request,
      inference::CudaSharedMemoryUnregisterResponse* response) override;
  grpc::Status TraceSetting(grpc::ServerContext* context,
                            const inference::TraceSettingRequest* request,
                            inference::TraceSettingResponse* response) override;
  // Reads and changes the log level (UpdateLogSettings).
  grpc::Status LogSettings(grpc::ServerContext* context,
                           const inference::LogSettingsRequest* request,
                           inference::LogSettingsResponse* response) override;

  // --- The same calls for a front door that authorizes its callers itself (the REST port,
  // server/kserve_http.h, with CallAuthenticator::Decide and the same access table): each gRPC
  // handler above is its Authorize followed by one of these, so both front doors share every
  // check and every answer.

  // ServerReady's answer.
  bool IsReady() const { return ready(); }
  absl::Status CheckModelReady(const inference::ModelReadyRequest& request,
                               inference::ModelReadyResponse* response) const;
  void DescribeServer(inference::ServerMetadataResponse* response) const;
  absl::Status DescribeModel(const inference::ModelMetadataRequest& request,
                             inference::ModelMetadataResponse* response) const;
  absl::Status GetModelConfig(const inference::ModelConfigRequest& request,
                              inference::ModelConfigResponse* response) const;
  absl::Status GetStatistics(const inference::ModelStatisticsRequest& request,
                             inference::ModelStatisticsResponse* response) const;
  absl::Status ListRepository(const inference::RepositoryIndexRequest& request,
                              inference::RepositoryIndexResponse* response) const;
  absl::Status LoadModel(const inference::RepositoryModelLoadRequest& request);
  absl::Status UnloadModel(const inference::RepositoryModelUnloadRequest& request);
  // Reads and changes the log level (server/kserve_log_settings.h).
  absl::Status UpdateLogSettings(const inference::LogSettingsRequest& request,
                                 inference::LogSettingsResponse* response);
  // The system shared-memory calls of `owner` (the caller's identity; "" without tokens).
  absl::Status RegisterSharedMemory(const std::string& owner,
                                    const inference::SystemSharedMemoryRegisterRequest& request);
  absl::Status UnregisterSharedMemory(
      const std::string& owner, const inference::SystemSharedMemoryUnregisterRequest& request);
  absl::Status SharedMemoryStatus(const std::string& owner,
                                  const inference::SystemSharedMemoryStatusRequest& request,
                                  inference::SystemSharedMemoryStatusResponse* response) const;
  // The CUDA shared-memory calls of `owner`.
  absl::Status RegisterCudaSharedMemory(const std::string& owner,
                                        const inference::CudaSharedMemoryRegisterRequest& request);
  absl::Status UnregisterCudaSharedMemory(
      const std::string& owner, const inference::CudaSharedMemoryUnregisterRequest& request);
  absl::Status CudaSharedMemoryStatus(const std::string& owner,
                                      const inference::CudaSharedMemoryStatusRequest& request,
                                      inference::CudaSharedMemoryStatusResponse* response) const;
  // ModelInfer's work for `owner` (whose shared-memory regions its tensors may name), counted
  // under `method` in the request metrics, with `deadline` on the engine's clock
  // (absl::InfiniteFuture(): none). `finish` is called exactly once, as Infer's below;
  // `request` and `response` must stay valid until then.
  void InferAuthorized(const char* method, const std::string& owner, absl::Time deadline,
                       const inference::ModelInferRequest& request,
                       inference::ModelInferResponse* response,
                       std::function<void(const absl::Status&)> finish);

  // The registered system shared-memory regions.
  const SharedMemoryRegistry& shared_memory() const { return *shared_memory_; }

  // Ends every open ModelStreamInfer call once the requests it has in flight are answered
  // (UNAVAILABLE: shutting down), and every later one at once. Server::Shutdown calls it
  // after the registry has drained, so that gRPC's shutdown finds no stream open.
  void CloseStreams();
  // How many ModelStreamInfer calls are open.
  int open_streams() const { return streams_->open_streams(); }

 private:
  KServeService(Options options, Clock* clock);
  bool ready() const { return !options_.ready || options_.ready(); }
  std::string Owner(const grpc::ServerContextBase& context) const {
    return options_.identify ? options_.identify(context) : std::string();
  }
  absl::Status Authorize(const grpc::ServerContextBase& context) const {
    return options_.authorize ? options_.authorize(context) : absl::OkStatus();
  }

  // UNIMPLEMENTED with `what` (after the authorization every handler starts with).
  grpc::Status Unsupported(const grpc::ServerContextBase& context, absl::string_view what) const;

  // The one inference path of ModelInfer (gRPC and REST) and of ModelStreamInfer's ordinary
  // requests, with the task's `deadline` on the engine's clock: checks
  // readiness, pins the model, reads the request and admits it, counting it under `method`.
  // `finish` is called exactly once: on this thread if the request is refused before it is
  // enqueued, else on the engine thread that completed it; with OK once `*response` holds the
  // forecast, or with the request's error. `request` and `response` must stay valid until then.
  void Infer(const char* method, const std::string& owner, absl::Time deadline,
             const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
             std::function<void(const absl::Status&)> finish);

  // What ModelStreamInfer does with each request it reads (the stream's StreamDispatch).
  // Requests with Triton's sequence parameters would go to a sequence scheduler here; no model
  // is a sequence model yet, so each is answered INVALID_ARGUMENT. The others go to Infer.
  void DispatchStreamRequest(const grpc::CallbackServerContext& context,
                             std::shared_ptr<StreamInferCall> call, InferReply reply);

  // Constant after construction.
  const Options options_;
  Clock* const clock_;
  const PredictAdmission admission_;
  // Own synchronisation; shared with the completion callbacks of calls in flight.
  const std::shared_ptr<KServeStatistics> statistics_;
  // Own synchronisation; shared with the open streams.
  const std::shared_ptr<KServeStreams> streams_;
  // Own synchronisation; regions in use stay mapped through the requests' references.
  const std::unique_ptr<SharedMemoryRegistry> shared_memory_;
  // nullptr without Options::tick_streams.
  std::unique_ptr<KServeSequences> sequences_;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_SERVICE_H_
