#include "client/forecastctl/output.h"

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/http_get.h"
#include "google/protobuf/util/json_util.h"

namespace forecastd::ctl {
namespace {

template <typename T>
std::string ShortestDecimal(T value) {
  if (!std::isfinite(value)) return "null";
  char buffer[64];
  const std::to_chars_result r = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, r.ptr);
}

// A cell that reads as a number, perhaps with a unit after it ("1.25ms", "-3", "12.3k").
bool LooksNumeric(absl::string_view cell) {
  if (cell.empty()) return false;
  size_t i = (cell[0] == '-' || cell[0] == '+') ? 1 : 0;
  return i < cell.size() && absl::ascii_isdigit(static_cast<unsigned char>(cell[i]));
}

std::string& ServerAddress() {
  static std::string* address = new std::string();
  return *address;
}

// Why `status` may mean that nothing speaking forecastd's gRPC was at the address.
bool ConnectionFailed(const absl::Status& status) {
  if (!absl::IsUnavailable(status) && !absl::IsInternal(status)) return false;
  for (const char* sign : {"failed to connect", "Failed to connect", "Connection refused",
                           "Failed parsing HTTP/2", "Socket closed", "DNS resolution failed",
                           "Connection reset", "Trying to connect an http1.x server"}) {
    if (absl::StrContains(status.message(), sign)) return true;
  }
  return false;
}

// What answers plain HTTP at `address`, if anything: forecastd's metrics or REST port.
std::string HttpAnswerAt(const std::string& address) {
  constexpr absl::Duration kProbe = absl::Seconds(1);
  absl::StatusOr<std::string> metrics = HttpGet(address, "/metrics", kProbe);
  if (metrics.ok()) {
    return absl::StrContains(*metrics, "forecastd_") ? "forecastd's metrics port"
                                                     : "A Prometheus metrics endpoint";
  }
  if (HttpGet(address, "/v2/health/live", kProbe).ok()) return "A KServe REST port";
  // Any HTTP status line (UNKNOWN) means an HTTP server, just not one of those.
  if (absl::IsUnknown(metrics.status())) return "An HTTP/1 server";
  return "";
}

}  // namespace

void SetServerAddress(const std::string& address) { ServerAddress() = address; }

int ServerError(const absl::Status& status) {
  std::cout.flush();
  std::fprintf(stderr, "error: %s: %s\n", absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  const std::string& address = ServerAddress();
  if (!address.empty() && ConnectionFailed(status)) {
    const std::string answer = HttpAnswerAt(address);
    std::fprintf(stderr, "forecastd's gRPC was not reachable at %s (--address).\n",
                 address.c_str());
    if (!answer.empty()) {
      std::fprintf(stderr,
                   "%s answers there over HTTP: gRPC is another port of the same daemon "
                   "(forecastd --grpc-address, 8001 by default).\n",
                   answer.c_str());
    }
    std::fprintf(stderr,
                 "Point forecastctl at the daemon with --address HOST:PORT or "
                 "FORECASTD_ADDRESS=HOST:PORT.\n");
  }
  return kExitServerError;
}

int UsageError(absl::string_view message) {
  std::cout.flush();
  std::fprintf(stderr, "error: %s\n", std::string(message).c_str());
  return kExitUsage;
}

absl::StatusOr<std::string> ReadInput(const std::string& path) {
  if (path == "-") {
    std::string text((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
    if (std::cin.bad()) return absl::InvalidArgumentError("cannot read stdin");
    return text;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::InvalidArgumentError(
        absl::StrCat("cannot read '", path, "': ", std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) return absl::InvalidArgumentError(absl::StrCat("cannot read '", path, "'"));
  return text.str();
}

std::string ProtoJson(const google::protobuf::Message& message, bool one_line) {
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = !one_line;
  options.always_print_primitive_fields = true;
  options.always_print_enums_as_ints = false;
  std::string json;
  const auto status = google::protobuf::util::MessageToJsonString(message, &json, options);
  if (!status.ok()) return absl::StrCat("{\"error\": ", JsonQuote(status.ToString()), "}");
  while (!json.empty() && json.back() == '\n') json.pop_back();
  return json;
}

void PrintJson(const google::protobuf::Message& message, bool one_line) {
  std::cout << ProtoJson(message, one_line) << '\n';
}

std::string JsonQuote(absl::string_view s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out.push_back(c);
        }
    }
  }
  out.push_back('"');
  return out;
}

std::string JsonFloat(float value) { return ShortestDecimal(value); }
std::string JsonDouble(double value) { return ShortestDecimal(value); }

std::string FormatNumber(double value) {
  if (std::isnan(value)) return "-";
  return absl::StrFormat("%.6g", value);
}

std::string FormatSeconds(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "-";
  if (seconds < 1) return absl::StrFormat("%.0fms", seconds * 1e3);
  if (seconds < 60) return absl::StrFormat("%.1fs", seconds);
  const int64_t s = static_cast<int64_t>(std::llround(seconds));
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string FormatMicros(double us) {
  if (!std::isfinite(us)) return "-";
  if (us < 1000) return absl::StrFormat("%.0fus", us);
  if (us < 1e6) return absl::StrFormat("%.2fms", us / 1e3);
  return absl::StrFormat("%.2fs", us / 1e6);
}

std::string FormatBytes(double bytes) {
  if (!std::isfinite(bytes)) return "-";
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int unit = 0;
  while (std::fabs(bytes) >= 1024 && unit < 4) {
    bytes /= 1024;
    ++unit;
  }
  return unit == 0 ? absl::StrFormat("%.0f B", bytes)
                   : absl::StrFormat("%.1f %s", bytes, kUnits[unit]);
}

std::string FormatRate(double per_second) {
  if (!std::isfinite(per_second)) return "-";
  if (per_second < 1000) return absl::StrFormat("%.4g", per_second);
  if (per_second < 1e6) return absl::StrFormat("%.1fk", per_second / 1e3);
  return absl::StrFormat("%.2fM", per_second / 1e6);
}

std::string Truncate(absl::string_view s, size_t max_chars) {
  std::string one_line(s);
  for (char& c : one_line) {
    if (c == '\n' || c == '\r' || c == '\t') c = ' ';
  }
  if (one_line.size() <= max_chars) return one_line;
  return absl::StrCat(one_line.substr(0, max_chars > 3 ? max_chars - 3 : 0), "...");
}

std::string ShortName(absl::string_view name, absl::string_view prefix) {
  if (absl::StartsWith(name, prefix)) name.remove_prefix(prefix.size());
  return std::string(name);
}

TextTable::TextTable(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  const size_t columns = headers_.size();
  std::vector<size_t> width(columns);
  std::vector<bool> numeric(columns, true);
  for (size_t c = 0; c < columns; ++c) {
    width[c] = headers_[c].size();
    bool any = false;
    for (const auto& row : rows_) {
      width[c] = std::max(width[c], row[c].size());
      if (row[c].empty() || row[c] == "-") continue;
      any = true;
      if (!LooksNumeric(row[c])) numeric[c] = false;
    }
    if (!any) numeric[c] = false;
  }
  std::string out;
  const auto append_row = [&](const std::vector<std::string>& cells) {
    std::string line;
    for (size_t c = 0; c < columns; ++c) {
      const std::string pad(width[c] - cells[c].size(), ' ');
      if (c > 0) line += "  ";
      line += numeric[c] ? pad + cells[c] : cells[c] + (c + 1 < columns ? pad : "");
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line;
    out += '\n';
  };
  append_row(headers_);
  for (const auto& row : rows_) append_row(row);
  return out;
}

}  // namespace forecastd::ctl
