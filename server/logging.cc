#include "server/logging.h"

#include <cstdio>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"
#include "spdlog/sinks/stdout_sinks.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

// %j: the message payload escaped for a JSON string.
class JsonEscapedMessage final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    for (const char c : msg.payload) {
      switch (c) {
        case '"':
          dest.append(std::string_view("\\\""));
          break;
        case '\\':
          dest.append(std::string_view("\\\\"));
          break;
        case '\n':
          dest.append(std::string_view("\\n"));
          break;
        case '\r':
          dest.append(std::string_view("\\r"));
          break;
        case '\t':
          dest.append(std::string_view("\\t"));
          break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char escaped[8];
            std::snprintf(escaped, sizeof(escaped), "\\u%04x", static_cast<unsigned char>(c));
            dest.append(std::string_view(escaped));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonEscapedMessage>();
  }
};

}  // namespace

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(absl::string_view text) {
  static constexpr struct {
    absl::string_view name;
    spdlog::level::level_enum level;
  } kLevels[] = {{"trace", spdlog::level::trace}, {"debug", spdlog::level::debug},
                 {"info", spdlog::level::info},   {"warn", spdlog::level::warn},
                 {"error", spdlog::level::err},   {"critical", spdlog::level::critical},
                 {"off", spdlog::level::off}};
  for (const auto& entry : kLevels) {
    if (text == entry.name) return entry.level;
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "bad log level '", text, "': expected trace, debug, info, warn, error, critical or off"));
}

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(
      absl::StrCat("bad log format '", text, "': expected text or json"));
}

void ApplyLogFormat(spdlog::sinks::sink& sink, LogFormat format) {
  auto formatter = std::make_unique<spdlog::pattern_formatter>(spdlog::pattern_time_type::utc);
  if (format == LogFormat::kText) {
    formatter->set_pattern("%Y-%m-%dT%H:%M:%S.%fZ %l [%t] %v");
  } else {
    formatter->add_flag<JsonEscapedMessage>('j');
    formatter->set_pattern(R"({"ts":"%Y-%m-%dT%H:%M:%S.%fZ","level":"%l","thread":%t,"msg":"%j"})");
  }
  sink.set_formatter(std::move(formatter));
}

void ConfigureLogging(const LogOptions& options) {
  auto sink = std::make_shared<spdlog::sinks::stderr_sink_mt>();
  ApplyLogFormat(*sink, options.format);
  auto logger = std::make_shared<spdlog::logger>("forecastd", sink);
  logger->set_level(options.level);
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(std::move(logger));
}

}  // namespace forecastd
