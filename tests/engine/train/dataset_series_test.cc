// WindowedDataset over several series and with covariates: windows never cross from one series
// to the next, each series splits and is standardised on its own, static covariates are
// standardised over the series, and FillBatch's input records are, value by value, what
// BuildInputRecords makes of the raw rows, standardised by the window's series' statistics.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/models/input_record.h"
#include "engine/train/dataset.h"
#include "engine/train/stream_chunks.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

#if FORECASTD_CATCH_V3
using Catch::Approx;
#endif

using data_test::RequireStatus;
using data_test::SmallModel;

// Series s ("s0", "s1", ...) of lengths[s] rows, one after the other. Column 0 holds the row
// number in the whole file, so a filled window tells which rows it read; column 1 is
// 1000 * (s + 1) + the row's index within its series.
Series Stacked(const std::vector<int64_t>& lengths) {
  Series series;
  series.column_names = {"row", "level"};
  for (size_t s = 0; s < lengths.size(); ++s) {
    series.series_names.push_back(absl::StrCat("s", s));
    for (int64_t i = 0; i < lengths[s]; ++i) {
      series.values.push_back(static_cast<float>(series.rows++));
      series.values.push_back(static_cast<float>(1000 * (s + 1) + i));
      series.series_ids.push_back(static_cast<int32_t>(s));
    }
  }
  return series;
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
  o.series_index = true;
  return o;
}

std::unique_ptr<WindowedDataset> CreateOk(Series series, const WindowedDatasetOptions& options) {
  auto dataset = WindowedDataset::Create(std::move(series), options);
  CAPTURE(dataset.status().ToString());
  REQUIRE(dataset.ok());
  return *std::move(dataset);
}

int64_t TrainRows(int64_t rows, double fraction) {
  return static_cast<int64_t>(std::floor(static_cast<double>(rows) * (1.0 - fraction) + 1e-6));
}

// ---------------------------------------------------------------------------------------------
// Windows

TEST_CASE("Windows never cross series: counts, first and last windows per series",
          "[unit][dataset]") {
  // Rows 0..19, 20..43, 44..73; fraction 0.25 splits them 15 + 5, 18 + 6, 22 + 8.
  const int64_t T = 3, P = 2, R = T * 2 + 1;
  auto d = CreateOk(Stacked({20, 24, 30}), Options(T, P, 1, 0.25));
  REQUIRE(d->num_series() == 3);
  CHECK(d->series_names() == std::vector<std::string>{"s0", "s1", "s2"});
  CHECK(d->SeriesBeginRow(1) == 20);
  CHECK(d->SeriesBeginRow(3) == 74);
  CHECK(d->num_train_rows() == 15 + 18 + 22);
  CHECK(d->num_validation_rows() == 5 + 6 + 8);
  CHECK(d->record_floats() == R);
  // Windows of 5 rows: 11 + 14 + 18 train, 1 + 2 + 4 validate.
  REQUIRE(d->num_train_windows() == 43);
  REQUIRE(d->num_validation_windows() == 7);

  struct Expected {
    int64_t windows, first_row, last_row;
  };
  const std::vector<Expected> train = {{11, 0, 10}, {14, 20, 33}, {18, 44, 61}};
  const std::vector<Expected> validation = {{1, 15, 15}, {2, 38, 39}, {4, 66, 69}};
  for (const Split split : {Split::kTrain, Split::kValidation}) {
    const std::vector<Expected>& want = split == Split::kTrain ? train : validation;
    const int64_t n = d->num_windows(split);
    std::vector<int64_t> all(n);
    std::iota(all.begin(), all.end(), int64_t{0});
    std::vector<float> x(n * R), y(n * P);
    REQUIRE(d->FillBatch(split, all, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
    std::vector<int64_t> count(3, 0);
    for (int64_t w = 0; w < n; ++w) {
      const int s = d->WindowSeries(split, w);
      CAPTURE(split == Split::kTrain, w, s);
      // Series by series, in order.
      REQUIRE(s >= (w == 0 ? 0 : d->WindowSeries(split, w - 1)));
      const float* record = x.data() + w * R;
      CHECK(record[R - 1] == static_cast<float>(s));
      if (count[s] == 0) CHECK(d->WindowStartRow(split, w) == want[s].first_row);
      if (count[s] == want[s].windows - 1) CHECK(d->WindowStartRow(split, w) == want[s].last_row);
      ++count[s];
      // Every row read, targets included, is of the window's series and part.
      const int64_t begin = d->SeriesBeginRow(s);
      const int64_t n_train = TrainRows(d->SeriesBeginRow(s + 1) - begin, 0.25);
      const int64_t lo = split == Split::kTrain ? begin : begin + n_train;
      const int64_t hi = split == Split::kTrain ? begin + n_train : d->SeriesBeginRow(s + 1);
      for (int64_t t = 0; t < T; ++t) {
        CHECK(record[t * 2] == static_cast<float>(d->WindowStartRow(split, w) + t));
      }
      CHECK(record[0] >= lo);
      CHECK(y[w * P + P - 1] < hi);
      CHECK(y[w * P + P - 1] == record[(T - 1) * 2] + P);
    }
    for (int s = 0; s < 3; ++s) CHECK(count[s] == want[s].windows);
  }
}

TEST_CASE("Windows never cross series, for many shapes and lengths", "[unit][dataset]") {
  for (const double f : {0.0, 0.25, 0.5}) {
    for (int64_t T = 1; T <= 3; ++T) {
      for (int64_t P = 1; P <= 2; ++P) {
        for (int64_t stride = 1; stride <= 2; ++stride) {
          for (int64_t a = 1; a <= 14; ++a) {
            for (const int64_t b : {int64_t{9}, int64_t{13}}) {
              CAPTURE(f, T, P, stride, a, b);
              const std::vector<int64_t> lengths = {a, b};
              int64_t want_train = 0, want_val = 0;
              bool short_series = false;
              for (const int64_t rows : lengths) {
                const int64_t nt = TrainRows(rows, f);
                int64_t tw = 0, vw = 0;
                for (int64_t s = 0; s + T + P <= nt; s += stride) ++tw;
                for (int64_t s = nt; s + T + P <= rows; s += stride) ++vw;
                short_series = short_series || tw == 0 || (f > 0 && vw == 0);
                want_train += tw;
                want_val += vw;
              }
              auto d = WindowedDataset::Create(Stacked(lengths), Options(T, P, stride, f));
              if (short_series) {
                REQUIRE_FALSE(d.ok());
                CHECK(d.status().code() == absl::StatusCode::kInvalidArgument);
                continue;
              }
              REQUIRE(d.ok());
              REQUIRE((*d)->num_train_windows() == want_train);
              REQUIRE((*d)->num_validation_windows() == want_val);
              for (const Split split : {Split::kTrain, Split::kValidation}) {
                const int64_t n = (*d)->num_windows(split);
                std::vector<int64_t> all(n);
                std::iota(all.begin(), all.end(), int64_t{0});
                std::vector<float> x(n * (T * 2 + 1)), y(n * P);
                REQUIRE((*d)->FillBatch(split, all, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
                for (int64_t w = 0; w < n; ++w) {
                  // The first input row and the last target row are in the same series.
                  const float first = x[w * (T * 2 + 1)];
                  const float last = y[w * P + P - 1];
                  const int s = (*d)->WindowSeries(split, w);
                  REQUIRE(first >= (*d)->SeriesBeginRow(s));
                  REQUIRE(last < (*d)->SeriesBeginRow(s + 1));
                  REQUIRE(last == first + T + P - 1);
                }
              }
            }
          }
        }
      }
    }
  }
}

TEST_CASE("A short series, several series without a series index, malformed series: refused",
          "[unit][dataset]") {
  const auto k = absl::StatusCode::kInvalidArgument;
  // s1 has 6 rows: 4 + 2 with fraction 0.25 (floor(4.5)), too few for a validation window.
  RequireStatus(WindowedDataset::Create(Stacked({20, 6}), Options(2, 1, 1, 0.25)).status(), k,
                "series 's1' has 6 rows; a window takes lookback 2 + horizon 1 rows");
  WindowedDatasetOptions no_index = Options(2, 1, 1, 0.25);
  no_index.series_index = false;
  RequireStatus(WindowedDataset::Create(Stacked({20, 20}), no_index).status(), k,
                "the data has 2 series");
  Series gap = Stacked({10, 10});
  gap.series_ids[12] = 0;  // s0 comes back inside s1
  RequireStatus(WindowedDataset::Create(gap, Options(2, 1, 1, 0.25)).status(), k,
                "series' rows are contiguous");
  Series short_ids = Stacked({10, 10});
  short_ids.series_ids.pop_back();
  RequireStatus(WindowedDataset::Create(short_ids, Options(2, 1, 1, 0.25)).status(), k,
                "malformed series");
  WindowedDatasetOptions mapped = Options(2, 1, 1, 0.25);
  mapped.record_series_index = {1};
  RequireStatus(WindowedDataset::Create(Stacked({10, 10}), mapped).status(), k,
                "record_series_index has 1 entries");

  // Stateful training walks one series.
  auto d = CreateOk(Stacked({20, 20}), Options(2, 1, 1, 0.25));
  CHECK(d->PartRows(Split::kTrain).empty());
  RequireStatus(StreamChunks::Create(*d, Split::kTrain, 2, 4).status(), k,
                "stateful training walks one series");
}

// ---------------------------------------------------------------------------------------------
// Statistics

TEST_CASE("Each series is standardised by the statistics of its own training rows",
          "[unit][dataset]") {
  // Two series of 10 rows, fraction 0.2: rows 0..7 and 10..17 train.
  auto d = CreateOk(Stacked({10, 10}), Options(1, 1, 1, 0.2, NormalizationMode::kFitOnTrain));
  const int F = 2;
  REQUIRE(d->mean().size() == 2 * F);
  REQUIRE(d->std().size() == 2 * F);
  // Column 0 over rows 0..7 and 10..17; column 1 over 1000..1007 and 2000..2007.
  const double sd = std::sqrt((12.25 + 6.25 + 2.25 + 0.25) * 2 / 8);  // of 0..7
  CHECK(d->mean()[0] == Approx(3.5));
  CHECK(d->mean()[1] == Approx(1003.5));
  CHECK(d->mean()[F + 0] == Approx(13.5));
  CHECK(d->mean()[F + 1] == Approx(2003.5));
  for (const int i : {0, 1, F, F + 1}) CHECK(d->std()[i] == Approx(sd));

  // Validation rows use their series' training statistics: s1's validation window reads row
  // 18 (column 1: 2008) and forecasts row 19.
  const std::vector<int64_t> w = {1};
  std::vector<float> x(F + 1), y(1);
  REQUIRE(d->FillBatch(Split::kValidation, w, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  CHECK(x[0] == Approx((18 - 13.5) / sd));
  CHECK(x[1] == Approx((2008 - 2003.5) / sd));
  CHECK(x[F] == 1.0f);  // the series index
  CHECK(y[0] == Approx((19 - 13.5) / sd));

  // Given statistics: one row per data series, with the index the model knows each by.
  WindowedDatasetOptions given = Options(1, 1, 1, 0.2, NormalizationMode::kGiven);
  given.given_stats.mean = {0, 1000, 10, 2000};
  given.given_stats.std = {1, 2, 4, 8};
  given.record_series_index = {5, 3};
  auto g = CreateOk(Stacked({10, 10}), given);
  CHECK(g->mean() == given.given_stats.mean);
  REQUIRE(g->FillBatch(Split::kValidation, w, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  CHECK(x[0] == (18.0f - 10) / 4);
  CHECK(x[1] == (2008.0f - 2000) / 8);
  CHECK(x[F] == 3.0f);
  given.given_stats.std.pop_back();
  RequireStatus(WindowedDataset::Create(Stacked({10, 10}), given).status(),
                absl::StatusCode::kInvalidArgument, "2 series (one row each) of 2 features");
}

TEST_CASE("Static covariates are standardised over the series", "[unit][dataset]") {
  Series s = Stacked({10, 10, 10});
  s.static_names = {"cap", "same"};
  s.static_values = {1, 4, 3, 4, 8, 4};  // (S, Fs)
  auto d = CreateOk(s, Options(1, 1, 1, 0.2));
  REQUIRE(d->num_static_features() == 2);
  const double mean = 4.0, sd = std::sqrt((9.0 + 1 + 16) / 3);
  const std::vector<float>& v = d->static_values();
  REQUIRE(v.size() == 6);
  CHECK(v[0] == Approx((1 - mean) / sd));
  CHECK(v[2] == Approx((3 - mean) / sd));
  CHECK(v[4] == Approx((8 - mean) / sd));
  // Constant over the series: only centred.
  CHECK(v[1] == 0.0f);
  CHECK(v[3] == 0.0f);
  CHECK(v[5] == 0.0f);
  s.static_values.pop_back();
  RequireStatus(WindowedDataset::Create(s, Options(1, 1, 1, 0.2)).status(),
                absl::StatusCode::kInvalidArgument, "5 static values for 3 series");
}

// ---------------------------------------------------------------------------------------------
// Input records

// Two hourly series of a model with a target, a future-known covariate, a past-only feature,
// two calendar features and a static covariate.
ModelConfig CovariateModel() {
  ModelConfig model = SmallModel(4, 3, {"load", "promo", "temp"}, {"load"});
  model.mutable_covariates()->add_future("promo");
  model.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  model.mutable_covariates()->add_calendar(v1::CALENDAR_DAY_OF_WEEK);
  model.mutable_covariates()->add_static_features("cap");
  model.add_series("north");
  model.add_series("south");
  return model;
}

Series CovariateSeries() {
  Series s;
  s.column_names = {"load", "promo", "temp"};
  s.series_names = {"north", "south"};
  s.static_names = {"cap"};
  s.static_values = {10, 30};
  const int64_t starts[] = {1704067200, 1704200000};  // 2024-01-01T00:00Z, and another
  for (int series = 0; series < 2; ++series) {
    for (int64_t i = 0; i < 30; ++i) {
      const double t = static_cast<double>(i);
      s.values.push_back(static_cast<float>(50 + 20 * series + 7 * std::sin(0.7 * t)));
      s.values.push_back(static_cast<float>((i * 7 + series) % 3 == 0 ? 1 : 0));
      s.values.push_back(static_cast<float>(-5 + 0.3 * t * (series + 1)));
      s.unix_seconds.push_back(starts[series] + 3600 * i + (i % 4) * 60);
      s.series_ids.push_back(series);
      ++s.rows;
    }
  }
  return s;
}

TEST_CASE("FillBatch records are BuildInputRecords' raw records standardised per series",
          "[unit][dataset]") {
  const ModelConfig model = CovariateModel();
  REQUIRE(ValidateModelConfig(model).ok());
  v1::DataConfig data;
  data.set_validation_fraction(0.3f);
  auto options = OptionsFromConfig(data, model);
  REQUIRE(options.ok());
  CHECK(options->future_indices == FutureFeatureIndices(model));
  CHECK(options->series_index);
  const Series raw = CovariateSeries();
  auto d = CreateOk(raw, *options);

  const int64_t T = 4, P = 3, Fin = 3, F = NumFeatures(model), Fk = NumFutureFeatures(model);
  const int64_t R = InputRecordFloats(model);
  REQUIRE(F == 7);
  REQUIRE(Fk == 5);
  REQUIRE(d->num_features() == F);
  REQUIRE(d->record_floats() == R);
  CHECK(d->feature_names() == FeatureColumnNames(model));
  REQUIRE(d->mean().size() == static_cast<size_t>(2 * F));
  // Calendar columns are standardised like the others: hour of day varies on hourly rows.
  CHECK(d->std()[Fin] != 1.0f);
  CHECK(d->static_values() == std::vector<float>{-1, 1});

  const std::vector<int> future = FutureFeatureIndices(model);
  for (const Split split : {Split::kTrain, Split::kValidation}) {
    const int64_t n = d->num_windows(split);
    REQUIRE(n > 2);
    std::vector<int64_t> ids(n);
    std::iota(ids.begin(), ids.end(), int64_t{0});
    std::vector<float> x(n * R), y(n * P);
    REQUIRE(d->FillBatch(split, ids, absl::MakeSpan(x), absl::MakeSpan(y)).ok());

    // What a request for the same windows carries, raw.
    std::vector<float> window(n * T * Fin), future_raw(n * P);
    std::vector<int64_t> times(n * (T + P));
    std::vector<int32_t> series(n);
    for (int64_t w = 0; w < n; ++w) {
      const int64_t start = d->WindowStartRow(split, w);
      series[w] = raw.series_of(start);
      for (int64_t t = 0; t < T + P; ++t) {
        times[w * (T + P) + t] = raw.unix_seconds[start + t];
        if (t < T) {
          for (int64_t f = 0; f < Fin; ++f) window[(w * T + t) * Fin + f] = raw.at(start + t, f);
        } else {
          future_raw[w * P + (t - T)] = raw.at(start + t, 1);  // promo
        }
      }
    }
    RequestWindows request;
    request.batch = n;
    request.window = window.data();
    request.future = future_raw.data();
    request.times = times.data();
    request.series = series.data();
    std::vector<float> records(n * R);
    REQUIRE(BuildInputRecords(model, request, records.data()).ok());

    const auto standardise = [&](float value, int s, int64_t column) {
      const float mean = d->mean()[s * F + column], scale = d->std()[s * F + column];
      return static_cast<float>((static_cast<double>(value) - mean) / scale);
    };
    for (int64_t w = 0; w < n; ++w) {
      const int s = series[w];
      const float* want = records.data() + w * R;
      const float* got = x.data() + w * R;
      CAPTURE(split == Split::kTrain, w, s);
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t f = 0; f < F; ++f) {
          CAPTURE(t, f);
          CHECK(got[t * F + f] == standardise(want[t * F + f], s, f));
        }
      }
      for (int64_t p = 0; p < P; ++p) {
        for (int64_t k = 0; k < Fk; ++k) {
          CAPTURE(p, k);
          const int64_t at = T * F + p * Fk + k;
          CHECK(got[at] == standardise(want[at], s, future[k]));
        }
      }
      CHECK(got[R - 1] == want[R - 1]);
      CHECK(got[R - 1] == static_cast<float>(s));
      const int64_t start = d->WindowStartRow(split, w);
      for (int64_t p = 0; p < P; ++p) {
        CHECK(y[w * P + p] == standardise(raw.at(start + T + p, 0), s, 0));
      }
    }
  }

  // Calendar features need every row's time.
  Series no_times = raw;
  no_times.unix_seconds.clear();
  RequireStatus(WindowedDataset::Create(no_times, *options).status(),
                absl::StatusCode::kInvalidArgument, "calendar features need every row's time");
}

}  // namespace
}  // namespace forecastd
