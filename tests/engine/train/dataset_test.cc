#include "engine/train/dataset.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

#if FORECASTD_CATCH_V3
using Catch::Approx;
#endif

using data_test::RequireStatus;
using data_test::SmallModel;

// Column 0 holds the row number, so a filled window tells which rows it read; column 1 is
// 10 * row + 1, column 2 is -row.
Series RowNumberSeries(int64_t rows) {
  Series s;
  s.column_names = {"row", "ten", "neg"};
  s.rows = rows;
  for (int64_t r = 0; r < rows; ++r) {
    s.values.push_back(static_cast<float>(r));
    s.values.push_back(static_cast<float>(10 * r + 1));
    s.values.push_back(static_cast<float>(-r));
  }
  return s;
}

WindowedDatasetOptions Options(int64_t T, int64_t P, int64_t stride, double fraction,
                               NormalizationMode mode = NormalizationMode::kNone) {
  WindowedDatasetOptions o;
  o.lookback = T;
  o.horizon = P;
  o.stride = stride;
  o.validation_fraction = fraction;
  o.target_indices = {0};
  o.normalization = mode;
  return o;
}

std::unique_ptr<WindowedDataset> CreateOk(Series series, const WindowedDatasetOptions& options) {
  auto dataset = WindowedDataset::Create(std::move(series), options);
  CAPTURE(dataset.status().ToString());
  REQUIRE(dataset.ok());
  return *std::move(dataset);
}

// ---------------------------------------------------------------------------------------------
// Windows

TEST_CASE("window counts and the chronological split", "[unit][dataset]") {
  // 20 rows, fraction 0.25: rows 0..14 train, 15..19 validate; a window is 3 + 2 = 5 rows.
  auto d = CreateOk(RowNumberSeries(20), Options(3, 2, 1, 0.25));
  CHECK(d->num_train_rows() == 15);
  CHECK(d->num_validation_rows() == 5);
  CHECK(d->num_train_windows() == 11);
  CHECK(d->num_validation_windows() == 1);
  CHECK(d->WindowStartRow(Split::kValidation, 0) == 15);

  auto strided = CreateOk(RowNumberSeries(20), Options(3, 2, 4, 0.25));
  CHECK(strided->num_train_windows() == 3);  // starts 0, 4, 8 (12 + 5 > 15)
  CHECK(strided->num_validation_windows() == 1);

  // A decimal fraction splits where the decimal says: 0.2 of 10 rows is 2.
  auto tenth = CreateOk(RowNumberSeries(10), Options(1, 1, 1, 0.2));
  CHECK(tenth->num_train_rows() == 8);
  CHECK(tenth->num_train_windows() == 7);
  CHECK(tenth->num_validation_windows() == 1);

  auto all = CreateOk(RowNumberSeries(6), Options(2, 1, 1, 0.0));
  CHECK(all->num_train_rows() == 6);
  CHECK(all->num_train_windows() == 4);
  CHECK(all->num_validation_windows() == 0);
}

TEST_CASE("first and last windows hold the right rows and targets", "[unit][dataset]") {
  WindowedDatasetOptions o = Options(3, 2, 2, 0.25);
  o.target_indices = {2, 1};  // K = 2, in this order
  auto d = CreateOk(RowNumberSeries(24), o);
  // n_train = 18: train starts 0, 2, ..., 12 (7 windows); validation rows 18..23: start 18.
  REQUIRE(d->num_train_windows() == 7);
  REQUIRE(d->num_validation_windows() == 1);
  const int64_t T = 3, P = 2, F = 3, K = 2;

  const std::vector<int64_t> first_last = {0, 6};
  std::vector<float> x(2 * T * F), y(2 * P * K);
  REQUIRE(d->FillBatch(Split::kTrain, first_last, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  // Window 0: inputs rows 0..2, targets rows 3..4 as (neg, ten).
  CHECK(std::vector<float>(x.begin(), x.begin() + T * F) ==
        std::vector<float>{0, 1, 0, 1, 11, -1, 2, 21, -2});
  CHECK(std::vector<float>(y.begin(), y.begin() + P * K) == std::vector<float>{-3, 31, -4, 41});
  // Window 6 starts at row 12: inputs 12..14, targets 15..16; it ends inside the training rows.
  CHECK(x[T * F] == 12);
  CHECK(x[2 * T * F - F] == 14);
  CHECK(std::vector<float>(y.begin() + P * K, y.end()) == std::vector<float>{-15, 151, -16, 161});

  const std::vector<int64_t> val = {0};
  std::vector<float> vx(T * F), vy(P * K);
  REQUIRE(d->FillBatch(Split::kValidation, val, absl::MakeSpan(vx), absl::MakeSpan(vy)).ok());
  CHECK(vx[0] == 18);
  CHECK(vy == std::vector<float>{-21, 211, -22, 221});
}

// Brute force over many shapes: the counts match an enumeration of window starts, every window
// stays in its part (checked on the row numbers FillBatch copies), and a too-short series
// fails with the true minimum number of rows.
TEST_CASE("no window crosses the split, for many shapes", "[unit][dataset]") {
  const auto train_rows = [](int64_t rows, double f) {
    return static_cast<int64_t>(std::floor(static_cast<double>(rows) * (1.0 - f) + 1e-6));
  };
  for (const double f : {0.0, 0.1, 0.25, 0.5, 0.7}) {
    for (int64_t T = 1; T <= 4; ++T) {
      for (int64_t P = 1; P <= 3; ++P) {
        for (int64_t stride = 1; stride <= 3; ++stride) {
          for (int64_t rows = 1; rows <= 40; ++rows) {
            CAPTURE(f, T, P, stride, rows);
            const int64_t n_train = train_rows(rows, f);
            int64_t want_train = 0, want_val = 0;
            for (int64_t s = 0; s + T + P <= n_train; s += stride) ++want_train;
            for (int64_t s = n_train; s + T + P <= rows; s += stride) ++want_val;
            auto d = WindowedDataset::Create(RowNumberSeries(rows), Options(T, P, stride, f));
            if (want_train == 0 || (f > 0 && want_val == 0)) {
              REQUIRE_FALSE(d.ok());
              int64_t need = 1;
              while (true) {
                const int64_t nt = train_rows(need, f);
                if (nt >= T + P && (f == 0 || need - nt >= T + P)) break;
                ++need;
              }
              RequireStatus(d.status(), absl::StatusCode::kInvalidArgument,
                            absl::StrCat("at least ", need, " rows are needed"));
              continue;
            }
            REQUIRE(d.ok());
            const auto& ds = **d;
            REQUIRE(ds.num_train_rows() == n_train);
            REQUIRE(ds.num_train_windows() == want_train);
            REQUIRE(ds.num_validation_windows() == want_val);
            for (const Split split : {Split::kTrain, Split::kValidation}) {
              const int64_t n = ds.num_windows(split);
              std::vector<int64_t> all(n);
              std::iota(all.begin(), all.end(), int64_t{0});
              std::vector<float> x(n * T * 3), y(n * P);
              REQUIRE(ds.FillBatch(split, all, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
              const int64_t lo = split == Split::kTrain ? 0 : n_train;
              const int64_t hi = split == Split::kTrain ? n_train : rows;
              for (int64_t w = 0; w < n; ++w) {
                REQUIRE(ds.WindowStartRow(split, w) == lo + w * stride);
                for (int64_t t = 0; t < T; ++t) {
                  const float row = x[(w * T + t) * 3];
                  REQUIRE(row >= lo);
                  REQUIRE(row < hi);
                }
                for (int64_t p = 0; p < P; ++p) {
                  REQUIRE(y[w * P + p] == static_cast<float>(ds.WindowStartRow(split, w) + T + p));
                  REQUIRE(y[w * P + p] < hi);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("normalisation is fitted on the training rows only", "[unit][dataset]") {
  // 15 rows, fraction 0.2: rows 0..11 train, 12..14 validate. Feature 1 is constant on the
  // training rows.
  Series s;
  s.column_names = {"x", "c"};
  s.rows = 15;
  const std::vector<float> x = {3, -1, 4, 1, -5, 9, 2, 6, 5, 3, -5, 8, 1e6f, -1e6f, 7e5f};
  for (int r = 0; r < 15; ++r) {
    s.values.push_back(x[r]);
    s.values.push_back(r < 12 ? 7.0f : 1000.0f);
  }
  double mean = 0, var = 0;
  for (int r = 0; r < 12; ++r) mean += x[r];
  mean /= 12;
  for (int r = 0; r < 12; ++r) var += (x[r] - mean) * (x[r] - mean);
  const double sd = std::sqrt(var / 12);  // population std, ddof 0

  auto d = CreateOk(s, Options(2, 1, 1, 0.2, NormalizationMode::kFitOnTrain));
  REQUIRE(d->num_train_rows() == 12);
  REQUIRE(d->mean().size() == 2);
  CHECK(d->mean()[0] == Approx(mean).epsilon(1e-6));
  CHECK(d->std()[0] == Approx(sd).epsilon(1e-6));
  CHECK(d->mean()[1] == 7.0f);
  CHECK(d->std()[1] == 1.0f);  // constant on the training rows: only centred

  // Validation values do not move the statistics.
  Series other = s;
  other.values[12 * 2] = 5;
  other.values[14 * 2 + 1] = -3;
  auto d2 = CreateOk(other, Options(2, 1, 1, 0.2, NormalizationMode::kFitOnTrain));
  CHECK(d2->mean() == d->mean());
  CHECK(d2->std() == d->std());

  // Batches carry normalised values, targets included.
  const std::vector<int64_t> w = {1};
  std::vector<float> bx(2 * 2), by(1);
  REQUIRE(d->FillBatch(Split::kTrain, w, absl::MakeSpan(bx), absl::MakeSpan(by)).ok());
  CHECK(bx[0] == Approx((-1 - mean) / sd).epsilon(1e-5));
  CHECK(bx[1] == 0.0f);
  CHECK(bx[2] == Approx((4 - mean) / sd).epsilon(1e-5));
  CHECK(by[0] == Approx((1 - mean) / sd).epsilon(1e-5));
  const std::vector<int64_t> v = {0};
  std::vector<float> vx(2 * 2), vy(1);
  REQUIRE(d->FillBatch(Split::kValidation, v, absl::MakeSpan(vx), absl::MakeSpan(vy)).ok());
  CHECK(vx[0] == Approx((1e6 - mean) / sd).epsilon(1e-5));
  CHECK(vx[1] == 1000.0f - 7.0f);
  CHECK(vy[0] == Approx((7e5 - mean) / sd).epsilon(1e-5));
}

TEST_CASE("given statistics and no normalisation", "[unit][dataset]") {
  WindowedDatasetOptions o = Options(1, 1, 1, 0.5, NormalizationMode::kGiven);
  o.given_stats.mean = {1, 10, 0};
  o.given_stats.std = {2, 5, 0.5f};
  auto d = CreateOk(RowNumberSeries(4), o);
  CHECK(d->mean() == o.given_stats.mean);
  CHECK(d->std() == o.given_stats.std);
  const std::vector<int64_t> w = {0};
  std::vector<float> x(3), y(1);
  REQUIRE(d->FillBatch(Split::kValidation, w, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  // Row 2 = (2, 21, -2).
  CHECK(x == std::vector<float>{0.5f, 2.2f, -4.0f});
  CHECK(y[0] == 1.0f);  // row 3's feature 0: (3 - 1) / 2

  o.given_stats.std[1] = 0;
  RequireStatus(WindowedDataset::Create(RowNumberSeries(4), o).status(),
                absl::StatusCode::kInvalidArgument, "std finite and > 0");
  o.given_stats.std.pop_back();
  RequireStatus(WindowedDataset::Create(RowNumberSeries(4), o).status(),
                absl::StatusCode::kInvalidArgument, "3 features");

  auto none = CreateOk(RowNumberSeries(4), Options(1, 1, 1, 0.5, NormalizationMode::kNone));
  CHECK(none->mean() == std::vector<float>{0, 0, 0});
  CHECK(none->std() == std::vector<float>{1, 1, 1});
  REQUIRE(none->FillBatch(Split::kTrain, w, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  CHECK(x == std::vector<float>{0, 1, 0});
  CHECK(y[0] == 1.0f);
}

TEST_CASE("bad window options and batches are rejected", "[unit][dataset]") {
  const auto k = absl::StatusCode::kInvalidArgument;
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(0, 1, 1, 0.2)).status(), k,
                "lookback");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(1, 0, 1, 0.2)).status(), k,
                "horizon");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(1, 1, 0, 0.2)).status(), k,
                "stride");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(1, 1, 1, 1.0)).status(), k,
                "validation_fraction");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(1, 1, 1, -0.1)).status(), k,
                "validation_fraction");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), Options(1, 1, 1, NAN)).status(), k,
                "validation_fraction");
  WindowedDatasetOptions o = Options(1, 1, 1, 0.2);
  o.target_indices = {3};
  RequireStatus(WindowedDataset::Create(RowNumberSeries(10), o).status(), k, "target index 3");
  // 20 rows, fraction 0.25: 15 + 5 rows; a window of 3 + 3 = 6 rows fits only the first part.
  // 24 rows split 18 + 6; 23 split 17 + 6 too (floor(17.25)); 22 split 16 + 6; 21 split 15 + 6;
  // 20 split 15 + 5. So 21.
  RequireStatus(WindowedDataset::Create(RowNumberSeries(20), Options(3, 3, 1, 0.25)).status(), k,
                "the series has 20 rows; a window takes lookback 3 + horizon 3 rows");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(20), Options(3, 3, 1, 0.25)).status(), k,
                "at least 21 rows are needed");
  RequireStatus(WindowedDataset::Create(RowNumberSeries(3), Options(3, 3, 1, 0.0)).status(), k,
                "at least 6 rows are needed");

  auto d = CreateOk(RowNumberSeries(20), Options(2, 1, 1, 0.2));  // 14 training windows
  std::vector<float> x(2 * 3), y(1);
  const std::vector<int64_t> bad = {14};
  RequireStatus(d->FillBatch(Split::kTrain, bad, absl::MakeSpan(x), absl::MakeSpan(y)),
                absl::StatusCode::kOutOfRange, "window 14");
  const std::vector<int64_t> neg = {-1};
  RequireStatus(d->FillBatch(Split::kTrain, neg, absl::MakeSpan(x), absl::MakeSpan(y)),
                absl::StatusCode::kOutOfRange, "window -1");
  const std::vector<int64_t> two = {0, 1};
  RequireStatus(d->FillBatch(Split::kTrain, two, absl::MakeSpan(x), absl::MakeSpan(y)), k,
                "(B, T, F) = 12");
}

TEST_CASE("OptionsFromConfig applies the proto's defaults", "[unit][dataset]") {
  const ModelConfig model = SmallModel(5, 2, {"a", "b", "c"}, {"c", "a"});
  v1::DataConfig data;
  auto o = OptionsFromConfig(data, model);
  REQUIRE(o.ok());
  CHECK(o->lookback == 5);
  CHECK(o->horizon == 2);
  CHECK(o->stride == 1);
  CHECK(o->validation_fraction == 0.2);
  CHECK(o->target_indices == std::vector<int>{2, 0});
  CHECK(o->normalization == NormalizationMode::kFitOnTrain);

  data.set_stride(3);
  data.set_validation_fraction(0.3f);
  ModelConfig raw = model;
  raw.set_normalization(v1::NORMALIZATION_NONE);
  o = OptionsFromConfig(data, raw);
  REQUIRE(o.ok());
  CHECK(o->stride == 3);
  CHECK(o->validation_fraction == 0.3);  // the decimal, not 0.30000001192...
  CHECK(o->normalization == NormalizationMode::kNone);

  data.set_stride(-1);
  RequireStatus(OptionsFromConfig(data, model).status(), absl::StatusCode::kInvalidArgument,
                "stride");
  data.set_stride(1);
  data.set_validation_fraction(1.0f);
  RequireStatus(OptionsFromConfig(data, model).status(), absl::StatusCode::kInvalidArgument,
                "validation_fraction");
}

// ---------------------------------------------------------------------------------------------
// Shuffling

bool IsPermutation(std::vector<int64_t> v, int64_t n) {
  std::sort(v.begin(), v.end());
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] != i) return false;
  }
  return static_cast<int64_t>(v.size()) == n;
}

TEST_CASE("ShuffledOrder is a deterministic permutation per seed and epoch", "[unit][dataset]") {
  const auto a = ShuffledOrder(100, 7, 0);
  CHECK(IsPermutation(a, 100));
  CHECK(a == ShuffledOrder(100, 7, 0));
  CHECK(a != ShuffledOrder(100, 7, 1));
  CHECK(a != ShuffledOrder(100, 8, 0));
  std::vector<int64_t> identity(100);
  std::iota(identity.begin(), identity.end(), int64_t{0});
  CHECK(a != identity);
  CHECK(ShuffledOrder(0, 7, 0).empty());
  CHECK(ShuffledOrder(1, 7, 0) == std::vector<int64_t>{0});
  // Pinned: the order is part of "same seed, same result", on every platform (cross-checked
  // against an independent Python transcription of DeriveSeed, PCG32 and Fisher-Yates).
  CHECK(ShuffledOrder(8, 42, 0) == std::vector<int64_t>{7, 6, 3, 5, 2, 0, 4, 1});

  auto d = CreateOk(RowNumberSeries(30), Options(2, 1, 1, 0.2));
  CHECK(d->TrainOrder(5, 3) == ShuffledOrder(d->num_train_windows(), 5, 3));
}

TEST_CASE("ShuffledOrder puts each element in each position about equally often",
          "[unit][dataset]") {
  constexpr int kEpochs = 40000;
  int count[4][4] = {};
  for (int e = 0; e < kEpochs; ++e) {
    const auto order = ShuffledOrder(4, 11, e);
    for (int pos = 0; pos < 4; ++pos) ++count[pos][order[pos]];
  }
  for (int pos = 0; pos < 4; ++pos) {
    for (int v = 0; v < 4; ++v) CHECK(count[pos][v] == Approx(kEpochs / 4).epsilon(0.05));
  }
}

}  // namespace
}  // namespace forecastd
