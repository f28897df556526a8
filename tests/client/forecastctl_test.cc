// Runs the real forecastctl binary against a real forecastd (free loopback ports, a temporary
// repository with small models) the way an operator or a script would, and checks what it
// prints and how it exits: forecasts equal to the Predict RPC's, a CSV replayed as a tick
// stream and the streams kept, a training job followed to SUCCEEDED, model management (deleting
// versions too), jobs, list formats and --watch, JSON numbers, benchmarks, metrics, error and
// usage exit codes, --help and completion in bash, zsh and fish. ctest
// runs each TEST_CASE in its own process, each with its own daemon.
#include <signal.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/input_windows.h"
#include "client/prometheus_text.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using ::forecastd::testing::ChildProcess;
using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::TempDir;

// Safety bounds only: a healthy run finishes far inside them on any machine.
constexpr absl::Duration kRunBound = absl::Seconds(120);

// The toy models: lookback, horizon, features (load, temp).
constexpr int kT = 8, kP = 3, kF = 2;
constexpr float kMean[kF] = {10.0f, 20.0f};
constexpr float kStd[kF] = {2.0f, 5.0f};

// --- The repository

ModelConfig BaseConfig(const std::string& name, std::vector<std::string> targets) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(kT);
  c.set_horizon(kP);
  c.add_feature_names("load");
  c.add_feature_names("temp");
  for (const std::string& t : targets) c.add_target_names(t);
  c.mutable_batching()->set_max_batch_size(8);
  c.mutable_batching()->set_max_queue_delay_us(500);
  return c;
}

// Tick streams of toy keep a recurrent state (quant's keep windows, the default).
ModelConfig ToyConfig() {
  ModelConfig c = BaseConfig("toy", {"temp", "load"});
  c.mutable_lstm()->set_hidden_size(8);
  c.mutable_lstm()->set_num_layers(1);
  c.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  return c;
}

ModelConfig QuantileConfig() {
  ModelConfig c = BaseConfig("quant", {"load"});
  c.mutable_gru()->set_hidden_size(8);
  c.mutable_gru()->set_num_layers(1);
  for (const float q : {0.1f, 0.5f, 0.9f}) c.add_quantiles(q);
  c.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_LAST_VALUE);
  return c;
}

void Publish(const std::string& repository, const ModelConfig& config, uint32_t seed) {
  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(config);
  REQUIRE(model.ok());
  ParameterArena& arena = (*model)->parameters();
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-0.3f, 0.3f);
  for (int64_t i = 0; i < arena.size(); ++i) arena.data()[i] = dist(gen);
  if ((*model)->standardized()) {
    std::copy(kMean, kMean + kF, arena.at("normalizer.mean"));
    std::copy(kStd, kStd + kF, arena.at("normalizer.std"));
  }
  const absl::Status status =
      PublishVersion(**model, absl::StrCat(repository, "/", config.name()), 1);
  INFO(status.ToString());
  REQUIRE(status.ok());
}

void WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path);
  out << text;
  REQUIRE(out.good());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// `rows` observations of smooth load and temp, with a timestamp column first and the
// features in the other order than the model's: the CLI must pick them by name.
std::string SeriesCsv(int rows) {
  std::string csv = "time,temp,load\n";
  for (int r = 0; r < rows; ++r) {
    const float load = kMean[0] + kStd[0] * std::sin(0.2f * static_cast<float>(r));
    const float temp = kMean[1] + kStd[1] * std::cos(0.13f * static_cast<float>(r));
    absl::StrAppend(&csv, "2024-01-01T", r, ":00,", temp, ",", load, "\n");
  }
  return csv;
}

// The model's view of SeriesCsv: (rows, F) in feature order (load, temp), as printed.
std::vector<float> SeriesValues(int rows) {
  std::vector<float> x;
  for (int r = 0; r < rows; ++r) {
    float load = 0, temp = 0;
    REQUIRE(absl::SimpleAtof(absl::StrCat(kMean[0] + kStd[0] * std::sin(0.2f * r)), &load));
    REQUIRE(absl::SimpleAtof(absl::StrCat(kMean[1] + kStd[1] * std::cos(0.13f * r)), &temp));
    x.push_back(load);
    x.push_back(temp);
  }
  return x;
}

// A daemon over a fresh repository holding toy and quant (version 1 each), with a data and a
// checkpoint directory of its own.
struct Fixture {
  TempDir repository;
  TempDir scratch;
  std::unique_ptr<ForecastdDaemon> daemon;

  // default_checkpoints: no --checkpoint-dir, so that each model keeps its checkpoints in its
  // own directory of the repository.
  explicit Fixture(bool default_checkpoints = false) {
    Publish(repository.path(), ToyConfig(), 1);
    Publish(repository.path(), QuantileConfig(), 2);
    options.binary = FORECASTD_BINARY;
    options.repository = repository.path();
    options.extra_flags = {"--data-dir", scratch.path()};
    if (!default_checkpoints) {
      options.extra_flags.insert(
          options.extra_flags.end(),
          {"--checkpoint-dir", absl::StrCat(scratch.path(), "/checkpoints")});
    }
    Restart();
  }

  // Starts the daemon again on the same repository, after `signal` (SIGTERM: a clean stop;
  // SIGKILL: a crash) if one runs.
  void Restart(int signal = SIGTERM) {
    if (daemon != nullptr) {
      REQUIRE(daemon->process().Signal(signal));
      REQUIRE(daemon->process().WaitForExit(absl::Seconds(60)).ok());
      daemon.reset();
    }
    absl::StatusOr<std::unique_ptr<ForecastdDaemon>> started = ForecastdDaemon::Start(options);
    INFO(started.status().ToString());
    REQUIRE(started.ok());
    daemon = *std::move(started);
  }

  ForecastdDaemon::Options options;

  std::string metrics_address() const { return absl::StrCat("127.0.0.1:", daemon->metrics_port()); }
  std::string Path(const std::string& name) const {
    return absl::StrCat(scratch.path(), "/", name);
  }
};

// --- Running forecastctl

struct CtlResult {
  int exit_code = -1;
  std::string out;  // stdout
  std::string err;  // stderr
};

// Runs forecastctl with `args` (after `prefix`, e.g. --address), stdout and stderr kept
// apart, stdin from `stdin_path` (/dev/null by default).
CtlResult RunCtl(const std::vector<std::string>& prefix, const std::vector<std::string>& args,
                 const std::string& stdin_path = "/dev/null") {
  TempDir io;
  const std::string out = absl::StrCat(io.path(), "/out");
  const std::string err = absl::StrCat(io.path(), "/err");
  std::vector<std::string> argv = {
      "/bin/sh", "-c", absl::StrCat("exec \"$@\" <'", stdin_path, "' >'", out, "' 2>'", err, "'"),
      "sh"};
  argv.insert(argv.end(), prefix.begin(), prefix.end());
  argv.insert(argv.end(), args.begin(), args.end());
  absl::StatusOr<testing::RunResult> run = testing::Run(argv, kRunBound);
  INFO(absl::StrJoin(args, " "));
  REQUIRE(run.ok());
  CtlResult result{run->exit_code, ReadFile(out), ReadFile(err)};
  UNSCOPED_INFO("forecastctl " << absl::StrJoin(args, " ") << " -> " << result.exit_code
                               << "\nstdout:\n"
                               << result.out << "\nstderr:\n"
                               << result.err);
  return result;
}

// forecastctl pointed at the fixture's daemon.
CtlResult Ctl(const Fixture& f, const std::vector<std::string>& args,
              const std::string& stdin_path = "/dev/null") {
  return RunCtl({FORECASTCTL_BINARY, "--address", f.daemon->grpc_address(), "--metrics-address",
                 f.metrics_address()},
                args, stdin_path);
}

// forecastctl with no server at all (usage, help, completion).
CtlResult CtlAlone(const std::vector<std::string>& args) {
  return RunCtl({FORECASTCTL_BINARY}, args);
}

template <typename Message>
Message ParseJson(const std::string& json) {
  Message message;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &message);
  INFO(json);
  INFO(status.ToString());
  REQUIRE(status.ok());
  return message;
}

std::vector<float> Floats(const v1::Tensor& tensor) {
  if (tensor.raw().empty()) return {tensor.values().begin(), tensor.values().end()};
  std::vector<float> x(tensor.raw().size() / sizeof(float));
  std::memcpy(x.data(), tensor.raw().data(), tensor.raw().size());
  return x;
}

// Every number of a nested JSON array, in order.
void Flatten(const google::protobuf::Value& v, std::vector<double>& out) {
  if (v.kind_case() == google::protobuf::Value::kNumberValue) {
    out.push_back(v.number_value());
  } else if (v.kind_case() == google::protobuf::Value::kListValue) {
    for (const auto& item : v.list_value().values()) Flatten(item, out);
  }
}

const google::protobuf::Value& Field(const google::protobuf::Value& object,
                                     const std::string& name) {
  const auto& fields = object.struct_value().fields();
  const auto it = fields.find(name);
  INFO(name);
  REQUIRE(it != fields.end());
  return it->second;
}

std::vector<std::string> Lines(const std::string& text) {
  return absl::StrSplit(text, '\n', absl::SkipEmpty());
}

// --- Predict

TEST_CASE("predict --output json equals the Predict RPC on the same windows",
          "[integration][forecastctl]") {
  Fixture f;
  constexpr int kRows = 20, kWindows = 3;
  WriteFile(f.Path("series.csv"), SeriesCsv(kRows));

  const CtlResult json = Ctl(f, {"predict", "toy", "--csv", f.Path("series.csv"), "--windows",
                                 absl::StrCat(kWindows), "--output", "json"});
  REQUIRE(json.exit_code == 0);
  const auto printed = ParseJson<google::protobuf::Value>(json.out);
  std::vector<double> shape, values, rows;
  Flatten(Field(printed, "shape"), shape);
  Flatten(Field(printed, "forecasts"), values);
  Flatten(Field(printed, "inputRows"), rows);
  REQUIRE(shape == std::vector<double>{kWindows, kP, 2});
  REQUIRE(Field(printed, "model").string_value() == "toy");
  REQUIRE(Field(printed, "version").number_value() == 1);
  REQUIRE(Field(printed, "targetNames").list_value().values(0).string_value() == "temp");
  REQUIRE(rows == std::vector<double>{kRows - kT - 2, kRows - 3, kRows - kT - 1, kRows - 2,
                                      kRows - kT, kRows - 1});
  REQUIRE(Field(Field(printed, "timing"), "batchSize").number_value() >= kWindows);

  // The same three windows through the RPC: the last ones of the series, in feature order.
  const std::vector<float> series = SeriesValues(kRows);
  v1::PredictRequest request;
  request.set_model("toy");
  for (const int64_t d : {kWindows, kT, kF}) request.mutable_inputs()->add_shape(d);
  for (int b = 0; b < kWindows; ++b) {
    const int first = kRows - kT - (kWindows - 1) + b;
    for (int i = first * kF; i < (first + kT) * kF; ++i) {
      request.mutable_inputs()->add_values(series[i]);
    }
  }
  grpc::ClientContext context;
  v1::PredictResponse response;
  const grpc::Status status = f.daemon->forecaster().Predict(&context, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  const std::vector<float> want = Floats(response.forecasts());
  REQUIRE(values.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i, values[i], want[i]);
    // Printed as the shortest decimal that reads back as the same float.
    REQUIRE(std::fabs(static_cast<float>(values[i]) - want[i]) <=
            1e-5f * std::fabs(want[i]) + 1e-5f);
  }

  SECTION("windows as JSON on stdin give the same forecasts, --json selects JSON output") {
    std::vector<std::string> windows;
    for (int b = 0; b < kWindows; ++b) {
      std::vector<std::string> steps;
      for (int t = 0; t < kT; ++t) {
        const int row = kRows - kT - (kWindows - 1) + b + t;
        steps.push_back(absl::StrCat("[", absl::StrCat(series[row * kF]), ", ",
                                     absl::StrCat(series[row * kF + 1]), "]"));
      }
      windows.push_back(absl::StrCat("[", absl::StrJoin(steps, ","), "]"));
    }
    WriteFile(f.Path("windows.json"),
              absl::StrCat("  {\"inputs\": [", absl::StrJoin(windows, ","), "]}"));
    const CtlResult from_stdin =
        Ctl(f, {"predict", "toy", "--json-input", "-", "--json"}, f.Path("windows.json"));
    REQUIRE(from_stdin.exit_code == 0);
    std::vector<double> again;
    Flatten(Field(ParseJson<google::protobuf::Value>(from_stdin.out), "forecasts"), again);
    REQUIRE(again.size() == values.size());
    for (size_t i = 0; i < again.size(); ++i) {
      REQUIRE(std::fabs(again[i] - values[i]) <= 1e-5 * std::fabs(values[i]) + 1e-5);
    }
  }

  SECTION("table and csv outputs; a CSV on stdin; --all") {
    const CtlResult table = Ctl(f, {"predict", "toy", "--csv", f.Path("series.csv")});
    REQUIRE(table.exit_code == 0);
    REQUIRE(absl::StrContains(table.out, "STEP"));
    REQUIRE(absl::StrContains(table.out, "temp"));
    REQUIRE(absl::StrContains(table.out, "model toy version 1"));

    const CtlResult csv =
        Ctl(f, {"predict", "toy", "--csv", "-", "--all", "-o", "csv"}, f.Path("series.csv"));
    REQUIRE(csv.exit_code == 0);
    const std::vector<std::string> lines = Lines(csv.out);
    REQUIRE(lines[0] == "window,step,temp,load");
    REQUIRE(lines.size() == 1 + (kRows - kT + 1) * kP);

    // 13 windows, max_batch_size 8: two requests, one answer.
    const CtlResult all =
        Ctl(f, {"predict", "toy", "--csv", f.Path("series.csv"), "--all", "--json"});
    REQUIRE(all.exit_code == 0);
    const auto parsed = ParseJson<google::protobuf::Value>(all.out);
    REQUIRE(Field(parsed, "requests").number_value() == 2);
    REQUIRE(Field(parsed, "shape").list_value().values(0).number_value() == kRows - kT + 1);
  }

  SECTION("a quantile model's table has a column per target and quantile") {
    const CtlResult table = Ctl(f, {"predict", "quant", "--csv", f.Path("series.csv")});
    REQUIRE(table.exit_code == 0);
    REQUIRE(absl::StrContains(table.out, "load p10"));
    REQUIRE(absl::StrContains(table.out, "load p90"));
    const CtlResult csv = Ctl(f, {"predict", "quant", "--csv", f.Path("series.csv"), "-o", "csv"});
    REQUIRE(Lines(csv.out)[0] == "window,step,load_p10,load_p50,load_p90");
  }
}

// --- Tick streams

TEST_CASE("stream replays a CSV one tick per row, and streams lists a kept key",
          "[integration][forecastctl]") {
  Fixture f;
  constexpr int kRows = 12;
  WriteFile(f.Path("series.csv"), SeriesCsv(kRows));

  // Table: one line per row with its sequence number, then the summary.
  const CtlResult table = Ctl(f, {"stream", "toy", "--csv", f.Path("series.csv"), "--key", "AAPL"});
  REQUIRE(table.exit_code == 0);
  REQUIRE(absl::StrContains(table.out, "state mode, lookback 8"));
  REQUIRE(absl::StrContains(table.out, "temp+1"));
  std::vector<int64_t> sequences;
  for (const std::string& line : Lines(table.out)) {
    const std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    int64_t n = 0;
    if (cells.size() == 2 + kP * 2 && absl::SimpleAtoi(cells[0], &n)) sequences.push_back(n);
  }
  std::vector<int64_t> want_sequences(kRows);
  for (int i = 0; i < kRows; ++i) want_sequences[i] = i + 1;
  REQUIRE(sequences == want_sequences);
  REQUIRE(absl::StrContains(table.out, absl::StrCat("summary: ", kRows, " ticks, 0 errors")));
  REQUIRE(absl::StrContains(table.out, "round trip us: p50"));

  // JSON lines: the forecast after the first T ticks is Predict's on that window.
  const CtlResult json = Ctl(f, {"stream", "toy", "--csv", f.Path("series.csv"), "--json"});
  REQUIRE(json.exit_code == 0);
  const std::vector<std::string> lines = Lines(json.out);
  REQUIRE(lines.size() == kRows + 1);
  std::vector<double> at_lookback;
  for (int i = 0; i < kRows; ++i) {
    const auto line = ParseJson<google::protobuf::Value>(lines[i]);
    REQUIRE(Field(line, "sequence").number_value() == i + 1);
    REQUIRE(Field(line, "version").number_value() == 1);
    if (i + 1 == kT) Flatten(Field(line, "forecast"), at_lookback);
  }
  const auto summary = ParseJson<google::protobuf::Value>(lines.back());
  REQUIRE(Field(Field(summary, "summary"), "ticks").number_value() == kRows);
  const std::vector<float> series = SeriesValues(kRows);
  v1::PredictRequest request;
  request.set_model("toy");
  for (const int64_t d : {1, kT, kF}) request.mutable_inputs()->add_shape(d);
  for (int i = 0; i < kT * kF; ++i) request.mutable_inputs()->add_values(series[i]);
  grpc::ClientContext context;
  v1::PredictResponse response;
  REQUIRE(f.daemon->forecaster().Predict(&context, request, &response).ok());
  const std::vector<float> want = Floats(response.forecasts());
  REQUIRE(at_lookback.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i, at_lookback[i], want[i]);
    REQUIRE(std::fabs(static_cast<float>(at_lookback[i]) - want[i]) <=
            1e-4f * std::fabs(want[i]) + 1e-4f);
  }

  // Window mode: the first T-1 ticks need more; CSV keeps the summary on stderr.
  const CtlResult csv = Ctl(f, {"stream", "quant", "--csv", f.Path("series.csv"), "-o", "csv"});
  REQUIRE(csv.exit_code == 0);
  const std::vector<std::string> rows = Lines(csv.out);
  REQUIRE(rows.size() == kRows + 1);
  REQUIRE(absl::StartsWith(rows[0], "sequence,version,ticks_needed,load+1_p10,load+1_p50"));
  REQUIRE(absl::StartsWith(rows[1], absl::StrCat("1,1,", kT - 1, ",")));
  REQUIRE(absl::StartsWith(rows[kT], absl::StrCat(kT, ",1,0,")));
  REQUIRE(absl::StrContains(csv.err, absl::StrCat("summary: ", kRows, " ticks")));
  REQUIRE(absl::StrContains(
      Ctl(f, {"stream", "quant", "--csv", f.Path("series.csv"), "--rate", "1000"}).out,
      absl::StrCat("needs ", kT - 1, " more ticks")));

  // --keep leaves the key open: streams lists it, detached, and --resume carries on from it.
  REQUIRE(Ctl(f, {"stream", "toy", "--csv", f.Path("series.csv"), "--key", "KEPT", "--keep"})
              .exit_code == 0);
  const CtlResult listed = Ctl(f, {"streams"});
  REQUIRE(listed.exit_code == 0);
  REQUIRE(absl::StrContains(listed.out, "KEY"));
  REQUIRE(absl::StrContains(listed.out, "KEPT"));
  REQUIRE(absl::StrContains(listed.out, "state"));
  REQUIRE_FALSE(absl::StrContains(listed.out, "AAPL"));  // closed at the end of its run
  const auto kept = ParseJson<v1::ListStreamsResponse>(Ctl(f, {"streams", "toy", "--json"}).out);
  REQUIRE(kept.streams_size() == 1);
  REQUIRE(kept.streams(0).key() == "KEPT");
  REQUIRE(kept.streams(0).sequence() == kRows);
  REQUIRE(kept.streams(0).ticks_buffered() == kT);
  const CtlResult resumed = Ctl(
      f, {"stream", "toy", "--csv", f.Path("series.csv"), "--key", "KEPT", "--resume", "--json"});
  REQUIRE(resumed.exit_code == 0);
  REQUIRE(Field(ParseJson<google::protobuf::Value>(Lines(resumed.out).front()), "sequence")
              .number_value() == kRows + 1);
  REQUIRE(absl::StrContains(Ctl(f, {"streams", "toy"}).out, "no tick streams of model toy"));

  // Errors: a key with nothing kept to resume, an unknown model.
  const CtlResult nothing =
      Ctl(f, {"stream", "toy", "--csv", f.Path("series.csv"), "--key", "NONE", "--resume"});
  REQUIRE(nothing.exit_code == 1);
  REQUIRE(absl::StartsWith(nothing.err, "error: NOT_FOUND: "));
  REQUIRE(Ctl(f, {"streams", "ghost"}).exit_code == 1);
  REQUIRE(Ctl(f, {"stream", "toy", "--key", "x"}).exit_code == 2);  // no --csv
}

// --- A model with covariates and series

// `rows` hourly observations of price, volume and event for each of `series`, stacked, with an
// ISO time column; the last kP rows of each series leave price and volume empty (the steps the
// last forecast forecasts). Cells are written as they are read back (cells[r] per column).
struct CovariateCsv {
  std::string text = "time,series,volume,price,event\n";
  std::vector<std::vector<float>> rows;  // price, volume, event per data row
  std::vector<int64_t> times;
  std::vector<std::string> series;
};

CovariateCsv MakeCovariateCsv(int rows, const std::vector<std::string>& series) {
  CovariateCsv csv;
  for (size_t s = 0; s < series.size(); ++s) {
    for (int r = 0; r < rows; ++r) {
      const bool ahead = r >= rows - kP;
      float price = 0, volume = 0;
      const std::string price_cell = absl::StrCat(10.0f + 2.0f * std::sin(0.3f * r + s));
      const std::string volume_cell = absl::StrCat(100.0f + 25.0f * std::cos(0.2f * r));
      REQUIRE(absl::SimpleAtof(price_cell, &price));
      REQUIRE(absl::SimpleAtof(volume_cell, &volume));
      const float event = r % 3 == 0 ? 1.0f : 0.0f;
      absl::StrAppend(&csv.text, "2026-03-02T", 4 + r < 10 ? "0" : "", 4 + r, ":00:00Z,", series[s],
                      ",", ahead ? "" : volume_cell, ",", ahead ? "" : price_cell, ",", event,
                      "\n");
      csv.rows.push_back({price, volume, event});
      csv.times.push_back(1772409600 + (4 + r) * 3600);
      csv.series.push_back(series[s]);
    }
  }
  return csv;
}

// The Predict request for the window of data rows [first, first + kT) of `csv`, its forecast
// steps the kP rows after it.
v1::PredictRequest CovariatePredict(const CovariateCsv& csv, int first) {
  v1::PredictRequest request;
  request.set_model("cov");
  for (const int64_t d : {1, kT, 3}) request.mutable_inputs()->add_shape(d);
  for (const int64_t d : {1, kP, 1}) request.mutable_future()->add_shape(d);
  for (int r = first; r < first + kT; ++r) {
    for (const float v : csv.rows[r]) request.mutable_inputs()->add_values(v);
  }
  for (int r = first + kT; r < first + kT + kP; ++r) {
    request.mutable_future()->add_values(csv.rows[r][2]);
  }
  for (int r = first; r < first + kT + kP; ++r) request.add_timestamps(csv.times[r]);
  request.add_series(csv.series[first]);
  return request;
}

void RequireForecastsClose(const std::vector<double>& printed, const std::vector<float>& want) {
  REQUIRE(printed.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    CAPTURE(i, printed[i], want[i]);
    REQUIRE(std::fabs(static_cast<float>(printed[i]) - want[i]) <=
            1e-4f * std::fabs(want[i]) + 1e-4f);
  }
}

TEST_CASE("predict and stream read a model's covariates, times and series from the CSV",
          "[integration][forecastctl]") {
  Fixture f;
  ModelConfig config = testing::CovariateConfig("cov", kT, kP);
  config.mutable_batching()->set_max_batch_size(8);
  const std::unique_ptr<Forecaster> model = testing::RandomCovariateModel(config, 3);
  REQUIRE(PublishVersion(*model, absl::StrCat(f.repository.path(), "/cov"), 1).ok());
  f.Restart();
  const auto rpc = [&](const v1::PredictRequest& request) {
    grpc::ClientContext context;
    v1::PredictResponse response;
    const grpc::Status status = f.daemon->forecaster().Predict(&context, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return Floats(response.forecasts());
  };

  constexpr int kRows = kT + kP + 2;  // three forecasts of kT + kP rows each
  const CovariateCsv one = MakeCovariateCsv(kRows, {"MSFT"});
  WriteFile(f.Path("msft.csv"), one.text);
  const CtlResult json =
      Ctl(f, {"predict", "cov", "--csv", f.Path("msft.csv"), "--timestamp-column", "time",
              "--series", "MSFT", "--windows", "2", "--json"});
  REQUIRE(json.exit_code == 0);
  std::vector<double> printed, rows;
  const auto parsed = ParseJson<google::protobuf::Value>(json.out);
  Flatten(Field(parsed, "forecasts"), printed);
  Flatten(Field(parsed, "inputRows"), rows);
  // The last forecast's steps are the CSV's last kP rows.
  REQUIRE(rows == std::vector<double>{1, kT, 2, kT + 1});
  std::vector<float> want = rpc(CovariatePredict(one, 1));
  const std::vector<float> second = rpc(CovariatePredict(one, 2));
  want.insert(want.end(), second.begin(), second.end());
  RequireForecastsClose(printed, want);

  // Stacked series: every window within one series, each with its own name.
  const CovariateCsv stacked = MakeCovariateCsv(kRows, {"AAPL", "MSFT"});
  WriteFile(f.Path("stacked.csv"), stacked.text);
  const CtlResult all =
      Ctl(f, {"predict", "cov", "--csv", f.Path("stacked.csv"), "--timestamp-column", "time",
              "--series-column", "series", "--all", "--json"});
  REQUIRE(all.exit_code == 0);
  printed.clear();
  rows.clear();
  const auto stacked_parsed = ParseJson<google::protobuf::Value>(all.out);
  Flatten(Field(stacked_parsed, "forecasts"), printed);
  Flatten(Field(stacked_parsed, "inputRows"), rows);
  REQUIRE(rows.size() == 2 * 6);  // three windows per series
  REQUIRE(rows[6] == kRows);      // MSFT's first window starts at its first row
  want.clear();
  for (const int first : {0, 1, 2, kRows, kRows + 1, kRows + 2}) {
    const std::vector<float> f_window = rpc(CovariatePredict(stacked, first));
    want.insert(want.end(), f_window.begin(), f_window.end());
  }
  RequireForecastsClose(printed, want);

  // The stream sends each tick with the event and times of the kP rows after it.
  const CtlResult streamed = Ctl(f, {"stream", "cov", "--csv", f.Path("msft.csv"),
                                     "--timestamp-column", "time", "--series", "MSFT", "--json"});
  REQUIRE(streamed.exit_code == 0);
  const std::vector<std::string> lines = Lines(streamed.out);
  REQUIRE(lines.size() == kRows - kP + 1);  // a line per tick, then the summary
  std::vector<double> at_lookback;
  Flatten(Field(ParseJson<google::protobuf::Value>(lines[kT - 1]), "forecast"), at_lookback);
  RequireForecastsClose(at_lookback, rpc(CovariatePredict(one, 0)));

  // What the model needs and a plain model refuses are usage errors.
  for (const std::vector<std::string>& args : std::vector<std::vector<std::string>>{
           {"predict", "cov", "--csv", f.Path("msft.csv"), "--timestamp-column", "time"},
           {"predict", "cov", "--csv", f.Path("msft.csv"), "--series", "MSFT"},
           {"predict", "cov", "--csv", f.Path("msft.csv"), "--timestamp-column", "time", "--series",
            "MSFT", "--windows", "4"},
           {"predict", "toy", "--csv", f.Path("msft.csv"), "--series", "MSFT"},
           {"stream", "cov", "--csv", f.Path("msft.csv"), "--series", "MSFT"}}) {
    CAPTURE(absl::StrJoin(args, " "));
    REQUIRE(Ctl(f, args).exit_code == 2);
  }
  const CtlResult unknown = Ctl(f, {"predict", "cov", "--csv", f.Path("msft.csv"),
                                    "--timestamp-column", "time", "--series", "GOOG"});
  REQUIRE(unknown.exit_code == 1);
  REQUIRE(absl::StrContains(unknown.err, "NOT_FOUND"));
}

// --- Training and jobs

TEST_CASE("train --json follows a new model's job to SUCCEEDED, then models and jobs show it",
          "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(200));
  ModelConfig config = BaseConfig("fresh", {"load"});
  config.mutable_lstm()->set_hidden_size(8);
  config.mutable_lstm()->set_num_layers(1);
  const absl::StatusOr<std::string> config_json = ModelConfigToJson(config);
  REQUIRE(config_json.ok());
  WriteFile(f.Path("fresh.json"), *config_json);

  const CtlResult train =
      Ctl(f, {"train", "fresh", "--config", f.Path("fresh.json"), "--inline-csv",
              f.Path("series.csv"), "--epochs", "2", "--batch-size", "16", "--seed", "1",
              "--optimizer", "adamw", "--loss", "huber", "--json"});
  REQUIRE(train.exit_code == 0);
  const std::vector<std::string> lines = Lines(train.out);
  REQUIRE(lines.size() >= 4);
  const std::string job_id = ParseJson<v1::TrainResponse>(lines.front()).job_id();
  REQUIRE(!job_id.empty());
  std::vector<int64_t> epochs_closed;
  for (size_t i = 1; i + 1 < lines.size(); ++i) {
    const auto event = ParseJson<v1::TrainJobEvent>(lines[i]);
    REQUIRE(event.has_progress());
    REQUIRE(event.progress().epochs() == 2);
    if (event.progress().kind() == v1::TrainProgressEvent::EPOCH) {
      epochs_closed.push_back(event.progress().epoch());
    }
  }
  REQUIRE(epochs_closed == std::vector<int64_t>{1, 2});
  const auto finished = ParseJson<v1::TrainJobEvent>(lines.back());
  REQUIRE(finished.has_finished());
  REQUIRE(finished.finished().job_id() == job_id);
  REQUIRE(finished.finished().state() == v1::TRAIN_JOB_SUCCEEDED);
  REQUIRE(finished.finished().published_version() == 1);

  const CtlResult models = Ctl(f, {"models", "list", "--json"});
  REQUIRE(models.exit_code == 0);
  bool found = false;
  const auto listed = ParseJson<v1::ListModelsResponse>(models.out);
  for (const v1::ModelStatus& m : listed.models()) {
    if (m.name() != "fresh") continue;
    found = true;
    REQUIRE(std::vector<int64_t>(m.versions().begin(), m.versions().end()) ==
            std::vector<int64_t>{1});
  }
  REQUIRE(found);

  const CtlResult jobs = Ctl(f, {"jobs", "list"});
  REQUIRE(jobs.exit_code == 0);
  REQUIRE(absl::StrContains(jobs.out, job_id));
  REQUIRE(absl::StrContains(jobs.out, "SUCCEEDED"));
  const CtlResult jobs_json = Ctl(f, {"jobs", "list", "--model", "fresh", "--json"});
  REQUIRE(ParseJson<v1::ListTrainJobsResponse>(jobs_json.out).jobs_size() == 1);
  const CtlResult show = Ctl(f, {"jobs", "show", job_id});
  REQUIRE(show.exit_code == 0);
  REQUIRE(absl::StrContains(show.out, "version 1 published"));

  SECTION("fine-tune detached, watch it, promote the result") {
    const CtlResult detached = Ctl(f, {"train", "fresh", "--inline-csv", f.Path("series.csv"),
                                       "--epochs", "1", "--base-version", "1", "--detach"});
    REQUIRE(detached.exit_code == 0);
    const std::string id(absl::StripAsciiWhitespace(detached.out));
    REQUIRE(!id.empty());
    REQUIRE(id != job_id);
    const CtlResult watch = Ctl(f, {"jobs", "watch", id});
    REQUIRE(watch.exit_code == 0);
    REQUIRE(absl::StrContains(watch.out, "SUCCEEDED, version 2 published"));

    const CtlResult promote = Ctl(f, {"models", "promote", "fresh", "2"});
    REQUIRE(promote.exit_code == 0);
    REQUIRE(absl::StrContains(promote.out, "serving version 2"));
    const CtlResult show_model = Ctl(f, {"models", "show", "fresh", "--json"});
    REQUIRE(ParseJson<v1::ModelStatus>(show_model.out).serving_version() == 2);
  }
}

TEST_CASE("Ctrl-C on a watch without a terminal detaches (130), a cancelled job's watch exits 1",
          "[integration][forecastctl]") {
  Fixture f(/*default_checkpoints=*/true);
  WriteFile(f.Path("series.csv"), SeriesCsv(200));
  const CtlResult started = Ctl(
      f, {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", "100000", "--detach"});
  REQUIRE(started.exit_code == 0);
  const std::string id(absl::StripAsciiWhitespace(started.out));

  // setsid: no controlling terminal, so there is nobody to ask and the watch detaches.
  absl::StatusOr<ChildProcess> watch =
      ChildProcess::Start({"/usr/bin/setsid", FORECASTCTL_BINARY, "--address",
                           f.daemon->grpc_address(), "jobs", "watch", id});
  REQUIRE(watch.ok());
  const absl::Time give_up = absl::Now() + kRunBound;
  // After the first epoch, whose end writes the job's checkpoint.
  while (!absl::StrContains(watch->Output(), "epoch 1/") && absl::Now() < give_up) {
    REQUIRE(watch->Running());
    absl::SleepFor(absl::Milliseconds(20));
  }
  REQUIRE(watch->Signal(SIGINT));
  const absl::StatusOr<int> code = watch->WaitForExit(kRunBound);
  INFO(watch->Output());
  REQUIRE(code.ok());
  // Detached, not done: 130 (128 + SIGINT), so that `train ... && promote` stops here.
  REQUIRE(*code == 130);
  REQUIRE(absl::StrContains(watch->Output(), absl::StrCat("jobs watch ", id)));

  const CtlResult running = Ctl(f, {"jobs", "show", id, "--json"});
  REQUIRE(running.exit_code == 0);
  const v1::TrainJobState state = ParseJson<v1::TrainJobInfo>(running.out).state();
  REQUIRE((state == v1::TRAIN_JOB_RUNNING || state == v1::TRAIN_JOB_QUEUED));

  // Another watch, then the job cancelled from elsewhere: the watch ends with 1, the state and
  // the reason.
  absl::StatusOr<ChildProcess> second = ChildProcess::Start(
      {FORECASTCTL_BINARY, "--address", f.daemon->grpc_address(), "jobs", "watch", id});
  REQUIRE(second.ok());
  while (!absl::StrContains(second->Output(), "Watching job") && absl::Now() < give_up) {
    REQUIRE(second->Running());
    absl::SleepFor(absl::Milliseconds(20));
  }
  const CtlResult cancel = Ctl(f, {"jobs", "cancel", id, "--wait"});
  REQUIRE(cancel.exit_code == 0);
  REQUIRE(absl::StrContains(cancel.out, "CANCELLED"));
  const absl::StatusOr<int> second_code = second->WaitForExit(kRunBound);
  INFO(second->Output());
  REQUIRE(second_code.ok());
  REQUIRE(*second_code == 1);
  REQUIRE(absl::StrContains(second->Output(), absl::StrCat("error: job ", id, " CANCELLED: ")));

  // A finished job: cancelling it says so and fails; watching it reports how it ended.
  const CtlResult again = Ctl(f, {"jobs", "cancel", id});
  INFO(again.err);
  REQUIRE(again.exit_code == 1);
  REQUIRE(absl::StrContains(again.err, absl::StrCat("job ", id, " already finished")));
  REQUIRE(absl::StrContains(again.err, "CANCELLED"));
  const CtlResult rewatch = Ctl(f, {"jobs", "watch", id});
  REQUIRE(rewatch.exit_code == 1);
  REQUIRE(absl::StrContains(rewatch.err, "CANCELLED"));

  // The cancelled job's checkpoint (kept to resume) is in the model's own directory, so that
  // removing the model removes it; nothing is written beside the models.
  const std::filesystem::path model_dir = std::filesystem::path(f.repository.path()) / "toy";
  std::vector<std::string> checkpoints;
  for (const auto& e : std::filesystem::directory_iterator(model_dir / ".checkpoints")) {
    checkpoints.push_back(e.path().filename().string());
  }
  INFO(absl::StrJoin(checkpoints, ", "));
  REQUIRE(checkpoints.size() == 1);
  REQUIRE(absl::EndsWith(checkpoints[0], ".ckpt"));
  REQUIRE_FALSE(
      std::filesystem::exists(std::filesystem::path(f.repository.path()) / ".checkpoints"));
}

TEST_CASE("training jobs outlive the daemon, with ids unique across restarts",
          "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(200));
  const auto detached = [&](const std::string& epochs) {
    const CtlResult r = Ctl(
        f, {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", epochs, "--detach"});
    REQUIRE(r.exit_code == 0);
    return std::string(absl::StripAsciiWhitespace(r.out));
  };
  const auto state = [&](const std::string& id) {
    const CtlResult r = Ctl(f, {"jobs", "show", id, "--json"});
    CAPTURE(id, r.err);
    REQUIRE(r.exit_code == 0);
    return ParseJson<v1::TrainJobInfo>(r.out);
  };
  const std::string done = detached("1");
  REQUIRE(Ctl(f, {"jobs", "watch", done}).exit_code == 0);
  const std::string running = detached("100000");
  REQUIRE(state(running).state() == v1::TRAIN_JOB_RUNNING);
  // A crash: the running job cannot record its end.
  f.Restart(SIGKILL);

  const v1::TrainJobInfo succeeded = state(done);
  REQUIRE(succeeded.state() == v1::TRAIN_JOB_SUCCEEDED);
  REQUIRE(succeeded.published_version() >= 2);
  REQUIRE(succeeded.epochs_run() == 1);
  REQUIRE(succeeded.created_unix_ms() > 0);
  const v1::TrainJobInfo lost = state(running);
  REQUIRE(lost.state() == v1::TRAIN_JOB_FAILED);
  REQUIRE(absl::StrContains(lost.error(), "forecastd stopped while the job ran"));

  // A new job gets a new id, listed after the others.
  const std::string next = detached("1");
  REQUIRE(next != done);
  REQUIRE(next != running);
  REQUIRE(Ctl(f, {"jobs", "watch", next}).exit_code == 0);
  const CtlResult list = Ctl(f, {"jobs", "list"});
  REQUIRE(list.exit_code == 0);
  REQUIRE(list.out.find(done) < list.out.find(running));
  REQUIRE(list.out.find(running) < list.out.find(next));
  // The records live in the repository.
  REQUIRE(std::filesystem::exists(std::filesystem::path(f.repository.path()) / ".jobs" /
                                  absl::StrCat(done, ".json")));

  // The version it published carries its lineage; the shipped version 1 has none.
  const CtlResult show = Ctl(f, {"models", "show", "toy", "--json"});
  REQUIRE(show.exit_code == 0);
  const v1::ModelStatus status = ParseJson<v1::ModelStatus>(show.out);
  REQUIRE(status.lineage().count(1) == 0);
  REQUIRE(status.lineage().count(succeeded.published_version()) == 1);
  const v1::VersionLineage& lineage = status.lineage().at(succeeded.published_version());
  REQUIRE(lineage.job_id() == done);
  REQUIRE(lineage.data_rows() == 200);
  REQUIRE(lineage.data_digest().size() == 16);
  REQUIRE(lineage.best_epoch() == 1);
  REQUIRE(lineage.has_best_validation_loss());
  REQUIRE(lineage.training().epochs() == 1);
  REQUIRE_FALSE(lineage.training().data().has_inline_series());  // by size and digest only
  REQUIRE(lineage.base_version() == 0);
  REQUIRE(absl::StartsWith(lineage.forecastd_version(), "0."));
  REQUIRE(lineage.published_unix_ms() >= succeeded.created_unix_ms());
  // The same series twice: the same digest.
  REQUIRE(status.lineage().at(state(next).published_version()).data_digest() ==
          lineage.data_digest());
  const CtlResult table = Ctl(f, {"models", "show", "toy"});
  REQUIRE(absl::StrContains(table.out, "DATA DIGEST"));
  REQUIRE(absl::StrContains(table.out, done));
}

// --- Admin

TEST_CASE("status and models list/show/unload/load", "[integration][forecastctl]") {
  Fixture f;
  const CtlResult status = Ctl(f, {"status"});
  REQUIRE(status.exit_code == 0);
  REQUIRE(absl::StrContains(status.out, "ready"));
  REQUIRE(absl::StrContains(status.out, "cpu"));
  REQUIRE(absl::StrContains(status.out, "LENT TEAMS"));
  REQUIRE(ParseJson<v1::ServerStatus>(Ctl(f, {"status", "--json"}).out).ready());

  const CtlResult list = Ctl(f, {"models", "list"});
  REQUIRE(list.exit_code == 0);
  REQUIRE(absl::StrContains(list.out, "NAME"));
  REQUIRE(absl::StrContains(list.out, "IN-FLIGHT"));
  REQUIRE(absl::StrContains(list.out, "toy"));
  REQUIRE(absl::StrContains(list.out, "READY"));

  const CtlResult show = Ctl(f, {"models", "show", "quant"});
  REQUIRE(show.exit_code == 0);
  REQUIRE(absl::StrContains(show.out, "gru (hidden 8, 1 layer)"));
  REQUIRE(absl::StrContains(show.out, "quantiles"));
  REQUIRE(absl::StrContains(
      show.out,
      "scaling:          per feature (mean and std of the training data); each window by its "
      "last value\n"));
  // How the loaded version computes: its precision and the instruction set oneDNN runs.
  REQUIRE(absl::StrContains(show.out, "COMPUTE"));
  const v1::ModelStatus shown =
      ParseJson<v1::ModelStatus>(Ctl(f, {"models", "show", "quant", "--json"}).out);
  REQUIRE(shown.loaded_size() == 1);
  INFO(shown.loaded(0).compute());
  REQUIRE(absl::StartsWith(shown.loaded(0).compute(), "fp32 on "));
  REQUIRE(absl::StrContains(show.out, shown.loaded(0).compute()));

  const CtlResult unload = Ctl(f, {"models", "unload", "quant", "--json"});
  REQUIRE(unload.exit_code == 0);
  REQUIRE(ParseJson<v1::ModelStatus>(unload.out).state() == v1::MODEL_UNLOADED);
  const CtlResult load = Ctl(f, {"models", "load", "quant"});
  REQUIRE(load.exit_code == 0);
  REQUIRE(absl::StrContains(load.out, "quant: READY"));

  // The address from the environment; a flag wins over it.
  const CtlResult from_env =
      RunCtl({"/usr/bin/env", absl::StrCat("FORECASTD_ADDRESS=", f.daemon->grpc_address()),
              FORECASTCTL_BINARY},
             {"status"});
  REQUIRE(from_env.exit_code == 0);
  const CtlResult flag_wins = RunCtl({"/usr/bin/env", "FORECASTD_ADDRESS=127.0.0.1:1",
                                      FORECASTCTL_BINARY, "--address", f.daemon->grpc_address()},
                                     {"status"});
  REQUIRE(flag_wins.exit_code == 0);
}

TEST_CASE("list commands take -o table, wide, json or csv, and --watch prints changes until Ctrl-C",
          "[integration][forecastctl]") {
  Fixture f;
  const CtlResult table = Ctl(f, {"models", "list"});
  REQUIRE(table.exit_code == 0);
  REQUIRE(!absl::StrContains(table.out, "ARCHITECTURE"));
  const CtlResult wide = Ctl(f, {"models", "list", "-o", "wide"});
  REQUIRE(wide.exit_code == 0);
  REQUIRE(absl::StrContains(wide.out, "ARCHITECTURE"));
  REQUIRE(absl::StrContains(wide.out, "gru (hidden 8, 1 layer)"));

  // CSV: every column, plain values, fields with commas quoted.
  const std::vector<std::string> csv = Lines(Ctl(f, {"models", "list", "-o", "csv"}).out);
  REQUIRE(csv.size() == 3);
  REQUIRE(absl::StartsWith(csv[0], "NAME,STATE,SERVING,VERSIONS,IN-FLIGHT,QUEUED,DEVICE,"));
  REQUIRE(absl::StartsWith(csv[1], "quant,READY,1,1,0,0,cpu,\"gru (hidden 8, 1 layer)\",8,3,"));
  REQUIRE(absl::StartsWith(csv[2], "toy,READY,1,1,0,0,cpu,"));
  // -o json is --json.
  REQUIRE(ParseJson<v1::ListModelsResponse>(Ctl(f, {"models", "list", "-o", "json"}).out)
              .models_size() == 2);
  REQUIRE(Lines(Ctl(f, {"jobs", "list", "-o", "csv"}).out) ==
          std::vector<std::string>{"JOB,MODEL,STATE,EPOCH,TRAIN LOSS,BEST VAL LOSS,BEST EPOCH,"
                                   "VERSION,PROMOTED,AGE,CREATED (UTC),FINISHED (UTC),ERROR"});
  REQUIRE(absl::StrContains(Ctl(f, {"streams", "-o", "wide"}).out, "no tick streams"));

  // --watch without a terminal: a listing each time it changes, one JSON line each.
  absl::StatusOr<ChildProcess> watch =
      ChildProcess::Start({FORECASTCTL_BINARY, "--address", f.daemon->grpc_address(), "models",
                           "list", "--watch", "--interval", "0.1", "-o", "json"});
  REQUIRE(watch.ok());
  const absl::Time give_up = absl::Now() + kRunBound;
  const auto wait_for = [&](const std::string& text) {
    while (!absl::StrContains(watch->Output(), text) && absl::Now() < give_up) {
      REQUIRE(watch->Running());
      absl::SleepFor(absl::Milliseconds(20));
    }
    REQUIRE(absl::StrContains(watch->Output(), text));
  };
  wait_for("MODEL_READY");
  REQUIRE(Ctl(f, {"models", "unload", "quant"}).exit_code == 0);
  wait_for("MODEL_UNLOADED");
  absl::SleepFor(absl::Milliseconds(300));  // listings that change nothing print nothing
  REQUIRE(watch->Signal(SIGINT));
  const absl::StatusOr<int> code = watch->WaitForExit(kRunBound);
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  // quant READY first, UNLOADED last (perhaps UNLOADING between); never the same twice running.
  const std::vector<std::string> listings = Lines(watch->Output());
  REQUIRE(listings.size() >= 2);
  REQUIRE(ParseJson<v1::ListModelsResponse>(listings.front()).models(0).state() == v1::MODEL_READY);
  REQUIRE(ParseJson<v1::ListModelsResponse>(listings.back()).models(0).state() ==
          v1::MODEL_UNLOADED);
  for (size_t i = 1; i < listings.size(); ++i) REQUIRE(listings[i] != listings[i - 1]);
}

TEST_CASE("JSON prints int64 fields as numbers where a double holds them exactly",
          "[integration][forecastctl]") {
  Fixture f;
  const CtlResult show = Ctl(f, {"models", "show", "toy", "--json"});
  REQUIRE(show.exit_code == 0);
  REQUIRE(absl::StrContains(show.out, "\"servingVersion\": 1,"));
  REQUIRE(absl::StrContains(show.out, "\"versions\": [\n    1\n  ]"));
  REQUIRE(!absl::StrContains(show.out, "\"servingVersion\": \""));
  REQUIRE(ParseJson<v1::ModelStatus>(show.out).serving_version() == 1);

  // A seed above 2^53 stays a string (as protobuf's mapping has it): exact for every reader.
  WriteFile(f.Path("series.csv"), SeriesCsv(60));
  const CtlResult train =
      Ctl(f, {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", "1", "--seed",
              "9007199254740993", "--base-version", "1", "--json"});
  REQUIRE(train.exit_code == 0);
  const CtlResult lineage = Ctl(f, {"models", "show", "toy", "--json"});
  REQUIRE(absl::StrContains(lineage.out, "\"seed\": \"9007199254740993\""));
  REQUIRE(absl::StrContains(lineage.out, "\"baseVersion\": 1,"));
  REQUIRE(ParseJson<v1::ModelStatus>(lineage.out).lineage().at(2).seed() == 9007199254740993ULL);
}

TEST_CASE("models delete removes a version with its checkpoints, never the serving one",
          "[integration][forecastctl]") {
  Fixture f(/*default_checkpoints=*/true);
  WriteFile(f.Path("series.csv"), SeriesCsv(200));
  const std::string checkpoints = absl::StrCat(f.repository.path(), "/toy/.checkpoints");
  const auto checkpoint_count = [&] {
    int n = 0;
    std::error_code error;
    for (const auto& e : std::filesystem::directory_iterator(checkpoints, error)) {
      n += e.path().extension() == ".ckpt" ? 1 : 0;
    }
    return n;
  };
  // Version 2, fine-tuned from 1, then serving.
  REQUIRE(Ctl(f, {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", "1",
                  "--base-version", "1", "--promote"})
              .exit_code == 0);
  REQUIRE(ParseJson<v1::ModelStatus>(Ctl(f, {"models", "show", "toy", "--json"}).out)
              .serving_version() == 2);

  // A long fine-tuning from version 1: deleting 1 is refused while it runs; cancelled after
  // its first epoch, it leaves a checkpoint that only version 1 can resume.
  const CtlResult started = Ctl(f, {"train", "toy", "--inline-csv", f.Path("series.csv"),
                                    "--epochs", "100000", "--base-version", "1", "--detach"});
  REQUIRE(started.exit_code == 0);
  const std::string id(absl::StripAsciiWhitespace(started.out));
  const absl::Time give_up = absl::Now() + kRunBound;
  while (checkpoint_count() == 0 && absl::Now() < give_up) absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(checkpoint_count() == 1);
  const CtlResult busy = Ctl(f, {"models", "delete", "toy", "1"});
  REQUIRE(busy.exit_code == 1);
  REQUIRE(absl::StrContains(busy.err, "FAILED_PRECONDITION"));
  REQUIRE(absl::StrContains(busy.err, id));
  REQUIRE(Ctl(f, {"jobs", "cancel", id, "--wait"}).exit_code == 0);
  REQUIRE(checkpoint_count() == 1);

  // The serving version is refused, an absent one is NOT_FOUND.
  const CtlResult serving = Ctl(f, {"models", "delete", "toy", "2"});
  REQUIRE(serving.exit_code == 1);
  REQUIRE(absl::StrContains(serving.err, "FAILED_PRECONDITION"));
  REQUIRE(absl::StrContains(serving.err, "is serving"));
  const CtlResult absent = Ctl(f, {"models", "delete", "toy", "7"});
  REQUIRE(absent.exit_code == 1);
  REQUIRE(absl::StrContains(absent.err, "NOT_FOUND"));

  const CtlResult deleted = Ctl(f, {"models", "delete", "toy", "1", "--json"});
  REQUIRE(deleted.exit_code == 0);
  const auto response = ParseJson<v1::DeleteModelVersionResponse>(deleted.out);
  REQUIRE(response.removed_checkpoints_size() == 1);
  REQUIRE(std::vector<int64_t>(response.model().versions().begin(),
                               response.model().versions().end()) == std::vector<int64_t>{2});
  REQUIRE(checkpoint_count() == 0);
  REQUIRE(!std::filesystem::exists(absl::StrCat(f.repository.path(), "/toy/1")));
  // Still serving, and still gone after a restart.
  WriteFile(f.Path("window.csv"), SeriesCsv(kT));
  REQUIRE(Ctl(f, {"predict", "toy", "--csv", f.Path("window.csv")}).exit_code == 0);
  f.Restart();
  const auto after = ParseJson<v1::ModelStatus>(Ctl(f, {"models", "show", "toy", "--json"}).out);
  REQUIRE(std::vector<int64_t>(after.versions().begin(), after.versions().end()) ==
          std::vector<int64_t>{2});
  // The last version left is the one that serves: refused too.
  REQUIRE(Ctl(f, {"models", "unload", "toy"}).exit_code == 0);
  const CtlResult last = Ctl(f, {"models", "delete", "toy", "2"});
  REQUIRE(last.exit_code == 1);
  REQUIRE(absl::StrContains(last.err, "its only version"));
}

// --- Errors

TEST_CASE("server errors exit 1 and name the gRPC code", "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(20));
  const auto require_error = [](const CtlResult& r, const std::string& code) {
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 1);
    REQUIRE(absl::StartsWith(r.err, absl::StrCat("error: ", code, ": ")));
  };
  require_error(Ctl(f, {"predict", "ghost", "--csv", f.Path("series.csv")}), "NOT_FOUND");
  REQUIRE(absl::StrContains(Ctl(f, {"models", "show", "ghost"}).err, "'ghost'"));
  require_error(Ctl(f, {"models", "show", "ghost"}), "NOT_FOUND");
  require_error(Ctl(f, {"models", "promote", "toy", "99"}), "NOT_FOUND");
  require_error(Ctl(f, {"jobs", "show", "no-such-job"}), "NOT_FOUND");
  require_error(Ctl(f, {"bench", "ghost"}), "NOT_FOUND");
  require_error(Ctl(f, {"train", "ghost", "--inline-csv", f.Path("series.csv"), "--epochs", "1"}),
                "NOT_FOUND");
  require_error(Ctl(f, {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", "1",
                        "--devices", "cuda:0,cuda:1"}),
                "INVALID_ARGUMENT");
  require_error(Ctl(f, {"predict", "toy", "--csv", f.Path("series.csv"), "--priority", "7"}),
                "INVALID_ARGUMENT");
  require_error(Ctl(f, {"bench", "toy", "--batch-sizes", "1000"}), "INVALID_ARGUMENT");

  // Nothing listens there.
  const std::string nowhere = absl::StrCat("127.0.0.1:", testing::PickFreePort());
  require_error(RunCtl({FORECASTCTL_BINARY, "--address", nowhere}, {"models", "list"}),
                "UNAVAILABLE");
  require_error(RunCtl({FORECASTCTL_BINARY, "--metrics-address", nowhere}, {"metrics"}),
                "UNAVAILABLE");
}

TEST_CASE("train --worker names the workers of a job across daemons",
          "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(200));
  const std::vector<std::string> train = {"train",    "toy", "--inline-csv", f.Path("series.csv"),
                                          "--epochs", "1"};
  const auto with = [&train](std::vector<std::string> extra) {
    extra.insert(extra.begin(), train.begin(), train.end());
    return extra;
  };
  const auto require_error = [](const CtlResult& r, const std::string& code,
                                const std::string& names) {
    INFO("stdout: " << r.out << "\nstderr: " << r.err);
    REQUIRE(r.exit_code == 1);
    REQUIRE(absl::StartsWith(r.err, absl::StrCat("error: ", code, ": ")));
    REQUIRE(absl::StrContains(r.err, names));
  };
  // Nothing listens there: the daemon refuses the job, naming the worker.
  const std::string nowhere = absl::StrCat("127.0.0.1:", testing::PickFreePort());
  require_error(Ctl(f, with({"--worker", nowhere})), "UNAVAILABLE", nowhere);
  // The devices after '=' reach the daemon, which takes GPUs only.
  require_error(Ctl(f, with({"--worker", absl::StrCat(nowhere, "=cpu")})), "INVALID_ARGUMENT",
                absl::StrCat(nowhere, "'s GPUs"));
  // The flags replace the spec's workers.
  WriteFile(f.Path("job.json"),
            R"({"model": "toy", "training": {"workers": [{"address": "127.0.0.1:1",
                "devices": ["cpu"]}]}})");
  require_error(Ctl(f, with({"--spec", f.Path("job.json"), "--worker", nowhere})), "UNAVAILABLE",
                nowhere);
  // An address is needed.
  for (const char* bad : {"=cuda:0", "="}) {
    CAPTURE(bad);
    const CtlResult r = Ctl(f, with({"--worker", bad}));
    REQUIRE(r.exit_code == 2);
    REQUIRE(absl::StrContains(r.err, "ADDRESS[=DEVICES]"));
  }
}

TEST_CASE("usage errors exit 2", "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(5));
  WriteFile(f.Path("ragged.json"), "[[[1, 2]], [[1]]]");
  const std::vector<std::vector<std::string>> cases = {
      {},
      {"frobnicate"},
      {"models"},
      {"models", "list", "--bogus"},
      {"models", "show"},
      {"models", "promote", "toy", "zero"},
      {"predict"},
      {"predict", "toy"},
      {"predict", "toy", "--csv", "/nonexistent/file.csv"},
      {"predict", "toy", "--csv", f.Path("series.csv")},  // 5 rows; a window needs 8
      {"predict", "toy", "--json-input", f.Path("ragged.json")},
      {"predict", "toy", "--csv", f.Path("series.csv"), "--output", "xml"},
      {"predict", "toy", "--csv", f.Path("series.csv"), "--windows", "2", "--all"},
      {"train", "toy", "--epochs", "2"},  // no data
      {"train", "toy", "--inline-csv", f.Path("series.csv"), "--optimizer", "adagrad"},
      {"train", "toy", "--inline-csv", f.Path("series.csv"), "--epochs", "-1"},
      {"bench", "toy", "--batch-sizes", "1,x"},
      {"--timeout", "0", "status"},
      {"completion", "tcsh"},
      {"models", "list", "-o", "yaml"},
      {"jobs", "list", "--watch", "--interval", "0"},
      {"models", "delete", "toy", "0"},
  };
  for (const std::vector<std::string>& args : cases) {
    const CtlResult r = Ctl(f, args);
    CAPTURE(absl::StrJoin(args, " "));
    REQUIRE(r.exit_code == 2);
  }
  // A parse error names the problem and where to read more.
  const CtlResult unknown = CtlAlone({"models", "list", "--bogus"});
  REQUIRE(absl::StrContains(unknown.err, "error: "));
  REQUIRE(absl::StrContains(unknown.err, "--bogus"));
  REQUIRE(absl::StrContains(unknown.err, "forecastctl models list --help"));

  // Typos get the nearest command or flag; ranges are stated in plain numbers.
  const auto says = [](const std::vector<std::string>& args, const std::string& text) {
    const CtlResult r = CtlAlone(args);
    CAPTURE(absl::StrJoin(args, " "), r.err);
    REQUIRE(r.exit_code == 2);
    REQUIRE(absl::StrContains(r.err, text));
    return r.err;
  };
  says({"modles"}, "'modles' is not a command of 'forecastctl'; did you mean 'models'?");
  says({"models", "lst"}, "did you mean 'list'?");
  says({"models", "list", "--jsn"},
       "'--jsn' is not a flag of 'forecastctl models list'; "
       "did you mean '--json'?");
  says({"jobs", "wacth", "x"}, "did you mean 'watch'?");
  says({"models", "show", "toy", "--adress", "x"}, "did you mean '--address'?");
  REQUIRE_FALSE(
      absl::StrContains(says({"frobnicate"}, "'frobnicate' is not a command"), "did you mean"));
  const std::string range = says({"train", "toy", "--epochs", "0"}, "must be above 0, not 0");
  REQUIRE_FALSE(absl::StrContains(range, "e+308"));
  says({"bench", "toy", "--duration-ms", "0"}, "must be from 1 to 600000, not 0");
  says({"train", "toy", "--validation-fraction", "1"}, "must be from 0 to 0.95, not 1");
}

TEST_CASE("kubectl's words work: ls, get, describe", "[integration][forecastctl]") {
  Fixture f;
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"models", "ls"}, {"get", "models"}}) {
    const CtlResult r = Ctl(f, args);
    CAPTURE(absl::StrJoin(args, " "), r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(absl::StrContains(r.out, "toy"));
  }
  for (const std::vector<std::string>& args :
       std::vector<std::vector<std::string>>{{"models", "get", "toy"},
                                             {"models", "describe", "toy"},
                                             {"describe", "model", "toy"},
                                             {"get", "model", "toy"}}) {
    const CtlResult r = Ctl(f, args);
    CAPTURE(absl::StrJoin(args, " "), r.err);
    REQUIRE(r.exit_code == 0);
    REQUIRE(absl::StrContains(r.out, "name:"));
  }
  const CtlResult jobs = Ctl(f, {"get", "jobs"});
  REQUIRE(jobs.exit_code == 0);
}

TEST_CASE("a connection failure says which address was tried and what answered there",
          "[integration][forecastctl]") {
  Fixture f;
  // The metrics port: HTTP, not gRPC.
  const CtlResult metrics = CtlAlone({"--address", f.metrics_address(), "status"});
  CAPTURE(metrics.err);
  REQUIRE(metrics.exit_code == 1);
  REQUIRE(absl::StrContains(metrics.err, absl::StrCat("not reachable at ", f.metrics_address())));
  REQUIRE(absl::StrContains(metrics.err, "forecastd's metrics port answers there"));
  REQUIRE(absl::StrContains(metrics.err, "--address HOST:PORT or FORECASTD_ADDRESS"));
  // Nothing at all there.
  const CtlResult nothing = CtlAlone({"--address", "127.0.0.1:1", "status"});
  CAPTURE(nothing.err);
  REQUIRE(nothing.exit_code == 1);
  REQUIRE(absl::StrContains(nothing.err, "not reachable at 127.0.0.1:1"));
  REQUIRE_FALSE(absl::StrContains(nothing.err, "answers there"));
}

// --- Help, completion

TEST_CASE("every command has --help with an example", "[integration][forecastctl]") {
  const std::vector<std::string> commands = {"",
                                             "status",
                                             "models",
                                             "models list",
                                             "models show",
                                             "models load",
                                             "models unload",
                                             "models promote",
                                             "models delete",
                                             "predict",
                                             "stream",
                                             "streams",
                                             "train",
                                             "jobs",
                                             "jobs list",
                                             "jobs show",
                                             "jobs watch",
                                             "jobs cancel",
                                             "bench",
                                             "metrics",
                                             "completion"};
  for (const std::string& command : commands) {
    std::vector<std::string> args = absl::StrSplit(command, ' ', absl::SkipEmpty());
    args.push_back("--help");
    const CtlResult r = CtlAlone(args);
    CAPTURE(command);
    REQUIRE(r.exit_code == 0);
    REQUIRE(absl::StrContains(r.out, "Example"));
    REQUIRE(absl::StrContains(
        r.out, absl::StrCat("Usage: forecastctl", command.empty() ? "" : " ", command)));
  }
}

// The candidates `shell` offers after `line` (typed after the forecastctl on PATH, its completion
// script loaded), one per line.
std::string ShellCompletes(const std::string& shell, const std::string& line) {
  TempDir dir;
  const CtlResult r = CtlAlone({"completion", shell});
  REQUIRE(r.exit_code == 0);
  const std::string script = absl::StrCat(dir.path(), "/forecastctl.", shell);
  WriteFile(script, r.out);
  const std::string bin_dir = std::filesystem::path(FORECASTCTL_BINARY).parent_path().string();
  std::string program;
  if (shell == "bash") {
    // As bash calls a completion function: the line up to the cursor.
    program = absl::StrCat("PATH='", bin_dir, "':$PATH; source '", script, "'; COMP_LINE='", line,
                           "'; COMP_POINT=${#COMP_LINE}; _forecastctl; printf '%s\n' "
                           "\"${COMPREPLY[@]}\"");
  } else if (shell == "zsh") {
    // compadd and compdef are the completion system's; these print what it would offer (the
    // candidates that start with the word being typed).
    program = absl::StrCat(
        "PATH='", bin_dir, "':$PATH; compdef() { :; }; compadd() { print -l -- ",
        "${(M)${(@P)2}:#${words[CURRENT]}*}; }; _files() { print ':files'; }; source '", script,
        "'; line='", line, "'; words=(${(z)line}); [[ $line == *' ' ]] && words+=(''); ",
        "CURRENT=${#words}; _forecastctl");
  } else {
    // fish completes a command line without a terminal: complete -C.
    program = absl::StrCat("set -x PATH '", bin_dir, "' $PATH; source '", script,
                           "'; complete -C '", line, "'");
  }
  const absl::StatusOr<testing::RunResult> run =
      testing::Run({absl::StrCat("/usr/bin/", shell), "-c", program}, kRunBound);
  REQUIRE(run.ok());
  INFO(shell << ": " << line << "\n" << run->output);
  REQUIRE(run->exit_code == 0);
  return run->output;
}

TEST_CASE("completion for bash, zsh and fish: commands, flags, choices and names from the server",
          "[integration][forecastctl]") {
  Fixture f;
  const std::string at = absl::StrCat("--address ", f.daemon->grpc_address(), " ");
  // What the scripts ask for: `__complete -- WORDS`, the last word being completed.
  const auto candidates = [&](std::vector<std::string> words) {
    words.insert(words.begin(), {"__complete", "--", "--address", f.daemon->grpc_address()});
    const CtlResult r = CtlAlone(words);
    REQUIRE(r.exit_code == 0);
    return Lines(r.out);
  };
  const auto has = [](const std::vector<std::string>& lines, const std::string& word) {
    return std::find(lines.begin(), lines.end(), word) != lines.end();
  };
  REQUIRE(has(candidates({""}), "models"));
  REQUIRE(!has(candidates({""}), "__complete"));
  // The hidden command is never offered as the fix of a typo.
  const CtlResult typo = CtlAlone({"_complete"});
  REQUIRE(typo.exit_code == 2);
  REQUIRE(!absl::StrContains(typo.err, "__complete"));
  REQUIRE(absl::StrContains(CtlAlone({"completon", "bash"}).err, "did you mean 'completion'?"));
  REQUIRE(has(candidates({"models", "de"}), "delete"));
  REQUIRE(has(candidates({"models", "list", "-"}), "--watch"));
  REQUIRE(has(candidates({"models", "list", "-"}), "--address"));  // global flags too
  REQUIRE(candidates({"models", "list", "-o", ""}) ==
          std::vector<std::string>{"table", "wide", "json", "csv"});
  // Names from the server: models, a model's versions, job ids, stream keys.
  REQUIRE(candidates({"models", "show", ""}) == std::vector<std::string>{"quant", "toy"});
  REQUIRE(candidates({"models", "promote", "toy", ""}) == std::vector<std::string>{"1"});
  REQUIRE(candidates({"predict", "toy", "--version", ""}) == std::vector<std::string>{"1"});
  REQUIRE(candidates({"jobs", "list", "--model", ""}) == std::vector<std::string>{"quant", "toy"});
  REQUIRE(candidates({"predict", "toy", "--csv", ""}) == std::vector<std::string>{":files"});
  REQUIRE(candidates({"jobs", "show", ""}).empty());  // no jobs yet
  // An unreachable server gives no names, quietly.
  const CtlResult away =
      CtlAlone({"__complete", "--", "--address", "127.0.0.1:1", "models", "show", ""});
  REQUIRE(away.exit_code == 0);
  REQUIRE(away.out.empty());
  REQUIRE(away.err.empty());

  for (const std::string shell : {"bash", "zsh", "fish"}) {
    CAPTURE(shell);
    const std::vector<std::string> commands = Lines(ShellCompletes(shell, "forecastctl models s"));
    REQUIRE(has(commands, "show"));
    REQUIRE(!has(commands, "list"));
    const std::vector<std::string> models =
        Lines(ShellCompletes(shell, absl::StrCat("forecastctl ", at, "models show ")));
    REQUIRE(has(models, "toy"));
    REQUIRE(has(models, "quant"));
    const std::vector<std::string> versions =
        Lines(ShellCompletes(shell, absl::StrCat("forecastctl ", at, "models promote toy ")));
    REQUIRE(has(versions, "1"));
    const std::vector<std::string> choices =
        Lines(ShellCompletes(shell, "forecastctl predict toy --output j"));
    REQUIRE(has(choices, "json"));
    REQUIRE(!has(choices, "csv"));
  }
}

// --- Bench, metrics

TEST_CASE("bench shows each point as it ends, then a table, and exports CSV",
          "[integration][forecastctl]") {
  Fixture f;
  const CtlResult r = Ctl(f, {"bench", "toy", "--batch-sizes", "1,4", "--concurrency", "1,2",
                              "--duration-ms", "100", "--csv", f.Path("bench.csv")});
  REQUIRE(r.exit_code == 0);
  const std::vector<std::string> lines = Lines(r.out);
  REQUIRE(absl::StrContains(r.out, "P50"));
  REQUIRE(absl::StrContains(r.out, "P99"));
  REQUIRE(absl::StrContains(r.out, "REQ/S"));
  int rows = 0;
  for (const std::string& line : lines) {
    const std::vector<std::string> cells = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (cells.size() >= 2 && (cells[0] == "1" || cells[0] == "4")) ++rows;
  }
  REQUIRE(rows == 4);
  REQUIRE(Lines(ReadFile(f.Path("bench.csv"))).size() == 5);
  // Each point on stderr as it ends, in order.
  INFO(r.err);
  for (const char* point :
       {"point 1/4: batch 1, concurrency 1: ", "point 2/4: batch 1, concurrency 2: ",
        "point 3/4: batch 4, concurrency 1: ", "point 4/4: batch 4, concurrency 2: "}) {
    REQUIRE(absl::StrContains(r.err, point));
  }
  REQUIRE(r.err.find("point 1/4") < r.err.find("point 4/4"));

  const CtlResult json =
      Ctl(f, {"bench", "toy", "--batch-sizes", "2", "--duration-ms", "50", "--json"});
  REQUIRE(json.exit_code == 0);
  const auto response = ParseJson<v1::BenchmarkResponse>(json.out);
  REQUIRE(response.points_size() == 1);
  REQUIRE(response.points(0).batch_size() == 2);
  REQUIRE(response.points(0).requests() > 0);
}

TEST_CASE("metrics shows forecastd_requests_total after traffic", "[integration][forecastctl]") {
  Fixture f;
  WriteFile(f.Path("series.csv"), SeriesCsv(20));
  REQUIRE(Ctl(f, {"predict", "toy", "--csv", f.Path("series.csv")}).exit_code == 0);

  const CtlResult text = Ctl(f, {"metrics"});
  REQUIRE(text.exit_code == 0);
  REQUIRE(absl::StrContains(text.out, "forecastd_requests_total (counter)"));
  REQUIRE(absl::StrContains(text.out, "forecastd_request_duration_seconds (histogram)"));
  REQUIRE(absl::StrContains(text.out, "P99"));
  REQUIRE(absl::StrContains(text.out, "nearest-rank percentile"));

  const CtlResult raw = Ctl(f, {"metrics", "--raw"});
  REQUIRE(raw.exit_code == 0);
  REQUIRE(absl::StrContains(raw.out, "# TYPE forecastd_requests_total counter"));

  const CtlResult filtered = Ctl(f, {"metrics", "requests_total"});
  REQUIRE(absl::StrContains(filtered.out, "forecastd_requests_total"));
  REQUIRE(!absl::StrContains(filtered.out, "forecastd_queue_depth"));

  const CtlResult json = Ctl(f, {"metrics", "--json"});
  REQUIRE(json.exit_code == 0);
  const auto parsed = ParseJson<google::protobuf::Value>(json.out);
  double toy_requests = 0;
  double toy_histogram_count = 0;
  for (const auto& family : Field(parsed, "families").list_value().values()) {
    const std::string name = Field(family, "name").string_value();
    for (const auto& series : Field(family, "series").list_value().values()) {
      const auto& labels = Field(series, "labels").struct_value().fields();
      const auto model = labels.find("model");
      if (model == labels.end() || model->second.string_value() != "toy") continue;
      if (name == "forecastd_requests_total") toy_requests += Field(series, "value").number_value();
      if (name == "forecastd_request_duration_seconds") {
        toy_histogram_count += Field(series, "count").number_value();
        // The bucket that holds the percentile: (gt, le], le a finite bucket bound.
        const auto& p99 = Field(series, "p99").struct_value().fields();
        REQUIRE(p99.at("le").number_value() > 0);
        REQUIRE((p99.at("gt").has_null_value() ||
                 p99.at("gt").number_value() < p99.at("le").number_value()));
      }
    }
  }
  REQUIRE(toy_requests >= 1);
  REQUIRE(toy_histogram_count >= 1);
}

// --- The client library's readers, on their own

TEST_CASE("CSV gaps after a window, a column as text and timestamps as Unix seconds",
          "[integration][forecastctl]") {
  const absl::StatusOr<Series> gaps = ParseCsvSeriesWithGaps("a,b\n1,2\n,4\n", {"a", "b"});
  REQUIRE(gaps.ok());
  REQUIRE(gaps->values[0] == 1);
  REQUIRE(std::isnan(gaps->values[2]));
  REQUIRE(gaps->values[3] == 4);
  REQUIRE_FALSE(ParseCsvSeries("a,b\n1,2\n,4\n", {"a", "b"}).ok());
  REQUIRE_FALSE(ParseCsvSeriesWithGaps("a\nx\n", {"a"}).ok());
  const absl::StatusOr<std::vector<std::string>> column =
      ParseCsvColumn("time,series\n\n1,\"AAPL\"\r\n2,MSFT\n", "series");
  REQUIRE(column.ok());
  REQUIRE(*column == std::vector<std::string>{"AAPL", "MSFT"});
  REQUIRE(ParseCsvColumn("a\n1\n", "series").status().code() == absl::StatusCode::kInvalidArgument);
  const int64_t t = 1772461800;  // 2026-03-02T14:30:00Z
  for (const char* cell : {"1772461800", "1772461800.9", "2026-03-02T14:30:00Z", "2026-03-02 14:30",
                           "2026-03-02T14:30:00.25", "2026-03-02T15:30:00+01:00"}) {
    CAPTURE(cell);
    const absl::StatusOr<int64_t> seconds = ParseUnixSeconds(cell);
    REQUIRE(seconds.ok());
    REQUIRE(*seconds == t);
  }
  REQUIRE(*ParseUnixSeconds("2026-03-02") == t - 14 * 3600 - 1800);
  REQUIRE(ParseUnixSeconds("monday").status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CSV series, sliding windows and JSON windows", "[integration][forecastctl]") {
  const absl::StatusOr<Series> series =
      ParseCsvSeries("time,b,a\r\n\n0,\"2\",1\n1,4,3\n2,6,5\n", {"a", "b"});
  REQUIRE(series.ok());
  REQUIRE(series->rows == 3);
  REQUIRE(series->values == std::vector<float>{1, 2, 3, 4, 5, 6});
  const absl::StatusOr<Windows> last_two = SlidingWindows(*series, 2, 2);
  REQUIRE(last_two.ok());
  REQUIRE(last_two->first_rows == std::vector<int64_t>{0, 1});
  REQUIRE(last_two->values == std::vector<float>{1, 2, 3, 4, 3, 4, 5, 6});
  REQUIRE(SlidingWindows(*series, 2, 0)->count == 2);
  REQUIRE(SlidingWindows(*series, 3, 1)->values.size() == 6);
  REQUIRE(absl::IsInvalidArgument(SlidingWindows(*series, 4, 1).status()));
  REQUIRE(absl::IsInvalidArgument(SlidingWindows(*series, 2, 3).status()));

  const absl::Status missing = ParseCsvSeries("a,c\n1,2\n", {"a", "b"}).status();
  REQUIRE(absl::StrContains(missing.message(), "no column 'b'"));
  const absl::Status bad = ParseCsvSeries("a\n1\nx\n", {"a"}).status();
  REQUIRE(absl::StrContains(bad.message(), "line 3"));
  REQUIRE(!ParseCsvSeries("a,b\n1\n", {"a"}).ok());
  REQUIRE(!ParseCsvSeries("a\nnan\n", {"a"}).ok());

  REQUIRE(LooksLikeJson("  \n[1]"));
  REQUIRE(LooksLikeJson("{}"));
  REQUIRE(!LooksLikeJson("a,b\n"));
  const absl::StatusOr<Windows> json = ParseJsonWindows("[[[1, 2], [3, 4]], [[5, 6], [7, 8]]]");
  REQUIRE(json.ok());
  REQUIRE(json->count == 2);
  REQUIRE(json->lookback == 2);
  REQUIRE(json->features == 2);
  REQUIRE(json->values == std::vector<float>{1, 2, 3, 4, 5, 6, 7, 8});
  REQUIRE(ParseJsonWindows("{\"inputs\": [[[1]]]}")->values == std::vector<float>{1});
  REQUIRE(!ParseJsonWindows("[[[1, 2], [3]]]").ok());
  REQUIRE(!ParseJsonWindows("[[[1, \"x\"]]]").ok());
  REQUIRE(!ParseJsonWindows("{\"windows\": []}").ok());
  REQUIRE(!ParseJsonWindows("[[[1]]").ok());
}

TEST_CASE("Prometheus text: families, label escapes, nearest-rank histogram buckets",
          "[integration][forecastctl]") {
  const std::string text =
      "# HELP t_requests_total Requests.\n"
      "# TYPE t_requests_total counter\n"
      "t_requests_total{model=\"a\\\"b\",code=\"OK\"} 3\n"
      "t_requests_total{model=\"c\",code=\"OK\"} 4 1700000000\n"
      "# TYPE t_latency_seconds histogram\n"
      "t_latency_seconds_bucket{model=\"a\",le=\"0.1\"} 10\n"
      "t_latency_seconds_bucket{model=\"a\",le=\"0.2\"} 20\n"
      "t_latency_seconds_bucket{model=\"a\",le=\"+Inf\"} 20\n"
      "t_latency_seconds_sum{model=\"a\"} 2.5\n"
      "t_latency_seconds_count{model=\"a\"} 20\n"
      "untyped_thing 7\n"
      "garbage line {\n";
  const std::vector<MetricFamily> families = ParsePrometheusText(text);
  REQUIRE(families.size() == 3);
  REQUIRE(families[0].name == "t_requests_total");
  REQUIRE(families[0].type == "counter");
  REQUIRE(families[0].help == "Requests.");
  REQUIRE(families[0].samples.size() == 2);
  REQUIRE(LabelValue(families[0].samples[0].labels, "model") == "a\"b");
  REQUIRE(families[0].samples[1].value == 4);
  REQUIRE(families[1].type == "histogram");
  REQUIRE(families[1].samples.size() == 5);
  REQUIRE(families[2].name == "untyped_thing");
  REQUIRE(families[2].type == "untyped");

  const std::vector<HistogramSeries> series = GroupHistogram(families[1]);
  REQUIRE(series.size() == 1);
  REQUIRE(series[0].count == 20);
  REQUIRE(series[0].sum == 2.5);
  REQUIRE(series[0].buckets.size() == 3);
  // Ten observations at or below 0.1, ten more at or below 0.2: the 10th (p50) is in the
  // first bucket, the 11th (p51) and the 20th (p100) in the second.
  const double inf = std::numeric_limits<double>::infinity();
  const auto bucket = [&](double q) { return HistogramNearestRank(series[0], q).value(); };
  REQUIRE(bucket(0.5).lower == -inf);
  REQUIRE(bucket(0.5).upper == 0.1);
  REQUIRE(bucket(0.05).upper == 0.1);
  REQUIRE(bucket(0.51).lower == 0.1);
  REQUIRE(bucket(0.51).upper == 0.2);
  REQUIRE(bucket(1.0).upper == 0.2);
  HistogramSeries empty;
  REQUIRE_FALSE(HistogramNearestRank(empty, 0.5).has_value());
  // Every batch of size 1 in the bucket le=1: p50 is that bucket, not a value inside it.
  HistogramSeries ones;
  ones.buckets = {{1.0, 7}, {2.0, 7}, {4.0, 7}, {inf, 7}};
  REQUIRE(HistogramNearestRank(ones, 0.5)->upper == 1.0);
  REQUIRE(HistogramNearestRank(ones, 0.99)->upper == 1.0);
  // Beyond the last finite bucket: the overflow bucket, (1, +Inf].
  HistogramSeries tail;
  tail.buckets = {{1.0, 1}, {inf, 10}};
  REQUIRE(HistogramNearestRank(tail, 0.99)->lower == 1.0);
  REQUIRE(HistogramNearestRank(tail, 0.99)->upper == inf);
  REQUIRE(HistogramNearestRank(tail, 0.1)->upper == 1.0);
}

}  // namespace
}  // namespace forecastd
