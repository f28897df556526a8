// Enforces the bearer-token roles of server/access_policy.h on every gRPC call, with the
// tokens of a TokenStore. gRPC's C++ server interceptors cannot end a call, so the work is in
// two parts: the interceptor that CallAuthenticator makes runs before any handler, reads
// `authorization: Bearer <token>`, decides, removes the header (so no handler or log line can
// see a token) and leaves its verdict in the call's metadata under a key that clients cannot
// set (any copy they send is dropped); every handler of the Forecaster, Admin and KServe
// services begins with CheckAuthorized, which returns that verdict and refuses a call that has
// none. Refusals are counted in forecastd_auth_failures_total{reason} and logged with the
// peer, the method and the token's name from the file, never the token, at most once a second.
// Thread-safe: interceptors run on every gRPC thread.
#ifndef FORECASTD_SERVER_AUTH_INTERCEPTOR_H_
#define FORECASTD_SERVER_AUTH_INTERCEPTOR_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "grpcpp/server_context.h"
#include "grpcpp/support/server_interceptor.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/registry.h"
#include "server/token_store.h"

namespace forecastd {

// The metadata key of the interceptor's verdict ("<code> <message>").
inline constexpr char kAuthVerdictKey[] = "x-forecastd-auth-verdict";
// The metadata key of the caller's roles (RoleSet::bits() in decimal), set with the verdict.
inline constexpr char kAuthRolesKey[] = "x-forecastd-auth-roles";
// The metadata key of the caller's identity (the token's name), set with the verdict.
inline constexpr char kAuthIdentityKey[] = "x-forecastd-auth-identity";

class CallAuthenticator {
 public:
  struct Options {
    // The accepted tokens. Not owned; required; must outlive every call.
    const TokenStore* tokens = nullptr;
    // Where forecastd_auth_failures_total is registered; nullptr: not counted.
    prometheus::Registry* registry = nullptr;
  };

  explicit CallAuthenticator(const Options& options);

  // For grpc::ServerBuilder::experimental().SetInterceptorCreators; the factory refers to this
  // object, which must outlive the server.
  std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface> NewInterceptorFactory();

  // The verdict on a call of `full_method` that carried these `authorization` values:
  // OK for an open method or a token with the method's role; UNAUTHENTICATED for no token,
  // a malformed header or an unknown token; PERMISSION_DENIED for a token without the role
  // and for a method the access table does not know. Counts and logs refusals. `roles`, when
  // not nullptr, receives the roles of a valid token (none for an open method); `identity`,
  // when not nullptr, its name (empty for an open method).
  absl::Status Decide(absl::string_view full_method,
                      absl::Span<const absl::string_view> authorization, absl::string_view peer,
                      RoleSet* roles = nullptr, std::string* identity = nullptr);

 private:
  class Interceptor;
  class Factory;

  void Refuse(absl::string_view reason, absl::string_view full_method, absl::string_view peer,
              absl::string_view detail);

  // Constant after construction.
  const TokenStore* const tokens_;
  prometheus::Family<prometheus::Counter>* failures_ = nullptr;

  absl::Mutex log_mu_;
  absl::Time last_log_ ABSL_GUARDED_BY(log_mu_) = absl::InfinitePast();
  int64_t unlogged_ ABSL_GUARDED_BY(log_mu_) = 0;
};

// The verdict the interceptor left on this call; UNAUTHENTICATED when there is none (the
// interceptor is not installed: a wiring bug, refused rather than let through).
absl::Status CheckAuthorized(const grpc::ServerContextBase& context);

// Who the call's token belongs to (its name in the token file), as the interceptor found it;
// empty without the interceptor or for an open method. What a caller owns (shared-memory
// regions) is keyed by it.
std::string CallerIdentity(const grpc::ServerContextBase& context);

// For what one method does only for some callers (Train with promote): PERMISSION_DENIED
// "<what> needs the role '<role>'" unless the call's token, as the interceptor found it, has
// `role`.
absl::Status CheckRole(const grpc::ServerContextBase& context, Role role, absl::string_view what);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_AUTH_INTERCEPTOR_H_
