// `Series`: the training data a TrainJob reads, F named float columns observed at `rows`
// times, possibly several series stacked (DataConfig.series_column), as ParseCsvSeries
// (csv_series.h) and the data sources (data_source.h) produce it and WindowedDataset
// (dataset.h) cuts it into windows. A plain value type; thread-compatible.
#ifndef FORECASTD_ENGINE_TRAIN_SERIES_H_
#define FORECASTD_ENGINE_TRAIN_SERIES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace forecastd {

// F named float columns observed at `rows` times, oldest first within each series. With
// several series (S of them) the rows of one series are contiguous, in time order, and the
// series follow each other in the order they first appear.
struct Series {
  std::vector<std::string> column_names;  // F
  int64_t rows = 0;
  std::vector<float> values;  // (rows, F), row-major
  // One per row, as written in the CSV (trimmed); empty when there is no timestamp column.
  std::vector<std::string> timestamps;
  // One per row, each row's time in Unix seconds (UTC, rounded down to the second); empty
  // unless asked for (calendar features).
  std::vector<int64_t> unix_seconds;

  // The series, in order of first appearance (S names); empty for one unnamed series.
  std::vector<std::string> series_names;
  // One per row, its series' index in series_names; empty for one unnamed series.
  std::vector<int32_t> series_ids;
  // Static covariates: the Fs columns constant within each series, and each series' values,
  // (S, Fs) row-major (S = 1 for one unnamed series).
  std::vector<std::string> static_names;
  std::vector<float> static_values;

  int num_columns() const { return static_cast<int>(column_names.size()); }
  float at(int64_t row, int column) const { return values[row * num_columns() + column]; }
  // S, counting one unnamed series as 1.
  int num_series() const {
    return series_names.empty() ? 1 : static_cast<int>(series_names.size());
  }
  int series_of(int64_t row) const { return series_ids.empty() ? 0 : series_ids[row]; }
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_SERIES_H_
