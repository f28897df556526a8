// The Prometheus endpoint: owns the metrics registry every component registers its
// forecastd_* families in, and the HTTP exposer that serves it at /metrics. Created once
// by Server; registry() may be used from any thread (prometheus-cpp is thread-safe).
#ifndef FORECASTD_SERVER_METRICS_H_
#define FORECASTD_SERVER_METRICS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"

namespace forecastd {

class MetricsExposer {
 public:
  struct Options {
    // host:port to serve /metrics on.
    std::string address;
    // Reported by forecastd_build_info.
    std::string version;
  };

  // Binds the address and starts serving; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsExposer>> Create(const Options& options);

  prometheus::Registry& registry() { return *registry_; }
  // Adds a collectable scraped along with the registry (kept alive by the caller).
  void AddCollectable(const std::shared_ptr<prometheus::Collectable>& collectable) {
    exposer_->RegisterCollectable(collectable);
  }
  // The port actually bound (useful when the address asked for port 0).
  int port() const;

 private:
  MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer,
                 std::shared_ptr<prometheus::Registry> registry);

  // Constant after construction.
  std::unique_ptr<prometheus::Exposer> exposer_;
  std::shared_ptr<prometheus::Registry> registry_;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_METRICS_H_
