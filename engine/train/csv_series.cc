#include "engine/train/csv_series.h"

#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// How much of a bad cell an error message quotes.
constexpr size_t kMaxQuotedChars = 40;

absl::string_view Trim(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsBlank(absl::string_view line) { return Trim(line).empty(); }

absl::Status LineError(absl::string_view source, int64_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(source, ": line ", line, ": ", what));
}

// Splits on ',' without allocating per cell; `cells` is reused across lines.
void SplitCells(absl::string_view line, std::vector<absl::string_view>& cells) {
  cells.clear();
  size_t begin = 0;
  while (true) {
    const size_t comma = line.find(',', begin);
    if (comma == absl::string_view::npos) {
      cells.push_back(line.substr(begin));
      return;
    }
    cells.push_back(line.substr(begin, comma - begin));
    begin = comma + 1;
  }
}

// A trimmed cell as a finite float, or a description of what is wrong with it.
absl::StatusOr<float> ParseFloatCell(absl::string_view cell) {
  if (cell.empty()) return absl::InvalidArgumentError("empty cell");
  absl::string_view digits = cell;
  // from_chars takes no leading '+', which some writers emit.
  if (digits.size() > 1 && digits[0] == '+' &&
      (digits[1] == '.' || (digits[1] >= '0' && digits[1] <= '9'))) {
    digits.remove_prefix(1);
  }
  const char* end = digits.data() + digits.size();
  float value = 0.0f;
  auto [ptr, ec] = std::from_chars(digits.data(), end, value);
  if (ec == std::errc::result_out_of_range && ptr == end) {
    // Too large, or too small for a normal float: overflow is an error, underflow is not.
    double wide = 0.0;
    std::from_chars(digits.data(), end, wide);
    if (!(std::fabs(wide) <= static_cast<double>(std::numeric_limits<float>::max()))) {
      return absl::InvalidArgumentError(
          absl::StrCat(QuoteForMessage(cell), " is out of float range"));
    }
    value = static_cast<float>(wide);
    ec = std::errc();
  }
  if (ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat(QuoteForMessage(cell), " is not a number"));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(
        absl::StrCat(QuoteForMessage(cell), " is not a finite number"));
  }
  return value;
}

// ---------------------------------------------------------------------------------------------
// Timestamps

// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's days_from_civil).
int64_t DaysFromCivil(int64_t y, int m, int d) {
  y -= m <= 2;
  const int64_t era = (y >= 0 ? y : y - 399) / 400;
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m > 2 ? m - 3 : m + 9) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int DaysInMonth(int64_t y, int m) {
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  const bool leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
  return m == 2 && leap ? 29 : kDays[m - 1];
}

// Reads exactly `n` digits at `pos`.
bool ReadDigits(absl::string_view s, size_t& pos, int n, int64_t& value) {
  if (pos + n > s.size()) return false;
  value = 0;
  for (int i = 0; i < n; ++i) {
    const char c = s[pos + i];
    if (c < '0' || c > '9') return false;
    value = value * 10 + (c - '0');
  }
  pos += n;
  return true;
}

// A point in time, ordered.
struct TimeKey {
  int64_t seconds = 0;  // since the Unix epoch, UTC
  int64_t nanos = 0;
  auto operator<=>(const TimeKey&) const = default;
};

// "YYYY-MM-DD[(T|t| )hh:mm[:ss[(.|,)fraction]]][Z|z|±hh[[:]mm]]"; nullopt when it is not one.
std::optional<TimeKey> ParseIso8601(absl::string_view s) {
  size_t pos = 0;
  int64_t year, month, day, hour = 0, minute = 0, second = 0, nanos = 0;
  if (!ReadDigits(s, pos, 4, year) || pos >= s.size() || s[pos++] != '-' ||
      !ReadDigits(s, pos, 2, month) || pos >= s.size() || s[pos++] != '-' ||
      !ReadDigits(s, pos, 2, day)) {
    return std::nullopt;
  }
  if (month < 1 || month > 12 || day < 1 || day > DaysInMonth(year, static_cast<int>(month))) {
    return std::nullopt;
  }
  int64_t offset_seconds = 0;
  if (pos < s.size()) {
    if (s[pos] != 'T' && s[pos] != 't' && s[pos] != ' ') return std::nullopt;
    ++pos;
    if (!ReadDigits(s, pos, 2, hour) || pos >= s.size() || s[pos++] != ':' ||
        !ReadDigits(s, pos, 2, minute)) {
      return std::nullopt;
    }
    if (pos < s.size() && s[pos] == ':') {
      ++pos;
      if (!ReadDigits(s, pos, 2, second)) return std::nullopt;
      if (pos < s.size() && (s[pos] == '.' || s[pos] == ',')) {
        ++pos;
        int digits = 0;
        while (pos < s.size() && s[pos] >= '0' && s[pos] <= '9') {
          if (++digits > 9) return std::nullopt;
          nanos = nanos * 10 + (s[pos++] - '0');
        }
        if (digits == 0) return std::nullopt;
        for (int i = digits; i < 9; ++i) nanos *= 10;
      }
    }
    if (hour > 23 || minute > 59 || second > 59) return std::nullopt;
    if (pos < s.size()) {
      if (s[pos] == 'Z' || s[pos] == 'z') {
        ++pos;
      } else if (s[pos] == '+' || s[pos] == '-') {
        const int64_t sign = s[pos++] == '-' ? -1 : 1;
        int64_t oh, om = 0;
        if (!ReadDigits(s, pos, 2, oh)) return std::nullopt;
        if (pos < s.size() && s[pos] == ':') ++pos;
        if (pos < s.size() && !ReadDigits(s, pos, 2, om)) return std::nullopt;
        if (oh > 23 || om > 59) return std::nullopt;
        offset_seconds = sign * (oh * 3600 + om * 60);
      }
    }
  }
  if (pos != s.size()) return std::nullopt;
  const int64_t days = DaysFromCivil(year, static_cast<int>(month), static_cast<int>(day));
  return TimeKey{days * 86400 + hour * 3600 + minute * 60 + second - offset_seconds, nanos};
}

std::optional<double> ParseNumber(absl::string_view s) {
  double value = 0.0;
  const auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  if (ec != std::errc() || ptr != s.data() + s.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

// Enforces DataConfig's "timestamps increase" row by row; see the header for the rules.
class TimestampChecker {
 public:
  TimestampChecker(absl::string_view source, absl::string_view column)
      : source_(source), column_(column) {}

  absl::Status Check(absl::string_view ts, int64_t line) {
    if (ts.empty()) {
      return LineError(source_, line,
                       absl::StrCat("column ", QuoteForMessage(column_), ": empty timestamp"));
    }
    if (kind_ == Kind::kUnknown) {
      if (ParseNumber(ts)) {
        kind_ = Kind::kNumber;
      } else if (ParseIso8601(ts)) {
        kind_ = Kind::kIso8601;
      } else {
        kind_ = Kind::kLabel;
      }
      first_line_ = line;
    }
    switch (kind_) {
      case Kind::kNumber: {
        const std::optional<double> t = ParseNumber(ts);
        if (!t) return Mismatch(ts, line, "a number");
        if (previous_line_ > 0 && !(*t > previous_number_)) return NotIncreasing(ts, line);
        previous_number_ = *t;
        break;
      }
      case Kind::kIso8601: {
        const std::optional<TimeKey> t = ParseIso8601(ts);
        if (!t) return Mismatch(ts, line, "an ISO 8601 date-time");
        if (previous_line_ > 0 && !(*t > previous_time_)) return NotIncreasing(ts, line);
        previous_time_ = *t;
        break;
      }
      case Kind::kLabel:
      case Kind::kUnknown: {
        const auto [it, inserted] = labels_.emplace(std::string_view(ts.data(), ts.size()), line);
        if (!inserted) {
          return LineError(source_, line,
                           absl::StrCat("timestamp ", QuoteForMessage(ts), " repeats line ",
                                        it->second, "; timestamps must be unique"));
        }
        break;
      }
    }
    previous_ = ts;
    previous_line_ = line;
    return absl::OkStatus();
  }

  // A new series starts: its first row follows no other and may reuse the labels of the last.
  // The format stays the file's.
  void Restart() {
    previous_line_ = 0;
    labels_.clear();
  }

 private:
  enum class Kind { kUnknown, kNumber, kIso8601, kLabel };

  absl::Status Mismatch(absl::string_view ts, int64_t line, absl::string_view kind) const {
    return LineError(
        source_, line,
        absl::StrCat("timestamp ", QuoteForMessage(ts), " is not ", kind, " like line ",
                     first_line_, "'s; timestamps must share one format"));
  }
  absl::Status NotIncreasing(absl::string_view ts, int64_t line) const {
    return LineError(source_, line,
                     absl::StrCat("timestamp ", QuoteForMessage(ts), " does not come after ",
                                  QuoteForMessage(previous_), " (line ", previous_line_,
                                  "); timestamps must strictly increase"));
  }

  const absl::string_view source_;
  const absl::string_view column_;
  Kind kind_ = Kind::kUnknown;
  int64_t first_line_ = 0;
  absl::string_view previous_;  // points into the text being parsed
  int64_t previous_line_ = 0;
  double previous_number_ = 0.0;
  TimeKey previous_time_;
  std::unordered_map<std::string_view, int64_t> labels_;  // label -> first line
};

// Checks that the rows of each series are contiguous and numbers the series in order of first
// appearance.
class SeriesTracker {
 public:
  SeriesTracker(absl::string_view source, absl::string_view column)
      : source_(source), column_(column) {}

  // The series of the row at `line` labelled `label`; `started` tells whether the row starts
  // a series.
  absl::StatusOr<int32_t> Track(absl::string_view label, int64_t line, bool& started) {
    started = false;
    if (label.empty()) {
      return LineError(source_, line,
                       absl::StrCat("column ", QuoteForMessage(column_), ": empty series label"));
    }
    if (current_ >= 0 && names_[current_] == label) return current_;
    const auto [it, inserted] = index_of_.emplace(std::string(label), Size());
    if (!inserted) {
      const size_t s = static_cast<size_t>(it->second);
      return LineError(
          source_, line,
          absl::StrCat("series ", QuoteForMessage(label), " comes back after series ",
                       QuoteForMessage(names_[current_]), "; its rows (lines ", first_line_[s],
                       " to ", last_line_[s], ") and these must be contiguous"));
    }
    if (current_ >= 0) last_line_[current_] = line - 1;
    current_ = Size();
    names_.emplace_back(label);
    first_line_.push_back(line);
    last_line_.push_back(line);
    started = true;
    return current_;
  }

  std::vector<std::string> TakeNames() { return std::move(names_); }

 private:
  int32_t Size() const { return static_cast<int32_t>(names_.size()); }

  const absl::string_view source_;
  const absl::string_view column_;
  int32_t current_ = -1;
  std::vector<std::string> names_;
  std::vector<int64_t> first_line_, last_line_;  // per series
  std::unordered_map<std::string, int32_t> index_of_;
};

}  // namespace

absl::StatusOr<int64_t> TimestampUnixSeconds(absl::string_view timestamp) {
  if (const std::optional<double> number = ParseNumber(timestamp)) {
    constexpr double kLimit = 4611686018427387904.0;  // 2^62
    const double seconds = std::floor(*number);
    if (!(std::fabs(seconds) <= kLimit)) {
      return absl::InvalidArgumentError(absl::StrCat("timestamp ", QuoteForMessage(timestamp),
                                                     " is too far from 1970 as Unix seconds"));
    }
    return static_cast<int64_t>(seconds);
  }
  if (const std::optional<TimeKey> time = ParseIso8601(timestamp)) return time->seconds;
  return absl::InvalidArgumentError(
      absl::StrCat("timestamp ", QuoteForMessage(timestamp),
                   " is neither a number (Unix seconds) nor an ISO 8601 date-time"));
}

std::string QuoteForMessage(absl::string_view s) {
  if (s.size() > kMaxQuotedChars) {
    return absl::StrCat("'", absl::CEscape(s.substr(0, kMaxQuotedChars)), "...'");
  }
  return absl::StrCat("'", absl::CEscape(s), "'");
}

// ---------------------------------------------------------------------------------------------
// CSV

absl::StatusOr<Series> ParseCsvSeries(absl::string_view text, absl::string_view source,
                                      const CsvOptions& options) {
  if (text.substr(0, 3) == "\xEF\xBB\xBF") text.remove_prefix(3);

  std::vector<absl::string_view> lines;
  for (size_t begin = 0; begin <= text.size();) {
    size_t end = text.find('\n', begin);
    if (end == absl::string_view::npos) end = text.size();
    absl::string_view line = text.substr(begin, end - begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    begin = end + 1;
  }
  size_t num_lines = lines.size();  // without the blank lines at the end
  while (num_lines > 0 && IsBlank(lines[num_lines - 1])) --num_lines;
  if (num_lines == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": line 1: the file is empty; expected a header line"));
  }
  if (IsBlank(lines[0])) return LineError(source, 1, "the header line is empty");

  // Header.
  std::vector<absl::string_view> cells;
  SplitCells(lines[0], cells);
  std::vector<std::string> header;
  std::unordered_map<std::string_view, int> column_of;
  for (size_t c = 0; c < cells.size(); ++c) {
    const absl::string_view name = Trim(cells[c]);
    if (name.empty()) {
      return LineError(source, 1, absl::StrCat("column ", c + 1, " of the header has no name"));
    }
    header.emplace_back(name);
    if (const auto [it, inserted] =
            column_of.emplace(std::string_view(name.data(), name.size()), static_cast<int>(c));
        !inserted) {
      return LineError(
          source, 1,
          absl::StrCat("column name ", QuoteForMessage(name), " appears twice (columns ",
                       it->second + 1, " and ", c + 1, ")"));
    }
  }
  // The header for error messages, cut short for very wide files.
  const auto header_list = [&] {
    constexpr size_t kMaxListed = 20;
    if (header.size() <= kMaxListed) return absl::StrJoin(header, ", ");
    return absl::StrCat(absl::StrJoin(header.begin(), header.begin() + kMaxListed, ", "), ", ... (",
                        header.size(), " columns)");
  };

  // A column the options name: its index in the header, or an error at line 1.
  const auto find_column = [&](absl::string_view what,
                               const std::string& name) -> absl::StatusOr<int> {
    const auto it = column_of.find(name);
    if (it == column_of.end()) {
      return LineError(source, 1,
                       absl::StrCat("the header has no ", what, " ", QuoteForMessage(name),
                                    " (columns: ", header_list(), ")"));
    }
    return it->second;
  };

  int timestamp_index = -1;
  if (!options.timestamp_column.empty()) {
    ASSIGN_OR_RETURN(timestamp_index, find_column("timestamp column", options.timestamp_column));
  }
  if (options.unix_seconds && timestamp_index < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(source, ": times in Unix seconds need a timestamp column"));
  }
  int series_index = -1;
  if (!options.series_column.empty()) {
    ASSIGN_OR_RETURN(series_index, find_column("series column", options.series_column));
    if (series_index == timestamp_index) {
      return LineError(source, 1,
                       absl::StrCat("the series column ", QuoteForMessage(options.series_column),
                                    " is also the timestamp column"));
    }
  }

  // For each header column, where it goes in the Series (-1: not kept), and for a static
  // covariate, its index among them (-1: not one).
  std::vector<int> output_of(header.size(), -1);
  std::vector<int> static_of(header.size(), -1);
  Series series;
  for (const std::string& name : options.static_columns) {
    ASSIGN_OR_RETURN(const int c, find_column("static covariate column", name));
    if (c == timestamp_index || c == series_index) {
      return LineError(source, 1,
                       absl::StrCat("static covariate ", QuoteForMessage(name), " is the ",
                                    c == timestamp_index ? "timestamp" : "series", " column"));
    }
    if (static_of[c] >= 0) {
      return LineError(
          source, 1,
          absl::StrCat("static covariate ", QuoteForMessage(name), " is asked for twice"));
    }
    static_of[c] = static_cast<int>(series.static_names.size());
    series.static_names.push_back(name);
  }
  const int Fs = static_cast<int>(series.static_names.size());
  if (options.columns.empty()) {
    for (size_t c = 0; c < header.size(); ++c) {
      if (static_cast<int>(c) == timestamp_index || static_cast<int>(c) == series_index ||
          static_of[c] >= 0) {
        continue;
      }
      output_of[c] = series.num_columns();
      series.column_names.push_back(header[c]);
    }
    if (series.column_names.empty()) {
      return LineError(source, 1,
                       "the header has no column besides the timestamp, series and static ones");
    }
  } else {
    for (const std::string& name : options.columns) {
      const auto it = column_of.find(name);
      if (it == column_of.end()) {
        return LineError(source, 1,
                         absl::StrCat("feature ", QuoteForMessage(name),
                                      " is not a column of the header (", header_list(), ")"));
      }
      if (it->second == timestamp_index || it->second == series_index) {
        return LineError(source, 1,
                         absl::StrCat("feature ", QuoteForMessage(name), " is the ",
                                      it->second == timestamp_index ? "timestamp" : "series",
                                      " column and cannot be a feature"));
      }
      if (static_of[it->second] >= 0) {
        return LineError(
            source, 1,
            absl::StrCat("feature ", QuoteForMessage(name), " is also a static covariate"));
      }
      if (output_of[it->second] >= 0) {
        return LineError(source, 1,
                         absl::StrCat("feature ", QuoteForMessage(name), " is asked for twice"));
      }
      output_of[it->second] = series.num_columns();
      series.column_names.push_back(name);
    }
  }
  if (num_lines == 1) {
    return LineError(source, 1, "the file has a header but no data rows");
  }

  // Rows.
  const int F = series.num_columns();
  series.rows = static_cast<int64_t>(num_lines) - 1;
  series.values.resize(static_cast<size_t>(series.rows) * F);
  if (timestamp_index >= 0) series.timestamps.reserve(series.rows);
  if (options.unix_seconds) series.unix_seconds.reserve(series.rows);
  if (series_index >= 0) series.series_ids.reserve(series.rows);
  if (series_index < 0 && Fs > 0) series.static_values.resize(Fs);
  TimestampChecker timestamps(source, options.timestamp_column);
  SeriesTracker tracker(source, options.series_column);
  // The series of the row being read, whether the row starts it, and its static values.
  int32_t current = 0;
  bool starts_series = true;
  float* statics = series.static_values.data();
  for (size_t i = 1; i < num_lines; ++i) {
    const int64_t line = static_cast<int64_t>(i) + 1;
    if (IsBlank(lines[i])) {
      return LineError(source, line, "empty row (blank lines may only end the file)");
    }
    SplitCells(lines[i], cells);
    if (cells.size() != header.size()) {
      return LineError(
          source, line,
          absl::StrCat("expected ", header.size(), " cells as in the header, got ", cells.size()));
    }
    if (series_index >= 0) {
      // First, so that the timestamp checks know whether the row starts a series.
      ASSIGN_OR_RETURN(current, tracker.Track(Trim(cells[series_index]), line, starts_series));
      series.series_ids.push_back(current);
      if (starts_series) {
        timestamps.Restart();
        series.static_values.resize(static_cast<size_t>(current + 1) * Fs);
        statics = series.static_values.data() + static_cast<size_t>(current) * Fs;
      }
    }
    float* row = series.values.data() + (i - 1) * F;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (static_cast<int>(c) == timestamp_index) {
        const absl::string_view ts = Trim(cells[c]);
        RETURN_IF_ERROR(timestamps.Check(ts, line));
        series.timestamps.emplace_back(ts);
        if (options.unix_seconds) {
          absl::StatusOr<int64_t> seconds = TimestampUnixSeconds(ts);
          if (!seconds.ok()) {
            return LineError(
                source, line,
                absl::StrCat("column ", QuoteForMessage(header[c]), ": ",
                             seconds.status().message(), "; calendar features need times"));
          }
          series.unix_seconds.push_back(*seconds);
        }
      } else if (output_of[c] >= 0 || static_of[c] >= 0) {
        absl::StatusOr<float> value = ParseFloatCell(Trim(cells[c]));
        if (!value.ok()) {
          return LineError(
              source, line,
              absl::StrCat("column ", QuoteForMessage(header[c]), ": ", value.status().message()));
        }
        if (output_of[c] >= 0) {
          row[output_of[c]] = *value;
        } else if (starts_series) {
          statics[static_of[c]] = *value;
        } else if (statics[static_of[c]] != *value) {
          return LineError(
              source, line,
              absl::StrCat("column ", QuoteForMessage(header[c]), ": static covariate ",
                           QuoteForMessage(Trim(cells[c])), " differs from the value ",
                           statics[static_of[c]], " earlier in ",
                           series_index >= 0
                               ? absl::StrCat("series ", QuoteForMessage(Trim(cells[series_index])))
                               : std::string("the file"),
                           "; a static covariate is constant within each series"));
        }
      }
    }
    starts_series = false;
  }
  if (series_index >= 0) series.series_names = tracker.TakeNames();
  return series;
}

absl::StatusOr<Series> ReadCsvSeries(const std::string& path, const CsvOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(path, "training CSV"));
  return ParseCsvSeries(text, path, options);
}

}  // namespace forecastd
