#include "backends/cpu/dnnl_status.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "oneapi/dnnl/dnnl_debug.h"

namespace forecastd {

absl::Status DnnlStatus(dnnl_status_t status, absl::string_view detail,
                        const VendorCallSite& site) {
  if (status == dnnl_success) return absl::OkStatus();
  absl::StatusCode code = absl::StatusCode::kInternal;
  if (status == dnnl_out_of_memory) code = absl::StatusCode::kResourceExhausted;
  if (status == dnnl_unimplemented) code = absl::StatusCode::kUnimplemented;
  const std::string name = absl::StrCat("dnnl_", dnnl_status2str(status));
  const std::string message = detail.empty()
                                  ? std::string(dnnl_status2str(status))
                                  : absl::StrCat(dnnl_status2str(status), " (", detail, ")");
  return VendorError(code, "oneDNN", name, message, site);
}

}  // namespace forecastd
