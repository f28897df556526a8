// The forecastd daemon as one object: the CPU backend and its device scheduler, the model
// registry over the repository, the training-job manager, Prometheus metrics, and the gRPC
// services (forecastd.v1.Forecaster and Admin, KServe v2 inference.GRPCInferenceService,
// grpc.health.v1, server reflection) on one port, KServe v2 REST on another, with TLS and
// bearer-token authentication when configured; and their orderly shutdown. main() creates one;
// integration tests may create their own. Thread-safe: Shutdown() and ReloadTokens() may be called
// from any thread, Shutdown() more than once.
#ifndef FORECASTD_SERVER_SERVER_H_
#define FORECASTD_SERVER_SERVER_H_

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/backend.h"
#include "backends/device.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/stream_hub.h"
#include "engine/train/train_job_manager.h"
#include "forecastd/v1/admin.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/admin_service.h"
#include "server/auth_interceptor.h"
#include "server/forecaster_service.h"
#include "server/health_service.h"
#include "server/kserve_http.h"
#include "server/kserve_service.h"
#include "server/metrics.h"
#include "server/server_options.h"
#include "server/serving_metrics.h"
#include "server/token_store.h"

namespace forecastd {

class Server {
 public:
  // Starts serving: loads the models (a model that fails to load is reported, not fatal),
  // then opens the gRPC port. Fails with NOT_FOUND or FAILED_PRECONDITION for a missing
  // repository or device, and UNAVAILABLE when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);

  ~Server();

  // Drains: health turns NOT_SERVING and new Predict/Train calls get UNAVAILABLE at once;
  // queued and in-flight predictions finish (up to drain_timeout); training jobs are
  // cancelled (their checkpoints stay); then the gRPC and metrics endpoints stop, giving
  // streaming calls shutdown_grace. Idempotent.
  void Shutdown();

  // Re-reads --token-file (main() calls it on SIGHUP) and logs the outcome. On an error the
  // tokens read before stay in force. FAILED_PRECONDITION when the server has no token file.
  absl::Status ReloadTokens();

  int grpc_port() const { return grpc_port_; }
  // 0 without a REST port.
  int http_port() const { return http_server_ != nullptr ? http_server_->port() : 0; }
  int metrics_port() const { return metrics_->port(); }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  class RegistryMetrics;

  Server(ServerOptions options, std::vector<Device> devices,
         std::unique_ptr<MetricsExposer> metrics);
  v1::ServerStatus Status() const;
  // <state dir>/streams.pb; and loading it at start.
  std::string StreamSnapshotPath() const;
  void RestoreStreams();

  // Constant after construction (the pointers' objects have their own synchronisation).
  const ServerOptions options_;
  const std::vector<Device> devices_;
  const absl::Time start_time_;
  std::unique_ptr<MetricsExposer> metrics_;
  std::unique_ptr<ServingMetrics> serving_metrics_;
  std::shared_ptr<prometheus::Collectable> state_metrics_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<Backend> bf16_backend_;  // bf16 models' where the CPU runs bf16; else null
  int cpu_threads_per_worker_ = 1;  // OpenMP threads of a CPU worker, and of a training job's steps
  std::unique_ptr<DeviceScheduler> scheduler_;
  // The devices models serve on, in --devices order; declared before registry_, so they
  // outlive its instances. The CPU's wraps backend_ and scheduler_.
  std::vector<std::unique_ptr<ExecutionDevice>> execution_devices_;
  std::unique_ptr<RegistryMetrics> registry_metrics_;
  std::unique_ptr<ModelRegistry> registry_;
  // Declared after registry_, so its streams let go of their versions first.
  std::unique_ptr<StreamHub> streams_;
  std::unique_ptr<TrainJobManager> jobs_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<ForecasterService> forecaster_;
  std::unique_ptr<AdminService> admin_;
  std::unique_ptr<KServeService> kserve_;
  // Both null without --token-file; declared before grpc_server_, so they outlive its calls.
  std::unique_ptr<TokenStore> tokens_;
  std::unique_ptr<CallAuthenticator> authenticator_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;
  // KServe REST; null without --http-address. Declared last, so it stops before the services
  // and the authenticator it calls go.
  std::unique_ptr<KServeHttpServer> http_server_;

  // Own synchronisation.
  std::atomic<bool> accepting_{true};

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_SERVER_H_
