#include "client/input_windows.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// The cells of one CSV line: split at commas outside double quotes, quotes removed ("" is a
// quote inside a quoted cell), surrounding spaces trimmed.
std::vector<std::string> SplitCsvLine(absl::string_view line) {
  std::vector<std::string> cells(1);
  bool quoted = false;
  for (size_t i = 0; i < line.size(); ++i) {
    const char c = line[i];
    if (quoted) {
      if (c == '"' && i + 1 < line.size() && line[i + 1] == '"') {
        cells.back().push_back('"');
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        cells.back().push_back(c);
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      cells.emplace_back();
    } else {
      cells.back().push_back(c);
    }
  }
  for (std::string& cell : cells) absl::StripAsciiWhitespace(&cell);
  return cells;
}

// A JSON number array's values, or why not.
absl::Status AppendNumbers(const google::protobuf::ListValue& list, absl::string_view where,
                           std::vector<float>& out) {
  for (int i = 0; i < list.values_size(); ++i) {
    const google::protobuf::Value& v = list.values(i);
    if (v.kind_case() != google::protobuf::Value::kNumberValue) {
      return absl::InvalidArgumentError(absl::StrCat("inputs", where, "[", i, "] is not a number"));
    }
    if (!std::isfinite(v.number_value())) {
      return absl::InvalidArgumentError(absl::StrCat("inputs", where, "[", i, "] is not finite"));
    }
    out.push_back(static_cast<float>(v.number_value()));
  }
  return absl::OkStatus();
}

const google::protobuf::ListValue* AsList(const google::protobuf::Value& v) {
  return v.kind_case() == google::protobuf::Value::kListValue ? &v.list_value() : nullptr;
}

}  // namespace

bool LooksLikeJson(absl::string_view text) {
  const absl::string_view stripped = absl::StripLeadingAsciiWhitespace(text);
  return !stripped.empty() && (stripped.front() == '{' || stripped.front() == '[');
}

namespace {

// Walks a CSV's lines: `on_header` gets the first non-blank line's cells, `on_row` every later
// non-blank line's cells (as many as the header's, else an error naming the line) and its
// 1-based line number. INVALID_ARGUMENT for a CSV without a header line.
absl::Status ForEachCsvRow(
    absl::string_view text,
    const std::function<absl::Status(const std::vector<std::string>& cells)>& on_header,
    const std::function<absl::Status(std::vector<std::string>& cells, int64_t line)>& on_row) {
  size_t header_cells = 0;
  bool have_header = false;
  int64_t line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (absl::StripAsciiWhitespace(line).empty()) continue;
    std::vector<std::string> cells = SplitCsvLine(line);
    if (!have_header) {
      have_header = true;
      header_cells = cells.size();
      RETURN_IF_ERROR(on_header(cells));
      continue;
    }
    if (cells.size() != header_cells) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ": ", cells.size(),
                                                     " cells, but the header has ", header_cells));
    }
    RETURN_IF_ERROR(on_row(cells, line_number));
  }
  if (!have_header) return absl::InvalidArgumentError("the CSV is empty (no header line)");
  return absl::OkStatus();
}

absl::StatusOr<Series> ReadCsvSeries(absl::string_view text,
                                     const std::vector<std::string>& columns, bool gaps) {
  Series series;
  series.columns = columns;
  const int64_t F = static_cast<int64_t>(columns.size());
  std::vector<size_t> index;  // per wanted column, its position in the header
  const auto on_header = [&](const std::vector<std::string>& cells) {
    for (const std::string& name : columns) {
      size_t at = 0;
      while (at < cells.size() && cells[at] != name) ++at;
      if (at == cells.size()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "the CSV header has no column '", name, "' (header: ", absl::StrJoin(cells, ","),
            "; needed: ", absl::StrJoin(columns, ","), ")"));
      }
      index.push_back(at);
    }
    return absl::OkStatus();
  };
  const auto on_row = [&](std::vector<std::string>& cells, int64_t line_number) {
    for (int64_t f = 0; f < F; ++f) {
      const std::string& cell = cells[index[f]];
      float value = 0.0f;
      if (gaps && cell.empty()) {
        series.values.push_back(std::numeric_limits<float>::quiet_NaN());
        continue;
      }
      if (!absl::SimpleAtof(cell, &value) || !std::isfinite(value)) {
        return absl::InvalidArgumentError(absl::StrCat("line ", line_number, ", column '",
                                                       columns[f], "': '", cell,
                                                       "' is not a finite number"));
      }
      series.values.push_back(value);
    }
    ++series.rows;
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachCsvRow(text, on_header, on_row));
  return series;
}

}  // namespace

absl::StatusOr<Series> ParseCsvSeries(absl::string_view text,
                                      const std::vector<std::string>& columns) {
  return ReadCsvSeries(text, columns, /*gaps=*/false);
}

absl::StatusOr<Series> ParseCsvSeriesWithGaps(absl::string_view text,
                                              const std::vector<std::string>& columns) {
  return ReadCsvSeries(text, columns, /*gaps=*/true);
}

absl::StatusOr<std::vector<std::string>> ParseCsvColumn(absl::string_view text,
                                                        absl::string_view column) {
  std::vector<std::string> out;
  size_t index = 0;
  const auto on_header = [&](const std::vector<std::string>& cells) {
    index = static_cast<size_t>(std::find(cells.begin(), cells.end(), column) - cells.begin());
    if (index == cells.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the CSV header has no column '", column, "' (header: ", absl::StrJoin(cells, ","), ")"));
    }
    return absl::OkStatus();
  };
  const auto on_row = [&](std::vector<std::string>& cells, int64_t) {
    out.push_back(std::move(cells[index]));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(ForEachCsvRow(text, on_header, on_row));
  return out;
}

absl::StatusOr<int64_t> ParseUnixSeconds(absl::string_view cell) {
  int64_t seconds = 0;
  if (absl::SimpleAtoi(cell, &seconds)) return seconds;
  // A number with a fraction, as training's CSV reader takes it: cut to the second.
  double number = 0;
  if (absl::SimpleAtod(cell, &number) && std::isfinite(number) && std::fabs(number) < 0x1p62) {
    return static_cast<int64_t>(std::floor(number));
  }
  const std::string text(cell);
  std::string error;
  absl::Time time;
  // With an offset or "Z" (%Ez takes both), then without (UTC), date-times then a date.
  for (const char* format :
       {"%Y-%m-%d%ET%H:%M:%E*S%Ez", "%Y-%m-%d %H:%M:%E*S%Ez", "%Y-%m-%d%ET%H:%M%Ez",
        "%Y-%m-%d %H:%M%Ez", "%Y-%m-%d%ET%H:%M:%E*S", "%Y-%m-%d %H:%M:%E*S", "%Y-%m-%d%ET%H:%M",
        "%Y-%m-%d %H:%M", "%Y-%m-%d"}) {
    if (absl::ParseTime(format, text, absl::UTCTimeZone(), &time, &error)) {
      return absl::ToUnixSeconds(time);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "'", cell, "' is neither Unix seconds nor an ISO 8601 date-time (2026-03-02T14:30:00Z)"));
}

absl::StatusOr<Windows> SlidingWindows(const Series& series, int64_t lookback, int64_t count) {
  const int64_t T = lookback;
  const int64_t F = static_cast<int64_t>(series.columns.size());
  if (T < 1) return absl::InvalidArgumentError(absl::StrCat("lookback ", T, " is not positive"));
  if (count < 0) return absl::InvalidArgumentError(absl::StrCat("window count ", count, " < 0"));
  const int64_t available = series.rows - T + 1;
  if (available < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the series has ", series.rows, " rows; one window needs ", T, " (lookback)"));
  }
  if (count > available) {
    return absl::InvalidArgumentError(absl::StrCat(count, " windows of ", T, " rows need ",
                                                   count + T - 1, " rows; the series has ",
                                                   series.rows));
  }
  const int64_t B = count == 0 ? available : count;
  Windows windows;
  windows.count = B;
  windows.lookback = T;
  windows.features = F;
  windows.values.reserve(static_cast<size_t>(B * T * F));
  for (int64_t b = 0; b < B; ++b) {
    const int64_t first = available - B + b;
    windows.first_rows.push_back(first);
    const auto begin = series.values.begin() + first * F;
    windows.values.insert(windows.values.end(), begin, begin + T * F);
  }
  return windows;
}

absl::StatusOr<Windows> ParseJsonWindows(absl::string_view text) {
  google::protobuf::Value root;
  const auto parsed = google::protobuf::util::JsonStringToMessage(
      google::protobuf::StringPiece(text.data(), text.size()), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not valid JSON: ", parsed.message().ToString()));
  }
  const google::protobuf::ListValue* batch = AsList(root);
  if (root.kind_case() == google::protobuf::Value::kStructValue) {
    const auto& fields = root.struct_value().fields();
    const auto it = fields.find("inputs");
    if (it == fields.end()) {
      return absl::InvalidArgumentError("the JSON object has no \"inputs\" field");
    }
    batch = AsList(it->second);
  }
  if (batch == nullptr) {
    return absl::InvalidArgumentError(
        "expected {\"inputs\": [[[...]]]} or a 3-D array [window][time step][feature]");
  }
  Windows windows;
  windows.count = batch->values_size();
  if (windows.count == 0) return absl::InvalidArgumentError("inputs has no windows");
  for (int64_t b = 0; b < windows.count; ++b) {
    const google::protobuf::ListValue* steps = AsList(batch->values(static_cast<int>(b)));
    if (steps == nullptr || steps->values_size() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("inputs[", b, "] is not a non-empty array of time steps"));
    }
    if (b == 0) windows.lookback = steps->values_size();
    if (steps->values_size() != windows.lookback) {
      return absl::InvalidArgumentError(absl::StrCat("inputs[", b, "] has ", steps->values_size(),
                                                     " time steps, inputs[0] has ",
                                                     windows.lookback));
    }
    for (int t = 0; t < steps->values_size(); ++t) {
      const google::protobuf::ListValue* features = AsList(steps->values(t));
      const std::string where = absl::StrCat("[", b, "][", t, "]");
      if (features == nullptr || features->values_size() == 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs", where, " is not a non-empty array of feature values"));
      }
      if (b == 0 && t == 0) windows.features = features->values_size();
      if (features->values_size() != windows.features) {
        return absl::InvalidArgumentError(
            absl::StrCat("inputs", where, " has ", features->values_size(),
                         " features, inputs[0][0] has ", windows.features));
      }
      if (absl::Status s = AppendNumbers(*features, where, windows.values); !s.ok()) return s;
    }
  }
  return windows;
}

}  // namespace forecastd
