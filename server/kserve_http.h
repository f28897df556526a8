// The KServe v2 REST front door (Triton's HTTP/REST API) on a port of its own, Triton's 8000 by
// default: health, server and model metadata, model readiness, inference with JSON tensors and
// with Triton's binary tensor extension, model configuration, statistics, the model
// repository's index / load / unload, and system shared memory (register / unregister / status;
// regions owned by the caller's token). Every endpoint translates its HTTP request into the
// inference.* message of the matching gRPC method and calls KServeService's transport-neutral
// call for it (server/kserve_service.h), so REST shares gRPC's checks, admission path, limits
// and answers; errors come back as KServe's {"error": "..."} with the HTTP status of their code
// (HttpStatusOf). With tokens on, `Authorization: Bearer <token>` is decided by the same
// CallAuthenticator, under the gRPC method's name, so the roles of server/access_policy.h apply
// unchanged; with TLS on, the port serves HTTPS with the gRPC port's certificate, key and client
// CA.
//
// HTTP is served by cpp-httplib (Debian and Ubuntu's libcpp-httplib-dev): of the libraries both
// distributions package, it is the one that parses HTTP/1.1, keep-alive, chunked and compressed
// bodies and TLS (OpenSSL, which gRPC uses already) behind a small C++ API, where libmicrohttpd
// would need a C callback layer and GnuTLS, and Boost.Beast leaves connection handling and TLS
// plumbing to its user. Its model is a pool of threads each serving one connection; an infer
// request waits on its thread for the engine to complete it, so `threads` bounds the REST
// requests in progress at once (further connections queue).
// Thread-safe: requests are handled on the pool's threads; Shutdown may be called from any
// thread, more than once.
#ifndef FORECASTD_SERVER_KSERVE_HTTP_H_
#define FORECASTD_SERVER_KSERVE_HTTP_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "server/auth_interceptor.h"
#include "server/kserve_service.h"
#include "server/tls_credentials.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace forecastd {

// The HTTP status KServe REST answers an error of this code with: 400 bad input, 404 unknown
// model, 401 / 403 missing or insufficient credentials, 429 refused for load (queue full,
// request memory limit), 503 not ready or draining, 504 deadline or queue timeout, 501 not
// supported, 500 otherwise.
int HttpStatusOf(absl::StatusCode code);

class KServeHttpServer {
 public:
  struct Options {
    // host:port to listen on ("127.0.0.1:8000", "0.0.0.0:8000", "[::1]:8000"); port 0 picks
    // a free one (port() tells which).
    std::string address = "127.0.0.1:8000";
    // The calls every endpoint makes. Not owned; required; must outlive the server.
    KServeService* service = nullptr;
    // Decides the bearer token of every request; not owned; nullptr: no authentication.
    CallAuthenticator* authenticator = nullptr;
    // HTTPS with these files when tls.enabled() (mutual TLS with a client CA); else HTTP.
    TlsOptions tls = {};
    // Largest request body accepted, in bytes (the server's --max-message-bytes); larger
    // bodies get 413.
    int64_t max_body_bytes = 64 << 20;
    // Connections served at once, >= 1.
    int threads = 16;
    // How long an idle keep-alive connection stays open, >= 1. Shutdown waits up to this long
    // for a thread that holds an idle connection, so the server sets it from
    // --shutdown-grace-seconds.
    int keep_alive_timeout_s = 5;
  };

  // Binds the address and starts serving. INVALID_ARGUMENT for bad options or TLS files that
  // do not load; UNAVAILABLE when the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<KServeHttpServer>> Create(const Options& options);

  ~KServeHttpServer();

  // Stops accepting, lets requests in progress finish and joins the threads. Idempotent.
  void Shutdown();

  int port() const { return port_; }

 private:
  explicit KServeHttpServer(const Options& options);
  void Route();

  // Constant after construction.
  const Options options_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = 0;
  // Runs http_'s accept loop; joined by Shutdown.
  std::thread listener_;

  // Own synchronisation: set by listener_ once the accept loop has ended.
  std::atomic<bool> listener_ended_{false};

  absl::Mutex mu_;
  bool shut_down_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_HTTP_H_
