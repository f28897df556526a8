// Asks a forecastd (or any gRPC server) for its grpc.health.v1 status. Used by forecastctl
// and by the integration tests. Thread-safe: each call makes its own channel.
#ifndef FORECASTD_CLIENT_HEALTH_CLIENT_H_
#define FORECASTD_CLIENT_HEALTH_CLIENT_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/security/credentials.h"

namespace forecastd {

// The serving status of `service` ("" for the whole server) at `address` (host:port),
// or the RPC's error (UNAVAILABLE when nothing listens, DEADLINE_EXCEEDED after `timeout`).
// `credentials` secure the channel (client/client_security.h); nullptr: plaintext. Health
// needs no token.
absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> CheckHealth(
    const std::string& address, const std::string& service, absl::Duration timeout,
    const std::shared_ptr<grpc::ChannelCredentials>& credentials = nullptr);

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_HEALTH_CLIENT_H_
