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
#include "engine/random.h"
#include "engine/train/chronological_split.h"
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

absl::Status CheckGivenStats(const FeatureStats& stats, int F) {
  if (stats.mean.size() != static_cast<size_t>(F) || stats.std.size() != static_cast<size_t>(F)) {
    return absl::InvalidArgumentError(
        absl::StrCat("given normalisation statistics have ", stats.mean.size(), " means and ",
                     stats.std.size(), " stds; the series has ", F, " features"));
  }
  for (int f = 0; f < F; ++f) {
    if (!std::isfinite(stats.mean[f]) || !std::isfinite(stats.std[f]) || !(stats.std[f] > 0.0f)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "given normalisation statistics for feature ", f, ": mean ", stats.mean[f], ", std ",
          stats.std[f], "; the mean must be finite and the std finite and > 0"));
    }
  }
  return absl::OkStatus();
}

// Mean and population std of each feature over rows [0, n_train), in double.
FeatureStats FitStats(const Series& series, int64_t n_train) {
  const int F = series.num_columns();
  std::vector<double> sum(F, 0.0);
  for (int64_t r = 0; r < n_train; ++r) {
    for (int f = 0; f < F; ++f) sum[f] += series.at(r, f);
  }
  std::vector<double> mean(F);
  for (int f = 0; f < F; ++f) mean[f] = sum[f] / static_cast<double>(n_train);
  std::vector<double> squares(F, 0.0);
  for (int64_t r = 0; r < n_train; ++r) {
    for (int f = 0; f < F; ++f) {
      const double d = series.at(r, f) - mean[f];
      squares[f] += d * d;
    }
  }
  FeatureStats stats;
  for (int f = 0; f < F; ++f) {
    const double sd = std::sqrt(squares[f] / static_cast<double>(n_train));
    stats.mean.push_back(static_cast<float>(mean[f]));
    stats.std.push_back(sd < kMinStd ? 1.0f : static_cast<float>(sd));
  }
  return stats;
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
  return options;
}

absl::StatusOr<std::unique_ptr<WindowedDataset>> WindowedDataset::Create(
    Series series, const WindowedDatasetOptions& options) {
  const int64_t T = options.lookback;
  const int64_t P = options.horizon;
  const int F = series.num_columns();
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
  if (F < 1 || rows < 0 || series.values.size() != static_cast<size_t>(rows) * F) {
    return absl::InvalidArgumentError(absl::StrCat("malformed series: ", F, " columns, ", rows,
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

  const int64_t n_train = TrainRowsFor(rows, fraction);
  std::unique_ptr<WindowedDataset> dataset(new WindowedDataset());
  dataset->rows_ = rows;
  dataset->T_ = T;
  dataset->P_ = P;
  dataset->F_ = F;
  dataset->stride_ = options.stride;
  dataset->num_train_rows_ = n_train;
  // Saturates instead of overflowing, for absurd option values.
  const int64_t window_rows =
      T > std::numeric_limits<int64_t>::max() - P ? std::numeric_limits<int64_t>::max() : T + P;
  dataset->num_train_windows_ = WindowsIn(n_train, window_rows, options.stride);
  dataset->num_validation_windows_ = WindowsIn(rows - n_train, window_rows, options.stride);
  if (dataset->num_train_windows_ == 0 ||
      (fraction > 0.0 && dataset->num_validation_windows_ == 0)) {
    const int64_t needed = MinRowsFor(window_rows, fraction);
    std::string parts =
        fraction > 0.0
            ? absl::StrCat("with validation_fraction ", fraction, " it splits into ", n_train,
                           " training and ", rows - n_train,
                           " validation rows, and each part needs at least one whole window")
            : absl::StrCat("all ", rows, " rows train");
    return absl::InvalidArgumentError(
        absl::StrCat("the series has ", rows, " rows; a window takes lookback ", T, " + horizon ",
                     P, " rows; ", parts, ": at least ", needed, " rows are needed"));
  }

  switch (options.normalization) {
    case NormalizationMode::kFitOnTrain:
      dataset->stats_ = FitStats(series, n_train);
      break;
    case NormalizationMode::kGiven:
      RETURN_IF_ERROR(CheckGivenStats(options.given_stats, F));
      dataset->stats_ = options.given_stats;
      break;
    case NormalizationMode::kNone:
      dataset->stats_.mean.assign(F, 0.0f);
      dataset->stats_.std.assign(F, 1.0f);
      break;
  }

  // Scale with the float statistics the model will store, so serving undoes exactly this.
  dataset->normalized_ = std::move(series.values);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = dataset->normalized_.data() + r * F;
    for (int f = 0; f < F; ++f) {
      row[f] = static_cast<float>((static_cast<double>(row[f]) - dataset->stats_.mean[f]) /
                                  dataset->stats_.std[f]);
    }
  }
  dataset->target_indices_ = options.target_indices;
  dataset->feature_names_ = std::move(series.column_names);
  return dataset;
}

int64_t WindowedDataset::WindowStartRow(Split split, int64_t index) const {
  return (split == Split::kTrain ? 0 : num_train_rows_) + index * stride_;
}

absl::Status WindowedDataset::FillBatch(Split split, absl::Span<const int64_t> window_indices,
                                        absl::Span<float> x, absl::Span<float> y) const {
  const int64_t B = static_cast<int64_t>(window_indices.size());
  const int64_t K = num_targets();
  if (x.size() != static_cast<size_t>(B * T_ * F_) || y.size() != static_cast<size_t>(B * P_ * K)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillBatch: x has ", x.size(), " floats and y ", y.size(), "; ", B,
        " windows need x (B, T, F) = ", B * T_ * F_, " and y (B, P, K) = ", B * P_ * K));
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
    std::memcpy(x.data() + b * T_ * F_, normalized_.data() + s * F_,
                static_cast<size_t>(T_ * F_) * sizeof(float));
    float* yb = y.data() + b * P_ * K;
    for (int64_t p = 0; p < P_; ++p) {
      const float* row = normalized_.data() + (s + T_ + p) * F_;
      for (int64_t k = 0; k < K; ++k) yb[p * K + k] = row[target_indices_[k]];
    }
  }
  return absl::OkStatus();
}

absl::Span<const float> WindowedDataset::PartRows(Split split) const {
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
