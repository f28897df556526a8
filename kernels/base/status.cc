#include "kernels/base/status.h"

#include "absl/strings/str_cat.h"

namespace forecastd {

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status VendorError(absl::StatusCode code, absl::string_view library,
                         absl::string_view error_name, absl::string_view vendor_message,
                         const VendorCallSite& site) {
  return absl::Status(code,
                      absl::StrCat(library, " error ", error_name, ": ", vendor_message, " in `",
                                   site.expression, "` at ", site.file, ":", site.line));
}

}  // namespace forecastd
