#include "engine/train/stream_chunks.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace forecastd {
namespace {

const char* PartName(Split split) { return split == Split::kTrain ? "training" : "validation"; }

int64_t PartRowCount(const WindowedDataset& dataset, Split split) {
  return split == Split::kTrain ? dataset.num_train_rows() : dataset.num_validation_rows();
}

}  // namespace

absl::StatusOr<StreamChunks> StreamChunks::Create(const WindowedDataset& dataset, Split split,
                                                  int64_t streams, int64_t chunk_length) {
  if (streams < 1 || chunk_length < 1) {
    return absl::InvalidArgumentError(absl::StrCat("stateful training needs at least one stream (",
                                                   streams, ") and one step per chunk (",
                                                   chunk_length, ")"));
  }
  if (dataset.num_series() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("stateful training walks one series; the data has ", dataset.num_series()));
  }
  const int64_t N = PartRowCount(dataset, split), P = dataset.horizon();
  const int64_t Ls = N / streams;
  if (Ls < P + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "stateful training cuts the ", N, " ", PartName(split), " rows into ", streams,
        " streams (batch_size) of ", Ls, " rows; each stream needs at least horizon + 1 = ", P + 1,
        " rows (one step and the ", P, " rows it forecasts), so at least ", streams * (P + 1), " ",
        PartName(split),
        " rows are needed: lower batch_size or give a "
        "longer series"));
  }
  return StreamChunks(dataset, split, streams, Ls, chunk_length);
}

int64_t StreamChunks::StreamsFor(const WindowedDataset& dataset, Split split, int64_t streams) {
  return std::min(streams, PartRowCount(dataset, split) / (dataset.horizon() + 1));
}

StreamChunks::StreamChunks(const WindowedDataset& dataset, Split split, int64_t B, int64_t Ls,
                           int64_t k)
    : dataset_(&dataset), split_(split), B_(B), Ls_(Ls), S_(Ls - dataset.horizon()), k_(k) {}

int64_t StreamChunks::chunk_steps(int64_t c) const { return std::min(k_, S_ - c * k_); }

absl::Status StreamChunks::FillChunk(int64_t c, absl::Span<float> x, absl::Span<float> y) const {
  if (c < 0 || c >= num_chunks()) {
    return absl::OutOfRangeError(
        absl::StrCat("FillChunk: chunk ", c, " of ", num_chunks(), " (", PartName(split_), ")"));
  }
  const int64_t K = chunk_steps(c), F = dataset_->num_features(), P = dataset_->horizon();
  const std::vector<int>& targets = dataset_->target_indices();
  const auto NT = static_cast<int64_t>(targets.size());
  if (x.size() != static_cast<size_t>(B_ * K * F) ||
      y.size() != static_cast<size_t>(B_ * K * P * NT)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "FillChunk: x has ", x.size(), " floats and y ", y.size(), "; chunk ", c,
        " needs x (B, K, F) = ", B_ * K * F, " and y (B, K, P, targets) = ", B_ * K * P * NT));
  }
  const absl::Span<const float> rows = dataset_->PartRows(split_);
  const int64_t first_step = c * k_;
  for (int64_t b = 0; b < B_; ++b) {
    const float* stream = rows.data() + b * Ls_ * F;
    std::memcpy(x.data() + b * K * F, stream + first_step * F,
                static_cast<size_t>(K * F) * sizeof(float));
    for (int64_t t = 0; t < K; ++t) {
      float* yt = y.data() + (b * K + t) * P * NT;
      for (int64_t p = 0; p < P; ++p) {
        const float* row = stream + (first_step + t + 1 + p) * F;
        for (int64_t k = 0; k < NT; ++k) yt[p * NT + k] = row[targets[static_cast<size_t>(k)]];
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
