// How forecastctl talks back: exit codes, error lines, protobuf JSON, aligned text tables and
// the number formats its tables share, plus reading an input file or stdin.
// Stateless apart from stdout/stderr; main thread only.
#ifndef FORECASTD_CLIENT_FORECASTCTL_OUTPUT_H_
#define FORECASTD_CLIENT_FORECASTCTL_OUTPUT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"

namespace forecastd::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitServerError = 1;  // an RPC (or the metrics endpoint) failed
inline constexpr int kExitUsage = 2;        // bad flags or values, unreadable input
// A watch left by Ctrl-C or SIGINT, the job still running (128 + SIGINT, as shells report an
// interrupted command).
inline constexpr int kExitDetached = 130;

// Prints "error: <CODE_NAME>: <message>" (e.g. "error: NOT_FOUND: model 'x' ...") to stderr
// and returns kExitServerError. When the error is that forecastd could not be reached (gRPC's
// UNAVAILABLE for a failed connection, or an answer that is not HTTP/2), it also says which
// address was tried (SetServerAddress), whether an HTTP server answered there instead (the
// metrics or REST port), and how to point elsewhere.
int ServerError(const absl::Status& status);
// The gRPC address the command talks to, for ServerError's hint.
void SetServerAddress(const std::string& address);
// Prints "error: <message>" to stderr and returns kExitUsage.
int UsageError(absl::string_view message);

// The contents of the file at `path`, or of stdin when `path` is "-". INVALID_ARGUMENT
// naming the file when it cannot be read.
absl::StatusOr<std::string> ReadInput(const std::string& path);

// The message in protobuf's JSON mapping (lowerCamelCase names, enums by name, every field
// without presence even when default), indented or on one line, except that 64-bit integers
// are numbers where a double holds them exactly (|v| <= 2^53), as jq and JavaScript read them;
// larger ones stay strings, as the mapping has them. protobuf's parser reads both back.
std::string ProtoJson(const google::protobuf::Message& message, bool one_line = false);
// Writes ProtoJson(message, one_line) and a newline to stdout.
void PrintJson(const google::protobuf::Message& message, bool one_line = false);

// A CSV field: `s` as is, or quoted (quotes doubled) when it holds a comma, a quote, a line
// break or leading or trailing spaces.
std::string CsvField(absl::string_view s);

// A JSON string literal for `s` (quoted and escaped).
std::string JsonQuote(absl::string_view s);
// The shortest decimal that reads back as the same float (or double); `null` for NaN and
// infinities, which JSON cannot hold.
std::string JsonFloat(float value);
std::string JsonDouble(double value);
// A quantile level as a percentile column label: 0.1 -> "p10", 0.025 -> "p2.5", 0.5 -> "p50".
std::string QuantileLabel(float level);

// Human formats for tables.
std::string FormatNumber(double value);                       // 6 significant digits; "-" for NaN
std::string FormatSeconds(double seconds);                    // "850ms", "12.3s", "4m05s", "2h03m"
std::string FormatMicros(double microseconds);                // "85us", "1.25ms", "2.10s"
std::string FormatBytes(double bytes);                        // "512 B", "1.5 MiB"
std::string FormatRate(double per_second);                    // "950", "12.3k", "1.20M"
std::string Truncate(absl::string_view s, size_t max_chars);  // ends in "..." when cut
// An enum value's name without its prefix: ("MODEL_READY", "MODEL_") -> "READY".
std::string ShortName(absl::string_view name, absl::string_view prefix);

// A table with a header row and columns padded to their widest cell; columns whose cells are
// all numbers are right-aligned.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);
  bool empty() const { return rows_.empty(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_OUTPUT_H_
