// forecastd-health: a grpc.health.v1 probe for the container's HEALTHCHECK (and for scripts).
// Asks the server at --address for the status of --service ("" is the server as a whole) and
// exits 0 when it is SERVING, 1 when it answers anything else or cannot be reached, 2 on a
// usage error. Prints one line saying what it saw. Speaks TLS (and presents a client
// certificate) for a daemon started with --tls-cert (and --tls-client-ca); health needs no
// token.
#include <iostream>
#include <memory>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client_security.h"
#include "client/health_client.h"
#include "grpc/health/v1/health.pb.h"

namespace {

constexpr int kExitServing = 0;
constexpr int kExitNotServing = 1;
constexpr int kExitUsage = 2;

}  // namespace

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:8001";
  std::string service;
  int timeout_ms = 2000;

  CLI::App app("forecastd-health: exits 0 when the gRPC server reports SERVING (grpc.health.v1).",
               "forecastd-health");
  app.add_option("--address", address, "host:port of the gRPC server")->capture_default_str();
  app.add_option("--service", service, "service to ask about; empty: the server as a whole");
  app.add_option("--timeout-ms", timeout_ms, "deadline for the Check call in milliseconds")
      ->capture_default_str()
      ->check(CLI::Range(1, 600000));
  forecastd::ClientTlsFiles tls;
  app.add_flag("--tls", tls.enabled, "connect with TLS, trusting the system's CAs");
  app.add_option("--tls-ca", tls.ca_path, "PEM CA certificates to verify the server with")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-cert", tls.cert_path, "PEM client certificate (mutual TLS)")
      ->check(CLI::ExistingFile);
  app.add_option("--tls-key", tls.key_path, "PEM key of --tls-cert")->check(CLI::ExistingFile);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return kExitServing;
  } catch (const CLI::ParseError& e) {
    std::cerr << "forecastd-health: " << e.what() << "\n";
    return kExitUsage;
  }

  const absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
      forecastd::MakeChannelCredentials(tls);
  if (!credentials.ok()) {
    std::cerr << "forecastd-health: " << credentials.status().message() << "\n";
    return kExitUsage;
  }
  const absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> status =
      forecastd::CheckHealth(address, service, absl::Milliseconds(timeout_ms), *credentials);
  const std::string what = service.empty() ? address : address + " (" + service + ")";
  if (!status.ok()) {
    std::cout << what << ": " << status.status().ToString() << "\n";
    return kExitNotServing;
  }
  std::cout << what << ": " << grpc::health::v1::HealthCheckResponse::ServingStatus_Name(*status)
            << "\n";
  return *status == grpc::health::v1::HealthCheckResponse::SERVING ? kExitServing : kExitNotServing;
}
