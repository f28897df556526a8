// grpc.health.v1.Health for forecastd: the overall status (service "") and one status per
// named service, answered by Check and streamed by Watch, as load balancers and Kubernetes
// probes expect. Server sets the statuses; on shutdown every status turns NOT_SERVING and
// open Watch streams end. Uses gRPC's callback API, so no thread waits on a watcher.
// Thread-safe.
#ifndef FORECASTD_SERVER_HEALTH_SERVICE_H_
#define FORECASTD_SERVER_HEALTH_SERVICE_H_

#include <map>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "grpc/health/v1/health.grpc.pb.h"

namespace forecastd {

class HealthService final : public grpc::health::v1::Health::CallbackService {
 public:
  using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

  HealthService();
  ~HealthService() override;

  // Sets the status of `service` ("" is the server as a whole) and tells its watchers.
  // Ignored after Shutdown().
  void SetStatus(const std::string& service, ServingStatus status);

  // Every known service becomes NOT_SERVING, watchers are told, then their streams end.
  void Shutdown();

  grpc::ServerUnaryReactor* Check(grpc::CallbackServerContext* context,
                                  const grpc::health::v1::HealthCheckRequest* request,
                                  grpc::health::v1::HealthCheckResponse* response) override;
  grpc::ServerWriteReactor<grpc::health::v1::HealthCheckResponse>* Watch(
      grpc::CallbackServerContext* context,
      const grpc::health::v1::HealthCheckRequest* request) override;

 private:
  class Watcher;
  friend class Watcher;

  // The status reported for `service`: SERVICE_UNKNOWN when it was never set.
  ServingStatus StatusLocked(const std::string& service) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RemoveWatcher(Watcher* watcher);

  mutable absl::Mutex mu_;
  std::map<std::string, ServingStatus> statuses_ ABSL_GUARDED_BY(mu_);
  std::set<Watcher*> watchers_ ABSL_GUARDED_BY(mu_);
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_HEALTH_SERVICE_H_
