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
