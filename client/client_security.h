// How forecastctl and the tests reach a forecastd that serves TLS (--tls-cert), asks for client
// certificates (--tls-client-ca) or bearer tokens (--token-file): gRPC channel credentials from
// PEM files, and the token from a file. Errors name the file, never a token or a key.
// Stateless; thread-safe.
#ifndef FORECASTD_CLIENT_CLIENT_SECURITY_H_
#define FORECASTD_CLIENT_CLIENT_SECURITY_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace forecastd {

struct ClientTlsFiles {
  // TLS with the system's root certificates even when ca_path is empty.
  bool enabled = false;
  // PEM CA certificates the server's certificate must chain to; "": the system's roots.
  std::string ca_path;
  // PEM client certificate and its key, for a server that asks for one (mutual TLS); both or
  // neither.
  std::string cert_path;
  std::string key_path;

  bool any() const { return enabled || !ca_path.empty() || !cert_path.empty(); }
};

// InsecureChannelCredentials when `files` asks for no TLS; otherwise SslCredentials over the
// files. INVALID_ARGUMENT for a certificate without its key (or the reverse); a file that
// cannot be read keeps its code (NOT_FOUND, ...) with the path in the message.
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files);

// The token in the file at `path`: its content without surrounding whitespace.
// INVALID_ARGUMENT for an empty file or one with more than one line of text.
absl::StatusOr<std::string> ReadBearerToken(const std::string& path);

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_CLIENT_SECURITY_H_
