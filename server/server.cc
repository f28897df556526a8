#include "server/server.h"

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "grpcpp/grpcpp.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

absl::Status CheckModelRepository(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat("model repository '", path, "' does not exist"));
  }
  if (!std::filesystem::is_directory(status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("model repository '", path, "' is not a directory"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  RETURN_IF_ERROR(CheckModelRepository(options.model_repository));

  const DeviceRegistry registry = DeviceRegistry::Discover();
  ASSIGN_OR_RETURN(std::vector<Device> devices, registry.Resolve(options.devices));
  std::vector<std::string> device_names;
  for (const Device& d : devices) device_names.push_back(absl::StrCat(d.Id(), " (", d.name, ")"));
  spdlog::info("devices: {}", absl::StrJoin(device_names, ", "));

  ASSIGN_OR_RETURN(
      std::unique_ptr<MetricsExposer> metrics,
      MetricsExposer::Create({.address = options.metrics_address, .version = kForecastdVersion}));

  std::unique_ptr<Server> server(new Server(options, std::move(devices), std::move(metrics)));

  grpc::ServerBuilder builder;
  builder.RegisterService(server->health_.get());
  // Without this a second daemon could silently share the port with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(options.grpc_address, grpc::InsecureServerCredentials(),
                           &server->grpc_port_);
  server->grpc_server_ = builder.BuildAndStart();
  if (server->grpc_server_ == nullptr || server->grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", options.grpc_address, " (is the port in use?)"));
  }
  server->health_->SetStatus("", grpc::health::v1::HealthCheckResponse::SERVING);
  spdlog::info(
      "forecastd {} serving gRPC on {} (port {}), metrics on http://{}/metrics, "
      "model repository '{}'",
      kForecastdVersion, options.grpc_address, server->grpc_port_, options.metrics_address,
      options.model_repository);
  return server;
}

Server::Server(ServerOptions options, std::vector<Device> devices,
               std::unique_ptr<MetricsExposer> metrics)
    : options_(std::move(options)),
      devices_(std::move(devices)),
      metrics_(std::move(metrics)),
      health_(std::make_unique<HealthService>()) {}

Server::~Server() { Shutdown(); }

void Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // Probes see NOT_SERVING (and Watch streams end) before the listener goes away, so load
  // balancers stop sending new work while in-flight calls finish.
  health_->Shutdown();
  if (grpc_server_ != nullptr) {
    const auto deadline =
        std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.shutdown_grace);
    grpc_server_->Shutdown(deadline);
    grpc_server_->Wait();
  }
  spdlog::info("forecastd stopped");
}

}  // namespace forecastd
