// Status plumbing shared by every layer: RETURN_IF_ERROR, ASSIGN_OR_RETURN, WithContext and the
// one formatter that turns a vendor library's error code into an absl::Status.
// It lives in the lowest layer so that kernels, backends, engine and server all use it.
// Everything here is stateless and thread-safe.
#ifndef FORECASTD_KERNELS_BASE_STATUS_H_
#define FORECASTD_KERNELS_BASE_STATUS_H_

#include <utility>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace forecastd {

// Returns from the enclosing function with the status of `expr` when it is not OK.
// `expr` may be an absl::Status or an absl::StatusOr<T>.
#define RETURN_IF_ERROR(expr)                                                        \
  do {                                                                               \
    if (auto fd_status_ = ::forecastd::internal::ToStatus(expr); !fd_status_.ok()) { \
      return fd_status_;                                                             \
    }                                                                                \
  } while (false)

// `ASSIGN_OR_RETURN(lhs, rexpr)` evaluates `rexpr` (an absl::StatusOr<T>), returns its
// status from the enclosing function when it is an error, and otherwise moves the value
// into `lhs`, which may be a declaration (`auto x`, `std::unique_ptr<T> y`) or an lvalue.
#define ASSIGN_OR_RETURN(lhs, rexpr) \
  FD_ASSIGN_OR_RETURN_IMPL_(FD_STATUS_CONCAT_(fd_statusor_, __LINE__), lhs, rexpr)

#define FD_STATUS_CONCAT_INNER_(a, b) a##b
#define FD_STATUS_CONCAT_(a, b) FD_STATUS_CONCAT_INNER_(a, b)
#define FD_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, rexpr) \
  auto statusor = (rexpr);                              \
  if (!statusor.ok()) {                                 \
    return std::move(statusor).status();                \
  }                                                     \
  lhs = *std::move(statusor)

namespace internal {
inline absl::Status ToStatus(absl::Status status) { return status; }
template <typename T>
absl::Status ToStatus(const absl::StatusOr<T>& status_or) {
  return status_or.status();
}
}  // namespace internal

// `status` with "<context>: " put before its message (same code); OK stays OK.
absl::Status WithContext(const absl::Status& status, absl::string_view context);

// Where a failing vendor call was made and what it was.
struct VendorCallSite {
  absl::string_view expression;  // the call's source text, e.g. "cublasCreate(&handle)"
  const char* file;
  int line;
};

// The single shape of every wrapped vendor error:
//   "<library> error <error_name>: <vendor_message> in `<expression>` at <file>:<line>"
// `error_name` is the vendor's symbolic code (e.g. "cudaErrorMemoryAllocation").
absl::Status VendorError(absl::StatusCode code, absl::string_view library,
                         absl::string_view error_name, absl::string_view vendor_message,
                         const VendorCallSite& site);

}  // namespace forecastd

#define FD_VENDOR_CALL_SITE(expr) \
  ::forecastd::VendorCallSite { #expr, __FILE__, __LINE__ }

#endif  // FORECASTD_KERNELS_BASE_STATUS_H_
