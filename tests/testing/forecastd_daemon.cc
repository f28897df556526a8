#include "tests/testing/forecastd_daemon.h"

#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/health_client.h"

namespace forecastd::testing {

ForecastdDaemon::ForecastdDaemon(ChildProcess process, std::string grpc_address, int metrics_port,
                                 int http_port,
                                 const std::shared_ptr<grpc::ChannelCredentials>& credentials)
    : process_(std::move(process)),
      grpc_address_(std::move(grpc_address)),
      metrics_port_(metrics_port),
      http_port_(http_port),
      channel_(grpc::CreateChannel(grpc_address_, credentials != nullptr
                                                      ? credentials
                                                      : grpc::InsecureChannelCredentials())),
      forecaster_(v1::Forecaster::NewStub(channel_)),
      admin_(v1::Admin::NewStub(channel_)) {}

absl::StatusOr<std::unique_ptr<ForecastdDaemon>> ForecastdDaemon::Start(const Options& options) {
  // A port PickFreePort found free can be taken by another test's process before the daemon
  // binds it (tests run in parallel); the daemon then exits saying so, and another pair of
  // ports is tried. Any other failure is returned at once.
  constexpr int kAttempts = 3;
  absl::StatusOr<std::unique_ptr<ForecastdDaemon>> daemon;
  for (int attempt = 0; attempt < kAttempts; ++attempt) {
    daemon = StartOnFreePorts(options);
    if (daemon.ok() || !absl::StrContains(daemon.status().message(), "(is the port in use?)")) {
      break;
    }
  }
  return daemon;
}

absl::StatusOr<std::unique_ptr<ForecastdDaemon>> ForecastdDaemon::StartOnFreePorts(
    const Options& options) {
  const int grpc_port = PickFreePort();
  const int metrics_port = PickFreePort();
  const int http_port = PickFreePort();
  if (grpc_port <= 0 || metrics_port <= 0 || http_port <= 0) {
    return absl::UnavailableError("no free loopback port");
  }
  const std::string grpc_address = absl::StrCat("127.0.0.1:", grpc_port);
  std::vector<std::string> argv = {options.binary,
                                   "--grpc-address",
                                   grpc_address,
                                   "--metrics-address",
                                   absl::StrCat("127.0.0.1:", metrics_port),
                                   "--http-address",
                                   absl::StrCat("127.0.0.1:", http_port),
                                   "--model-repository",
                                   options.repository,
                                   "--devices",
                                   options.devices};
  argv.insert(argv.end(), options.extra_flags.begin(), options.extra_flags.end());
  absl::StatusOr<ChildProcess> process = ChildProcess::Start(argv);
  if (!process.ok()) return process.status();
  std::unique_ptr<ForecastdDaemon> daemon(new ForecastdDaemon(
      *std::move(process), grpc_address, metrics_port, http_port, options.credentials));

  const absl::Time give_up = absl::Now() + options.start_bound;
  absl::Status last = absl::UnavailableError("not asked yet");
  while (absl::Now() < give_up) {
    if (!daemon->process_.Running()) {
      return absl::UnavailableError(
          absl::StrCat("forecastd exited while starting:\n", daemon->process_.Output()));
    }
    const absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> health =
        CheckHealth(grpc_address, "", absl::Seconds(2), options.credentials);
    if (health.ok() && *health == grpc::health::v1::HealthCheckResponse::SERVING) return daemon;
    last = health.ok() ? absl::UnavailableError(absl::StrCat("health status ", *health))
                       : health.status();
    absl::SleepFor(absl::Milliseconds(20));
  }
  return absl::DeadlineExceededError(absl::StrCat(
      "forecastd never reported SERVING (", last.ToString(), "):\n", daemon->process_.Output()));
}

absl::StatusOr<std::string> ForecastdDaemon::Metrics() const {
  return HttpGet("127.0.0.1", metrics_port_, "/metrics");
}

}  // namespace forecastd::testing
