// Triton's log-settings call (LogSettings over gRPC, /v2/logging over REST) on forecastd's
// process-wide spdlog logger: it reads and changes the log level at run time. Triton's
// settings are severities turned on or off plus a verbose level, while spdlog has one
// threshold, so they map as:
//   log_verbose_level >= 2: trace; 1: debug; 0: the lowest of info, warning, error turned on
//   (none: off)
// and back (log_info is on when the level is info or lower, and so on). "log_level" takes
// forecastd's own names (trace, debug, info, warn, error, critical, off) and is applied first.
// log_file must stay "" (forecastd logs to stderr) and log_format "default" (the format is
// --log-format's); any other key is INVALID_ARGUMENT. Thread-safe (spdlog's level is atomic);
// concurrent updates apply in some order.
#ifndef FORECASTD_SERVER_KSERVE_LOG_SETTINGS_H_
#define FORECASTD_SERVER_KSERVE_LOG_SETTINGS_H_

#include "absl/status/status.h"
#include "inference/grpc_service.pb.h"

namespace forecastd::kserve {

// Applies `request`'s settings (none: only reads), then fills `response` with every setting as
// it now stands. On an error nothing is changed.
absl::Status ApplyLogSettings(const inference::LogSettingsRequest& request,
                              inference::LogSettingsResponse* response);

}  // namespace forecastd::kserve

#endif  // FORECASTD_SERVER_KSERVE_LOG_SETTINGS_H_
