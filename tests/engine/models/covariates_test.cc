// Models with covariates and series (ModelConfig.covariates, ModelConfig.series): their
// parameters, input records, the body's input rows, per-series statistics, the calendar features
// and BuildInputRecords. The maths against PyTorch is the golden cases' (lstm_covariates,
// transformer_series, gru_series); these tests pin the contracts around it.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/reference_backend.h"
#include "engine/models/forecaster.h"
#include "engine/models/input_record.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

// F = 3 features (load, temperature, price), T = 6, P = 3, targets price and load.
ModelConfig Base() {
  ModelConfig c;
  c.set_name("m");
  c.set_lookback(6);
  c.set_horizon(3);
  for (const char* f : {"load", "temperature", "price"}) c.add_feature_names(f);
  c.add_target_names("price");
  c.add_target_names("load");
  c.mutable_lstm()->set_hidden_size(4);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

ModelConfig WithCovariates() {
  ModelConfig c = Base();
  c.mutable_covariates()->add_future("temperature");
  c.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  c.mutable_covariates()->add_static_features("size");
  c.add_series("north");
  c.add_series("south");
  return c;
}

void FillRandom(ParameterArena& arena, uint32_t seed) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.5f, 0.5f);
  for (int64_t i = 0; i < arena.size(); ++i) arena.data()[i] = dist(gen);
  for (const ParameterSpec& spec : arena.specs()) {
    if (spec.name == "normalizer.std") {
      for (int64_t i = 0; i < spec.numel; ++i) arena.data()[spec.offset + i] = 0.5f + 0.1f * i;
    }
  }
}

std::vector<float> RandomVector(std::mt19937& gen, int64_t n, float lo, float hi) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

TEST_CASE("Covariates add calendar columns, future-known features and per-series tables",
          "[unit][model]") {
  const ModelConfig c = WithCovariates();
  REQUIRE(ValidateModelConfig(c).ok());
  REQUIRE(NumFeatures(c) == 5);
  REQUIRE(NumInputColumns(c) == 3);
  REQUIRE(FeatureColumnNames(c) == std::vector<std::string>{"load", "temperature", "price",
                                                            "hour_of_day_sin", "hour_of_day_cos"});
  REQUIRE(FutureFeatureIndices(c) == std::vector<int>{1, 3, 4});
  REQUIRE(NumFutureInputColumns(c) == 1);
  REQUIRE(InputRecordFloats(c) == 6 * 5 + 3 * 3 + 1);
  REQUIRE_FALSE(SupportsStateMode(c));
  auto model = Forecaster::Create(c).value();
  REQUIRE(model->input_floats() == 40);
  const ParameterArena& p = model->parameters();
  REQUIRE(p.Find("normalizer.mean").value()->shape == std::vector<int64_t>{2, 5});
  REQUIRE(p.Find("series.static").value()->shape == std::vector<int64_t>{2, 1});
  // The body reads T + P = 9 rows of F + static + flag = 7 columns.
  REQUIRE(p.Find("rnn.weight_ih_l0").value()->shape == std::vector<int64_t>{16, 7});
  REQUIRE_FALSE(Forecaster::IsTrainable(*p.Find("series.static").value()));
  REQUIRE(model->SupportsStatefulTraining().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Config validation names what is wrong with covariates and series", "[unit][model]") {
  const auto invalid = [](const ModelConfig& c, const std::string& part) {
    const absl::Status s = ValidateModelConfig(c);
    INFO(s.ToString());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(s.message().find(part) != std::string::npos);
  };
  ModelConfig c = Base();
  c.mutable_covariates()->add_future("wind");
  invalid(c, "'wind' is not one of the feature_names");
  c = Base();
  c.mutable_covariates()->add_future("price");
  invalid(c, "is a target");
  c = Base();
  c.mutable_covariates()->add_static_features("load");
  invalid(c, "one value per series");
  c = Base();
  c.mutable_covariates()->add_calendar(v1::CALENDAR_DAY_OF_WEEK);
  c.mutable_covariates()->add_calendar(v1::CALENDAR_DAY_OF_WEEK);
  invalid(c, "repeats");
  c = Base();
  c.mutable_covariates()->add_calendar(v1::CALENDAR_UNSPECIFIED);
  invalid(c, "is not a calendar feature");
  c = Base();
  c.set_feature_names(0, "hour_of_day_sin");
  c.set_target_names(1, "hour_of_day_sin");
  c.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  invalid(c, "both in feature_names and a calendar feature");
  c = Base();
  c.add_series(std::string("a"));
  c.add_series(std::string("a"));
  invalid(c, "series 'a' repeats");
  c = Base();
  c.add_series(std::string("a"));
  c.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  invalid(c, "STREAM_MODE_STATE is not available");
  // Static covariates without the series: a valid config to train, but no model yet.
  c = Base();
  c.mutable_covariates()->add_static_features("size");
  REQUIRE(ValidateModelConfig(c).ok());
  REQUIRE(Forecaster::Create(c).status().code() == absl::StatusCode::kInvalidArgument);
}

// Forward on raw records is ForwardTrain on the same records standardised by each window's
// series' statistics, then de-standardised by them: the two paths read records the same way.
TEST_CASE("Forward on records is ForwardTrain on standardised records, per series",
          "[unit][model]") {
  for (const bool window_scaling : {false, true}) {
    CAPTURE(window_scaling);
    ModelConfig c = WithCovariates();
    if (window_scaling) {
      c.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
      c.mutable_window_scaling()->set_affine(true);
      c.mutable_window_scaling()->set_forecast_change(true);
    }
    auto model = Forecaster::Create(c).value();
    FillRandom(model->parameters(), 7);
    const Forecaster& m = *model;
    const int64_t B = 4, T = 6, F = 5, P = 3, Fk = 3, R = m.input_floats();
    std::mt19937 gen(3);
    std::vector<float> raw = RandomVector(gen, B * R, -2.0f, 2.0f);
    for (int64_t b = 0; b < B; ++b) raw[b * R + R - 1] = static_cast<float>(b % 2);
    ReferenceBackend backend;
    Workspace workspace;
    std::vector<float> out(static_cast<size_t>(B * m.num_outputs()));
    REQUIRE(m.Forward(backend, out.data(), raw.data(), B, workspace).ok());

    const float* mean = m.parameters().at("normalizer.mean");
    const float* std = m.parameters().at("normalizer.std");
    const std::vector<int> future = FutureFeatureIndices(c);
    std::vector<float> rec = raw;
    for (int64_t b = 0; b < B; ++b) {
      const int64_t s = b % 2;
      for (int64_t i = 0; i < T * F; ++i) {
        float& v = rec[b * R + i];
        v = (v - mean[s * F + i % F]) / std[s * F + i % F];
      }
      for (int64_t i = 0; i < P * Fk; ++i) {
        const int j = future[static_cast<size_t>(i % Fk)];
        float& v = rec[b * R + T * F + i];
        v = (v - mean[s * F + j]) / std[s * F + j];
      }
    }
    std::vector<float> yn(out.size());
    TrainingTape tape;
    REQUIRE(m.ForwardTrain(backend, yn.data(), rec.data(), B, tape).ok());
    const int64_t K = 2;
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t i = 0; i < P * K; ++i) {
        const int f = m.target_features()[static_cast<size_t>(i % K)];
        const int64_t s = b % 2;
        const float want = yn[b * P * K + i] * std[s * F + f] + mean[s * F + f];
        REQUIRE(std::abs(out[b * P * K + i] - want) <= 1e-5f * std::max(1.0f, std::abs(want)));
      }
    }
    // Backward runs through the record path and leaves the data's tables untrained.
    std::vector<float> dout(yn.size(), 0.1f), grads(static_cast<size_t>(m.parameters().size()));
    REQUIRE(m.Backward(backend, grads.data(), dout.data(), tape).ok());
    const ParameterSpec& table = *m.parameters().Find("series.static").value();
    for (int64_t i = 0; i < table.numel; ++i) REQUIRE(grads[table.offset + i] == 0.0f);
    if (window_scaling) {
      // The future-known column's affine parameters are not used, so get no gradient.
      const ParameterSpec& gamma = *m.parameters().Find("window_scaling.weight").value();
      REQUIRE(grads[gamma.offset + 1] == 0.0f);
      REQUIRE(grads[gamma.offset + 0] != 0.0f);
    }
  }
}

TEST_CASE("A forecast moves with the future-known values and the series", "[unit][model]") {
  auto model = Forecaster::Create(WithCovariates()).value();
  FillRandom(model->parameters(), 11);
  const Forecaster& m = *model;
  const int64_t R = m.input_floats(), n = m.num_outputs();
  std::mt19937 gen(5);
  std::vector<float> rec = RandomVector(gen, 3 * R, -1.0f, 1.0f);
  rec[R - 1] = 0.0f;
  // Window 1: window 0 with other future values; window 2: window 0 of the other series.
  std::copy(rec.begin(), rec.begin() + R, rec.begin() + R);
  std::copy(rec.begin(), rec.begin() + R, rec.begin() + 2 * R);
  rec[R + 6 * 5] += 1.0f;
  rec[3 * R - 1] = 1.0f;
  ReferenceBackend backend;
  Workspace workspace;
  std::vector<float> out(static_cast<size_t>(3 * n));
  REQUIRE(m.Forward(backend, out.data(), rec.data(), 3, workspace).ok());
  const auto differs = [&](int64_t a, int64_t b) {
    double d = 0.0;
    for (int64_t i = 0; i < n; ++i)
      d = std::max(d, std::abs(double{out[a * n + i]} - out[b * n + i]));
    return d > 1e-4;
  };
  REQUIRE(differs(0, 1));
  REQUIRE(differs(0, 2));
  // NeutralWindows are records of the first series that forecast finite values.
  const std::vector<float> neutral = m.NeutralWindows(2);
  REQUIRE(static_cast<int64_t>(neutral.size()) == 2 * R);
  REQUIRE(neutral[R - 1] == 0.0f);
  REQUIRE(m.Forward(backend, out.data(), neutral.data(), 2, workspace).ok());
  for (int64_t i = 0; i < 2 * n; ++i) REQUIRE(std::isfinite(out[i]));
}

TEST_CASE("Calendar phases follow the UTC calendar", "[unit][model]") {
  // 2000-06-05T12:00:00Z, a Monday: 960206400.
  const int64_t monday_noon = 960206400;
  REQUIRE(CalendarPhase(v1::CALENDAR_HOUR_OF_DAY, monday_noon) == 0.5);
  REQUIRE(std::abs(CalendarPhase(v1::CALENDAR_DAY_OF_WEEK, monday_noon) - 0.5 / 7) < 1e-12);
  REQUIRE(std::abs(CalendarPhase(v1::CALENDAR_HOUR_OF_WEEK, monday_noon + 86400 * 6) - 6.5 / 7) <
          1e-12);
  // 2000 is a leap year: 1 January 00:00 is 0, 31 December 00:00 is 365 / 366.
  REQUIRE(CalendarPhase(v1::CALENDAR_DAY_OF_YEAR, 946684800) == 0.0);
  REQUIRE(std::abs(CalendarPhase(v1::CALENDAR_DAY_OF_YEAR, 978220800) - 365.0 / 366) < 1e-12);
  // Before the epoch: 1969-12-31T18:00Z is 0.75 of its day, a Wednesday (2 days after Monday).
  REQUIRE(CalendarPhase(v1::CALENDAR_HOUR_OF_DAY, -6 * 3600) == 0.75);
  REQUIRE(std::abs(CalendarPhase(v1::CALENDAR_DAY_OF_WEEK, -6 * 3600) - 2.75 / 7) < 1e-12);
  ModelConfig c = Base();
  c.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  float v[2];
  CalendarValues(c, monday_noon + 6 * 3600, v);  // 18:00: a quarter before the next midnight
  REQUIRE(std::abs(v[0] - -1.0f) < 1e-6f);
  REQUIRE(std::abs(v[1]) < 1e-6f);
}

TEST_CASE("BuildInputRecords lays out window, calendar, future values and series",
          "[unit][model]") {
  const ModelConfig c = WithCovariates();
  const int64_t T = 6, P = 3, F = 5, Fk = 3, R = InputRecordFloats(c);
  std::vector<float> window(static_cast<size_t>(T * 3)), future(static_cast<size_t>(P));
  for (size_t i = 0; i < window.size(); ++i) window[i] = static_cast<float>(i);
  for (size_t i = 0; i < future.size(); ++i) future[i] = 100.0f + static_cast<float>(i);
  std::vector<int64_t> times(static_cast<size_t>(T + P));
  for (int64_t i = 0; i < T + P; ++i) times[i] = 960206400 + i * 1800;
  const int32_t series = 1;
  std::vector<float> rec(static_cast<size_t>(R), -1.0f);
  REQUIRE(BuildInputRecords(c, {1, window.data(), future.data(), times.data(), &series}, rec.data())
              .ok());
  float cal[2];
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t f = 0; f < 3; ++f) REQUIRE(rec[t * F + f] == window[t * 3 + f]);
    CalendarValues(c, times[t], cal);
    REQUIRE(rec[t * F + 3] == cal[0]);
    REQUIRE(rec[t * F + 4] == cal[1]);
  }
  for (int64_t p = 0; p < P; ++p) {
    REQUIRE(rec[T * F + p * Fk] == future[p]);
    CalendarValues(c, times[T + p], cal);
    REQUIRE(rec[T * F + p * Fk + 1] == cal[0]);
    REQUIRE(rec[T * F + p * Fk + 2] == cal[1]);
  }
  REQUIRE(rec[R - 1] == 1.0f);

  // What is missing or wrong is named.
  const auto fails = [&](const RequestWindows& r, const std::string& part) {
    const absl::Status s = BuildInputRecords(c, r, rec.data());
    INFO(s.ToString());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(s.message().find(part) != std::string::npos);
  };
  fails({1, window.data(), nullptr, times.data(), &series}, "future-known covariates");
  fails({1, window.data(), future.data(), nullptr, &series}, "calendar features");
  fails({1, window.data(), future.data(), times.data(), nullptr}, "name the series");
  const int32_t bad = 2;
  fails({1, window.data(), future.data(), times.data(), &bad}, "series index 2");
  times[4] = times[3];
  fails({1, window.data(), future.data(), times.data(), &series}, "must increase");
  REQUIRE(SeriesIndex(c, "south").value() == 1);
  const auto unknown = SeriesIndex(c, "west");
  REQUIRE(unknown.status().code() == absl::StatusCode::kNotFound);
  REQUIRE(unknown.status().message().find("'north', 'south'") != std::string::npos);
}

}  // namespace
}  // namespace forecastd
