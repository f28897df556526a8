// Wraps oneDNN failures into absl::Status, once for the whole project: C API status codes
// through DNNL_RETURN_IF_ERROR, and the C++ API's dnnl::error exceptions through DNNL_TRY,
// so no exception crosses a module boundary. Used by backends/cpu/ only. Thread-safe.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_STATUS_H_
#define FORECASTD_BACKENDS_CPU_DNNL_STATUS_H_

#include "absl/strings/string_view.h"

#include "kernels/base/status.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace forecastd {

// OK for dnnl_success; RESOURCE_EXHAUSTED for out-of-memory, UNIMPLEMENTED for an
// unsupported primitive or shape, INTERNAL otherwise. `detail` is oneDNN's own message
// when it gave one (the C++ API's exception text), else empty.
absl::Status DnnlStatus(dnnl_status_t status, absl::string_view detail, const VendorCallSite& site);

}  // namespace forecastd

// Evaluates a oneDNN C API call and returns its wrapped error from the enclosing function.
#define DNNL_RETURN_IF_ERROR(expr) \
  RETURN_IF_ERROR(::forecastd::DnnlStatus((expr), "", FD_VENDOR_CALL_SITE(expr)))

// Runs a statement that uses the oneDNN C++ API and turns a thrown dnnl::error into a
// returned Status. The enclosing function returns absl::Status or absl::StatusOr<T>.
#define DNNL_TRY(statement)                                                        \
  do {                                                                             \
    try {                                                                          \
      statement;                                                                   \
    } catch (const ::dnnl::error& fd_dnnl_error_) {                                \
      return ::forecastd::DnnlStatus(fd_dnnl_error_.status, fd_dnnl_error_.what(), \
                                     FD_VENDOR_CALL_SITE(statement));              \
    }                                                                              \
  } while (false)

#endif  // FORECASTD_BACKENDS_CPU_DNNL_STATUS_H_
