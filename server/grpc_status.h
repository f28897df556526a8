// The one place where forecastd's absl::Status becomes a gRPC status (ARCHITECTURE.md,
// "Errors"): the codes map one to one, since absl's are gRPC's, and the message is kept.
// Stateless; thread-safe.
#ifndef FORECASTD_SERVER_GRPC_STATUS_H_
#define FORECASTD_SERVER_GRPC_STATUS_H_

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace forecastd {

grpc::Status ToGrpcStatus(const absl::Status& status);

// The canonical name of a code, "OK", "INVALID_ARGUMENT", ..., as metrics label it.
const char* GrpcCodeName(grpc::StatusCode code);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_GRPC_STATUS_H_
