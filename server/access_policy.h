// Which role each gRPC method of forecastd needs when bearer tokens are on (--token-file):
// `predict` for forecasts and metadata, `train` for training jobs, `admin` for changing what
// serves; grpc.health.v1, server reflection and KServe's ServerLive/ServerReady stay open so
// probes and tools work without a token. A method missing from the table is refused, never
// allowed. The auth interceptor (server/auth_interceptor.h) asks AccessFor on every call.
// Stateless; thread-safe.
#ifndef FORECASTD_SERVER_ACCESS_POLICY_H_
#define FORECASTD_SERVER_ACCESS_POLICY_H_

#include <cstdint>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace forecastd {

enum class Role : uint8_t {
  kPredict = 1 << 0,  // Predict, Stream, ModelInfer, model, stream and server metadata
  kTrain = 1 << 1,    // Train and training-job control
  kAdmin = 1 << 2,    // load, unload and promote models; Benchmark
};

// "predict", "train", "admin".
const char* RoleName(Role role);
// The role named `name` (exactly as RoleName spells it); INVALID_ARGUMENT otherwise.
absl::StatusOr<Role> ParseRole(absl::string_view name);

// The roles one token grants. A value type.
class RoleSet {
 public:
  RoleSet() = default;
  void Add(Role role) { bits_ |= static_cast<uint8_t>(role); }
  bool Has(Role role) const { return (bits_ & static_cast<uint8_t>(role)) != 0; }
  bool empty() const { return bits_ == 0; }
  bool operator==(const RoleSet& other) const { return bits_ == other.bits_; }
  // As one small number, for passing a caller's roles along with its call.
  uint8_t bits() const { return bits_; }
  static RoleSet FromBits(uint8_t bits) {
    RoleSet set;
    set.bits_ = bits;
    return set;
  }

 private:
  uint8_t bits_ = 0;
};

// What a full gRPC method name ("/forecastd.v1.Forecaster/Predict") requires.
struct MethodAccess {
  enum class Kind {
    kOpen,     // no token needed
    kRole,     // a token whose roles include `role`
    kUnknown,  // not in the table: refused
  };
  Kind kind = Kind::kUnknown;
  Role role = Role::kAdmin;  // when kind is kRole
};

MethodAccess AccessFor(absl::string_view full_method);

// One row of the table, for tests and documentation.
struct MethodRule {
  const char* full_method;
  MethodAccess access;
};
// Every method of forecastd.v1.Forecaster, forecastd.v1.Admin and
// inference.GRPCInferenceService. (Health and reflection are open by service prefix.)
absl::Span<const MethodRule> MethodRules();

}  // namespace forecastd

#endif  // FORECASTD_SERVER_ACCESS_POLICY_H_
