// Windows of training data: the `WindowedDataset` that cuts a Series (series.h) into
// (lookback T, horizon P) windows that never cross from one series to the next, splits each
// series chronologically into training and validation parts (chronological_split.h),
// normalises each series per feature with statistics fitted on its own training rows only,
// fills batches of the input records a Forecaster trains on (ModelConfig.covariates and
// ModelConfig.series), and gives the shuffled order TrainJob visits the training windows in
// each epoch. Immutable after creation; const methods are thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_DATASET_H_
#define FORECASTD_ENGINE_TRAIN_DATASET_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/models/model_config.h"
#include "engine/train/series.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

enum class Split { kTrain, kValidation };

// Per-feature x' = (x - mean) / std; with several series, one row per series.
struct FeatureStats {
  std::vector<float> mean;  // (S, F), S = 1 for one series
  std::vector<float> std;   // (S, F), each > 0
};

enum class NormalizationMode {
  // Mean and population standard deviation (ddof 0, accumulated in double) of each feature
  // of each series over that series' training rows only (every row before its split, whether
  // or not a window covers it). A feature whose std is below 1e-12 (constant on the training
  // rows) gets std 1, so it is only centred.
  kFitOnTrain,
  // Use WindowedDatasetOptions::given_stats (fine-tuning keeps the base model's scaling).
  kGiven,
  // mean 0, std 1: values pass through unchanged.
  kNone,
};

struct WindowedDatasetOptions {
  int64_t lookback = 0;  // T >= 1: input rows per window
  int64_t horizon = 0;   // P >= 1: target rows per window, right after the inputs
  // K columns of the series that are forecast (TargetFeatureIndices), each in [0, F).
  std::vector<int> target_indices;
  int64_t stride = 1;  // >= 1: rows between consecutive window starts within a part
  // In [0, 1). The first n_train = floor(rows * (1 - fraction)) rows train, the rest validate
  // (computed in double with 1e-6 rows of slack, so 0.2 of 10 rows is exactly 2). 0 means no
  // validation part. DataConfig's "0: use 0.2" is applied by OptionsFromConfig, not here.
  double validation_fraction = 0.2;
  NormalizationMode normalization = NormalizationMode::kFitOnTrain;
  // kGiven only: (S, F) finite means and finite stds > 0, row s for the data's series s.
  FeatureStats given_stats;

  // What each input record carries beside the window (Forecaster::input_floats(); see
  // input_record.h). The defaults are a model without covariates or series, whose record is
  // the window.
  // Calendar features (ModelConfig.covariates.calendar), computed with CalendarValues from
  // Series::unix_seconds and appended to every row after the series' columns, two per feature:
  // F = the series' columns + 2 * calendar features, normalised like the others.
  std::vector<v1::CalendarFeature> calendar;
  // The future-known features' columns among the F (FutureFeatureIndices), distinct: each
  // record carries their values on the P rows after the window, (P, Fk), normalised with the
  // window's series' statistics of those columns.
  std::vector<int> future_indices;
  // Whether each record ends with its window's series index, as a float (a model with
  // ModelConfig.series). Needed for a Series of several series.
  bool series_index = false;
  // With series_index: the index the records carry for each of the data's S series (the
  // model's index of the series of that name, where the model's list is not the data's: a
  // fine-tuned model, or a config that lists its series); empty: the data's own index.
  std::vector<int> record_series_index;
};

// Options for `model` and `data`: T, P, targets, calendar features, future-known features and
// whether records carry a series index (the model has ModelConfig.series) from the model,
// stride and fraction from `data` with the proto's defaults for 0 (stride 1, fraction 0.2; the
// float fraction is read as its shortest decimal, so 0.2f is 0.2), kNone for
// NORMALIZATION_NONE models and kFitOnTrain otherwise (a fine-tuning caller switches to
// kGiven). INVALID_ARGUMENT for a negative stride or a fraction outside [0, 1).
absl::StatusOr<WindowedDatasetOptions> OptionsFromConfig(const v1::DataConfig& data,
                                                         const ModelConfig& model);

// A series, or several stacked, cut into windows. Each series (rows [b_s, b_s + rows_s)) splits
// on its own: its first n_s = floor(rows_s * (1 - fraction)) rows train, the rest validate.
// Window w of a series' part starts at row r = part_begin + w * stride; its inputs are rows
// [r, r + T) (all F features) and its targets rows [r + T, r + T + P) (the K target features).
// Training windows lie entirely inside their series' training rows, validation windows
// entirely inside its validation rows: no row serves both parts, and no window crosses from
// one series to the next. A part's windows are numbered series by series: first every window
// of the first series, then the second's, and so on.
// The rows are normalised once at creation, each by its series' statistics; FillBatch copies
// normalised values.
class WindowedDataset {
 public:
  // INVALID_ARGUMENT for bad options or a malformed series, or when a series gives no
  // training window, or no validation window with fraction > 0 (the message names the series
  // and says how many rows would be needed).
  static absl::StatusOr<std::unique_ptr<WindowedDataset>> Create(
      Series series, const WindowedDatasetOptions& options);

  WindowedDataset(const WindowedDataset&) = delete;
  WindowedDataset& operator=(const WindowedDataset&) = delete;

  // x (B, record_floats()) normalised input records and y (B, P, K) normalised targets, for
  // the windows `window_indices` (B of them) of `split`. Record b is the window's rows (T, F),
  // then with future-known features their values on the P target rows (P, Fk), then with
  // series_index the window's series index; x is (B, T, F) for a dataset without either.
  // INVALID_ARGUMENT when x or y is not exactly that size; OUT_OF_RANGE for an index outside
  // [0, num_windows(split)).
  absl::Status FillBatch(Split split, absl::Span<const int64_t> window_indices, absl::Span<float> x,
                         absl::Span<float> y) const;

  // The normalised rows of `split`'s part, (rows of the part, F) row-major: what stateful
  // training (stream_chunks.h) cuts into streams. For a dataset of one series only (stateful
  // training refuses models with several); empty for several series.
  absl::Span<const float> PartRows(Split split) const;

  // The permutation of [0, num_train_windows()) that epoch `epoch` of a job seeded with `seed`
  // visits: ShuffledOrder(num_train_windows(), seed, epoch).
  std::vector<int64_t> TrainOrder(uint64_t seed, int64_t epoch) const;

  int64_t num_windows(Split split) const {
    return split == Split::kTrain ? num_train_windows_ : num_validation_windows_;
  }
  int64_t num_train_windows() const { return num_train_windows_; }
  int64_t num_validation_windows() const { return num_validation_windows_; }
  // The row where window `index` of `split` starts, and the series it belongs to (index in
  // range).
  int64_t WindowStartRow(Split split, int64_t index) const;
  int WindowSeries(Split split, int64_t index) const;

  int64_t num_rows() const { return rows_; }
  int64_t num_train_rows() const { return num_train_rows_; }  // n_train, over every series
  int64_t num_validation_rows() const { return rows_ - num_train_rows_; }
  // S: the data's series (1 for one unnamed series), their names (empty for one unnamed
  // series), and the first row of series s (s in [0, S]; S gives the number of rows).
  int num_series() const { return static_cast<int>(series_begin_.size()) - 1; }
  const std::vector<std::string>& series_names() const { return series_names_; }
  int64_t SeriesBeginRow(int s) const { return series_begin_[static_cast<size_t>(s)]; }
  // Floats of one input record: T * F, + P * Fk with future-known features, + 1 with
  // series_index.
  int64_t record_floats() const { return record_floats_; }
  int64_t lookback() const { return T_; }
  int64_t horizon() const { return P_; }
  int num_features() const { return F_; }  // F, calendar columns included
  int num_targets() const { return static_cast<int>(target_indices_.size()); }
  const std::vector<int>& target_indices() const { return target_indices_; }
  const std::vector<std::string>& feature_names() const { return feature_names_; }

  // The scaling applied, (S, F) (what the trainer stores as normalizer.mean / normalizer.std).
  const std::vector<float>& mean() const { return stats_.mean; }
  const std::vector<float>& std() const { return stats_.std; }
  // The static covariates (Series::static_names), (S, Fs): each column standardised over the
  // S series (mean and population std across them; a std below 1e-12 counts as 1), what the
  // trainer stores as series.static.
  const std::vector<float>& static_values() const { return static_values_; }
  int num_static_features() const { return num_static_; }

 private:
  WindowedDataset() = default;

  // The first window of series s of `split`'s part, s in [0, S] (S: the part's windows).
  const std::vector<int64_t>& window_begin(Split split) const {
    return split == Split::kTrain ? train_window_begin_ : validation_window_begin_;
  }

  int64_t rows_ = 0;
  int64_t T_ = 0;
  int64_t P_ = 0;
  int F_ = 0;
  int64_t stride_ = 1;
  int64_t num_train_rows_ = 0;
  int64_t num_train_windows_ = 0;
  int64_t num_validation_windows_ = 0;
  std::vector<int> target_indices_;
  std::vector<std::string> feature_names_;
  FeatureStats stats_;
  std::vector<float> normalized_;  // (rows, F)
  // Per series (S + 1 entries: the last closes the last series).
  std::vector<int64_t> series_begin_;       // first row
  std::vector<int64_t> series_train_rows_;  // n_s (S entries)
  std::vector<int64_t> train_window_begin_, validation_window_begin_;
  std::vector<std::string> series_names_;
  // The record beyond the window.
  int64_t record_floats_ = 0;
  std::vector<int> future_indices_;
  bool series_index_ = false;
  std::vector<int> record_series_index_;  // S
  int num_static_ = 0;
  std::vector<float> static_values_;  // (S, Fs)
};

// A uniformly random permutation of [0, n) for epoch `epoch` of a job seeded with `seed`:
// Fisher–Yates over Random(DeriveSeed(seed, SeedPurpose::kShuffle, epoch)) (engine/random.h),
// so it is the same on every platform. Empty for n <= 0.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_DATASET_H_
