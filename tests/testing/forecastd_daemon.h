// A forecastd binary started by a test on free loopback ports, with a gRPC channel (plaintext,
// or TLS with the credentials the test gives) and stubs for its Forecaster and Admin services
// and a reader for its Prometheus endpoint.
// Used by the API integration tests. Owned by one test thread; the stubs themselves are
// thread-safe, so several client threads may share them.
#ifndef FORECASTD_TESTS_TESTING_FORECASTD_DAEMON_H_
#define FORECASTD_TESTS_TESTING_FORECASTD_DAEMON_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/process.h"

namespace forecastd::testing {

class ForecastdDaemon {
 public:
  struct Options {
    std::string binary;      // the forecastd executable
    std::string repository;  // --model-repository
    // `--devices`.
    std::string devices = "cpu";
    // Appended to the command line after the addresses, the repository and `--devices`.
    std::vector<std::string> extra_flags;
    // A safety bound on start-up, not a measurement: the daemon must report SERVING on
    // grpc.health.v1 within it.
    absl::Duration start_bound = absl::Seconds(60);
    // What the health probe and channel() connect with; nullptr: plaintext.
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr;
  };

  // Starts the daemon on free loopback ports and waits until its health service says SERVING
  // (up to three tries when another process takes a port first). The error carries the
  // daemon's output when it exits or never gets there.
  static absl::StatusOr<std::unique_ptr<ForecastdDaemon>> Start(const Options& options);

  ChildProcess& process() { return process_; }
  const std::string& grpc_address() const { return grpc_address_; }  // 127.0.0.1:<port>
  int metrics_port() const { return metrics_port_; }
  int http_port() const { return http_port_; }  // KServe REST
  const std::shared_ptr<grpc::Channel>& channel() const { return channel_; }
  v1::Forecaster::Stub& forecaster() { return *forecaster_; }
  v1::Admin::Stub& admin() { return *admin_; }

  // The body of GET /metrics.
  absl::StatusOr<std::string> Metrics() const;

 private:
  // One try of Start.
  static absl::StatusOr<std::unique_ptr<ForecastdDaemon>> StartOnFreePorts(const Options& options);

  ForecastdDaemon(ChildProcess process, std::string grpc_address, int metrics_port, int http_port,
                  const std::shared_ptr<grpc::ChannelCredentials>& credentials);

  ChildProcess process_;
  const std::string grpc_address_;
  const int metrics_port_;
  const int http_port_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Forecaster::Stub> forecaster_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_FORECASTD_DAEMON_H_
