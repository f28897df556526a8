#include "server/tls_credentials.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "engine/file_io.h"
#include "grpcpp/security/server_credentials.h"
#include "openssl/bio.h"
#include "openssl/err.h"
#include "openssl/pem.h"
#include "openssl/x509.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

struct BioFree {
  void operator()(BIO* bio) const { BIO_free(bio); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyFree {
  void operator()(EVP_PKEY* key) const { EVP_PKEY_free(key); }
};
using BioPtr = std::unique_ptr<BIO, BioFree>;
using X509Ptr = std::unique_ptr<X509, X509Free>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyFree>;

// Refuses to ask for a passphrase: OpenSSL's default would prompt on the terminal.
int NoPassphrase(char* /*buf*/, int /*size*/, int /*rwflag*/, void* /*u*/) { return 0; }

BioPtr MemoryBio(const std::string& bytes) {
  return BioPtr(BIO_new_mem_buf(bytes.data(), static_cast<int>(bytes.size())));
}

absl::Status FileError(absl::string_view flag, const std::string& path, absl::string_view why) {
  ERR_clear_error();
  return absl::InvalidArgumentError(absl::StrCat(flag, " '", path, "': ", why));
}

absl::StatusOr<std::string> ReadPem(absl::string_view flag, const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileBytes(path, flag);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat(flag, " '", path, "': ", bytes.status().message()));
  }
  if (bytes->empty()) return FileError(flag, path, "the file is empty");
  return bytes;
}

void WarnAboutValidity(const std::string& path, X509* cert) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    spdlog::warn("TLS certificate '{}' has expired: clients will refuse it", path);
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    spdlog::warn("TLS certificate '{}' is not valid yet: clients will refuse it", path);
  }
}

}  // namespace

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& options) {
  if (!options.enabled()) {
    if (!options.key_path.empty()) {
      return absl::InvalidArgumentError("--tls-key needs --tls-cert");
    }
    if (options.mutual()) {
      return absl::InvalidArgumentError("--tls-client-ca needs --tls-cert and --tls-key");
    }
    return grpc::InsecureServerCredentials();
  }
  if (options.key_path.empty()) return absl::InvalidArgumentError("--tls-cert needs --tls-key");

  absl::StatusOr<std::string> cert_pem = ReadPem("--tls-cert", options.cert_path);
  if (!cert_pem.ok()) return cert_pem.status();
  absl::StatusOr<std::string> key_pem = ReadPem("--tls-key", options.key_path);
  if (!key_pem.ok()) return key_pem.status();

  BioPtr cert_bio = MemoryBio(*cert_pem);
  X509Ptr cert(PEM_read_bio_X509(cert_bio.get(), nullptr, NoPassphrase, nullptr));
  if (cert == nullptr) {
    return FileError("--tls-cert", options.cert_path, "no PEM certificate could be read");
  }
  BioPtr key_bio = MemoryBio(*key_pem);
  PkeyPtr key(PEM_read_bio_PrivateKey(key_bio.get(), nullptr, NoPassphrase, nullptr));
  if (key == nullptr) {
    return FileError("--tls-key", options.key_path,
                     "no PEM private key could be read (encrypted keys are not supported)");
  }
  if (X509_check_private_key(cert.get(), key.get()) != 1) {
    return FileError(
        "--tls-key", options.key_path,
        absl::StrCat("the key does not belong to the certificate in '", options.cert_path, "'"));
  }
  WarnAboutValidity(options.cert_path, cert.get());

  grpc::SslServerCredentialsOptions ssl(GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  ssl.pem_key_cert_pairs.push_back({*key_pem, *cert_pem});
  if (options.mutual()) {
    absl::StatusOr<std::string> ca_pem = ReadPem("--tls-client-ca", options.client_ca_path);
    if (!ca_pem.ok()) return ca_pem.status();
    BioPtr ca_bio = MemoryBio(*ca_pem);
    int certificates = 0;
    while (X509Ptr ca{PEM_read_bio_X509(ca_bio.get(), nullptr, NoPassphrase, nullptr)}) {
      ++certificates;
    }
    ERR_clear_error();  // the loop ends on an "no start line" error
    if (certificates == 0) {
      return FileError("--tls-client-ca", options.client_ca_path,
                       "no PEM certificate could be read");
    }
    ssl.pem_root_certs = *ca_pem;
    ssl.client_certificate_request = GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY;
  }
  return grpc::SslServerCredentials(ssl);
}

}  // namespace forecastd
