// `Series`: the training data a TrainJob reads, F named float columns observed at `rows`
// times, as ParseCsvSeries (csv_series.h) and the data sources (data_source.h) produce it and
// WindowedDataset (dataset.h) cuts it into windows. A plain value type; thread-compatible.
#ifndef FORECASTD_ENGINE_TRAIN_SERIES_H_
#define FORECASTD_ENGINE_TRAIN_SERIES_H_

#include <cstdint>
#include <string>
#include <vector>

namespace forecastd {

// F named float columns observed at `rows` times, oldest first.
struct Series {
  std::vector<std::string> column_names;  // F
  int64_t rows = 0;
  std::vector<float> values;  // (rows, F), row-major
  // One per row, as written in the CSV (trimmed); empty when there is no timestamp column.
  std::vector<std::string> timestamps;

  int num_columns() const { return static_cast<int>(column_names.size()); }
  float at(int64_t row, int column) const { return values[row * num_columns() + column]; }
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_SERIES_H_
