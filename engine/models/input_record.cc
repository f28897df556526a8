#include "engine/models/input_record.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "absl/strings/str_cat.h"

namespace forecastd {

namespace {

// Days since 1970-01-01 of a civil date (proleptic Gregorian), and back (H. Hinnant's
// algorithms).
int64_t FloorDiv(int64_t a, int64_t b) { return a / b - ((a % b != 0) && ((a < 0) != (b < 0))); }

int64_t DaysFromCivil(int64_t y, int64_t m, int64_t d) {
  y -= m <= 2;
  const int64_t era = FloorDiv(y, 400);
  const int64_t yoe = y - era * 400;
  const int64_t doy = (153 * (m + (m > 2 ? -3 : 9)) + 2) / 5 + d - 1;
  const int64_t doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
  return era * 146097 + doe - 719468;
}

int64_t YearOfDays(int64_t z) {
  z += 719468;
  const int64_t era = FloorDiv(z, 146097);
  const int64_t doe = z - era * 146097;
  const int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
  const int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
  const int64_t mp = (5 * doy + 2) / 153;
  const int64_t m = mp + (mp < 10 ? 3 : -9);
  return yoe + era * 400 + (m <= 2);
}

}  // namespace

double CalendarPhase(v1::CalendarFeature feature, int64_t unix_seconds) {
  constexpr int64_t kDay = 86400, kWeek = 7 * kDay;
  // 1970-01-01 was a Thursday: Monday 00:00 is 3 days earlier.
  const int64_t since_monday = unix_seconds + 3 * kDay;
  switch (feature) {
    case v1::CALENDAR_HOUR_OF_DAY:
      return static_cast<double>(unix_seconds - FloorDiv(unix_seconds, kDay) * kDay) / kDay;
    case v1::CALENDAR_DAY_OF_WEEK:
    case v1::CALENDAR_HOUR_OF_WEEK:
      return static_cast<double>(since_monday - FloorDiv(since_monday, kWeek) * kWeek) / kWeek;
    case v1::CALENDAR_DAY_OF_YEAR: {
      const int64_t year = YearOfDays(FloorDiv(unix_seconds, kDay));
      const int64_t start = DaysFromCivil(year, 1, 1) * kDay;
      const int64_t end = DaysFromCivil(year + 1, 1, 1) * kDay;
      return static_cast<double>(unix_seconds - start) / static_cast<double>(end - start);
    }
    default:
      return 0.0;
  }
}

void CalendarValues(const ModelConfig& config, int64_t unix_seconds, float* out) {
  for (int i = 0; i < config.covariates().calendar_size(); ++i) {
    const double angle =
        2.0 * std::numbers::pi * CalendarPhase(config.covariates().calendar(i), unix_seconds);
    out[2 * i] = static_cast<float>(std::sin(angle));
    out[2 * i + 1] = static_cast<float>(std::cos(angle));
  }
}

absl::StatusOr<int> SeriesIndex(const ModelConfig& config, absl::string_view name) {
  for (int s = 0; s < config.series_size(); ++s) {
    if (config.series(s) == name) return s;
  }
  std::string known;
  for (int s = 0; s < std::min(config.series_size(), 5); ++s) {
    absl::StrAppend(&known, s > 0 ? ", " : "", "'", config.series(s), "'");
  }
  if (config.series_size() > 5) absl::StrAppend(&known, ", ...");
  if (config.series_size() == 0) {
    return absl::NotFoundError(absl::StrCat("model '", config.name(),
                                            "' was trained on one series and names none; send "
                                            "no series"));
  }
  return absl::NotFoundError(absl::StrCat("model '", config.name(), "' knows no series '", name,
                                          "' (its ", config.series_size(), " series: ", known,
                                          ")"));
}

absl::Status BuildInputRecords(const ModelConfig& config, const RequestWindows& request,
                               float* records) {
  const int64_t B = request.batch, T = config.lookback(), P = config.horizon();
  const int64_t Fin = NumInputColumns(config), F = NumFeatures(config);
  const int64_t FkIn = NumFutureInputColumns(config), Fk = NumFutureFeatures(config);
  const int64_t C = F - Fin, R = InputRecordFloats(config);
  const bool times = NeedsTimestamps(config);
  if (request.window == nullptr) return absl::InvalidArgumentError("no input windows");
  if (FkIn > 0 && request.future == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name(), "' has future-known covariates: send their values ",
                     "for the ", P, " forecast steps (", FkIn, " per step)"));
  }
  if (times && request.times == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat("model '", config.name(), "' has calendar features: send the times of the ", T,
                     " window rows and the ", P, " forecast steps (Unix seconds)"));
  }
  if (NumSeries(config) > 0 && request.series == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("model '", config.name(), "' was trained on ",
                                                   NumSeries(config),
                                                   " series: name the series of each window"));
  }
  for (int64_t b = 0; b < B; ++b) {
    float* record = records + b * R;
    const int64_t* t = times ? request.times + b * (T + P) : nullptr;
    if (times) {
      for (int64_t i = 1; i < T + P; ++i) {
        if (t[i] <= t[i - 1]) {
          return absl::InvalidArgumentError(absl::StrCat("window ", b,
                                                         ": its times must increase (time ", i,
                                                         " is ", t[i], ", after ", t[i - 1], ")"));
        }
      }
    }
    for (int64_t r = 0; r < T; ++r) {
      const float* row = request.window + (b * T + r) * Fin;
      std::copy(row, row + Fin, record + r * F);
      if (C > 0) CalendarValues(config, t[r], record + r * F + Fin);
    }
    float* future = record + T * F;
    for (int64_t p = 0; p < P && Fk > 0; ++p) {
      if (FkIn > 0) {
        const float* row = request.future + (b * P + p) * FkIn;
        std::copy(row, row + FkIn, future + p * Fk);
      }
      if (C > 0) CalendarValues(config, t[T + p], future + p * Fk + FkIn);
    }
    if (NumSeries(config) > 0) {
      const int32_t s = request.series[b];
      if (s < 0 || s >= NumSeries(config)) {
        return absl::InvalidArgumentError(absl::StrCat("window ", b, ": series index ", s,
                                                       " is not in [0, ", NumSeries(config), ")"));
      }
      record[R - 1] = static_cast<float>(s);
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd
