#include "server/metrics.h"

#include <chrono>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "prometheus/gauge.h"

namespace forecastd {

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Create(const Options& options) {
  auto registry = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("forecastd_build_info")
      .Help("Always 1; the labels say which forecastd build is running.")
      .Register(*registry)
      .Add({{"version", options.version}})
      .Set(1);
  const double start_seconds =
      std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  prometheus::BuildGauge()
      .Name("forecastd_start_time_seconds")
      .Help("When this forecastd process started, in seconds since the Unix epoch.")
      .Register(*registry)
      .Add({})
      .Set(start_seconds);

  std::unique_ptr<prometheus::Exposer> exposer;
  try {
    exposer = std::make_unique<prometheus::Exposer>(options.address, /*num_threads=*/2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.address,
                                               " (is the port in use?): ", e.what()));
  }
  exposer->RegisterCollectable(registry);
  return std::unique_ptr<MetricsExposer>(
      new MetricsExposer(std::move(exposer), std::move(registry)));
}

MetricsExposer::MetricsExposer(std::unique_ptr<prometheus::Exposer> exposer,
                               std::shared_ptr<prometheus::Registry> registry)
    : exposer_(std::move(exposer)), registry_(std::move(registry)) {}

int MetricsExposer::port() const {
  const std::vector<int> ports = exposer_->GetListeningPorts();
  return ports.empty() ? 0 : ports.front();
}

}  // namespace forecastd
