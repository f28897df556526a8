// Predict inputs from the files operators have: a CSV series cut into sliding windows
// `(B, T, F)` in a model's feature order, or windows written out as JSON; and the CSV columns a
// model with covariates or series needs beside them (timestamps, series labels). forecastctl's
// `predict`, `stream` and `train --inline-csv` use it. Stateless; thread-safe.
#ifndef FORECASTD_CLIENT_INPUT_WINDOWS_H_
#define FORECASTD_CLIENT_INPUT_WINDOWS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace forecastd {

// Observations `[rows, F]` of the F named columns, in the order they were asked for.
struct Series {
  std::vector<std::string> columns;  // F names
  int64_t rows = 0;
  std::vector<float> values;  // (rows, F), row-major
};

// Reads CSV text whose first line is a header. Takes the columns named `columns`, in that
// order, from wherever they are in the header; other columns (a timestamp, say) are ignored
// and may hold anything. Blank lines are skipped; cells may be double-quoted; CRLF is fine.
// INVALID_ARGUMENT, naming the line and column, for a missing column, a row with another
// number of cells than the header, or a cell that is not a finite number.
absl::StatusOr<Series> ParseCsvSeries(absl::string_view text,
                                      const std::vector<std::string>& columns);
// The same, where an empty cell reads as NaN (the rows after a forecast's window, whose targets
// are not known yet); every other cell must still be a finite number.
absl::StatusOr<Series> ParseCsvSeriesWithGaps(absl::string_view text,
                                              const std::vector<std::string>& columns);

// The cells of the column `column`, one per data row in ParseCsvSeries' row order, as text.
// INVALID_ARGUMENT when the header has no such column or a row has another number of cells.
absl::StatusOr<std::vector<std::string>> ParseCsvColumn(absl::string_view text,
                                                        absl::string_view column);

// A timestamp cell as Unix seconds (UTC), as training's CSV reader takes it: a number is Unix
// seconds; otherwise an ISO 8601 date ("2026-03-02") or date-time ("2026-03-02 14:30",
// "2026-03-02T14:30:00", optionally with fractional seconds and "Z" or an offset "+01:00";
// without one, UTC); cut to the second. INVALID_ARGUMENT for anything else.
absl::StatusOr<int64_t> ParseUnixSeconds(absl::string_view cell);

// `B` windows of `T` consecutive observations of `F` features.
struct Windows {
  int64_t count = 0;          // B
  int64_t lookback = 0;       // T
  int64_t features = 0;       // F
  std::vector<float> values;  // (B, T, F), row-major
  // Per window, the index of its first row in the series it was cut from; empty when the
  // windows were given as such (JSON).
  std::vector<int64_t> first_rows;
};

// The last `count` sliding windows of `lookback` rows (stride 1) of `series`, the last one
// ending at its last row, oldest first; `count` 0 takes every window. INVALID_ARGUMENT when
// the series has fewer rows than the windows need.
absl::StatusOr<Windows> SlidingWindows(const Series& series, int64_t lookback, int64_t count);

// Windows from JSON: `{"inputs": [[[...]]]}` or a bare 3-D array, indexed
// [window][time step][feature]. INVALID_ARGUMENT for malformed JSON, a ragged or empty
// array, or a value that is not a finite number.
absl::StatusOr<Windows> ParseJsonWindows(absl::string_view text);

// True when the first non-space character is '{' or '[' (JSON rather than CSV).
bool LooksLikeJson(absl::string_view text);

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_INPUT_WINDOWS_H_
