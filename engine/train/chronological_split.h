// The chronological split of a training series: the first rows train, the rest validate, and
// how many (lookback + horizon)-row windows fit in each part. WindowedDataset (dataset.h) is
// the caller; the arithmetic lives here so the split rule is stated once. Pure functions;
// thread-safe.
#ifndef FORECASTD_ENGINE_TRAIN_CHRONOLOGICAL_SPLIT_H_
#define FORECASTD_ENGINE_TRAIN_CHRONOLOGICAL_SPLIT_H_

#include <cstdint>

namespace forecastd {

// n_train = floor(rows * (1 - fraction)) rows train, in [0, rows], computed in double with
// 1e-6 rows of slack so that 0.2 of 10 rows is exactly 2 (fraction in [0, 1)).
int64_t TrainRowsFor(int64_t rows, double fraction);

// Windows of `window_rows` rows, starting every `stride` (>= 1) rows, that fit in `part_rows`.
int64_t WindowsIn(int64_t part_rows, int64_t window_rows, int64_t stride);

// The fewest rows that give one training window and, when fraction > 0, one validation window.
int64_t MinRowsFor(int64_t window_rows, double fraction);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_CHRONOLOGICAL_SPLIT_H_
