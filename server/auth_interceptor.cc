#include "server/auth_interceptor.h"

#include <iterator>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "server/access_policy.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

constexpr char kAuthorizationKey[] = "authorization";

// Refusal reasons, the `reason` label of forecastd_auth_failures_total.
constexpr char kMissingToken[] = "missing_token";
constexpr char kMalformedHeader[] = "malformed_header";
constexpr char kInvalidToken[] = "invalid_token";
constexpr char kPermissionDenied[] = "permission_denied";
constexpr char kUnknownMethod[] = "unknown_method";

absl::string_view View(const grpc::string_ref& ref) { return {ref.data(), ref.size()}; }

}  // namespace

// One per call: decides at POST_RECV_INITIAL_METADATA, which gRPC runs before the handler.
class CallAuthenticator::Interceptor final : public grpc::experimental::Interceptor {
 public:
  Interceptor(CallAuthenticator* authenticator, grpc::experimental::ServerRpcInfo* info)
      : authenticator_(authenticator), info_(info) {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      std::multimap<grpc::string_ref, grpc::string_ref>* metadata =
          methods->GetRecvInitialMetadata();
      std::vector<absl::string_view> authorization;
      for (auto it = metadata->begin(); it != metadata->end();) {
        const absl::string_view key = View(it->first);
        if (key == kAuthorizationKey) authorization.push_back(View(it->second));
        if (key == kAuthorizationKey || key == kAuthVerdictKey || key == kAuthRolesKey ||
            key == kAuthIdentityKey) {
          it = metadata->erase(it);
        } else {
          ++it;
        }
      }
      const char* method = info_->method() != nullptr ? info_->method() : "";
      const std::string peer =
          info_->server_context() != nullptr ? info_->server_context()->peer() : "";
      // The token is still in the call's metadata array, which nothing of ours reads.
      RoleSet roles;
      const absl::Status verdict =
          authenticator_->Decide(method, authorization, peer, &roles, &identity_);
      verdict_ = absl::StrCat(static_cast<int>(verdict.code()), " ", verdict.message());
      roles_ = absl::StrCat(roles.bits());
      metadata->emplace(grpc::string_ref(kAuthVerdictKey), grpc::string_ref(verdict_));
      metadata->emplace(grpc::string_ref(kAuthRolesKey), grpc::string_ref(roles_));
      metadata->emplace(grpc::string_ref(kAuthIdentityKey), grpc::string_ref(identity_));
    }
    methods->Proceed();
  }

 private:
  CallAuthenticator* const authenticator_;
  grpc::experimental::ServerRpcInfo* const info_;
  // Referenced from the call's metadata map: live as long as the call.
  std::string verdict_;
  std::string roles_;
  std::string identity_;
};

class CallAuthenticator::Factory final
    : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit Factory(CallAuthenticator* authenticator) : authenticator_(authenticator) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new Interceptor(authenticator_, info);
  }

 private:
  CallAuthenticator* const authenticator_;
};

CallAuthenticator::CallAuthenticator(const Options& options) : tokens_(options.tokens) {
  if (options.registry != nullptr) {
    failures_ = &prometheus::BuildCounter()
                     .Name("forecastd_auth_failures_total")
                     .Help("gRPC calls refused by token authentication, by reason")
                     .Register(*options.registry);
    for (const char* reason :
         {kMissingToken, kMalformedHeader, kInvalidToken, kPermissionDenied, kUnknownMethod}) {
      failures_->Add({{"reason", reason}});
    }
  }
}

std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>
CallAuthenticator::NewInterceptorFactory() {
  return std::make_unique<Factory>(this);
}

absl::Status CallAuthenticator::Decide(absl::string_view full_method,
                                       absl::Span<const absl::string_view> authorization,
                                       absl::string_view peer, RoleSet* roles,
                                       std::string* identity_out) {
  const MethodAccess access = AccessFor(full_method);
  if (access.kind == MethodAccess::Kind::kOpen) return absl::OkStatus();
  if (access.kind == MethodAccess::Kind::kUnknown) {
    Refuse(kUnknownMethod, full_method, peer, "the method is not in the access table");
    return absl::PermissionDeniedError(
        absl::StrCat(full_method, " is not in forecastd's access table"));
  }
  if (authorization.empty()) {
    Refuse(kMissingToken, full_method, peer, "no token");
    return absl::UnauthenticatedError(
        "this call needs a bearer token: send the metadata 'authorization: Bearer <token>'");
  }
  if (authorization.size() > 1) {
    Refuse(kMalformedHeader, full_method, peer, "several authorization headers");
    return absl::UnauthenticatedError(
        absl::StrCat("send one authorization header, not ", authorization.size()));
  }
  absl::StatusOr<absl::string_view> token = BearerToken(authorization.front());
  if (!token.ok()) {
    Refuse(kMalformedHeader, full_method, peer, token.status().message());
    return absl::UnauthenticatedError(token.status().message());
  }
  const std::optional<TokenIdentity> identity = tokens_->Authenticate(*token);
  if (!identity.has_value()) {
    Refuse(kInvalidToken, full_method, peer, "unknown token");
    return absl::UnauthenticatedError("the bearer token is not valid");
  }
  if (!identity->roles.Has(access.role)) {
    Refuse(kPermissionDenied, full_method, peer,
           absl::StrCat("token '", identity->name, "' lacks the role ", RoleName(access.role)));
    return absl::PermissionDeniedError(absl::StrCat(full_method, " needs the role '",
                                                    RoleName(access.role),
                                                    "', which this token does not have"));
  }
  if (roles != nullptr) *roles = identity->roles;
  if (identity_out != nullptr) *identity_out = identity->name;
  return absl::OkStatus();
}

void CallAuthenticator::Refuse(absl::string_view reason, absl::string_view full_method,
                               absl::string_view peer, absl::string_view detail) {
  if (failures_ != nullptr) failures_->Add({{"reason", std::string(reason)}}).Increment();
  int64_t unlogged = 0;
  {
    absl::MutexLock lock(&log_mu_);
    const absl::Time now = absl::Now();
    if (now - last_log_ < absl::Seconds(1)) {
      ++unlogged_;
      return;
    }
    last_log_ = now;
    unlogged = std::exchange(unlogged_, 0);
  }
  spdlog::warn("auth: refused {} from {}: {}{}", std::string(full_method), std::string(peer),
               std::string(detail),
               unlogged > 0 ? absl::StrCat(" (", unlogged, " more refused since the last report)")
                            : std::string());
}

absl::Status CheckAuthorized(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto range = metadata.equal_range(grpc::string_ref(kAuthVerdictKey));
  if (range.first == range.second || std::next(range.first) != range.second) {
    return absl::UnauthenticatedError("the call was not authenticated");
  }
  const absl::string_view verdict = View(range.first->second);
  const size_t space = verdict.find(' ');
  int code = 0;
  if (space == absl::string_view::npos || !absl::SimpleAtoi(verdict.substr(0, space), &code) ||
      code < 0 || code > 16) {
    return absl::UnauthenticatedError("the call was not authenticated");
  }
  if (code == 0) return absl::OkStatus();
  return absl::Status(static_cast<absl::StatusCode>(code), verdict.substr(space + 1));
}

std::string CallerIdentity(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  const auto range = metadata.equal_range(grpc::string_ref(kAuthIdentityKey));
  if (range.first == range.second || std::next(range.first) != range.second) return "";
  return std::string(View(range.first->second));
}

absl::Status CheckRole(const grpc::ServerContextBase& context, Role role, absl::string_view what) {
  const auto& metadata = context.client_metadata();
  const auto range = metadata.equal_range(grpc::string_ref(kAuthRolesKey));
  int bits = 0;
  const bool found = range.first != range.second && std::next(range.first) == range.second &&
                     absl::SimpleAtoi(View(range.first->second), &bits) && bits >= 0 &&
                     bits <= 0xff;
  if (found && RoleSet::FromBits(static_cast<uint8_t>(bits)).Has(role)) return absl::OkStatus();
  return absl::PermissionDeniedError(
      absl::StrCat(what, " needs the role '", RoleName(role), "', which this token does not have"));
}

}  // namespace forecastd
