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
#include <tuple>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
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

// The largest magnitude below which every integer is exact in a double (2^53): JSON readers
// that hold numbers as doubles (JavaScript, jq) read such int64 values back unchanged.
constexpr uint64_t kExactInDouble = uint64_t{1} << 53;

std::string Int64Json(int64_t v) {
  const uint64_t magnitude = v < 0 ? uint64_t{0} - static_cast<uint64_t>(v) : v;
  return magnitude <= kExactInDouble ? absl::StrCat(v) : absl::StrCat("\"", v, "\"");
}

std::string UInt64Json(uint64_t v) {
  return v <= kExactInDouble ? absl::StrCat(v) : absl::StrCat("\"", v, "\"");
}

// protobuf's JSON mapping for a float or double: the shortest decimal, NaN and infinities as
// the strings protobuf's parser reads.
template <typename T>
std::string FloatJson(T v) {
  if (std::isnan(v)) return "\"NaN\"";
  if (std::isinf(v)) return v > 0 ? "\"Infinity\"" : "\"-Infinity\"";
  return ShortestDecimal(v);
}

// protobuf's JSON mapping written out by reflection, so that 64-bit integers can be numbers
// (protobuf's printer always quotes them): lowerCamelCase names, enums by name, every field
// without presence even when default, fields with presence when set, map keys in order.
// google.protobuf.* messages (which have JSON forms of their own) go through protobuf's printer.
struct JsonWriter {
  bool one_line;
  std::string* out;

  void Newline(int depth) {
    if (one_line) return;
    out->push_back('\n');
    out->append(static_cast<size_t>(depth) * 2, ' ');
  }

  void Message(const google::protobuf::Message& m, int depth) {
    using google::protobuf::FieldDescriptor;
    const google::protobuf::Descriptor* d = m.GetDescriptor();
    if (absl::StartsWith(d->file()->name(), "google/protobuf/")) {
      google::protobuf::util::JsonPrintOptions options;
      std::string json;
      if (google::protobuf::util::MessageToJsonString(m, &json, options).ok()) {
        out->append(json);
      } else {
        out->append("null");
      }
      return;
    }
    const google::protobuf::Reflection* r = m.GetReflection();
    out->push_back('{');
    bool first = true;
    for (int i = 0; i < d->field_count(); ++i) {
      const FieldDescriptor* f = d->field(i);
      if (!f->is_repeated() && f->has_presence() && !r->HasField(m, f)) continue;
      out->append(first ? "" : ",");
      first = false;
      Newline(depth + 1);
      absl::StrAppend(out, JsonQuote(f->json_name()), one_line ? ":" : ": ");
      if (f->is_map()) {
        Map(m, f, depth + 1);
      } else if (f->is_repeated()) {
        const int n = r->FieldSize(m, f);
        out->push_back('[');
        for (int k = 0; k < n; ++k) {
          out->append(k == 0 ? "" : ",");
          Newline(depth + 2);
          Value(m, f, k, depth + 2);
        }
        if (n > 0) Newline(depth + 1);
        out->push_back(']');
      } else {
        Value(m, f, -1, depth + 1);
      }
    }
    if (!first) Newline(depth);
    out->push_back('}');
  }

  // Entry `index` of a repeated field, or the singular field for -1.
  void Value(const google::protobuf::Message& m, const google::protobuf::FieldDescriptor* f,
             int index, int depth) {
    using google::protobuf::FieldDescriptor;
    const google::protobuf::Reflection* r = m.GetReflection();
    const bool rep = index >= 0;
    switch (f->cpp_type()) {
      case FieldDescriptor::CPPTYPE_INT32:
        absl::StrAppend(out, rep ? r->GetRepeatedInt32(m, f, index) : r->GetInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_UINT32:
        absl::StrAppend(out, rep ? r->GetRepeatedUInt32(m, f, index) : r->GetUInt32(m, f));
        break;
      case FieldDescriptor::CPPTYPE_INT64:
        out->append(Int64Json(rep ? r->GetRepeatedInt64(m, f, index) : r->GetInt64(m, f)));
        break;
      case FieldDescriptor::CPPTYPE_UINT64:
        out->append(UInt64Json(rep ? r->GetRepeatedUInt64(m, f, index) : r->GetUInt64(m, f)));
        break;
      case FieldDescriptor::CPPTYPE_FLOAT:
        out->append(FloatJson(rep ? r->GetRepeatedFloat(m, f, index) : r->GetFloat(m, f)));
        break;
      case FieldDescriptor::CPPTYPE_DOUBLE:
        out->append(FloatJson(rep ? r->GetRepeatedDouble(m, f, index) : r->GetDouble(m, f)));
        break;
      case FieldDescriptor::CPPTYPE_BOOL:
        out->append((rep ? r->GetRepeatedBool(m, f, index) : r->GetBool(m, f)) ? "true" : "false");
        break;
      case FieldDescriptor::CPPTYPE_ENUM: {
        const int number = rep ? r->GetRepeatedEnumValue(m, f, index) : r->GetEnumValue(m, f);
        const google::protobuf::EnumValueDescriptor* value =
            f->enum_type()->FindValueByNumber(number);
        out->append(value != nullptr ? JsonQuote(value->name()) : absl::StrCat(number));
        break;
      }
      case FieldDescriptor::CPPTYPE_STRING: {
        std::string scratch;
        const std::string& s = rep ? r->GetRepeatedStringReference(m, f, index, &scratch)
                                   : r->GetStringReference(m, f, &scratch);
        out->append(
            JsonQuote(f->type() == FieldDescriptor::TYPE_BYTES ? absl::Base64Escape(s) : s));
        break;
      }
      case FieldDescriptor::CPPTYPE_MESSAGE:
        Message(rep ? r->GetRepeatedMessage(m, f, index) : r->GetMessage(m, f), depth);
        break;
    }
  }

  // A map field as a JSON object, its keys as strings in ascending key order.
  void Map(const google::protobuf::Message& m, const google::protobuf::FieldDescriptor* f,
           int depth) {
    using google::protobuf::FieldDescriptor;
    const google::protobuf::Reflection* r = m.GetReflection();
    const FieldDescriptor* key = f->message_type()->map_key();
    const FieldDescriptor* value = f->message_type()->map_value();
    // Ordered by the key's value: as a signed or an unsigned number, else as text.
    struct Entry {
      int64_t order_signed = 0;
      uint64_t order_unsigned = 0;
      std::string key;  // as JSON writes it
      const google::protobuf::Message* message;
    };
    std::vector<Entry> entries;
    for (int k = 0; k < r->FieldSize(m, f); ++k) {
      const google::protobuf::Message& e = r->GetRepeatedMessage(m, f, k);
      const google::protobuf::Reflection* er = e.GetReflection();
      Entry entry{0, 0, "", &e};
      switch (key->cpp_type()) {
        case FieldDescriptor::CPPTYPE_INT32:
        case FieldDescriptor::CPPTYPE_INT64:
          entry.order_signed = key->cpp_type() == FieldDescriptor::CPPTYPE_INT32
                                   ? er->GetInt32(e, key)
                                   : er->GetInt64(e, key);
          entry.key = absl::StrCat(entry.order_signed);
          break;
        case FieldDescriptor::CPPTYPE_UINT32:
        case FieldDescriptor::CPPTYPE_UINT64:
          entry.order_unsigned = key->cpp_type() == FieldDescriptor::CPPTYPE_UINT32
                                     ? er->GetUInt32(e, key)
                                     : er->GetUInt64(e, key);
          entry.key = absl::StrCat(entry.order_unsigned);
          break;
        case FieldDescriptor::CPPTYPE_BOOL:
          entry.order_unsigned = er->GetBool(e, key) ? 1 : 0;
          entry.key = entry.order_unsigned != 0 ? "true" : "false";
          break;
        default:
          entry.key = er->GetString(e, key);
      }
      entries.push_back(std::move(entry));
    }
    std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
      return std::tie(a.order_signed, a.order_unsigned, a.key) <
             std::tie(b.order_signed, b.order_unsigned, b.key);
    });
    out->push_back('{');
    for (size_t k = 0; k < entries.size(); ++k) {
      out->append(k == 0 ? "" : ",");
      Newline(depth + 1);
      absl::StrAppend(out, JsonQuote(entries[k].key), one_line ? ":" : ": ");
      Value(*entries[k].message, value, -1, depth + 1);
    }
    if (!entries.empty()) Newline(depth);
    out->push_back('}');
  }
};

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
  std::string json;
  JsonWriter{one_line, &json}.Message(message, 0);
  return json;
}

void PrintJson(const google::protobuf::Message& message, bool one_line) {
  std::cout << ProtoJson(message, one_line) << '\n';
}

std::string CsvField(absl::string_view s) {
  const bool quote = s.find_first_of(",\"\n\r") != absl::string_view::npos ||
                     (!s.empty() && (s.front() == ' ' || s.back() == ' '));
  if (!quote) return std::string(s);
  return absl::StrCat("\"", absl::StrReplaceAll(s, {{"\"", "\"\""}}), "\"");
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

std::string QuantileLabel(float level) {
  // Six significant digits drop the float's binary tail (0.1f * 100 = 10.0000001).
  return absl::StrFormat("p%g", static_cast<double>(level) * 100.0);
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
