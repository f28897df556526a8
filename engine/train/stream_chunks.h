// StreamChunks: one part (training or validation) of a WindowedDataset as stateful training
// (TrainingConfig.stateful) walks it: cut into B contiguous, equal-length streams side by side
// (PyTorch's language-model "batchify"), walked in chunks of k time steps. TrainJob makes one
// per part; the trainer fills each chunk's inputs and targets in turn.
// Immutable after creation; const methods are thread-safe. Refers to the dataset, which must
// outlive it.
#ifndef FORECASTD_ENGINE_TRAIN_STREAM_CHUNKS_H_
#define FORECASTD_ENGINE_TRAIN_STREAM_CHUNKS_H_

#include <cstdint>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/train/dataset.h"

namespace forecastd {

// With N rows in the part, horizon P and B streams: stream b is rows [b*Ls, (b+1)*Ls) of the
// part, Ls = floor(N / B) (the N - B*Ls rows at the end are not used). Step s of a stream reads
// its row s and forecasts the targets of its rows s+1 .. s+P, so a stream has S = Ls - P steps
// (its last P rows are read only as targets). Chunk c covers steps [c*k, min((c+1)*k, S)): all
// chunks have k steps but the last, which may have fewer.
class StreamChunks {
 public:
  // INVALID_ARGUMENT when streams < 1, chunk_length < 1, the dataset has several series, or
  // the streams are too short to have one step (Ls < P + 1); the message says how many rows
  // would be needed.
  static absl::StatusOr<StreamChunks> Create(const WindowedDataset& dataset, Split split,
                                             int64_t streams, int64_t chunk_length);

  // The most streams `split` can be cut into with at least one step each (its rows / (P + 1)),
  // capped at `streams`: how many streams validation uses.
  static int64_t StreamsFor(const WindowedDataset& dataset, Split split, int64_t streams);

  int64_t streams() const { return B_; }       // B
  int64_t stream_rows() const { return Ls_; }  // Ls
  int64_t steps() const { return S_; }         // S, per stream
  int64_t chunk_length() const { return k_; }  // k
  int64_t num_chunks() const { return (S_ + k_ - 1) / k_; }
  // K_c, the steps of chunk c (in [0, num_chunks())).
  int64_t chunk_steps(int64_t c) const;

  // x (B, K_c, F): the standardised rows chunk c reads; y (B, K_c, P, targets): the standardised
  // targets each of its steps forecasts. INVALID_ARGUMENT when x or y is not exactly that size,
  // OUT_OF_RANGE for a chunk outside [0, num_chunks()).
  absl::Status FillChunk(int64_t c, absl::Span<float> x, absl::Span<float> y) const;

 private:
  StreamChunks(const WindowedDataset& dataset, Split split, int64_t B, int64_t Ls, int64_t k);

  const WindowedDataset* dataset_;
  Split split_;
  int64_t B_, Ls_, S_, k_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_STREAM_CHUNKS_H_
