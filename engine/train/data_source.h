// Where a training job's Series comes from: DataConfig's inline values, or the CSV file that
// its csv_path names inside the server's data directory (kept inside it). TrainJob calls
// LoadSeries, which resolves the path and reads the CSV (csv_series.h). Stateless functions;
// thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_DATA_SOURCE_H_
#define FORECASTD_ENGINE_TRAIN_DATA_SOURCE_H_

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/models/model_config.h"
#include "engine/train/series.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

// The file that DataConfig.csv_path names inside `data_dir`, as a canonical absolute path.
// INVALID_ARGUMENT for an empty or absolute path, a ".." component, a NUL byte, or a path that
// leaves `data_dir` once symlinks are resolved; NOT_FOUND when `data_dir` does not exist.
// (Whether the file exists is left to the reader.) The check resolves symlinks at call time;
// the data directory is the operator's, so it is not defended against being rewritten between
// this check and the read.
absl::StatusOr<std::filesystem::path> ResolveDataPath(const std::filesystem::path& data_dir,
                                                      absl::string_view relative_path);

// A Series of the model's features from an InlineSeries: rows >= 1, values.size() == rows * F,
// every value finite; INVALID_ARGUMENT otherwise, naming the row and feature of a bad value.
absl::StatusOr<Series> SeriesFromInline(const v1::InlineSeries& inline_series,
                                        absl::Span<const std::string> feature_names);

// The model's feature columns (feature_names; calendar features are computed later, from
// Series::unix_seconds) from wherever `data` points: inline values, or the CSV at csv_path
// inside `data_dir` (with data.timestamp_column and data.series_column, and the model's static
// covariates). Parse errors and a missing file (NOT_FOUND) name csv_path as the client wrote
// it, not the server's absolute path. INVALID_ARGUMENT when no source is set; for a
// timestamp_column or series_column with inline_series, and for a model with calendar features
// or static covariates with inline_series; for calendar features without a timestamp_column,
// and static covariates without a series_column.
absl::StatusOr<Series> LoadSeries(const v1::DataConfig& data, const ModelConfig& model,
                                  const std::filesystem::path& data_dir);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_DATA_SOURCE_H_
