#include "client/client_security.h"

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace forecastd {
namespace {

absl::StatusOr<std::string> ReadWholeFile(absl::string_view what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  }
  std::ostringstream bytes;
  bytes << in.rdbuf();
  if (in.bad()) return absl::DataLossError(absl::StrCat("error reading ", what, " '", path, "'"));
  return bytes.str();
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const ClientTlsFiles& files) {
  if (files.cert_path.empty() != files.key_path.empty()) {
    return absl::InvalidArgumentError(
        "a client certificate needs its key, and a key its "
        "certificate (--tls-cert and --tls-key)");
  }
  if (!files.any()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions ssl;
  if (!files.ca_path.empty()) {
    absl::StatusOr<std::string> ca = ReadWholeFile("CA file", files.ca_path);
    if (!ca.ok()) return ca.status();
    ssl.pem_root_certs = *std::move(ca);
  }
  if (!files.cert_path.empty()) {
    absl::StatusOr<std::string> cert = ReadWholeFile("certificate", files.cert_path);
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadWholeFile("key", files.key_path);
    if (!key.ok()) return key.status();
    ssl.pem_cert_chain = *std::move(cert);
    ssl.pem_private_key = *std::move(key);
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<std::string> ReadBearerToken(const std::string& path) {
  absl::StatusOr<std::string> text = ReadWholeFile("token file", path);
  if (!text.ok()) return text.status();
  const absl::string_view token = absl::StripAsciiWhitespace(*text);
  if (token.empty())
    return absl::InvalidArgumentError(absl::StrCat("token file '", path, "' is empty"));
  if (token.find_first_of(" \t\r\n") != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "token file '", path, "' holds more than one word: put the token alone in it"));
  }
  return std::string(token);
}

}  // namespace forecastd
