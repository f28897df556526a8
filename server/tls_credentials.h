// The credentials forecastd's gRPC port listens with: plaintext, TLS (--tls-cert/--tls-key) or
// mutual TLS (--tls-client-ca: every client must present a certificate that chains to that CA).
// The PEM files are read and checked when the server starts (the certificate and key parse and
// belong together, the CA bundle parses), so a bad file stops the start with an error naming
// it instead of an unusable port. The metrics endpoint is not covered: it stays plaintext
// HTTP. Stateless; thread-safe.
#ifndef FORECASTD_SERVER_TLS_CREDENTIALS_H_
#define FORECASTD_SERVER_TLS_CREDENTIALS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/server_credentials.h"

namespace forecastd {

struct TlsOptions {
  // PEM certificate chain (leaf first) the gRPC port presents; "": plaintext.
  std::string cert_path;
  // PEM private key of that certificate; required with cert_path. Never logged.
  std::string key_path;
  // PEM CA certificates client certificates are verified against; "": no client certificate
  // asked for. Set: mutual TLS, a client without a valid certificate cannot connect.
  std::string client_ca_path;

  bool enabled() const { return !cert_path.empty(); }
  bool mutual() const { return !client_ca_path.empty(); }
};

// InsecureServerCredentials without a certificate; otherwise SslServerCredentials over the
// files. INVALID_ARGUMENT for a key without a certificate (or the reverse), a client CA without
// a certificate, or a file that is not what it should be (PEM that does not parse, a key that
// does not match the certificate); NOT_FOUND / PERMISSION_DENIED when a file cannot be read.
// Every error names the flag and the path. Logs a warning for a certificate that has expired
// or is not valid yet.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_TLS_CREDENTIALS_H_
