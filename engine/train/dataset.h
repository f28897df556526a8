// Windows of training data: the `WindowedDataset` that cuts a Series (series.h) into
// (lookback T, horizon P) windows, split chronologically into training and validation parts
// (chronological_split.h), normalised per feature with statistics fitted on the training rows
// only, and the shuffled order TrainJob visits the training windows in each epoch.
// Immutable after creation; const methods are thread-safe.
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

// Per-feature x' = (x - mean) / std.
struct FeatureStats {
  std::vector<float> mean;  // F
  std::vector<float> std;   // F, each > 0
};

enum class NormalizationMode {
  // Mean and population standard deviation (ddof 0, accumulated in double) of each feature
  // over the training rows only (every row before the split, whether or not a window covers
  // it). A feature whose std is below 1e-12 (constant on the training rows) gets std 1, so it
  // is only centred.
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
  FeatureStats given_stats;  // kGiven only: F finite means and finite stds > 0
};

// Options for `model` and `data`: T, P and targets from the model, stride and fraction from
// `data` with the proto's defaults for 0 (stride 1, fraction 0.2; the float fraction is read as
// its shortest decimal, so 0.2f is 0.2), kNone for NORMALIZATION_NONE models and kFitOnTrain
// otherwise (a fine-tuning caller switches to kGiven). INVALID_ARGUMENT for a negative stride
// or a fraction outside [0, 1).
absl::StatusOr<WindowedDatasetOptions> OptionsFromConfig(const v1::DataConfig& data,
                                                         const ModelConfig& model);

// A series cut into windows. Window w of a part starts at row s = part_begin + w * stride; its
// inputs are rows [s, s + T) (all F features) and its targets rows [s + T, s + T + P) (the K
// target features). Training windows lie entirely inside the training rows [0, n_train),
// validation windows entirely inside [n_train, rows): no row serves both parts.
// The series is normalised once at creation; FillBatch copies normalised values.
class WindowedDataset {
 public:
  // INVALID_ARGUMENT for bad options, or when the series gives no training window, or no
  // validation window with fraction > 0; the message says how many rows would be needed.
  static absl::StatusOr<std::unique_ptr<WindowedDataset>> Create(
      Series series, const WindowedDatasetOptions& options);

  WindowedDataset(const WindowedDataset&) = delete;
  WindowedDataset& operator=(const WindowedDataset&) = delete;

  // x (B, T, F) and y (B, P, K), normalised, for the windows `window_indices` (B of them) of
  // `split`. INVALID_ARGUMENT when x or y is not exactly that size; OUT_OF_RANGE for an index
  // outside [0, num_windows(split)).
  absl::Status FillBatch(Split split, absl::Span<const int64_t> window_indices, absl::Span<float> x,
                         absl::Span<float> y) const;

  // The normalised rows of `split`'s part, (rows of the part, F) row-major: what stateful
  // training (stream_chunks.h) cuts into streams.
  absl::Span<const float> PartRows(Split split) const;

  // The permutation of [0, num_train_windows()) that epoch `epoch` of a job seeded with `seed`
  // visits: ShuffledOrder(num_train_windows(), seed, epoch).
  std::vector<int64_t> TrainOrder(uint64_t seed, int64_t epoch) const;

  int64_t num_windows(Split split) const {
    return split == Split::kTrain ? num_train_windows_ : num_validation_windows_;
  }
  int64_t num_train_windows() const { return num_train_windows_; }
  int64_t num_validation_windows() const { return num_validation_windows_; }
  // The row where window `index` of `split` starts (index in range).
  int64_t WindowStartRow(Split split, int64_t index) const;

  int64_t num_rows() const { return rows_; }
  int64_t num_train_rows() const { return num_train_rows_; }  // n_train
  int64_t num_validation_rows() const { return rows_ - num_train_rows_; }
  int64_t lookback() const { return T_; }
  int64_t horizon() const { return P_; }
  int num_features() const { return F_; }
  int num_targets() const { return static_cast<int>(target_indices_.size()); }
  const std::vector<int>& target_indices() const { return target_indices_; }
  const std::vector<std::string>& feature_names() const { return feature_names_; }

  // The scaling applied (what the trainer stores as normalizer.mean / normalizer.std).
  const std::vector<float>& mean() const { return stats_.mean; }
  const std::vector<float>& std() const { return stats_.std; }

 private:
  WindowedDataset() = default;

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
};

// A uniformly random permutation of [0, n) for epoch `epoch` of a job seeded with `seed`:
// Fisher–Yates over Random(DeriveSeed(seed, SeedPurpose::kShuffle, epoch)) (engine/random.h),
// so it is the same on every platform. Empty for n <= 0.
std::vector<int64_t> ShuffledOrder(int64_t n, uint64_t seed, int64_t epoch);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_DATASET_H_
