// Starts the real forecastd binary and talks to it the way an operator and a load balancer
// would: health checks, a metrics scrape, signals, exit codes.
#include <signal.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/health_client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

using ::forecastd::testing::ChildProcess;
using ServingStatus = grpc::health::v1::HealthCheckResponse::ServingStatus;

// Safety bounds only: a healthy run finishes far inside them on any machine.
constexpr absl::Duration kStartBound = absl::Seconds(60);
constexpr absl::Duration kExitBound = absl::Seconds(60);

struct Daemon {
  std::unique_ptr<testing::TempDir> repository;
  ChildProcess process;
  std::string grpc_address;
  int metrics_port;
};

Daemon StartDaemon(std::vector<std::string> extra_flags = {}) {
  const int grpc_port = testing::PickFreePort();
  const int metrics_port = testing::PickFreePort();
  const int http_port = testing::PickFreePort();
  REQUIRE(grpc_port > 0);
  REQUIRE(metrics_port > 0);
  REQUIRE(http_port > 0);
  const std::string grpc_address = absl::StrCat("127.0.0.1:", grpc_port);
  auto repository = std::make_unique<testing::TempDir>();
  std::vector<std::string> argv = {FORECASTD_BINARY,
                                   "--grpc-address",
                                   grpc_address,
                                   "--metrics-address",
                                   absl::StrCat("127.0.0.1:", metrics_port),
                                   "--http-address",
                                   absl::StrCat("127.0.0.1:", http_port),
                                   "--model-repository",
                                   repository->path(),
                                   "--devices",
                                   "cpu"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::StatusOr<ChildProcess> process = ChildProcess::Start(argv);
  REQUIRE(process.ok());
  return Daemon{std::move(repository), *std::move(process), grpc_address, metrics_port};
}

// Polls the health service until it answers SERVING; fails if the daemon exits first.
void AwaitServing(Daemon& daemon) {
  const absl::Time give_up = absl::Now() + kStartBound;
  absl::StatusOr<ServingStatus> status = absl::UnavailableError("not asked yet");
  while (absl::Now() < give_up) {
    INFO(daemon.process.Output());
    REQUIRE(daemon.process.Running());
    status = CheckHealth(daemon.grpc_address, "", absl::Seconds(2));
    if (status.ok() && *status == grpc::health::v1::HealthCheckResponse::SERVING) return;
    absl::SleepFor(absl::Milliseconds(50));
  }
  INFO(daemon.process.Output());
  FAIL("forecastd never reported SERVING: " << status.status().ToString());
}

TEST_CASE("forecastd serves grpc.health.v1 and exits 0 on SIGTERM", "[integration][daemon]") {
  Daemon daemon = StartDaemon();
  AwaitServing(daemon);
  REQUIRE(daemon.process.Signal(SIGTERM));
  const absl::StatusOr<int> code = daemon.process.WaitForExit(kExitBound);
  INFO(daemon.process.Output());
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  REQUIRE(daemon.process.Output().find("received SIGTERM, shutting down") != std::string::npos);
  // Nothing listens any more.
  REQUIRE_FALSE(CheckHealth(daemon.grpc_address, "", absl::Seconds(1)).ok());
}

TEST_CASE("Health Watch streams SERVING, then NOT_SERVING on shutdown, then ends",
          "[integration][daemon]") {
  Daemon daemon = StartDaemon();
  AwaitServing(daemon);
  auto stub = grpc::health::v1::Health::NewStub(
      grpc::CreateChannel(daemon.grpc_address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  grpc::health::v1::HealthCheckRequest request;
  auto reader = stub->Watch(&context, request);
  grpc::health::v1::HealthCheckResponse response;
  REQUIRE(reader->Read(&response));
  REQUIRE(response.status() == grpc::health::v1::HealthCheckResponse::SERVING);

  REQUIRE(daemon.process.Signal(SIGTERM));
  REQUIRE(reader->Read(&response));
  REQUIRE(response.status() == grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  REQUIRE_FALSE(reader->Read(&response));
  const grpc::Status end = reader->Finish();
  CAPTURE(end.error_message());
  REQUIRE(end.error_code() == grpc::StatusCode::UNAVAILABLE);
  REQUIRE(daemon.process.WaitForExit(kExitBound).value() == 0);
}

TEST_CASE("forecastd exits 0 on SIGINT", "[integration][daemon]") {
  Daemon daemon = StartDaemon({"--log-format", "json"});
  AwaitServing(daemon);
  REQUIRE(daemon.process.Signal(SIGINT));
  const absl::StatusOr<int> code = daemon.process.WaitForExit(kExitBound);
  INFO(daemon.process.Output());
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  REQUIRE(daemon.process.Output().find(R"("msg":"received SIGINT, shutting down")") !=
          std::string::npos);
}

TEST_CASE("forecastd serves Prometheus metrics", "[integration][daemon]") {
  Daemon daemon = StartDaemon();
  AwaitServing(daemon);
  const absl::StatusOr<std::string> body =
      testing::HttpGet("127.0.0.1", daemon.metrics_port, "/metrics");
  REQUIRE(body.ok());
  CAPTURE(*body);
  REQUIRE(body->find("# TYPE forecastd_build_info gauge") != std::string::npos);
  REQUIRE(body->find("forecastd_build_info{version=\"0.") != std::string::npos);
  REQUIRE(body->find("forecastd_start_time_seconds ") != std::string::npos);
  REQUIRE(daemon.process.Signal(SIGTERM));
  REQUIRE(daemon.process.WaitForExit(kExitBound).value() == 0);
}

TEST_CASE("forecastd reports unknown services as NOT_FOUND", "[integration][daemon]") {
  Daemon daemon = StartDaemon();
  AwaitServing(daemon);
  const auto status = CheckHealth(daemon.grpc_address, "no.such.Service", absl::Seconds(5));
  REQUIRE(status.status().code() == absl::StatusCode::kNotFound);
  REQUIRE(daemon.process.Signal(SIGTERM));
  REQUIRE(daemon.process.WaitForExit(kExitBound).value() == 0);
}

TEST_CASE("forecastd refuses to start on a port that is taken, with exit code 1",
          "[integration][daemon]") {
  Daemon first = StartDaemon();
  AwaitServing(first);
  const int metrics_port = testing::PickFreePort();
  testing::TempDir repository;
  const auto second = testing::Run({FORECASTD_BINARY, "--grpc-address", first.grpc_address,
                                    "--metrics-address", absl::StrCat("127.0.0.1:", metrics_port),
                                    "--http-address", "", "--model-repository", repository.path()});
  REQUIRE(second.ok());
  CAPTURE(second->output);
  REQUIRE(second->exit_code == 1);
  REQUIRE(second->output.find("cannot serve gRPC on " + first.grpc_address) != std::string::npos);
  REQUIRE(first.process.Signal(SIGTERM));
  REQUIRE(first.process.WaitForExit(kExitBound).value() == 0);
}

TEST_CASE("forecastd exits 1 for a missing repository and 2 for bad flags",
          "[integration][daemon]") {
  const auto missing =
      testing::Run({FORECASTD_BINARY, "--model-repository", "/nonexistent/models", "--grpc-address",
                    "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--http-address", ""});
  REQUIRE(missing.ok());
  CAPTURE(missing->output);
  REQUIRE(missing->exit_code == 1);
  REQUIRE(missing->output.find("model repository '/nonexistent/models' does not exist") !=
          std::string::npos);

  const auto bad_flag = testing::Run({FORECASTD_BINARY, "--log-level", "loud"});
  REQUIRE(bad_flag.ok());
  CAPTURE(bad_flag->output);
  REQUIRE(bad_flag->exit_code == 2);
  REQUIRE(bad_flag->output.find("bad log level 'loud'") != std::string::npos);

  testing::TempDir repository;
  const auto missing_gpu = testing::Run(
      {FORECASTD_BINARY, "--devices", "cuda:63", "--model-repository", repository.path(),
       "--grpc-address", "127.0.0.1:0", "--metrics-address", "127.0.0.1:0", "--http-address", ""});
  REQUIRE(missing_gpu.ok());
  CAPTURE(missing_gpu->output);
  REQUIRE(missing_gpu->exit_code == 1);
  REQUIRE(missing_gpu->output.find("device cuda:63 is not present") != std::string::npos);
}

TEST_CASE("forecastd --version and --help exit 0", "[integration][daemon]") {
  const auto version = testing::Run({FORECASTD_BINARY, "--version"});
  REQUIRE(version.ok());
  REQUIRE(version->exit_code == 0);
  REQUIRE(version->output.rfind("forecastd 0.", 0) == 0);
  const auto help = testing::Run({FORECASTD_BINARY, "--help"});
  REQUIRE(help.ok());
  REQUIRE(help->exit_code == 0);
  REQUIRE(help->output.find("--model-repository") != std::string::npos);
}

}  // namespace
}  // namespace forecastd
