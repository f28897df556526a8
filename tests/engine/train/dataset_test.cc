#include "engine/train/dataset.h"

#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/train/random.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

#if FORECASTD_CATCH_V3
using Catch::Approx;
#endif

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at scope exit.
struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "dataset_test.XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

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

void RequireStatus(const absl::Status& status, absl::StatusCode code, absl::string_view what) {
  CAPTURE(status.ToString());
  CHECK(status.code() == code);
  CHECK(absl::StrContains(status.message(), what));
}

ModelConfig SmallModel(int T, int P, std::vector<std::string> features,
                       std::vector<std::string> targets) {
  ModelConfig config;
  config.set_name("m");
  config.set_lookback(T);
  config.set_horizon(P);
  for (const auto& f : features) config.add_feature_names(f);
  for (const auto& t : targets) config.add_target_names(t);
  config.mutable_lstm()->set_hidden_size(4);
  config.mutable_lstm()->set_num_layers(1);
  return config;
}

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
// CSV: accepted input

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

// ---------------------------------------------------------------------------------------------
// Random

TEST_CASE("Random is the reference PCG32", "[unit][random]") {
  // pcg32_srandom_r(&rng, 42, 54) in pcg-random.org's pcg32-demo.
  Random rng(42, 54);
  for (uint32_t want :
       {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u, 0x83d2f293u, 0xbfa4784bu, 0xcbed606eu}) {
    CHECK(rng.NextU32() == want);
  }
  // SplitMix64's first output for seed 1234567 in the reference splitmix64.c.
  CHECK(SplitMix64(1234567) == 6457827717110365317ull);
  // Uniforms are exact functions of the pinned integers.
  Random u(42, 54);
  CHECK(u.UniformFloat() == static_cast<float>(0xa15c02b7u >> 8) / 16777216.0f);
  CHECK(u.NextU64() == ((uint64_t{0x7b47f409u} << 32) | 0xba1d3330u));
}

TEST_CASE("Random is deterministic per seed and stream", "[unit][random]") {
  Random a(9), b(9), c(10), d(9, 1);
  bool differ_seed = false, differ_stream = false;
  for (int i = 0; i < 16; ++i) {
    const uint32_t x = a.NextU32();
    CHECK(x == b.NextU32());
    differ_seed |= x != c.NextU32();
    differ_stream |= x != d.NextU32();
  }
  CHECK(differ_seed);
  CHECK(differ_stream);
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(1, SeedPurpose::kShuffle, 1));
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(1, SeedPurpose::kWeightInit, 0));
  CHECK(DeriveSeed(1, SeedPurpose::kShuffle, 0) != DeriveSeed(2, SeedPurpose::kShuffle, 0));
}

TEST_CASE("Random::UniformInt stays below its bound, evenly", "[unit][random]") {
  Random rng(3);
  CHECK(rng.UniformInt(0) == 0);
  for (uint64_t bound : {uint64_t{1}, uint64_t{2}, uint64_t{7}, uint64_t{0xFFFFFFFF},
                         uint64_t{1} << 32, (uint64_t{1} << 40) + 3, ~uint64_t{0}}) {
    for (int i = 0; i < 1000; ++i) CHECK(rng.UniformInt(bound) < bound);
  }
  constexpr int kDraws = 60000;
  int count[6] = {};
  for (int i = 0; i < kDraws; ++i) ++count[rng.UniformInt(6)];
  for (int c : count) CHECK(c == Approx(kDraws / 6).epsilon(0.05));
  // A large bound reaches its upper half too.
  uint64_t top = 0;
  for (int i = 0; i < 100; ++i) top = std::max(top, rng.UniformInt((uint64_t{1} << 40) + 3));
  CHECK(top > (uint64_t{1} << 39));
}

TEST_CASE("Random uniform and normal draws have the right moments", "[unit][random]") {
  constexpr int kDraws = 200000;
  Random rng(2024);
  double sum = 0, sum2 = 0;
  float lo = 1e9f, hi = -1e9f;
  for (int i = 0; i < kDraws; ++i) {
    const float v = rng.Uniform(-2.0f, 6.0f);
    lo = std::min(lo, v);
    hi = std::max(hi, v);
    sum += v;
    sum2 += static_cast<double>(v) * v;
  }
  const double mean = sum / kDraws, var = sum2 / kDraws - mean * mean;
  CHECK(lo >= -2.0f);
  CHECK(hi < 6.0f);
  CHECK(mean == Approx(2.0).margin(0.02));
  CHECK(var == Approx(64.0 / 12.0).epsilon(0.01));
  // A range too narrow for 2^24 steps still stays half-open.
  for (int i = 0; i < 1000; ++i) CHECK(rng.Uniform(1.0f, std::nextafter(1.0f, 2.0f)) == 1.0f);

  sum = sum2 = 0;
  int within_one = 0;
  for (int i = 0; i < kDraws; ++i) {
    const float v = rng.Normal(3.0f, 2.0f);
    sum += v;
    sum2 += static_cast<double>(v) * v;
    within_one += std::fabs(v - 3.0f) < 2.0f;
  }
  const double nmean = sum / kDraws, nvar = sum2 / kDraws - nmean * nmean;
  CHECK(nmean == Approx(3.0).margin(0.02));
  CHECK(nvar == Approx(4.0).epsilon(0.02));
  CHECK(static_cast<double>(within_one) / kDraws == Approx(0.6827).margin(0.005));
}

TEST_CASE("Random::Normal is Box-Muller over the pinned stream", "[unit][random]") {
  Random rng(42, 54);
  const uint64_t a = (uint64_t{0xa15c02b7u} << 32) | 0x7b47f409u;
  const uint64_t b = (uint64_t{0xba1d3330u} << 32) | 0x83d2f293u;
  const double u1 = 1.0 - static_cast<double>(a >> 11) * 0x1.0p-53;
  const double u2 = static_cast<double>(b >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double two_pi = 6.283185307179586476925286766559;
  CHECK(rng.Normal(0.0f, 1.0f) == static_cast<float>(r * std::cos(two_pi * u2)));
  CHECK(rng.Normal(1.0f, 2.0f) == static_cast<float>(1.0 + 2.0 * r * std::sin(two_pi * u2)));
}

}  // namespace
}  // namespace forecastd
