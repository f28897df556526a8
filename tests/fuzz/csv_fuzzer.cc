// Fuzz target: the training-data CSV reader, ParseCsvSeries (engine/train/csv_series.h), on
// untrusted text, followed by what a Train job does with the series: WindowedDataset::Create
// and FillBatch. The input's first line picks the CsvOptions, the rest is the CSV:
//   <timestamp column>|<column>,<column>,...\n<csv text>
// ("|\n" for no timestamp and every column). Checks the Series' documented shape: at least
// one row, rows * F finite values, the asked-for columns in order, one timestamp per row when
// a timestamp column is named; and that windows cut from it come back with the right sizes.
#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "engine/train/csv_series.h"
#include "engine/train/dataset.h"
#include "tests/fuzz/fuzz_check.h"

namespace forecastd {
namespace {

void CheckSeries(const Series& series, const CsvOptions& options) {
  const int F = series.num_columns();
  FUZZ_CHECK(F >= 1 && series.rows >= 1, "an accepted series is empty");
  FUZZ_CHECK(series.values.size() == static_cast<size_t>(series.rows) * F,
             "values are not rows * F");
  for (const float v : series.values) FUZZ_CHECK(std::isfinite(v), "a non-finite value");
  if (!options.columns.empty()) {
    FUZZ_CHECK(series.column_names == options.columns, "columns differ from those asked for");
  }
  for (const std::string& name : series.column_names) {
    FUZZ_CHECK(!name.empty() && name != options.timestamp_column, "bad column name " + name);
  }
  const size_t expected_timestamps =
      options.timestamp_column.empty() ? 0 : static_cast<size_t>(series.rows);
  FUZZ_CHECK(series.timestamps.size() == expected_timestamps, "one timestamp per row expected");
  for (const std::string& ts : series.timestamps) FUZZ_CHECK(!ts.empty(), "an empty timestamp");
}

// Windows of lookback 2 and horizon 1 over the first column, a quarter of the rows validating.
void CheckWindows(Series series) {
  WindowedDatasetOptions options;
  options.lookback = 2;
  options.horizon = 1;
  options.target_indices = {0};
  options.validation_fraction = 0.25;
  const int64_t rows = series.rows;
  const int F = series.num_columns();
  absl::StatusOr<std::unique_ptr<WindowedDataset>> dataset =
      WindowedDataset::Create(std::move(series), options);
  if (!dataset.ok()) {
    FUZZ_CHECK(dataset.status().code() == absl::StatusCode::kInvalidArgument,
               dataset.status().ToString());
    return;
  }
  const WindowedDataset& d = **dataset;
  FUZZ_CHECK(d.num_rows() == rows && d.num_features() == F && d.num_train_windows() >= 1 &&
                 d.num_validation_windows() >= 1,
             "dataset sizes");
  std::vector<float> x(static_cast<size_t>(2 * F)), y(1);
  for (const Split split : {Split::kTrain, Split::kValidation}) {
    const int64_t n = d.num_windows(split);
    for (const int64_t w : {int64_t{0}, n - 1}) {
      FUZZ_CHECK(d.WindowStartRow(split, w) + 3 <= rows, "a window runs past the series");
      const absl::Status status = d.FillBatch(split, {w}, absl::MakeSpan(x), absl::MakeSpan(y));
      FUZZ_CHECK(status.ok(), status.ToString());
    }
    const absl::Status past = d.FillBatch(split, {n}, absl::MakeSpan(x), absl::MakeSpan(y));
    FUZZ_CHECK(past.code() == absl::StatusCode::kOutOfRange, past.ToString());
  }
}

}  // namespace
}  // namespace forecastd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view input(reinterpret_cast<const char*>(data), size);
  const size_t newline = input.find('\n');
  if (newline == absl::string_view::npos) return 0;
  const absl::string_view options_line = input.substr(0, newline);
  const size_t bar = options_line.find('|');
  if (bar == absl::string_view::npos) return 0;
  forecastd::CsvOptions options;
  options.timestamp_column = std::string(options_line.substr(0, bar));
  if (bar + 1 < options_line.size()) {
    options.columns = absl::StrSplit(options_line.substr(bar + 1), ',');
  }
  absl::StatusOr<forecastd::Series> series =
      forecastd::ParseCsvSeries(input.substr(newline + 1), "fuzz.csv", options);
  if (!series.ok()) {
    FUZZ_CHECK(series.status().code() == absl::StatusCode::kInvalidArgument,
               series.status().ToString());
    return 0;
  }
  forecastd::CheckSeries(*series, options);
  forecastd::CheckWindows(*std::move(series));
  return 0;
}
