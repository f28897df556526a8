// Certificates for the TLS tests, made with the `openssl` command line into a directory when a
// test runs (nothing is committed, nothing expires between runs): a CA; a server certificate
// from it for IP 127.0.0.1 and DNS localhost; a client certificate from it; and a client
// certificate from a second CA that the server does not trust. Keys are unencrypted EC P-256.
// Stateless; thread-compatible (each call writes its own files).
#ifndef FORECASTD_TESTS_TESTING_TEST_CERTIFICATES_H_
#define FORECASTD_TESTS_TESTING_TEST_CERTIFICATES_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "grpcpp/security/credentials.h"

namespace forecastd::testing {

// Paths of the PEM files.
struct TestCertificates {
  std::string ca_cert;
  std::string server_cert, server_key;
  std::string client_cert, client_key;              // signed by ca_cert
  std::string rogue_client_cert, rogue_client_key;  // signed by another CA

  // TLS trusting ca_cert, with `cert_path`/`key_path` as the client certificate when given.
  std::shared_ptr<grpc::ChannelCredentials> Client(const std::string& cert_path = "",
                                                   const std::string& key_path = "") const;
};

// Writes the files into `dir` (which must exist). The error carries openssl's output.
absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir);

// The whole file at `path`; "" when it cannot be read.
std::string ReadTextFile(const std::string& path);

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_TEST_CERTIFICATES_H_
