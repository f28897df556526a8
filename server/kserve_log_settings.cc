#include "server/kserve_log_settings.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/logging.h"
#include "spdlog/spdlog.h"

namespace forecastd::kserve {
namespace {

using Setting = inference::LogSettingsRequest::SettingValue;
using spdlog::level::level_enum;

absl::StatusOr<bool> BoolSetting(const std::string& key, const Setting& value) {
  if (!value.has_bool_param()) {
    return absl::InvalidArgumentError(absl::StrCat("log setting '", key, "' must be a boolean"));
  }
  return value.bool_param();
}

}  // namespace

absl::Status ApplyLogSettings(const inference::LogSettingsRequest& request,
                              inference::LogSettingsResponse* response) {
  const level_enum before = spdlog::get_level();
  level_enum level = before;
  if (const auto it = request.settings().find("log_level"); it != request.settings().end()) {
    if (!it->second.has_string_param()) {
      return absl::InvalidArgumentError("log setting 'log_level' must be a string");
    }
    absl::StatusOr<level_enum> parsed = ParseLogLevel(it->second.string_param());
    if (!parsed.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("log setting 'log_level': ", parsed.status().message()));
    }
    level = *parsed;
  }
  bool info = level <= spdlog::level::info;
  bool warning = level <= spdlog::level::warn;
  bool error = level <= spdlog::level::err;
  uint32_t verbose = level == spdlog::level::trace ? 2 : level == spdlog::level::debug ? 1 : 0;
  bool severities_changed = false;
  for (const auto& [key, value] : request.settings()) {
    if (key == "log_level") continue;
    if (key == "log_info" || key == "log_warning" || key == "log_error") {
      absl::StatusOr<bool> on = BoolSetting(key, value);
      if (!on.ok()) return on.status();
      (key == "log_info" ? info : key == "log_warning" ? warning : error) = *on;
      severities_changed = true;
    } else if (key == "log_verbose_level") {
      if (!value.has_uint32_param()) {
        return absl::InvalidArgumentError(
            "log setting 'log_verbose_level' must be an unsigned integer");
      }
      verbose = value.uint32_param();
      severities_changed = true;
    } else if (key == "log_file") {
      if (!value.has_string_param() || !value.string_param().empty()) {
        return absl::UnimplementedError(
            "log setting 'log_file' is not supported: forecastd logs to stderr (leave it \"\")");
      }
    } else if (key == "log_format") {
      if (!value.has_string_param() || value.string_param() != "default") {
        return absl::UnimplementedError(
            "log setting 'log_format' is not supported: forecastd's format is chosen at start "
            "with --log-format (leave it \"default\")");
      }
    } else {
      return absl::InvalidArgumentError(absl::StrCat(
          "unknown log setting '", key,
          "'; forecastd takes log_level, log_info, log_warning, log_error, log_verbose_level, "
          "log_file (\"\") and log_format (\"default\")"));
    }
  }
  if (severities_changed) {
    level = verbose >= 2   ? spdlog::level::trace
            : verbose == 1 ? spdlog::level::debug
            : info         ? spdlog::level::info
            : warning      ? spdlog::level::warn
            : error        ? spdlog::level::err
                           : spdlog::level::off;
  }
  if (level != before) {
    // Said before a change to a quieter level, after one to a louder level, so it shows.
    const auto say = [&] {
      spdlog::warn("log level changed from {} to {} (LogSettings)",
                   spdlog::level::to_string_view(before), spdlog::level::to_string_view(level));
    };
    if (level > before) say();
    spdlog::set_level(level);
    if (level < before) say();
  }

  auto& settings = *response->mutable_settings();
  settings["log_level"].set_string_param(std::string(spdlog::level::to_string_view(level).data(),
                                                     spdlog::level::to_string_view(level).size()));
  settings["log_info"].set_bool_param(level <= spdlog::level::info);
  settings["log_warning"].set_bool_param(level <= spdlog::level::warn);
  settings["log_error"].set_bool_param(level <= spdlog::level::err);
  settings["log_verbose_level"].set_uint32_param(level == spdlog::level::trace   ? 2
                                                 : level == spdlog::level::debug ? 1
                                                                                 : 0);
  settings["log_file"].set_string_param("");
  settings["log_format"].set_string_param("default");
  return absl::OkStatus();
}

}  // namespace forecastd::kserve
