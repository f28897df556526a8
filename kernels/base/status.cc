#include "kernels/base/status.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace forecastd {

absl::Status WithContext(const absl::Status& status, absl::string_view context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

absl::Status VendorError(absl::StatusCode code, absl::string_view library,
                         absl::string_view error_name, absl::string_view vendor_message,
                         const VendorCallSite& site) {
  // __FILE__ is relative to the project root (-fmacro-prefix-map), or, where ccache compiled
  // with paths relative to the build directory (CCACHE_BASEDIR), relative to that: the same
  // path behind "../" steps, which go.
  absl::string_view file = site.file;
  while (absl::ConsumePrefix(&file, "../") || absl::ConsumePrefix(&file, "./")) {
  }
  return absl::Status(code, absl::StrCat(library, " error ", error_name, ": ", vendor_message,
                                         " in `", site.expression, "` at ", file, ":", site.line));
}

}  // namespace forecastd
