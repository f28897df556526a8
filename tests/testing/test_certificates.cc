#include "tests/testing/test_certificates.h"

#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/testing/process.h"

namespace forecastd::testing {
namespace {

// The openssl executable on PATH (ChildProcess does not search it).
std::string OpensslPath() {
  const char* path = std::getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path != nullptr ? path : "/usr/bin:/bin", ':')) {
    const std::string candidate = absl::StrCat(dir.empty() ? "." : dir, "/openssl");
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "/usr/bin/openssl";
}

absl::Status Openssl(std::vector<std::string> args) {
  args.insert(args.begin(), OpensslPath());
  absl::StatusOr<RunResult> run = Run(args, absl::Seconds(60));
  if (!run.ok()) return run.status();
  if (run->exit_code != 0) {
    return absl::InternalError(
        absl::StrCat(absl::StrJoin(args, " "), " exited ", run->exit_code, ":\n", run->output));
  }
  return absl::OkStatus();
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("cannot write ", path));
  return absl::OkStatus();
}

// A self-signed CA certificate and its key.
absl::Status MakeCa(const std::string& cert, const std::string& key, const std::string& name) {
  return Openssl({"req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
                  "-keyout", key, "-out", cert, "-subj", "/CN=" + name, "-days", "2", "-addext",
                  "basicConstraints=critical,CA:TRUE", "-addext",
                  "keyUsage=critical,keyCertSign,cRLSign"});
}

// A certificate signed by the CA, with the extensions in `extensions` (an -extfile).
absl::Status MakeLeaf(const std::string& dir, const std::string& stem, const std::string& name,
                      const std::string& extensions, const std::string& ca_cert,
                      const std::string& ca_key, int serial) {
  const std::string csr = absl::StrCat(dir, "/", stem, ".csr");
  const std::string ext = absl::StrCat(dir, "/", stem, ".ext");
  if (absl::Status s = WriteTextFile(ext, extensions); !s.ok()) return s;
  if (absl::Status s = Openssl({"req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
                                "-nodes", "-keyout", absl::StrCat(dir, "/", stem, ".key"), "-out",
                                csr, "-subj", "/CN=" + name});
      !s.ok()) {
    return s;
  }
  return Openssl({"x509", "-req", "-in", csr, "-CA", ca_cert, "-CAkey", ca_key, "-set_serial",
                  absl::StrCat(serial), "-days", "2", "-extfile", ext, "-out",
                  absl::StrCat(dir, "/", stem, ".crt")});
}

}  // namespace

std::shared_ptr<grpc::ChannelCredentials> TestCertificates::Client(
    const std::string& cert_path, const std::string& key_path) const {
  grpc::SslCredentialsOptions ssl;
  ssl.pem_root_certs = ReadTextFile(ca_cert);
  if (!cert_path.empty()) {
    ssl.pem_cert_chain = ReadTextFile(cert_path);
    ssl.pem_private_key = ReadTextFile(key_path);
  }
  return grpc::SslCredentials(ssl);
}

absl::StatusOr<TestCertificates> MakeTestCertificates(const std::string& dir) {
  TestCertificates c;
  c.ca_cert = dir + "/ca.crt";
  const std::string ca_key = dir + "/ca.key";
  if (absl::Status s = MakeCa(c.ca_cert, ca_key, "forecastd test CA"); !s.ok()) return s;
  const std::string rogue_ca_cert = dir + "/rogue-ca.crt";
  const std::string rogue_ca_key = dir + "/rogue-ca.key";
  if (absl::Status s = MakeCa(rogue_ca_cert, rogue_ca_key, "untrusted CA"); !s.ok()) return s;

  if (absl::Status s = MakeLeaf(dir, "server", "localhost",
                                "subjectAltName=IP:127.0.0.1,DNS:localhost\n"
                                "extendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n",
                                c.ca_cert, ca_key, 2);
      !s.ok()) {
    return s;
  }
  const std::string client_ext = "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n";
  if (absl::Status s =
          MakeLeaf(dir, "client", "forecastd test client", client_ext, c.ca_cert, ca_key, 3);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = MakeLeaf(dir, "rogue-client", "forecastd test client", client_ext,
                                rogue_ca_cert, rogue_ca_key, 4);
      !s.ok()) {
    return s;
  }
  c.server_cert = dir + "/server.crt";
  c.server_key = dir + "/server.key";
  c.client_cert = dir + "/client.crt";
  c.client_key = dir + "/client.key";
  c.rogue_client_cert = dir + "/rogue-client.crt";
  c.rogue_client_key = dir + "/rogue-client.key";
  return c;
}

std::string ReadTextFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

}  // namespace forecastd::testing
