// Configures the process-wide spdlog logger that every layer writes to: one line per event,
// as text or as JSON lines, at the level `--log-level` chose. main() calls
// ConfigureLogging once, before any other thread starts; logging itself is thread-safe.
#ifndef FORECASTD_SERVER_LOGGING_H_
#define FORECASTD_SERVER_LOGGING_H_

#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "spdlog/common.h"
#include "spdlog/sinks/sink.h"

namespace forecastd {

enum class LogFormat { kText, kJson };

struct LogOptions {
  // trace, debug, info, warn, error, critical or off.
  spdlog::level::level_enum level = spdlog::level::info;
  LogFormat format = LogFormat::kText;
};

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text);
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text);

// Makes the default logger write to stderr with `options`.
void ConfigureLogging(const LogOptions& options);

// Sets the line format of `sink`: text, or one JSON object per line with the keys ts
// (UTC, RFC 3339 with microseconds), level, thread and msg (escaped as JSON requires).
void ApplyLogFormat(spdlog::sinks::sink& sink, LogFormat format);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_LOGGING_H_
