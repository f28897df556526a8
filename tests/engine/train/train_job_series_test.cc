// TrainJob on several series with covariates, end to end: a stacked CSV with a series column, a
// future-known covariate, a calendar feature and a static covariate trains and publishes a
// model whose config names the series and whose weights hold per-series normaliser tables and
// the standardised static values, and which forecasts from an input record; the series map by
// name (fine-tuning, a config that lists them), and unknown or missing series are refused.
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/reference_backend.h"
#include "engine/models/input_record.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "engine/train/train_job.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using data_test::RequireStatus;
using data_test::SmallModel;
using data_test::TempDir;
using data_test::WriteFile;

constexpr int64_t kRows = 60;           // per series
constexpr int64_t kStart = 1704067200;  // 2024-01-01T00:00Z

// One series' hourly rows: a daily load cycle around `level`, a promotion every fifth hour
// that lifts the load, and the series' capacity.
struct Row {
  int64_t time;
  float load, promo;
};
std::vector<Row> Hourly(float level, int64_t phase) {
  std::vector<Row> rows;
  for (int64_t i = 0; i < kRows; ++i) {
    const float promo = (i + phase) % 5 == 0 ? 1.0f : 0.0f;
    const float hour = static_cast<float>(i % 24);
    rows.push_back({kStart + 3600 * i,
                    level + 3.0f * std::sin(hour * 0.2618f) + 2.0f * promo +
                        0.1f * std::sin(12.9898f * static_cast<float>(i)),
                    promo});
  }
  return rows;
}

// "south" first, so the series are ["south", "north"] in order of first appearance.
std::string StackedCsv(const std::vector<std::string>& names) {
  std::string csv = "time,region,load,promo,capacity\n";
  for (size_t s = 0; s < names.size(); ++s) {
    const float level = 20.0f + 15.0f * static_cast<float>(s);
    for (const Row& row : Hourly(level, static_cast<int64_t>(s))) {
      absl::StrAppend(&csv, row.time, ",", names[s], ",", row.load, ",", row.promo, ",",
                      100 * (s + 1), "\n");
    }
  }
  return csv;
}

ModelConfig CovariateLstm() {
  ModelConfig model = SmallModel(8, 2, {"load", "promo"}, {"load"});
  model.set_name("regions");
  model.mutable_lstm()->set_hidden_size(8);
  model.mutable_covariates()->add_future("promo");
  model.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  model.mutable_covariates()->add_static_features("capacity");
  return model;
}

TrainJobOptions Options(Backend* backend, const std::filesystem::path& dir,
                        const ModelConfig& model, const std::string& csv) {
  TrainJobOptions o;
  o.model = model;
  o.training.mutable_data()->set_csv_path(csv);
  o.training.mutable_data()->set_timestamp_column("time");
  o.training.mutable_data()->set_series_column("region");
  o.training.set_epochs(2);
  o.training.set_batch_size(16);
  o.training.set_seed(3);
  o.training.mutable_optimizer()->set_learning_rate(1e-2f);
  o.model_dir = (dir / model.name()).string();
  o.data_dir = dir;
  o.backend = backend;
  o.publish = false;
  return o;
}

std::unique_ptr<TrainJob> CreateOk(const TrainJobOptions& options) {
  auto job = TrainJob::Create(options);
  CAPTURE(job.status().ToString());
  REQUIRE(job.ok());
  return *std::move(job);
}

TrainResult RunOk(TrainJob& job) {
  auto result = job.Run();
  CAPTURE(result.status().ToString());
  REQUIRE(result.ok());
  return *result;
}

TEST_CASE("A job on stacked series with covariates publishes per-series tables that forecast",
          "[unit][train]") {
  TempDir dir;
  ReferenceBackend backend;
  WriteFile(dir.path / "regions.csv", StackedCsv({"south", "north"}));
  TrainJobOptions options = Options(&backend, dir.path, CovariateLstm(), "regions.csv");
  options.publish = true;
  auto job = CreateOk(options);
  const int64_t F = 4, S = 2;  // load, promo, hour_of_day_sin, hour_of_day_cos
  const Forecaster& model = job->model();
  REQUIRE(model.num_features() == F);
  REQUIRE(model.num_series() == S);
  // T * F + P * Fk + the series index: 8 * 4 + 2 * 3 + 1.
  REQUIRE(model.input_floats() == 39);
  REQUIRE(job->dataset().record_floats() == model.input_floats());
  // 60 rows per series, fraction 0.2: 48 + 12; windows of 10 rows: 39 + 3 per series.
  CHECK(job->dataset().num_train_windows() == 2 * 39);
  CHECK(job->dataset().num_validation_windows() == 2 * 3);

  const TrainResult result = RunOk(*job);
  REQUIRE(result.version == 1);
  REQUIRE(result.train_losses.size() == 2);
  REQUIRE(std::isfinite(result.validation_losses.back()));

  // The published config names the series in order of first appearance.
  const auto config = ReadModelConfig((dir.path / "regions" / kModelConfigFile).string());
  REQUIRE(config.ok());
  CHECK(std::vector<std::string>(config->series().begin(), config->series().end()) ==
        std::vector<std::string>{"south", "north"});

  // The weights hold (S, F) normaliser tables, each series' fitted on its training rows, and
  // the static covariate standardised over the series (100 and 200: -1 and 1).
  const auto file = SafetensorsFile::Read((dir.path / "regions" / "1" / kWeightsFile).string());
  REQUIRE(file.ok());
  const auto mean = file->ReadF32("normalizer.mean", std::vector<int64_t>{S, F});
  const auto stdev = file->ReadF32("normalizer.std", std::vector<int64_t>{S, F});
  const auto statics = file->ReadF32("series.static", std::vector<int64_t>{S, 1});
  CAPTURE(mean.status().ToString(), statics.status().ToString());
  REQUIRE(mean.ok());
  REQUIRE(stdev.ok());
  REQUIRE(statics.ok());
  CHECK(*mean == job->dataset().mean());
  CHECK(*stdev == job->dataset().std());
  CHECK(*statics == std::vector<float>{-1, 1});
  CHECK(std::abs((*mean)[0] - 20.0f) < 2.0f);  // south's load
  CHECK(std::abs((*mean)[F] - 35.0f) < 2.0f);  // north's

  // The published version forecasts from raw input records of either series.
  auto loaded = LoadForecaster(options.model_dir, 1);
  REQUIRE(loaded.ok());
  const Forecaster& published = **loaded;
  const int64_t T = 8, P = 2, B = 2;
  std::vector<float> window, future;
  std::vector<int64_t> times;
  const std::vector<int32_t> series = {0, 1};
  for (int32_t s : series) {
    const std::vector<Row> rows = Hourly(20.0f + 15.0f * static_cast<float>(s), s);
    for (int64_t t = 0; t < T + P; ++t) {
      const Row& row = rows[static_cast<size_t>(kRows - T - P + t)];
      times.push_back(row.time);
      if (t < T) {
        window.push_back(row.load);
        window.push_back(row.promo);
      } else {
        future.push_back(row.promo);
      }
    }
  }
  RequestWindows request;
  request.batch = B;
  request.window = window.data();
  request.future = future.data();
  request.times = times.data();
  request.series = series.data();
  std::vector<float> records(static_cast<size_t>(B * published.input_floats()));
  REQUIRE(BuildInputRecords(published.config(), request, records.data()).ok());
  std::vector<float> out(static_cast<size_t>(B * published.num_outputs()));
  Workspace ws;
  REQUIRE(published.Forward(backend, out.data(), records.data(), B, ws).ok());
  for (int64_t p = 0; p < P; ++p) {
    CAPTURE(p);
    CHECK(std::isfinite(out[p]));
    // Each forecast in its own series' range, de-standardised with that series' statistics.
    CHECK(std::abs(out[p] - 20.0f) < 8.0f);
    CHECK(std::abs(out[P + p] - 35.0f) < 8.0f);
  }
}

TEST_CASE("Series map by name: fine-tuning, a config that lists them, unknown and missing ones",
          "[unit][train]") {
  TempDir dir;
  ReferenceBackend backend;
  WriteFile(dir.path / "regions.csv", StackedCsv({"south", "north"}));
  WriteFile(dir.path / "north.csv", StackedCsv({"north"}));
  WriteFile(dir.path / "east.csv", StackedCsv({"north", "east"}));
  TrainJobOptions base = Options(&backend, dir.path, CovariateLstm(), "regions.csv");
  base.publish = true;
  base.training.set_epochs(1);
  {
    auto job = CreateOk(base);
    REQUIRE(RunOk(*job).version == 1);
  }
  const auto published = ReadModelConfig((dir.path / "regions" / kModelConfigFile).string());
  REQUIRE(published.ok());

  SECTION("fine-tuning on one of the series keeps its statistics and index") {
    TrainJobOptions tune = Options(&backend, dir.path, *published, "north.csv");
    tune.training.set_base_version(1);
    tune.training.set_epochs(1);
    auto job = CreateOk(tune);
    const WindowedDataset& data = job->dataset();
    REQUIRE(data.num_series() == 1);
    // north is the model's series 1: its records carry 1 and its statistics are the base's row.
    const float* mean = job->model().parameters().at("normalizer.mean");
    const int F = data.num_features();
    CHECK(data.mean() == std::vector<float>(mean + F, mean + 2 * F));
    const std::vector<int64_t> first = {0};
    std::vector<float> x(static_cast<size_t>(data.record_floats())), y(2);
    REQUIRE(data.FillBatch(Split::kTrain, first, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
    CHECK(x.back() == 1.0f);
    RunOk(*job);
  }
  SECTION("fine-tuning on a series the base version does not know") {
    TrainJobOptions tune = Options(&backend, dir.path, *published, "east.csv");
    tune.training.set_base_version(1);
    RequireStatus(TrainJob::Create(tune).status(), absl::StatusCode::kInvalidArgument,
                  "series 'east'");
  }
  SECTION("a config that lists the series keeps its order; the data's map onto it") {
    ModelConfig listed = CovariateLstm();
    listed.set_name("listed");
    listed.add_series("north");
    listed.add_series("south");
    auto job = CreateOk(Options(&backend, dir.path, listed, "regions.csv"));
    CHECK(job->model().config().series(0) == "north");
    const WindowedDataset& data = job->dataset();
    REQUIRE(data.series_names() == std::vector<std::string>{"south", "north"});
    // The data's series 0 (south) is the model's row 1.
    const int F = data.num_features();
    const float* mean = job->model().parameters().at("normalizer.mean");
    CHECK(std::vector<float>(mean + F, mean + 2 * F) ==
          std::vector<float>(data.mean().begin(), data.mean().begin() + F));
    const float* statics = job->model().parameters().at("series.static");
    CHECK(statics[0] == 1.0f);  // north's capacity, 200
    CHECK(statics[1] == -1.0f);
  }
  SECTION("a listed series without rows, or listed series without a series column") {
    ModelConfig listed = CovariateLstm();
    listed.add_series("south");
    listed.add_series("west");
    listed.add_series("north");
    RequireStatus(TrainJob::Create(Options(&backend, dir.path, listed, "regions.csv")).status(),
                  absl::StatusCode::kInvalidArgument, "series 'west' of model 'regions'");
    TrainJobOptions no_column = Options(&backend, dir.path, *published, "regions.csv");
    no_column.training.mutable_data()->clear_series_column();
    RequireStatus(TrainJob::Create(no_column).status(), absl::StatusCode::kInvalidArgument,
                  "set data.series_column");
  }
}

}  // namespace
}  // namespace forecastd
