#include "engine/train/data_source.h"

#include <cmath>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/file_io.h"
#include "engine/train/csv_series.h"
#include "kernels/base/status.h"

namespace forecastd {

namespace fs = std::filesystem;

absl::StatusOr<fs::path> ResolveDataPath(const fs::path& data_dir,
                                         absl::string_view relative_path) {
  const auto invalid = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("csv_path ", QuoteForMessage(relative_path), " ", why));
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
    return absl::NotFoundError(absl::StrCat("data directory ", QuoteForMessage(data_dir.string()),
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
      return absl::InvalidArgumentError(absl::StrCat(
          "inline_series value ", i, " (row ", i / F, ", feature ",
          QuoteForMessage(feature_names[i % F]), ") is ", v, "; values must be finite"));
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
      if (!data.series_column().empty()) {
        return absl::InvalidArgumentError(
            "series_column applies to csv_path only; inline_series holds one series");
      }
      if (NeedsTimestamps(model)) {
        return absl::InvalidArgumentError(
            "the model has calendar features, computed from the rows' times: train it from "
            "csv_path with a timestamp_column (inline_series has no timestamps)");
      }
      if (NumStaticFeatures(model) > 0) {
        return absl::InvalidArgumentError(
            "the model has static covariates, values per series: train it from csv_path with a "
            "series_column (inline_series holds one series)");
      }
      return SeriesFromInline(data.inline_series(), features);
    case v1::DataConfig::kCsvPath: {
      if (NeedsTimestamps(model) && data.timestamp_column().empty()) {
        return absl::InvalidArgumentError(
            "the model has calendar features, computed from the rows' times: set "
            "data.timestamp_column");
      }
      if (NumStaticFeatures(model) > 0 && data.series_column().empty()) {
        return absl::InvalidArgumentError(
            "the model has static covariates, values per series: set data.series_column");
      }
      ASSIGN_OR_RETURN(const fs::path path, ResolveDataPath(data_dir, data.csv_path()));
      absl::StatusOr<std::string> text = ReadFileBytes(path.string(), "training CSV");
      if (absl::IsNotFound(text.status())) {
        return absl::NotFoundError(absl::StrCat("csv_path ", QuoteForMessage(data.csv_path()),
                                                ": no such file in the data directory"));
      }
      if (!text.ok()) return text.status();
      CsvOptions options;
      options.timestamp_column = data.timestamp_column();
      options.columns = features;
      options.series_column = data.series_column();
      options.static_columns.assign(model.covariates().static_features().begin(),
                                    model.covariates().static_features().end());
      options.unix_seconds = NeedsTimestamps(model);
      return ParseCsvSeries(*text, data.csv_path(), options);
    }
    case v1::DataConfig::SOURCE_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError("DataConfig has no source: set inline_series or csv_path");
}

}  // namespace forecastd
