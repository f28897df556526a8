#include "engine/train/data_source.h"

#include <filesystem>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using data_test::RequireStatus;
using data_test::SmallModel;
using data_test::TempDir;
using data_test::WriteFile;

namespace fs = std::filesystem;

// ---------------------------------------------------------------------------------------------
// Data paths and sources

TEST_CASE("ResolveDataPath keeps csv_path inside the data directory", "[unit][dataset]") {
  TempDir tmp;
  const fs::path data = tmp.path / "data";
  fs::create_directories(data / "sub");
  WriteFile(data / "sub" / "ok.csv", "a\n1\n");
  WriteFile(tmp.path / "secret.csv", "a\n1\n");
  fs::create_symlink(tmp.path / "secret.csv", data / "link.csv");
  fs::create_directory_symlink(tmp.path, data / "up");
  fs::create_symlink(data / "sub" / "ok.csv", data / "inner.csv");
  const fs::path canonical_ok = fs::canonical(data / "sub" / "ok.csv");

  SECTION("a plain relative path, and a symlink that stays inside") {
    const auto ok = ResolveDataPath(data, "sub/ok.csv");
    REQUIRE(ok.ok());
    CHECK(*ok == canonical_ok);
    const auto dotted = ResolveDataPath(data, "./sub/./ok.csv");
    REQUIRE(dotted.ok());
    CHECK(*dotted == canonical_ok);
    const auto inner = ResolveDataPath(data, "inner.csv");
    REQUIRE(inner.ok());
    CHECK(*inner == canonical_ok);
    // Out through a symlink and back in: the file itself is inside, so it is allowed.
    const auto round_trip = ResolveDataPath(data, "up/data/sub/ok.csv");
    REQUIRE(round_trip.ok());
    CHECK(*round_trip == canonical_ok);
    // A missing file is the reader's business.
    CHECK(ResolveDataPath(data, "sub/later.csv").ok());
  }
  SECTION("rejections") {
    const auto k = absl::StatusCode::kInvalidArgument;
    RequireStatus(ResolveDataPath(data, "").status(), k, "empty");
    RequireStatus(ResolveDataPath(data, (tmp.path / "secret.csv").string()).status(), k,
                  "must be relative");
    RequireStatus(ResolveDataPath(data, "/etc/passwd").status(), k, "must be relative");
    RequireStatus(ResolveDataPath(data, "../secret.csv").status(), k, "'..'");
    RequireStatus(ResolveDataPath(data, "sub/../sub/ok.csv").status(), k, "'..'");
    RequireStatus(ResolveDataPath(data, "sub/..").status(), k, "'..'");
    RequireStatus(ResolveDataPath(data, "link.csv").status(), k, "outside the data directory");
    RequireStatus(ResolveDataPath(data, "up/secret.csv").status(), k, "outside the data directory");
    RequireStatus(ResolveDataPath(data, ".").status(), k, "data directory itself");
    RequireStatus(ResolveDataPath(data, std::string("a\0b", 3)).status(), k, "NUL");
  }
  SECTION("a missing data directory") {
    RequireStatus(ResolveDataPath(tmp.path / "nope", "a.csv").status(), absl::StatusCode::kNotFound,
                  "data directory");
  }
}

TEST_CASE("LoadSeries reads csv_path or inline_series for the model's features",
          "[unit][dataset]") {
  TempDir tmp;
  fs::create_directories(tmp.path / "sub");
  WriteFile(tmp.path / "sub" / "prices.csv", "ts,volume,close,open\n1,10,100,99\n2,20,101,100\n");
  WriteFile(tmp.path / "sub" / "bad.csv", "ts,close,open\n1,100,99\n2,x,100\n");
  const ModelConfig model = SmallModel(1, 1, {"open", "close"}, {"close"});

  v1::DataConfig data;
  data.set_csv_path("sub/prices.csv");
  data.set_timestamp_column("ts");
  const auto s = LoadSeries(data, model, tmp.path);
  REQUIRE(s.ok());
  CHECK(s->column_names == std::vector<std::string>{"open", "close"});
  CHECK(s->values == std::vector<float>{99, 100, 100, 101});
  CHECK(s->timestamps == std::vector<std::string>{"1", "2"});

  data.set_csv_path("sub/bad.csv");
  RequireStatus(LoadSeries(data, model, tmp.path).status(), absl::StatusCode::kInvalidArgument,
                "sub/bad.csv: line 3: column 'close'");
  data.set_csv_path("sub/none.csv");
  RequireStatus(LoadSeries(data, model, tmp.path).status(), absl::StatusCode::kNotFound,
                "'sub/none.csv': no such file");
  data.set_csv_path("../x.csv");
  RequireStatus(LoadSeries(data, model, tmp.path).status(), absl::StatusCode::kInvalidArgument,
                "'..'");

  v1::DataConfig inline_data;
  inline_data.mutable_inline_series()->set_rows(2);
  for (float v : {1.0f, 2.0f, 3.0f, 4.0f}) inline_data.mutable_inline_series()->add_values(v);
  const auto inl = LoadSeries(inline_data, model, tmp.path);
  REQUIRE(inl.ok());
  CHECK(inl->column_names == std::vector<std::string>{"open", "close"});
  CHECK(inl->values == std::vector<float>{1, 2, 3, 4});
  inline_data.set_timestamp_column("ts");
  RequireStatus(LoadSeries(inline_data, model, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "timestamp_column");

  RequireStatus(LoadSeries(v1::DataConfig(), model, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "no source");
}

TEST_CASE("LoadSeries reads the series column, static covariates and times for calendars",
          "[unit][dataset]") {
  TempDir tmp;
  WriteFile(tmp.path / "stacked.csv",
            "ts,id,open,close,cap\n"
            "2024-01-01T00:00Z,a,1,2,5\n2024-01-01T01:00Z,a,3,4,5\n"
            "2024-01-01T00:00Z,b,5,6,9\n2024-01-01T01:00Z,b,7,8,9\n");
  ModelConfig model = SmallModel(1, 1, {"open", "close"}, {"close"});
  model.mutable_covariates()->add_calendar(v1::CALENDAR_HOUR_OF_DAY);
  model.mutable_covariates()->add_static_features("cap");

  v1::DataConfig data;
  data.set_csv_path("stacked.csv");
  data.set_timestamp_column("ts");
  data.set_series_column("id");
  const auto s = LoadSeries(data, model, tmp.path);
  CAPTURE(s.status().ToString());
  REQUIRE(s.ok());
  // Calendar columns are not read: the dataset computes them from the times.
  CHECK(s->column_names == std::vector<std::string>{"open", "close"});
  CHECK(s->values == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  CHECK(s->series_names == std::vector<std::string>{"a", "b"});
  CHECK(s->series_ids == std::vector<int32_t>{0, 0, 1, 1});
  CHECK(s->static_values == std::vector<float>{5, 9});
  CHECK(s->unix_seconds == std::vector<int64_t>{1704067200, 1704070800, 1704067200, 1704070800});

  v1::DataConfig no_times = data;
  no_times.clear_timestamp_column();
  RequireStatus(LoadSeries(no_times, model, tmp.path).status(), absl::StatusCode::kInvalidArgument,
                "calendar features");
  v1::DataConfig one_series = data;
  one_series.clear_series_column();
  RequireStatus(LoadSeries(one_series, model, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "set data.series_column");

  // Inline values hold one series without times.
  v1::DataConfig inline_data;
  inline_data.mutable_inline_series()->set_rows(1);
  for (float v : {1.0f, 2.0f}) inline_data.mutable_inline_series()->add_values(v);
  const ModelConfig plain = SmallModel(1, 1, {"open", "close"}, {"close"});
  REQUIRE(LoadSeries(inline_data, plain, tmp.path).ok());
  v1::DataConfig inline_series = inline_data;
  inline_series.set_series_column("id");
  RequireStatus(LoadSeries(inline_series, plain, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "series_column applies to csv_path only");
  ModelConfig calendar = plain;
  calendar.mutable_covariates()->add_calendar(v1::CALENDAR_DAY_OF_WEEK);
  RequireStatus(LoadSeries(inline_data, calendar, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "calendar features");
  ModelConfig statics = plain;
  statics.mutable_covariates()->add_static_features("cap");
  RequireStatus(LoadSeries(inline_data, statics, tmp.path).status(),
                absl::StatusCode::kInvalidArgument, "static covariates");
}

TEST_CASE("SeriesFromInline checks the value count and finiteness", "[unit][dataset]") {
  const std::vector<std::string> features = {"a", "b"};
  v1::InlineSeries in;
  in.set_rows(2);
  for (float v : {1.0f, 2.0f, 3.0f}) in.add_values(v);
  RequireStatus(SeriesFromInline(in, features).status(), absl::StatusCode::kInvalidArgument,
                "3 values; expected rows * features = 2 * 2");
  in.add_values(NAN);
  RequireStatus(SeriesFromInline(in, features).status(), absl::StatusCode::kInvalidArgument,
                "value 3 (row 1, feature 'b') is nan");
  in.set_values(3, INFINITY);
  RequireStatus(SeriesFromInline(in, features).status(), absl::StatusCode::kInvalidArgument,
                "is inf");
  in.set_values(3, 4.0f);
  REQUIRE(SeriesFromInline(in, features).ok());
  in.set_rows(0);
  RequireStatus(SeriesFromInline(in, features).status(), absl::StatusCode::kInvalidArgument,
                "at least 1");
  in.set_rows(int64_t{1} << 62);  // rows * F would overflow
  RequireStatus(SeriesFromInline(in, features).status(), absl::StatusCode::kInvalidArgument,
                "expected rows * features");
}

}  // namespace
}  // namespace forecastd
