#include "engine/train/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/models/input_record.h"
#include "engine/random.h"
#include "engine/train/chronological_split.h"
#include "engine/train/csv_series.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// A std below this is treated as a constant feature, which is only centred.
constexpr double kMinStd = 1e-12;

// The shortest decimal that reads back as `f`, as a double: 0.2f becomes 0.2, not 0.200000003.
double ShortestDecimal(float f) {
  char buf[64];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), f);
  double d = static_cast<double>(f);
  if (ec == std::errc()) std::from_chars(buf, end, d);
  return d;
}

absl::Status CheckGivenStats(const FeatureStats& stats, int S, int F) {
  const size_t n = static_cast<size_t>(S) * F;
  if (stats.mean.size() != n || stats.std.size() != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("given normalisation statistics have ", stats.mean.size(), " means and ",
                     stats.std.size(), " stds; ",
                     S == 1 ? std::string("the series has ")
                            : absl::StrCat("the data has ", S, " series (one row each) of "),
                     F, " features"));
  }
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(stats.mean[i]) || !std::isfinite(stats.std[i]) || !(stats.std[i] > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "given normalisation statistics for feature ", i % F,
          S == 1 ? std::string() : absl::StrCat(" of series ", i / F), ": mean ", stats.mean[i],
          ", std ", stats.std[i], "; the mean must be finite and the std finite and > 0"));
    }
  }
  return absl::OkStatus();
}

// Mean and population std of each of the F columns of `rows` (n rows, row-major), in double,
// appended to `stats`.
void FitStats(const float* rows, int64_t n, int F, FeatureStats& stats) {
  std::vector<double> sum(F, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int f = 0; f < F; ++f) sum[f] += rows[r * F + f];
  }
  std::vector<double> mean(F);
  for (int f = 0; f < F; ++f) mean[f] = sum[f] / static_cast<double>(n);
  std::vector<double> squares(F, 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int f = 0; f < F; ++f) {
      const double d = rows[r * F + f] - mean[f];
      squares[f] += d * d;
    }
  }
  for (int f = 0; f < F; ++f) {
    const double sd = std::sqrt(squares[f] / static_cast<double>(n));
    stats.mean.push_back(static_cast<float>(mean[f]));
    stats.std.push_back(sd < kMinStd ? 1.0f : static_cast<float>(sd));
  }
}

// The series' layout checked: S series of contiguous rows, numbered in order, and the row
// times, names and static values their sizes promise. The first row of each series, S + 1
// entries.
absl::StatusOr<std::vector<int64_t>> SeriesBegins(const Series& series) {
  const int64_t rows = series.rows;
  const int S = series.num_series();
  const int Fs = static_cast<int>(series.static_names.size());
  if (series.series_names.empty() != series.series_ids.empty() ||
      (!series.series_ids.empty() && series.series_ids.size() != static_cast<size_t>(rows))) {
    return absl::InvalidArgumentError(absl::StrCat("malformed series: ", series.series_names.size(),
                                                   " series names and ", series.series_ids.size(),
                                                   " series ids for ", rows, " rows"));
  }
  if (series.static_values.size() != static_cast<size_t>(S) * Fs) {
    return absl::InvalidArgumentError(
        absl::StrCat("malformed series: ", series.static_values.size(), " static values for ", S,
                     " series of ", Fs, " static covariates"));
  }
  std::vector<int64_t> begin = {0};
  for (int64_t r = 1; r < rows; ++r) {
    const int previous = series.series_of(r - 1), current = series.series_of(r);
    if (current == previous) continue;
    if (current != previous + 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("malformed series: row ", r, " is in series ", current, " after series ",
                       previous, "; a series' rows are contiguous and the series in order"));
    }
    begin.push_back(r);
  }
  if (rows > 0 && (series.series_of(0) != 0 || static_cast<int>(begin.size()) != S)) {
    return absl::InvalidArgumentError(absl::StrCat("malformed series: ", S, " series named, ",
                                                   begin.size(), " found in the rows"));
  }
  begin.push_back(rows);
  return begin;
}

// The rows (rows, F) the dataset normalises: the series' columns, then the calendar features
// of each row's time.
absl::StatusOr<std::vector<float>> RowsWithCalendar(
    Series& series, const std::vector<v1::CalendarFeature>& calendar) {
  if (calendar.empty()) return std::move(series.values);
  if (series.unix_seconds.size() != static_cast<size_t>(series.rows)) {
    return absl::InvalidArgumentError(
        absl::StrCat("calendar features need every row's time: the series has ",
                     series.unix_seconds.size(), " times for ", series.rows, " rows"));
  }
  ModelConfig config;  // CalendarValues reads the calendar features only
  for (const v1::CalendarFeature feature : calendar) {
    config.mutable_covariates()->add_calendar(feature);
  }
  const int Fin = series.num_columns();
  const int F = Fin + 2 * static_cast<int>(calendar.size());
  std::vector<float> rows(static_cast<size_t>(series.rows) * F);
  for (int64_t r = 0; r < series.rows; ++r) {
    float* row = rows.data() + r * F;
    std::copy_n(series.values.data() + r * Fin, Fin, row);
    CalendarValues(config, series.unix_seconds[static_cast<size_t>(r)], row + Fin);
  }
  return rows;
}

// Each static covariate standardised over the S series (population std; below kMinStd: 1).
std::vector<float> StandardizeStatics(const std::vector<float>& values, int S, int Fs) {
  std::vector<float> out(values.size());
  for (int j = 0; j < Fs; ++j) {
    double sum = 0.0;
    for (int s = 0; s < S; ++s) sum += values[static_cast<size_t>(s) * Fs + j];
    const double mean = sum / S;
    double squares = 0.0;
    for (int s = 0; s < S; ++s) {
      const double d = values[static_cast<size_t>(s) * Fs + j] - mean;
      squares += d * d;
    }
    double sd = std::sqrt(squares / S);
    if (sd < kMinStd) sd = 1.0;
    for (int s = 0; s < S; ++s) {
      const size_t i = static_cast<size_t>(s) * Fs + j;
      out[i] = static_cast<float>((static_cast<double>(values[i]) - mean) / sd);
    }
  }
  return out;
}

}  // namespace

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
  for (int i = 0; i < model.covariates().calendar_size(); ++i) {
    options.calendar.push_back(model.covariates().calendar(i));
  }
  options.future_indices = FutureFeatureIndices(model);
  options.series_index = NumSeries(model) > 0;
  return options;
}

absl::StatusOr<std::unique_ptr<WindowedDataset>> WindowedDataset::Create(
    Series series, const WindowedDatasetOptions& options) {
  const int64_t T = options.lookback;
  const int64_t P = options.horizon;
  const int Fin = series.num_columns();
  const int F = Fin + 2 * static_cast<int>(options.calendar.size());
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
  if (Fin < 1 || rows < 0 || series.values.size() != static_cast<size_t>(rows) * Fin) {
    return absl::InvalidArgumentError(absl::StrCat("malformed series: ", Fin, " columns, ", rows,
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
  std::vector<bool> is_future(F, false);
  for (const int k : options.future_indices) {
    if (k < 0 || k >= F || is_future[k]) {
      return absl::InvalidArgumentError(absl::StrCat("future-known feature index ", k,
                                                     " is out of range [0, ", F, ") or repeats"));
    }
    is_future[k] = true;
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> series_begin, SeriesBegins(series));
  const int S = series.num_series();
  if (S > 1 && !options.series_index) {
    return absl::InvalidArgumentError(
        absl::StrCat("the data has ", S,
                     " series; a model trained on several series reads each "
                     "window's series index (ModelConfig.series)"));
  }
  std::vector<int> record_series_index = options.record_series_index;
  if (record_series_index.empty()) {
    record_series_index.resize(static_cast<size_t>(S));
    std::iota(record_series_index.begin(), record_series_index.end(), 0);
  }
  if (record_series_index.size() != static_cast<size_t>(S) ||
      *std::min_element(record_series_index.begin(), record_series_index.end()) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("record_series_index has ", options.record_series_index.size(),
                     " entries; the data has ", S, " series, each needing an index >= 0"));
  }

  std::unique_ptr<WindowedDataset> dataset(new WindowedDataset());
  dataset->rows_ = rows;
  dataset->T_ = T;
  dataset->P_ = P;
  dataset->F_ = F;
  dataset->stride_ = options.stride;
  // Saturates instead of overflowing, for absurd option values.
  const int64_t window_rows =
      T > std::numeric_limits<int64_t>::max() - P ? std::numeric_limits<int64_t>::max() : T + P;
  dataset->train_window_begin_ = {0};
  dataset->validation_window_begin_ = {0};
  for (int s = 0; s < S; ++s) {
    const int64_t rows_s = series_begin[s + 1] - series_begin[s];
    const int64_t n_train = TrainRowsFor(rows_s, fraction);
    const int64_t train_windows = WindowsIn(n_train, window_rows, options.stride);
    const int64_t validation_windows = WindowsIn(rows_s - n_train, window_rows, options.stride);
    if (train_windows == 0 || (fraction > 0.0 && validation_windows == 0)) {
      const int64_t needed = MinRowsFor(window_rows, fraction);
      std::string parts =
          fraction > 0.0
              ? absl::StrCat("with validation_fraction ", fraction, " it splits into ", n_train,
                             " training and ", rows_s - n_train,
                             " validation rows, and each part needs at least one whole window")
              : absl::StrCat("all ", rows_s, " rows train");
      const std::string which =
          series.series_names.empty()
              ? std::string("the series")
              : absl::StrCat("series ", QuoteForMessage(series.series_names[s]));
      return absl::InvalidArgumentError(
          absl::StrCat(which, " has ", rows_s, " rows; a window takes lookback ", T, " + horizon ",
                       P, " rows; ", parts, ": at least ", needed, " rows are needed"));
    }
    dataset->series_train_rows_.push_back(n_train);
    dataset->num_train_rows_ += n_train;
    dataset->train_window_begin_.push_back(dataset->train_window_begin_.back() + train_windows);
    dataset->validation_window_begin_.push_back(dataset->validation_window_begin_.back() +
                                                validation_windows);
  }
  dataset->num_train_windows_ = dataset->train_window_begin_.back();
  dataset->num_validation_windows_ = dataset->validation_window_begin_.back();

  ASSIGN_OR_RETURN(std::vector<float> values, RowsWithCalendar(series, options.calendar));
  switch (options.normalization) {
    case NormalizationMode::kFitOnTrain:
      for (int s = 0; s < S; ++s) {
        FitStats(values.data() + series_begin[s] * F, dataset->series_train_rows_[s], F,
                 dataset->stats_);
      }
      break;
    case NormalizationMode::kGiven:
      RETURN_IF_ERROR(CheckGivenStats(options.given_stats, S, F));
      dataset->stats_ = options.given_stats;
      break;
    case NormalizationMode::kNone:
      dataset->stats_.mean.assign(static_cast<size_t>(S) * F, 0.0f);
      dataset->stats_.std.assign(static_cast<size_t>(S) * F, 1.0f);
      break;
  }

  // Scale with the float statistics the model will store, so serving undoes exactly this.
  dataset->normalized_ = std::move(values);
  for (int s = 0; s < S; ++s) {
    const float* mean = dataset->stats_.mean.data() + static_cast<size_t>(s) * F;
    const float* std = dataset->stats_.std.data() + static_cast<size_t>(s) * F;
    for (int64_t r = series_begin[s]; r < series_begin[s + 1]; ++r) {
      float* row = dataset->normalized_.data() + r * F;
      for (int f = 0; f < F; ++f) {
        row[f] = static_cast<float>((static_cast<double>(row[f]) - mean[f]) / std[f]);
      }
    }
  }
  dataset->target_indices_ = options.target_indices;
  dataset->feature_names_ = std::move(series.column_names);
  for (const v1::CalendarFeature feature : options.calendar) {
    dataset->feature_names_.push_back(CalendarName(feature) + "_sin");
    dataset->feature_names_.push_back(CalendarName(feature) + "_cos");
  }
  dataset->series_begin_ = std::move(series_begin);
  dataset->series_names_ = std::move(series.series_names);
  dataset->future_indices_ = options.future_indices;
  dataset->series_index_ = options.series_index;
  dataset->record_series_index_ = std::move(record_series_index);
  dataset->record_floats_ = T * F + P * static_cast<int64_t>(options.future_indices.size()) +
                            (options.series_index ? 1 : 0);
  dataset->num_static_ = static_cast<int>(series.static_names.size());
  dataset->static_values_ = StandardizeStatics(series.static_values, S, dataset->num_static_);
  return dataset;
}

int WindowedDataset::WindowSeries(Split split, int64_t index) const {
  const std::vector<int64_t>& begin = window_begin(split);
  // The last series whose first window is at or before `index` (a series has at least one).
  return static_cast<int>(std::upper_bound(begin.begin(), begin.end(), index) - begin.begin()) - 1;
}

int64_t WindowedDataset::WindowStartRow(Split split, int64_t index) const {
  const int s = WindowSeries(split, index);
  const int64_t part_begin =
      series_begin_[s] + (split == Split::kTrain ? 0 : series_train_rows_[s]);
  return part_begin + (index - window_begin(split)[s]) * stride_;
}

absl::Status WindowedDataset::FillBatch(Split split, absl::Span<const int64_t> window_indices,
                                        absl::Span<float> x, absl::Span<float> y) const {
  const int64_t B = static_cast<int64_t>(window_indices.size());
  const int64_t K = num_targets(), R = record_floats_;
  const int64_t Fk = static_cast<int64_t>(future_indices_.size());
  if (x.size() != static_cast<size_t>(B * R) || y.size() != static_cast<size_t>(B * P_ * K)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillBatch: x has ", x.size(), " floats and y ", y.size(), "; ", B, " windows need x ",
        R == T_ * F_ ? "(B, T, F)" : absl::StrCat("(B, record of ", R, " floats)"), " = ", B * R,
        " and y (B, P, K) = ", B * P_ * K));
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
    float* record = x.data() + b * R;
    std::memcpy(record, normalized_.data() + s * F_, static_cast<size_t>(T_ * F_) * sizeof(float));
    // The future-known values of the forecast steps: the target rows' own, already normalised
    // by the series' statistics of their columns.
    float* future = record + T_ * F_;
    for (int64_t p = 0; p < P_ && Fk > 0; ++p) {
      const float* row = normalized_.data() + (s + T_ + p) * F_;
      for (int64_t k = 0; k < Fk; ++k) future[p * Fk + k] = row[future_indices_[k]];
    }
    if (series_index_) {
      record[R - 1] = static_cast<float>(
          record_series_index_[static_cast<size_t>(WindowSeries(split, window_indices[b]))]);
    }
    float* yb = y.data() + b * P_ * K;
    for (int64_t p = 0; p < P_; ++p) {
      const float* row = normalized_.data() + (s + T_ + p) * F_;
      for (int64_t k = 0; k < K; ++k) yb[p * K + k] = row[target_indices_[k]];
    }
  }
  return absl::OkStatus();
}

absl::Span<const float> WindowedDataset::PartRows(Split split) const {
  if (num_series() > 1) return {};
  const absl::Span<const float> all(normalized_);
  const size_t train_floats = static_cast<size_t>(num_train_rows_ * F_);
  return split == Split::kTrain ? all.subspan(0, train_floats) : all.subspan(train_floats);
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
