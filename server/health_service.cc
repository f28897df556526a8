#include "server/health_service.h"

#include <optional>
#include <utility>

namespace forecastd {

using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;

// One Watch stream. It sends the current status, then each change; at most one write is
// in flight, and a change that arrives meanwhile replaces any unsent one (watchers want the
// latest status, not every intermediate one). Lives until gRPC calls OnDone.
class HealthService::Watcher final : public grpc::ServerWriteReactor<HealthCheckResponse> {
 public:
  Watcher(HealthService* service, std::string name) : service_(service), name_(std::move(name)) {}

  // Called with service_->mu_ held.
  void Notify(ServingStatus status, bool finish_after) {
    bool start = false;
    {
      absl::MutexLock lock(&mu_);
      if (finished_) return;
      if (status != last_sent_ || finish_after) pending_ = status;
      finish_after_ = finish_after_ || finish_after;
      start = !writing_;
    }
    if (start) NextStep();
  }

  void OnWriteDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      writing_ = false;
      if (!ok) {
        finished_ = true;
      }
    }
    if (!ok) {
      Finish(grpc::Status::CANCELLED);
      return;
    }
    NextStep();
  }

  void OnCancel() override {
    bool finish = false;
    {
      absl::MutexLock lock(&mu_);
      if (!finished_ && !writing_) {
        finished_ = true;
        finish = true;
      }
      cancelled_ = true;
    }
    if (finish) Finish(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    service_->RemoveWatcher(this);
    delete this;
  }

 private:
  // Starts the next write, or finishes the stream when asked to and nothing is left to send.
  void NextStep() {
    std::optional<grpc::Status> finish_with;
    {
      absl::MutexLock lock(&mu_);
      if (finished_ || writing_) return;
      if (cancelled_) {
        finished_ = true;
        finish_with = grpc::Status::CANCELLED;
      } else if (pending_.has_value()) {
        response_.set_status(*pending_);
        last_sent_ = *pending_;
        pending_.reset();
        writing_ = true;
      } else if (finish_after_) {
        finished_ = true;
        finish_with = grpc::Status(grpc::StatusCode::UNAVAILABLE, "forecastd is shutting down");
      } else {
        return;
      }
    }
    if (finish_with.has_value()) {
      Finish(*finish_with);
    } else {
      StartWrite(&response_);
    }
  }

  HealthService* const service_;
  const std::string name_;

  absl::Mutex mu_;
  HealthCheckResponse response_;  // owned by the write in flight while writing_
  std::optional<ServingStatus> pending_ ABSL_GUARDED_BY(mu_);
  ServingStatus last_sent_ ABSL_GUARDED_BY(mu_) = HealthCheckResponse::UNKNOWN;
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool finish_after_ ABSL_GUARDED_BY(mu_) = false;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;

 public:
  const std::string& name() const { return name_; }
};

HealthService::HealthService() = default;

HealthService::~HealthService() { Shutdown(); }

HealthService::ServingStatus HealthService::StatusLocked(const std::string& service) const {
  const auto it = statuses_.find(service);
  return it == statuses_.end() ? HealthCheckResponse::SERVICE_UNKNOWN : it->second;
}

void HealthService::SetStatus(const std::string& service, ServingStatus status) {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  statuses_[service] = status;
  for (Watcher* watcher : watchers_) {
    if (watcher->name() == service) watcher->Notify(status, /*finish_after=*/false);
  }
}

void HealthService::Shutdown() {
  absl::MutexLock lock(&mu_);
  if (shut_down_) return;
  shut_down_ = true;
  for (auto& [name, status] : statuses_) status = HealthCheckResponse::NOT_SERVING;
  for (Watcher* watcher : watchers_) {
    watcher->Notify(StatusLocked(watcher->name()), /*finish_after=*/true);
  }
}

void HealthService::RemoveWatcher(Watcher* watcher) {
  absl::MutexLock lock(&mu_);
  watchers_.erase(watcher);
}

grpc::ServerUnaryReactor* HealthService::Check(grpc::CallbackServerContext* context,
                                               const HealthCheckRequest* request,
                                               HealthCheckResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  ServingStatus status;
  {
    absl::MutexLock lock(&mu_);
    status = StatusLocked(request->service());
  }
  if (status == HealthCheckResponse::SERVICE_UNKNOWN) {
    reactor->Finish(
        grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service '" + request->service() + "'"));
  } else {
    response->set_status(status);
    reactor->Finish(grpc::Status::OK);
  }
  return reactor;
}

grpc::ServerWriteReactor<HealthCheckResponse>* HealthService::Watch(
    grpc::CallbackServerContext* context, const HealthCheckRequest* request) {
  auto* watcher = new Watcher(this, request->service());
  absl::MutexLock lock(&mu_);
  watchers_.insert(watcher);
  watcher->Notify(StatusLocked(request->service()), /*finish_after=*/shut_down_);
  return watcher;
}

}  // namespace forecastd
