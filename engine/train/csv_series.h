// The training-data CSV reader: ParseCsvSeries turns the text of a CSV file into a Series of
// the asked-for columns, checking every cell, the timestamp column and the series column;
// ReadCsvSeries reads the file first. LoadSeries (data_source.h) calls it for
// DataConfig.csv_path, and the CSV fuzzer calls it directly. Stateless functions; thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_
#define FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_

#include <cstdint>
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
// The series column, when named, holds each row's series label (any non-empty string). The
// rows of one series must be contiguous (a label that comes back after another series is an
// error), and the timestamp rules above apply within each series, restarting at its first row
// (the format is still the file's). Static covariate columns hold one float per series: every
// row of a series must hold the same value.
//
// Errors are INVALID_ARGUMENT "<source>: line <n>: ..." with the 1-based line number.

struct CsvOptions {
  // The column holding observation times; "" when the file has none.
  std::string timestamp_column;
  // The columns the Series keeps, in this order (a model's feature_names); the header may list
  // them in any order and have others. Empty: every column except the timestamp, series and
  // static ones, in file order.
  std::vector<std::string> columns;
  // The column naming each row's series (DataConfig.series_column); "": one series. Kept as
  // Series::series_names and Series::series_ids, never as a feature.
  std::string series_column;
  // Static covariate columns (ModelConfig.covariates.static_features): read as floats, constant
  // within each series, kept per series in Series::static_values, never as features.
  std::vector<std::string> static_columns;
  // Keep each row's time as Series::unix_seconds (TimestampUnixSeconds), for calendar
  // features: needs timestamp_column, whose cells must then be numbers or ISO 8601 times.
  bool unix_seconds = false;
};

absl::StatusOr<Series> ParseCsvSeries(absl::string_view text, absl::string_view source_name,
                                      const CsvOptions& options);
// Reads `path` (see ReadFileBytes for its errors) and parses it; errors name `path`.
absl::StatusOr<Series> ReadCsvSeries(const std::string& path, const CsvOptions& options);

// The time a timestamp cell names, in Unix seconds (UTC), rounded down to the second: a
// number is Unix seconds; an ISO 8601 date-time as the CSV format above reads it (without an
// offset: UTC). INVALID_ARGUMENT for anything else (an opaque label) or a number beyond
// +-2^62 seconds.
absl::StatusOr<int64_t> TimestampUnixSeconds(absl::string_view timestamp);

// `s` in single quotes, C-escaped and cut after 40 characters, as the errors of the CSV reader
// and the data sources quote what a client wrote.
std::string QuoteForMessage(absl::string_view s);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_CSV_SERIES_H_
