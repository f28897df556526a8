// The training-data CSV reader: ParseCsvSeries turns the text of a CSV file into a Series of
// the asked-for columns, checking every cell and the timestamp column; ReadCsvSeries reads the
// file first. LoadSeries (data_source.h) calls it for DataConfig.csv_path, and the CSV fuzzer
// calls it directly. Stateless functions; thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_
#define FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/train/series.h"

namespace forecastd {

// The file format.
//
// Format: a header line of column names, then one line per observation, cells separated by
// commas. Lines end in "\n" or "\r\n"; blank lines at the end are ignored, anywhere else they
// are an error; a UTF-8 byte-order mark before the header is skipped. Names and cells are
// trimmed of spaces and tabs. Quoting is not supported: a comma always separates cells.
// Every kept cell must be a finite decimal float ("nan", "inf" and empty cells are errors);
// columns not asked for are not parsed, so they may hold anything.
//
// The timestamp column, when named, is kept as strings and never used as a feature. Its cells
// must be non-empty and, as DataConfig requires, increase down the file; the first row decides
// how they are compared:
//   - a number (e.g. Unix seconds): every row must be a number, strictly increasing;
//   - ISO 8601 "YYYY-MM-DD[(T| )hh:mm[:ss[.fraction]]][Z|±hh[:mm]]": every row must be one,
//     strictly increasing in time (a time without an offset is read as UTC);
//   - anything else: opaque labels, which may not repeat (their order cannot be checked).
//
// Errors are INVALID_ARGUMENT "<source>: line <n>: ..." with the 1-based line number.

struct CsvOptions {
  // The column holding observation times; "" when the file has none.
  std::string timestamp_column;
  // The columns the Series keeps, in this order (a model's feature_names); the header may list
  // them in any order and have others. Empty: every column except the timestamp, in file order.
  std::vector<std::string> columns;
};

absl::StatusOr<Series> ParseCsvSeries(absl::string_view text, absl::string_view source_name,
                                      const CsvOptions& options);
// Reads `path` (see ReadFileBytes for its errors) and parses it; errors name `path`.
absl::StatusOr<Series> ReadCsvSeries(const std::string& path, const CsvOptions& options);

// `s` in single quotes, C-escaped and cut after 40 characters, as the errors of the CSV reader
// and the data sources quote what a client wrote.
std::string QuoteForMessage(absl::string_view s);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_
