// The forecastd daemon as one object: resolves devices, opens the model repository, serves
// Prometheus metrics and the gRPC services (grpc.health.v1 today), and shuts all of it down
// in order. main() creates one; integration tests may create their own.
// Thread-safe: Shutdown() may be called from any thread, more than once.
#ifndef FORECASTD_SERVER_SERVER_H_
#define FORECASTD_SERVER_SERVER_H_

#include <memory>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "backends/device.h"
#include "grpcpp/server.h"
#include "server/health_service.h"
#include "server/metrics.h"
#include "server/server_options.h"

namespace forecastd {

class Server {
 public:
  // Starts serving. Fails with NOT_FOUND or FAILED_PRECONDITION for a missing repository
  // or device, and UNAVAILABLE when an address cannot be bound.
  static absl::StatusOr<std::unique_ptr<Server>> Create(const ServerOptions& options);

  ~Server();

  // Reports NOT_SERVING on health checks, gives in-flight calls `shutdown_grace` to finish,
  // then stops the gRPC and metrics endpoints. Idempotent.
  void Shutdown();

  int grpc_port() const { return grpc_port_; }
  int metrics_port() const { return metrics_->port(); }
  const std::vector<Device>& devices() const { return devices_; }

 private:
  Server(ServerOptions options, std::vector<Device> devices,
         std::unique_ptr<MetricsExposer> metrics);

  // Constant after construction.
  const ServerOptions options_;
  const std::vector<Device> devices_;
  std::unique_ptr<MetricsExposer> metrics_;
  const std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> grpc_server_;
  int grpc_port_ = 0;

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_SERVER_H_
