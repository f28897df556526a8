#include "engine/train/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <optional>
#include <string_view>
#include <system_error>
#include <unordered_map>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "engine/train/random.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

// A std below this is treated as a constant feature, which is only centred.
constexpr double kMinStd = 1e-12;
// Slack, in rows, for the split point, so that a fraction whose binary value is a hair off its
// decimal (0.2f of 5 rows: 5 * (1 - 0.2000000030) = 3.99999998) still splits where the decimal
// says.
constexpr double kSplitSlackRows = 1e-6;
// How much of a bad cell an error message quotes.
constexpr size_t kMaxQuotedChars = 40;

absl::string_view Trim(absl::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

bool IsBlank(absl::string_view line) { return Trim(line).empty(); }

std::string Quote(absl::string_view s) {
  if (s.size() > kMaxQuotedChars) {
    return absl::StrCat("'", absl::CEscape(s.substr(0, kMaxQuotedChars)), "...'");
  }
  return absl::StrCat("'", absl::CEscape(s), "'");
}

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
      return absl::InvalidArgumentError(absl::StrCat(Quote(cell), " is out of float range"));
    }
    value = static_cast<float>(wide);
    ec = std::errc();
  }
  if (ec != std::errc() || ptr != end) {
    return absl::InvalidArgumentError(absl::StrCat(Quote(cell), " is not a number"));
  }
  if (!std::isfinite(value)) {
    return absl::InvalidArgumentError(absl::StrCat(Quote(cell), " is not a finite number"));
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
      return LineError(source_, line, absl::StrCat("column ", Quote(column_), ": empty timestamp"));
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
                           absl::StrCat("timestamp ", Quote(ts), " repeats line ", it->second,
                                        "; timestamps must be unique"));
        }
        break;
      }
    }
    previous_ = ts;
    previous_line_ = line;
    return absl::OkStatus();
  }

 private:
  enum class Kind { kUnknown, kNumber, kIso8601, kLabel };

  absl::Status Mismatch(absl::string_view ts, int64_t line, absl::string_view kind) const {
    return LineError(source_, line,
                     absl::StrCat("timestamp ", Quote(ts), " is not ", kind, " like line ",
                                  first_line_, "'s; timestamps must share one format"));
  }
  absl::Status NotIncreasing(absl::string_view ts, int64_t line) const {
    return LineError(
        source_, line,
        absl::StrCat("timestamp ", Quote(ts), " does not come after ", Quote(previous_), " (line ",
                     previous_line_, "); timestamps must strictly increase"));
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

// ---------------------------------------------------------------------------------------------
// Windows

int64_t TrainRowsFor(int64_t rows, double fraction) {
  const double n = std::floor(static_cast<double>(rows) * (1.0 - fraction) + kSplitSlackRows);
  return std::clamp(static_cast<int64_t>(n), int64_t{0}, rows);
}

int64_t WindowsIn(int64_t part_rows, int64_t window_rows, int64_t stride) {
  return part_rows < window_rows ? 0 : (part_rows - window_rows) / stride + 1;
}

// The fewest rows that give one training window and, when fraction > 0, one validation window.
int64_t MinRowsFor(int64_t window_rows, double fraction) {
  const auto ok = [&](int64_t rows) {
    const int64_t n_train = TrainRowsFor(rows, fraction);
    return n_train >= window_rows && (fraction == 0.0 || rows - n_train >= window_rows);
  };
  double estimate = static_cast<double>(window_rows) / (1.0 - fraction);
  if (fraction > 0.0) {
    estimate = std::max({estimate, static_cast<double>(window_rows) / fraction,
                         2.0 * static_cast<double>(window_rows)});
  }
  if (!(estimate < 1e15)) return static_cast<int64_t>(std::min(estimate, 9e18));
  int64_t rows = std::max<int64_t>(1, static_cast<int64_t>(estimate) - 2);
  while (!ok(rows)) ++rows;
  while (rows > 1 && ok(rows - 1)) --rows;
  return rows;
}

// The shortest decimal that reads back as `f`, as a double: 0.2f becomes 0.2, not 0.200000003.
double ShortestDecimal(float f) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  double d = static_cast<double>(f);
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

absl::Status CheckGivenStats(const FeatureStats& stats, int F) {
  if (stats.mean.size() != static_cast<size_t>(F) || stats.std.size() != static_cast<size_t>(F)) {
    return absl::InvalidArgumentError(
        absl::StrCat("given normalisation statistics have ", stats.mean.size(), " means and ",
                     stats.std.size(), " stds; the series has ", F, " features"));
  }
  for (int f = 0; f < F; ++f) {
    if (!std::isfinite(stats.mean[f]) || !std::isfinite(stats.std[f]) || !(stats.std[f] > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "given normalisation statistics for feature ", f, ": mean ", stats.mean[f], ", std ",
          stats.std[f], "; the mean must be finite and the std finite and > 0"));
    }
  }
  return absl::OkStatus();
}

// Mean and population std of each feature over rows [0, n_train), in double.
FeatureStats FitStats(const Series& series, int64_t n_train) {
  const int F = series.num_columns();
  std::vector<double> sum(F, 0.0);
  for (int64_t r = 0; r < n_train; ++r) {
    for (int f = 0; f < F; ++f) sum[f] += series.at(r, f);
  }
  std::vector<double> mean(F);
  for (int f = 0; f < F; ++f) mean[f] = sum[f] / static_cast<double>(n_train);
  std::vector<double> squares(F, 0.0);
  for (int64_t r = 0; r < n_train; ++r) {
    for (int f = 0; f < F; ++f) {
      const double d = series.at(r, f) - mean[f];
      squares[f] += d * d;
    }
  }
  FeatureStats stats;
  for (int f = 0; f < F; ++f) {
    const double sd = std::sqrt(squares[f] / static_cast<double>(n_train));
    stats.mean.push_back(static_cast<float>(mean[f]));
    stats.std.push_back(sd < kMinStd ? 1.0f : static_cast<float>(sd));
  }
  return stats;
}

}  // namespace

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
      return LineError(source, 1,
                       absl::StrCat("column name ", Quote(name), " appears twice (columns ",
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

  int timestamp_index = -1;
  if (!options.timestamp_column.empty()) {
    const auto it = column_of.find(options.timestamp_column);
    if (it == column_of.end()) {
      return LineError(
          source, 1,
          absl::StrCat("the header has no timestamp column ", Quote(options.timestamp_column),
                       " (columns: ", header_list(), ")"));
    }
    timestamp_index = it->second;
  }

  // For each header column, where it goes in the Series (-1: not kept).
  std::vector<int> output_of(header.size(), -1);
  Series series;
  if (options.columns.empty()) {
    for (size_t c = 0; c < header.size(); ++c) {
      if (static_cast<int>(c) == timestamp_index) continue;
      output_of[c] = series.num_columns();
      series.column_names.push_back(header[c]);
    }
    if (series.column_names.empty()) {
      return LineError(source, 1, "the header has no column besides the timestamp");
    }
  } else {
    for (const std::string& name : options.columns) {
      const auto it = column_of.find(name);
      if (it == column_of.end()) {
        return LineError(source, 1,
                         absl::StrCat("feature ", Quote(name), " is not a column of the header (",
                                      header_list(), ")"));
      }
      if (it->second == timestamp_index) {
        return LineError(source, 1,
                         absl::StrCat("feature ", Quote(name),
                                      " is the timestamp column and cannot be a feature"));
      }
      if (output_of[it->second] >= 0) {
        return LineError(source, 1, absl::StrCat("feature ", Quote(name), " is asked for twice"));
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
  TimestampChecker timestamps(source, options.timestamp_column);
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
    float* row = series.values.data() + (i - 1) * F;
    for (size_t c = 0; c < cells.size(); ++c) {
      if (static_cast<int>(c) == timestamp_index) {
        const absl::string_view ts = Trim(cells[c]);
        RETURN_IF_ERROR(timestamps.Check(ts, line));
        series.timestamps.emplace_back(ts);
      } else if (output_of[c] >= 0) {
        absl::StatusOr<float> value = ParseFloatCell(Trim(cells[c]));
        if (!value.ok()) {
          return LineError(
              source, line,
              absl::StrCat("column ", Quote(header[c]), ": ", value.status().message()));
        }
        row[output_of[c]] = *value;
      }
    }
  }
  return series;
}

absl::StatusOr<Series> ReadCsvSeries(const std::string& path, const CsvOptions& options) {
  ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(path, "training CSV"));
  return ParseCsvSeries(text, path, options);
}

// ---------------------------------------------------------------------------------------------
// Data sources

absl::StatusOr<fs::path> ResolveDataPath(const fs::path& data_dir,
                                         absl::string_view relative_path) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(absl::StrCat("csv_path ", Quote(relative_path), " ", why));
  };
  if (relative_path.empty()) return absl::InvalidArgumentError("csv_path is empty");
  if (relative_path.find('\0') != absl::string_view::npos) return invalid("contains a NUL byte");
  const fs::path relative(std::string{relative_path});
  if (relative.is_absolute() || relative.has_root_directory() || relative.has_root_name()) {
    return invalid("must be relative to the server's data directory");
  }
  for (const fs::path& component : relative) {
    if (component == "..") return invalid("may not contain a '..' component");
  }
  absl::StatusOr<std::string> full =
      ResolveInside(data_dir.string(), (data_dir / relative).string());
  if (absl::IsNotFound(full.status())) {
    return absl::NotFoundError(absl::StrCat("data directory ", Quote(data_dir.string()),
                                            " is not usable: ", full.status().message()));
  }
  if (!full.ok()) {
    // Never the server's absolute paths: the message goes back to the client.
    return invalid(absl::IsPermissionDenied(full.status())
                       ? "leads outside the data directory (via a symlink)"
                       : "cannot be resolved");
  }
  std::error_code ec;
  if (fs::equivalent(*full, data_dir, ec)) {
    return invalid("names the data directory itself, not a file");
  }
  return fs::path(*full);
}

absl::StatusOr<Series> SeriesFromInline(const v1::InlineSeries& inline_series,
                                        absl::Span<const std::string> feature_names) {
  const int64_t F = static_cast<int64_t>(feature_names.size());
  if (F == 0) return absl::InvalidArgumentError("inline_series: the model has no features");
  const int64_t rows = inline_series.rows();
  if (rows < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("inline_series.rows is ", rows, "; it must be at least 1"));
  }
  const int64_t n = inline_series.values_size();
  if (rows > n / F || rows * F != n) {
    return absl::InvalidArgumentError(absl::StrCat(
        "inline_series has ", n, " values; expected rows * features = ", rows, " * ", F));
  }
  for (int64_t i = 0; i < n; ++i) {
    const float v = inline_series.values(static_cast<int>(i));
    if (!std::isfinite(v)) {
      return absl::InvalidArgumentError(absl::StrCat("inline_series value ", i, " (row ", i / F,
                                                     ", feature ", Quote(feature_names[i % F]),
                                                     ") is ", v, "; values must be finite"));
    }
  }
  Series series;
  series.column_names.assign(feature_names.begin(), feature_names.end());
  series.rows = rows;
  series.values.assign(inline_series.values().begin(), inline_series.values().end());
  return series;
}

absl::StatusOr<Series> LoadSeries(const v1::DataConfig& data, const ModelConfig& model,
                                  const fs::path& data_dir) {
  const std::vector<std::string> features(model.feature_names().begin(),
                                          model.feature_names().end());
  switch (data.source_case()) {
    case v1::DataConfig::kInlineSeries:
      if (!data.timestamp_column().empty()) {
        return absl::InvalidArgumentError(
            "timestamp_column applies to csv_path only; inline_series has no timestamps");
      }
      return SeriesFromInline(data.inline_series(), features);
    case v1::DataConfig::kCsvPath: {
      ASSIGN_OR_RETURN(const fs::path path, ResolveDataPath(data_dir, data.csv_path()));
      absl::StatusOr<std::string> text = ReadFileBytes(path.string(), "training CSV");
      if (absl::IsNotFound(text.status())) {
        return absl::NotFoundError(absl::StrCat("csv_path ", Quote(data.csv_path()),
                                                ": no such file in the data directory"));
      }
      if (!text.ok()) return text.status();
      CsvOptions options;
      options.timestamp_column = data.timestamp_column();
      options.columns = features;
      return ParseCsvSeries(*text, data.csv_path(), options);
    }
    case v1::DataConfig::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("DataConfig has no source: set inline_series or csv_path");
}

// ---------------------------------------------------------------------------------------------
// Windows

absl::StatusOr<WindowedDatasetOptions> OptionsFromConfig(const v1::DataConfig& data,
                                                         const ModelConfig& model) {
  RETURN_IF_ERROR(ValidateModelConfig(model));
  if (data.stride() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.stride is ", data.stride(), "; it must be >= 1 (0: 1)"));
  }
  const float fraction = data.validation_fraction();
  if (!(fraction >= 0.0f && fraction < 1.0f)) {
    return absl::InvalidArgumentError(
        absl::StrCat("data.validation_fraction is ", fraction, "; it must be in [0, 1) (0: 0.2)"));
  }
  WindowedDatasetOptions options;
  options.lookback = model.lookback();
  options.horizon = model.horizon();
  options.target_indices = TargetFeatureIndices(model);
  options.stride = data.stride() == 0 ? 1 : data.stride();
  options.validation_fraction = fraction == 0.0f ? 0.2 : ShortestDecimal(fraction);
  options.normalization = model.normalization() == v1::NORMALIZATION_NONE
                              ? NormalizationMode::kNone
                              : NormalizationMode::kFitOnTrain;
  return options;
}

absl::StatusOr<std::unique_ptr<WindowedDataset>> WindowedDataset::Create(
    Series series, const WindowedDatasetOptions& options) {
  const int64_t T = options.lookback;
  const int64_t P = options.horizon;
  const int F = series.num_columns();
  const int64_t rows = series.rows;
  const double fraction = options.validation_fraction;
  if (T < 1 || P < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("lookback (", T, ") and horizon (", P, ") must each be at least 1"));
  }
  if (options.stride < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stride is ", options.stride, "; it must be at least 1"));
  }
  if (!(fraction >= 0.0 && fraction < 1.0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("validation_fraction is ", fraction, "; it must be in [0, 1)"));
  }
  if (F < 1 || rows < 0 || series.values.size() != static_cast<size_t>(rows) * F) {
    return absl::InvalidArgumentError(absl::StrCat("malformed series: ", F, " columns, ", rows,
                                                   " rows, ", series.values.size(), " values"));
  }
  if (options.target_indices.empty()) {
    return absl::InvalidArgumentError("no target features");
  }
  std::vector<bool> is_target(F, false);
  for (const int k : options.target_indices) {
    if (k < 0 || k >= F || is_target[k]) {
      return absl::InvalidArgumentError(
          absl::StrCat("target index ", k, " is out of range [0, ", F, ") or repeats"));
    }
    is_target[k] = true;
  }

  const int64_t n_train = TrainRowsFor(rows, fraction);
  std::unique_ptr<WindowedDataset> dataset(new WindowedDataset());
  dataset->rows_ = rows;
  dataset->T_ = T;
  dataset->P_ = P;
  dataset->F_ = F;
  dataset->stride_ = options.stride;
  dataset->num_train_rows_ = n_train;
  // Saturates instead of overflowing, for absurd option values.
  const int64_t window_rows =
      T > std::numeric_limits<int64_t>::max() - P ? std::numeric_limits<int64_t>::max() : T + P;
  dataset->num_train_windows_ = WindowsIn(n_train, window_rows, options.stride);
  dataset->num_validation_windows_ = WindowsIn(rows - n_train, window_rows, options.stride);
  if (dataset->num_train_windows_ == 0 ||
      (fraction > 0.0 && dataset->num_validation_windows_ == 0)) {
    const int64_t needed = MinRowsFor(window_rows, fraction);
    std::string parts =
        fraction > 0.0
            ? absl::StrCat("with validation_fraction ", fraction, " it splits into ", n_train,
                           " training and ", rows - n_train,
                           " validation rows, and each part needs at least one whole window")
            : absl::StrCat("all ", rows, " rows train");
    return absl::InvalidArgumentError(
        absl::StrCat("the series has ", rows, " rows; a window takes lookback ", T, " + horizon ",
                     P, " rows; ", parts, ": at least ", needed, " rows are needed"));
  }

  switch (options.normalization) {
    case NormalizationMode::kFitOnTrain:
      dataset->stats_ = FitStats(series, n_train);
      break;
    case NormalizationMode::kGiven:
      RETURN_IF_ERROR(CheckGivenStats(options.given_stats, F));
      dataset->stats_ = options.given_stats;
      break;
    case NormalizationMode::kNone:
      dataset->stats_.mean.assign(F, 0.0f);
      dataset->stats_.std.assign(F, 1.0f);
      break;
  }

  // Scale with the float statistics the model will store, so serving undoes exactly this.
  dataset->normalized_ = std::move(series.values);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dataset->normalized_.data() + r * F;
    for (int f = 0; f < F; ++f) {
      row[f] = static_cast<float>((static_cast<double>(row[f]) - dataset->stats_.mean[f]) /
                                  dataset->stats_.std[f]);
    }
  }
  dataset->target_indices_ = options.target_indices;
  dataset->feature_names_ = std::move(series.column_names);
  return dataset;
}

int64_t WindowedDataset::WindowStartRow(Split split, int64_t index) const {
  return (split == Split::kTrain ? 0 : num_train_rows_) + index * stride_;
}

absl::Status WindowedDataset::FillBatch(Split split, absl::Span<const int64_t> window_indices,
                                        absl::Span<float> x, absl::Span<float> y) const {
  const int64_t B = static_cast<int64_t>(window_indices.size());
  const int64_t K = num_targets();
  if (x.size() != static_cast<size_t>(B * T_ * F_) || y.size() != static_cast<size_t>(B * P_ * K)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillBatch: x has ", x.size(), " floats and y ", y.size(), "; ", B,
        " windows need x (B, T, F) = ", B * T_ * F_, " and y (B, P, K) = ", B * P_ * K));
  }
  const int64_t n = num_windows(split);
  for (const int64_t w : window_indices) {
    if (w < 0 || w >= n) {
      return absl::OutOfRangeError(absl::StrCat("FillBatch: window ", w, " of the ",
                                                split == Split::kTrain ? "training" : "validation",
                                                " part, which has ", n));
    }
  }
  for (int64_t b = 0; b < B; ++b) {
    const int64_t s = WindowStartRow(split, window_indices[b]);
    std::memcpy(x.data() + b * T_ * F_, normalized_.data() + s * F_,
                static_cast<size_t>(T_ * F_) * sizeof(float));
    float* yb = y.data() + b * P_ * K;
    for (int64_t p = 0; p < P_; ++p) {
      const float* row = normalized_.data() + (s + T_ + p) * F_;
      for (int64_t k = 0; k < K; ++k) yb[p * K + k] = row[target_indices_[k]];
    }
  }
  return absl::OkStatus();
}

std::vector<int64_t> WindowedDataset::TrainOrder(uint64_t seed, int64_t epoch) const {
  return ShuffledOrder(num_train_windows_, seed, epoch);
}

std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch) {
  if (n <= 0) return {};
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), int64_t{0});
  Random rng(DeriveSeed(seed, SeedPurpose::kShuffle, static_cast<uint64_t>(epoch)));
  Shuffle(absl::MakeSpan(order), rng);
  return order;
}

}  // namespace forecastd
