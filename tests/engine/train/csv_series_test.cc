#include "engine/train/csv_series.h"

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using data_test::RequireStatus;
using data_test::TempDir;
using data_test::WriteFile;

CsvOptions Columns(std::vector<std::string> columns, std::string timestamp_column = "") {
  CsvOptions options;
  options.columns = std::move(columns);
  options.timestamp_column = std::move(timestamp_column);
  return options;
}

Series ParseOk(const std::string& text, const CsvOptions& options = {}) {
  absl::StatusOr<Series> series = ParseCsvSeries(text, "good.csv", options);
  CAPTURE(series.status().ToString());
  REQUIRE(series.ok());
  return *std::move(series);
}

// The parse fails with INVALID_ARGUMENT at `line` of "bad.csv", and the message says `what`.
void RequireCsvError(const std::string& text, const CsvOptions& options, int line,
                     absl::string_view what) {
  const absl::StatusOr<Series> series = ParseCsvSeries(text, "bad.csv", options);
  CAPTURE(text, series.status().ToString());
  REQUIRE_FALSE(series.ok());
  CHECK(series.status().code() == absl::StatusCode::kInvalidArgument);
  CHECK(absl::StrContains(series.status().message(), absl::StrCat("bad.csv: line ", line, ": ")));
  CHECK(absl::StrContains(series.status().message(), what));
}

// ---------------------------------------------------------------------------------------------
// CSV: accepted input

TEST_CASE("The real series in data/ read as training data, their time columns increasing",
          "[unit][dataset]") {
  // Daily index closes in business time; `time` in decimal years (numbers).
  const absl::StatusOr<Series> eu =
      ReadCsvSeries(FORECASTD_DATA_DIR "/eu_stock_markets.csv", Columns({}, "time"));
  CAPTURE(eu.status().ToString());
  REQUIRE(eu.ok());
  REQUIRE(eu->column_names == std::vector<std::string>{"DAX", "SMI", "CAC", "FTSE"});
  REQUIRE(eu->rows == 1860);
  REQUIRE(eu->at(0, 0) == 1628.75f);     // DAX's first close
  REQUIRE(eu->at(1859, 0) == 5473.72f);  // and its last
  REQUIRE(eu->at(1859, 3) == 5455.0f);   // FTSE's last
  REQUIRE(eu->timestamps.front() == "1991.49615384615");

  // Half-hourly demand in megawatts; ISO times, 48 a day for 84 days.
  const absl::StatusOr<Series> taylor =
      ReadCsvSeries(FORECASTD_DATA_DIR "/taylor.csv", Columns({"demand"}, "time"));
  CAPTURE(taylor.status().ToString());
  REQUIRE(taylor.ok());
  REQUIRE(taylor->rows == 84 * 48);
  REQUIRE(taylor->at(0, 0) == 22262.0f);
  REQUIRE(taylor->timestamps.front() == "2000-06-05T00:00");
  REQUIRE(taylor->timestamps.back() == "2000-08-27T23:30");
}

TEST_CASE("CSV without timestamp keeps every column in file order", "[unit][dataset]") {
  const Series s = ParseOk("a,b\n1,2\n3.5,-4e2\n");
  CHECK(s.column_names == std::vector<std::string>{"a", "b"});
  CHECK(s.rows == 2);
  CHECK(s.values == std::vector<float>{1, 2, 3.5f, -400});
  CHECK(s.timestamps.empty());
  CHECK(s.at(1, 1) == -400.0f);
}

TEST_CASE("CSV with CRLF, spaces, a timestamp, extra and reordered columns", "[unit][dataset]") {
  const std::string text =
      "time , a ,symbol,b\r\n"
      "2024-01-01T00:00:00Z, 1 ,AAPL,2\r\n"
      "2024-01-01T00:01:00Z,3,MSFT, 4\r\n"
      "\r\n";
  const Series s = ParseOk(text, Columns({"b", "a"}, "time"));
  CHECK(s.column_names == std::vector<std::string>{"b", "a"});
  CHECK(s.rows == 2);
  CHECK(s.values == std::vector<float>{2, 1, 4, 3});
  CHECK(s.timestamps == std::vector<std::string>{"2024-01-01T00:00:00Z", "2024-01-01T00:01:00Z"});
}

TEST_CASE("CSV endings: no final newline, several blank lines, a byte-order mark",
          "[unit][dataset]") {
  CHECK(ParseOk("a\n1\n2").rows == 2);
  CHECK(ParseOk("a\n1\n2\n\n  \n\n").rows == 2);
  const Series s = ParseOk(
      "\xEF\xBB\xBF"
      "a,b\n1,2\n");
  CHECK(s.column_names == std::vector<std::string>{"a", "b"});
}

TEST_CASE("CSV numbers: '+', exponents, and underflow to zero are accepted", "[unit][dataset]") {
  const Series s = ParseOk("a,b,c\n+1.5,.25,1e-50\n");
  CHECK(s.values == std::vector<float>{1.5f, 0.25f, 0.0f});
}

TEST_CASE("CSV timestamps: numbers, ISO 8601 with offsets, and labels", "[unit][dataset]") {
  CHECK(ParseOk("t,a\n1700000000,1\n1700000060.5,2\n", Columns({}, "t")).rows == 2);
  // 10:30+02:00 is 08:30Z, which comes after 08:00Z though its text sorts before it.
  CHECK(ParseOk("t,a\n2024-03-01 08:00Z,1\n2024-03-01T10:30:00.25+02:00,2\n2024-03-02,3\n",
                Columns({}, "t"))
            .rows == 3);
  // Labels cannot be ordered, only kept unique.
  const Series s = ParseOk("t,a\nday two,1\nday one,2\n", Columns({"a"}, "t"));
  CHECK(s.timestamps == std::vector<std::string>{"day two", "day one"});
}

// ---------------------------------------------------------------------------------------------
// CSV: rejected input, each with its line

TEST_CASE("CSV errors name the source and the 1-based line", "[unit][dataset]") {
  const CsvOptions none;
  SECTION("empty row in the middle") { RequireCsvError("a,b\n1,2\n\n3,4\n", none, 3, "empty row"); }
  SECTION("whitespace-only row in the middle") {
    RequireCsvError("a,b\n1,2\n \t\r\n3,4\n", none, 3, "empty row");
  }
  SECTION("non-numeric cell names its column") {
    RequireCsvError("a,b\n1,2\n3,abc\n", none, 3, "column 'b': 'abc' is not a number");
  }
  SECTION("trailing garbage after a number") {
    RequireCsvError("a,b\n1,1.5x\n", none, 2, "column 'b': '1.5x' is not a number");
  }
  SECTION("nan") { RequireCsvError("a,b\n1,2\n3,4\nnan,5\n", none, 4, "'nan' is not a finite"); }
  SECTION("inf") {
    RequireCsvError("a,b\r\n1,inf\r\n", none, 2, "column 'b': 'inf' is not a finite");
  }
  SECTION("-infinity") { RequireCsvError("a\n-infinity\n", none, 2, "not a finite"); }
  SECTION("out of float range") { RequireCsvError("a\n1\n1e39\n", none, 3, "out of float range"); }
  SECTION("empty cell") { RequireCsvError("a,b\n1, \n", none, 2, "column 'b': empty cell"); }
  SECTION("ragged: too many cells") {
    RequireCsvError("a,b\n1,2\n3,4\n5,6,7\n", none, 4, "expected 2 cells as in the header, got 3");
  }
  SECTION("ragged: too few cells") {
    RequireCsvError("a,b,c\n1,2\n", none, 2, "expected 3 cells as in the header, got 2");
  }
  SECTION("duplicate header names, after trimming") {
    RequireCsvError("a, b,b \n1,2,3\n", none, 1, "column name 'b' appears twice (columns 2 and 3)");
  }
  SECTION("unnamed column") { RequireCsvError("a,,c\n1,2,3\n", none, 1, "column 2"); }
  SECTION("header only") { RequireCsvError("a,b\n", none, 1, "no data rows"); }
  SECTION("header only, blank lines after") {
    RequireCsvError("a,b\r\n\r\n\n", none, 1, "no data rows");
  }
  SECTION("empty file") { RequireCsvError("", none, 1, "empty"); }
  SECTION("missing feature") {
    RequireCsvError("a,b\n1,2\n", Columns({"a", "volume"}), 1,
                    "feature 'volume' is not a column of the header (a, b)");
  }
  SECTION("missing timestamp column") {
    RequireCsvError("a,b\n1,2\n", Columns({"a"}, "time"), 1, "no timestamp column 'time'");
  }
  SECTION("the timestamp column is not a feature") {
    RequireCsvError("t,a\n1,2\n", Columns({"t"}, "t"), 1, "'t' is the timestamp column");
  }
}

TEST_CASE("CSV timestamps must be non-empty, one format, and increase", "[unit][dataset]") {
  const CsvOptions t = Columns({}, "t");
  RequireCsvError("t,a\n1,1\n,2\n", t, 3, "empty");
  RequireCsvError("t,a\n1,1\n2,2\n2,3\n", t, 4, "'2' does not come after '2' (line 3)");
  RequireCsvError("t,a\n5,1\n4,2\n", t, 3, "strictly increase");
  RequireCsvError("t,a\n2024-01-02,1\n2024-01-01T23:59:59Z,2\n", t, 3, "does not come after");
  // The same instant written with two offsets is a duplicate.
  RequireCsvError("t,a\n2024-01-01T10:00+01:00,1\n2024-01-01T09:00Z,2\n", t, 3,
                  "does not come after");
  RequireCsvError("t,a\n2024-01-01,1\n1700000000,2\n", t, 3,
                  "not an ISO 8601 date-time like line 2");
  RequireCsvError("t,a\n100,1\nlater,2\n", t, 3, "not a number like line 2");
  RequireCsvError("t,a\nmon,1\ntue,2\nmon,3\n", t, 4, "'mon' repeats line 2");
  // An impossible date is not ISO 8601, so the column is read as labels: 02-30 is unique.
  CHECK(ParseOk("t,a\n2023-02-30,1\n2023-02-28,2\n", t).rows == 2);
}

// ---------------------------------------------------------------------------------------------
// CSV: several series, static covariates and Unix seconds

CsvOptions SeriesColumns(std::vector<std::string> columns, std::string timestamp_column,
                         std::string series_column, std::vector<std::string> statics = {},
                         bool unix_seconds = false) {
  CsvOptions options = Columns(std::move(columns), std::move(timestamp_column));
  options.series_column = std::move(series_column);
  options.static_columns = std::move(statics);
  options.unix_seconds = unix_seconds;
  return options;
}

TEST_CASE("CSV series column: labels numbered by first appearance, times restart per series",
          "[unit][dataset]") {
  const std::string text =
      "t,id,a,size,b\n"
      "2024-01-01T00:00Z,FTSE,1,3.5,10\n"
      "2024-01-01T01:00Z,FTSE,2,3.5,20\n"
      "2023-12-31T23:00Z,dax 40,3,-1,30\n"  // a new series starts its times afresh
      "2024-01-01T00:00Z,dax 40,4,-1,40\n"
      "2024-01-01T00:00Z,1,5,0,50\n";
  const Series s = ParseOk(text, SeriesColumns({"b", "a"}, "t", "id", {"size"}, true));
  CHECK(s.column_names == std::vector<std::string>{"b", "a"});
  CHECK(s.rows == 5);
  CHECK(s.values == std::vector<float>{10, 1, 20, 2, 30, 3, 40, 4, 50, 5});
  CHECK(s.series_names == std::vector<std::string>{"FTSE", "dax 40", "1"});
  CHECK(s.series_ids == std::vector<int32_t>{0, 0, 1, 1, 2});
  CHECK(s.num_series() == 3);
  CHECK(s.series_of(3) == 1);
  CHECK(s.static_names == std::vector<std::string>{"size"});
  CHECK(s.static_values == std::vector<float>{3.5f, -1, 0});
  const int64_t jan1 = 1704067200;  // 2024-01-01T00:00Z
  CHECK(s.unix_seconds == std::vector<int64_t>{jan1, jan1 + 3600, jan1 - 3600, jan1, jan1});

  // Every column but the timestamp, series and static ones, when none are named.
  const Series all = ParseOk(text, SeriesColumns({}, "t", "id", {"size"}));
  CHECK(all.column_names == std::vector<std::string>{"a", "b"});
  CHECK(all.unix_seconds.empty());
  // Without a series column the file is one series; static columns are constant over it.
  const Series one = ParseOk("a,k\n1,7\n2,7\n", SeriesColumns({"a"}, "", "", {"k"}));
  CHECK(one.series_names.empty());
  CHECK(one.series_ids.empty());
  CHECK(one.num_series() == 1);
  CHECK(one.static_values == std::vector<float>{7});
  // Labels may repeat across series, not within one.
  CHECK(ParseOk("t,id,a\nmon,x,1\ntue,x,2\nmon,y,3\n", SeriesColumns({}, "t", "id")).series_names ==
        std::vector<std::string>{"x", "y"});
}

TEST_CASE("CSV series column errors: contiguity, static covariates, times for calendars",
          "[unit][dataset]") {
  const CsvOptions o = SeriesColumns({"a"}, "t", "id", {"k"});
  SECTION("a series that comes back") {
    RequireCsvError("t,id,a,k\n1,x,1,0\n2,x,1,0\n1,y,1,0\n3,x,1,0\n", o, 5,
                    "series 'x' comes back after series 'y'; its rows (lines 2 to 3)");
  }
  SECTION("times decrease within a series") {
    RequireCsvError("t,id,a,k\n1,x,1,0\n2,x,1,0\n9,y,1,0\n8,y,1,0\n", o, 5,
                    "'8' does not come after '9' (line 4)");
  }
  SECTION("a label repeats within a series") {
    RequireCsvError("t,id,a,k\nmon,x,1,0\nmon,y,1,0\nmon,y,1,0\n", o, 4, "'mon' repeats line 3");
  }
  SECTION("the format is the file's, across series") {
    RequireCsvError("t,id,a,k\n1,x,1,0\n2024-01-01,y,1,0\n", o, 3, "not a number like line 2");
  }
  SECTION("an empty series label") {
    RequireCsvError("t,id,a,k\n1,x,1,0\n2, ,1,0\n", o, 3, "column 'id': empty series label");
  }
  SECTION("a static covariate that changes within a series") {
    RequireCsvError("t,id,a,k\n1,x,1,5\n2,x,1,5\n3,x,1,6\n", o, 4,
                    "column 'k': static covariate '6' differs from the value 5 earlier in "
                    "series 'x'");
  }
  SECTION("a static covariate that is not a number") {
    RequireCsvError("t,id,a,k\n1,x,1,big\n", o, 2, "column 'k': 'big' is not a number");
  }
  SECTION("no such series column") {
    RequireCsvError("t,a,k\n1,1,0\n", o, 1, "no series column 'id'");
  }
  SECTION("no such static column") {
    RequireCsvError("t,id,a\n1,x,1\n", o, 1, "no static covariate column 'k'");
  }
  SECTION("the series column is not a feature") {
    RequireCsvError("t,id,a\n1,x,1\n", SeriesColumns({"id"}, "t", "id"), 1,
                    "'id' is the series column");
  }
  SECTION("a static covariate is not a feature") {
    RequireCsvError("t,id,a,k\n1,x,1,0\n", SeriesColumns({"a", "k"}, "t", "id", {"k"}), 1,
                    "feature 'k' is also a static covariate");
  }
  SECTION("the series column is not the timestamp") {
    RequireCsvError("t,a\n1,1\n", SeriesColumns({"a"}, "t", "t"), 1,
                    "is also the timestamp column");
  }
  SECTION("label times cannot give calendar features") {
    RequireCsvError("t,id,a\nmon,x,1\ntue,x,2\n", SeriesColumns({"a"}, "t", "id", {}, true), 2,
                    "column 't': timestamp 'mon' is neither a number (Unix seconds) nor an ISO "
                    "8601 date-time; calendar features need times");
  }
}

TEST_CASE("TimestampUnixSeconds reads numbers and ISO 8601, not labels", "[unit][dataset]") {
  CHECK(TimestampUnixSeconds("1700000000").value() == 1700000000);
  CHECK(TimestampUnixSeconds("1700000060.75").value() == 1700000060);  // rounded down
  CHECK(TimestampUnixSeconds("-1.5").value() == -2);
  CHECK(TimestampUnixSeconds("1970-01-01").value() == 0);
  CHECK(TimestampUnixSeconds("2024-03-01T10:30:00.25+02:00").value() == 1709281800);
  CHECK(TimestampUnixSeconds("2024-03-01 08:30").value() == 1709281800);
  RequireStatus(TimestampUnixSeconds("day one").status(), absl::StatusCode::kInvalidArgument,
                "'day one' is neither a number");
  RequireStatus(TimestampUnixSeconds("1e300").status(), absl::StatusCode::kInvalidArgument,
                "too far from 1970");
  // Without a timestamp column there is nothing to convert.
  CsvOptions no_times;
  no_times.unix_seconds = true;
  CHECK(ParseCsvSeries("a\n1\n", "x.csv", no_times).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("ReadCsvSeries reads a file and names it in errors", "[unit][dataset]") {
  TempDir dir;
  WriteFile(dir.path / "x.csv", "a\n1\n2\n");
  WriteFile(dir.path / "bad.csv", "a\n1\nz\n");
  const auto good = ReadCsvSeries((dir.path / "x.csv").string(), {});
  REQUIRE(good.ok());
  CHECK(good->rows == 2);
  const auto bad = ReadCsvSeries((dir.path / "bad.csv").string(), {});
  RequireStatus(bad.status(), absl::StatusCode::kInvalidArgument,
                absl::StrCat((dir.path / "bad.csv").string(), ": line 3"));
  CHECK(ReadCsvSeries((dir.path / "none.csv").string(), {}).status().code() ==
        absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace forecastd
