// `forecastctl predict MODEL`: windows from a CSV series or a JSON array, one Predict call,
// the forecasts as a table, CSV or JSON. For a model with future-known covariates or calendar
// features each forecast reads T + P CSV rows: the window, then the P rows of its forecast
// steps (their covariates and times); a model trained on several series is told each window's
// series.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/output.h"
#include "client/input_windows.h"
#include "kernels/base/status.h"

namespace forecastd::ctl {
namespace {

struct PredictArgs {
  std::string model;
  std::string csv;
  std::string json_input;
  int64_t windows = 0;
  bool all = false;
  int64_t version = 0;
  uint32_t priority = 0;
  uint64_t timeout_us = 0;
  std::string output = "table";
  std::string timestamp_column;  // calendar features: the CSV's time column
  std::string series;            // several series: the windows' series
  std::string series_column;     // ... or the CSV column naming each row's
};

// What the requests carry for the windows beside them, for a model with covariates or series;
// each empty where the model takes none.
struct Extras {
  std::vector<float> future;        // (B, P, covariates.future)
  std::vector<int64_t> timestamps;  // (B, T + P)
  std::vector<std::string> series;  // B names, or one for every window
};

// Little-endian float32 bytes, whatever the host's byte order.
std::string RawBytes(const std::vector<float>& values) {
  std::string raw(values.size() * sizeof(float), '\0');
  for (size_t i = 0; i < values.size(); ++i) {
    const uint32_t bits = std::bit_cast<uint32_t>(values[i]);
    for (int b = 0; b < 4; ++b) raw[4 * i + b] = static_cast<char>((bits >> (8 * b)) & 0xff);
  }
  return raw;
}

std::vector<float> FromRawBytes(const std::string& raw) {
  std::vector<float> values(raw.size() / sizeof(float));
  for (size_t i = 0; i < values.size(); ++i) {
    uint32_t bits = 0;
    for (int b = 0; b < 4; ++b) {
      bits |= uint32_t{static_cast<unsigned char>(raw[4 * i + b])} << (8 * b);
    }
    values[i] = std::bit_cast<float>(bits);
  }
  return values;
}

// A forecast tensor read back: (B, P, targets[, Q]).
struct Forecasts {
  int64_t B = 0, P = 0, targets = 0, Q = 1;
  bool has_quantiles = false;
  std::vector<float> values;
  float at(int64_t b, int64_t p, int64_t t, int64_t q) const {
    return values[static_cast<size_t>(((b * P + p) * targets + t) * Q + q)];
  }
};

absl::StatusOr<Forecasts> ReadForecasts(const v1::PredictResponse& response) {
  const v1::Tensor& tensor = response.forecasts();
  Forecasts f;
  if (tensor.shape_size() != 3 && tensor.shape_size() != 4) {
    return absl::InternalError(
        absl::StrCat("the forecasts have ", tensor.shape_size(), " dimensions, not 3 or 4"));
  }
  f.B = tensor.shape(0);
  f.P = tensor.shape(1);
  f.targets = tensor.shape(2);
  f.has_quantiles = tensor.shape_size() == 4;
  f.Q = f.has_quantiles ? tensor.shape(3) : 1;
  f.values = tensor.raw().empty()
                 ? std::vector<float>(tensor.values().begin(), tensor.values().end())
                 : FromRawBytes(tensor.raw());
  if (static_cast<int64_t>(f.values.size()) != f.B * f.P * f.targets * f.Q) {
    return absl::InternalError(absl::StrCat("the forecasts hold ", f.values.size(),
                                            " values; their shape needs ",
                                            f.B * f.P * f.targets * f.Q));
  }
  return f;
}

// Fixed decimals line up in a column; very large or small values keep their digits.
std::string FormatForecast(float value) {
  const double v = std::fabs(value);
  if (v != 0 && (v < 1e-3 || v >= 1e7)) return absl::StrFormat("%.6g", value);
  return absl::StrFormat("%.4f", value);
}

// Column names: one per target, or per (target, quantile): "load p10" ("load_p10" in CSV).
std::vector<std::string> ValueColumns(const v1::PredictResponse& response, const Forecasts& f,
                                      absl::string_view quantile_separator) {
  std::vector<std::string> columns;
  for (int64_t t = 0; t < f.targets; ++t) {
    const std::string target =
        t < response.target_names_size() ? response.target_names(t) : absl::StrCat("target", t);
    for (int64_t q = 0; q < f.Q; ++q) {
      if (!f.has_quantiles) {
        columns.push_back(target);
      } else {
        const std::string level = q < response.quantiles_size()
                                      ? QuantileLabel(response.quantiles(q))
                                      : absl::StrCat("q", q);
        columns.push_back(absl::StrCat(target, quantile_separator, level));
      }
    }
  }
  return columns;
}

void PrintTable(const v1::PredictResponse& response, const Forecasts& f, const Windows& windows,
                int requests) {
  const std::vector<std::string> value_columns = ValueColumns(response, f, " ");
  for (int64_t b = 0; b < f.B; ++b) {
    if (b > 0) std::cout << "\n";
    std::cout << "window " << b + 1 << " of " << f.B;
    if (b < static_cast<int64_t>(windows.first_rows.size())) {
      const int64_t first = windows.first_rows[b];
      std::cout << " (data rows " << first + 1 << "-" << first + windows.lookback << ")";
    }
    std::cout << ": the next " << f.P << " steps\n";
    std::vector<std::string> headers = {"STEP"};
    for (const std::string& c : value_columns) headers.push_back(c);
    TextTable table(headers);
    for (int64_t p = 0; p < f.P; ++p) {
      std::vector<std::string> row = {absl::StrCat(p + 1)};
      for (int64_t t = 0; t < f.targets; ++t) {
        for (int64_t q = 0; q < f.Q; ++q) row.push_back(FormatForecast(f.at(b, p, t, q)));
      }
      table.AddRow(std::move(row));
    }
    std::cout << table.Render();
  }
  const v1::Timing& timing = response.timing();
  std::cout << "\nmodel " << response.model() << " version " << response.version() << ": "
            << (requests > 1 ? absl::StrCat(requests, " requests, summed: ") : "") << "queue "
            << FormatMicros(static_cast<double>(timing.queue_us())) << ", compute "
            << FormatMicros(static_cast<double>(timing.compute_us())) << ", total "
            << FormatMicros(static_cast<double>(timing.total_us())) << ", batch size "
            << timing.batch_size() << (requests > 1 ? " (largest)" : "") << "\n";
}

void PrintCsv(const v1::PredictResponse& response, const Forecasts& f) {
  std::vector<std::string> header = {"window", "step"};
  for (const std::string& c : ValueColumns(response, f, "_")) header.push_back(c);
  std::cout << absl::StrJoin(header, ",") << "\n";
  for (int64_t b = 0; b < f.B; ++b) {
    for (int64_t p = 0; p < f.P; ++p) {
      std::string line = absl::StrCat(b + 1, ",", p + 1);
      for (int64_t t = 0; t < f.targets; ++t) {
        for (int64_t q = 0; q < f.Q; ++q) absl::StrAppend(&line, ",", JsonFloat(f.at(b, p, t, q)));
      }
      std::cout << line << "\n";
    }
  }
}

// {"model", "version", "shape", "targetNames", "quantiles", "forecasts": nested like shape,
//  "timing": {...}}; names in protobuf's JSON style, like every other --json output. With
// several requests, timing holds their sums (and the largest batch).
void PrintJsonForecasts(const v1::PredictResponse& response, const Forecasts& f,
                        const Windows& windows, int requests) {
  std::string out = absl::StrCat("{\n  \"model\": ", JsonQuote(response.model()),
                                 ",\n  \"version\": ", response.version(), ",\n  \"shape\": [",
                                 absl::StrJoin(response.forecasts().shape(), ", "), "]");
  std::vector<std::string> names;
  for (const std::string& n : response.target_names()) names.push_back(JsonQuote(n));
  absl::StrAppend(&out, ",\n  \"targetNames\": [", absl::StrJoin(names, ", "), "]");
  std::vector<std::string> levels;
  for (const float q : response.quantiles()) levels.push_back(JsonFloat(q));
  absl::StrAppend(&out, ",\n  \"quantiles\": [", absl::StrJoin(levels, ", "), "]");
  absl::StrAppend(&out, ",\n  \"forecasts\": [");
  for (int64_t b = 0; b < f.B; ++b) {
    absl::StrAppend(&out, b > 0 ? "," : "", "\n    [");
    for (int64_t p = 0; p < f.P; ++p) {
      absl::StrAppend(&out, p > 0 ? ", " : "", "[");
      for (int64_t t = 0; t < f.targets; ++t) {
        if (t > 0) out += ", ";
        if (f.has_quantiles) out += "[";
        for (int64_t q = 0; q < f.Q; ++q) {
          absl::StrAppend(&out, q > 0 ? ", " : "", JsonFloat(f.at(b, p, t, q)));
        }
        if (f.has_quantiles) out += "]";
      }
      out += "]";
    }
    out += "]";
  }
  absl::StrAppend(&out, "\n  ]");
  if (!windows.first_rows.empty()) {
    // Per window, the 0-based data rows [first, last] of the input it was cut from.
    std::vector<std::string> rows;
    for (const int64_t first : windows.first_rows) {
      rows.push_back(absl::StrCat("[", first, ", ", first + windows.lookback - 1, "]"));
    }
    absl::StrAppend(&out, ",\n  \"inputRows\": [", absl::StrJoin(rows, ", "), "]");
  }
  const v1::Timing& timing = response.timing();
  absl::StrAppend(&out, ",\n  \"timing\": {\"queueUs\": ", timing.queue_us(),
                  ", \"computeUs\": ", timing.compute_us(), ", \"totalUs\": ", timing.total_us(),
                  ", \"batchSize\": ", timing.batch_size(), "},\n  \"requests\": ", requests,
                  "\n}\n");
  std::cout << out;
}

// "'a', 'b', 'c', ...": the first few of `names`.
std::string FewNames(const google::protobuf::RepeatedPtrField<std::string>& names) {
  std::vector<std::string> quoted;
  for (int i = 0; i < std::min(names.size(), 5); ++i)
    quoted.push_back(absl::StrCat("'", names[i], "'"));
  if (names.size() > 5) quoted.push_back("...");
  return absl::StrJoin(quoted, ", ");
}

// The windows and extras of a CSV for a model with future-known covariates, calendar features or
// several series: every span of T rows (T + P with future-known values, the P rows after the
// window giving its forecast steps' covariates and times), within one series where
// --series-column names each row's; the last `count` of them (0: all).
absl::StatusOr<Windows> CsvWindowsWithExtras(absl::string_view text, const v1::ModelConfig& config,
                                             const PredictArgs& args, int64_t count,
                                             Extras& extras) {
  const std::vector<std::string> features(config.feature_names().begin(),
                                          config.feature_names().end());
  const int64_t T = config.lookback(), P = config.horizon(), F = features.size();
  const bool calendar = config.covariates().calendar_size() > 0;
  const bool ahead = config.covariates().future_size() > 0 || calendar;
  const int64_t span = T + (ahead ? P : 0);
  // The rows after a window may leave the columns that are not future-known empty.
  ASSIGN_OR_RETURN(const Series series,
                   ahead ? ParseCsvSeriesWithGaps(text, features) : ParseCsvSeries(text, features));
  std::vector<int64_t> times;
  if (calendar) {
    ASSIGN_OR_RETURN(const std::vector<std::string> cells,
                     ParseCsvColumn(text, args.timestamp_column));
    for (size_t r = 0; r < cells.size(); ++r) {
      absl::StatusOr<int64_t> t = ParseUnixSeconds(cells[r]);
      if (!t.ok()) {
        return absl::InvalidArgumentError(absl::StrCat(
            "data row ", r + 1, ", column '", args.timestamp_column, "': ", t.status().message()));
      }
      times.push_back(*t);
    }
  }
  std::vector<std::string> labels;
  if (!args.series_column.empty()) {
    ASSIGN_OR_RETURN(labels, ParseCsvColumn(text, args.series_column));
  }
  // Every span of rows that lies within one series.
  std::vector<int64_t> firsts;
  for (int64_t first = 0; first + span <= series.rows; ++first) {
    const bool one_series =
        labels.empty() || std::all_of(labels.begin() + first, labels.begin() + first + span,
                                      [&](const std::string& l) { return l == labels[first]; });
    if (one_series) firsts.push_back(first);
  }
  if (firsts.empty() || static_cast<int64_t>(firsts.size()) < count) {
    return absl::InvalidArgumentError(
        absl::StrCat("the series has ", series.rows, " rows; ", std::max<int64_t>(count, 1),
                     " window", count > 1 ? "s" : "", " of ", span, " rows (lookback ", T,
                     ahead ? absl::StrCat(", then the ", P, " forecast steps' covariates") : "",
                     ")", labels.empty() ? "" : ", each within one series,", " need",
                     count > 1 ? "" : "s", " more (", firsts.size(), " available)"));
  }
  if (count > 0) firsts.erase(firsts.begin(), firsts.end() - count);

  std::vector<int64_t> future_columns;
  for (const std::string& name : config.covariates().future()) {
    future_columns.push_back(std::find(features.begin(), features.end(), name) - features.begin());
  }
  Windows windows;
  windows.count = static_cast<int64_t>(firsts.size());
  windows.lookback = T;
  windows.features = F;
  windows.first_rows = firsts;
  for (const int64_t first : firsts) {
    for (int64_t r = first; r < first + T; ++r) {
      for (int64_t f = 0; f < F; ++f) {
        const float x = series.values[static_cast<size_t>(r * F + f)];
        if (std::isnan(x)) {
          return absl::InvalidArgumentError(
              absl::StrCat("data row ", r + 1, ", column '", features[static_cast<size_t>(f)],
                           "' is empty; a window's rows need every feature"));
        }
        windows.values.push_back(x);
      }
    }
    for (int64_t r = first + T; r < first + span && !future_columns.empty(); ++r) {
      for (const int64_t f : future_columns) {
        const float x = series.values[static_cast<size_t>(r * F + f)];
        if (std::isnan(x)) {
          return absl::InvalidArgumentError(absl::StrCat(
              "data row ", r + 1, ", column '", features[static_cast<size_t>(f)],
              "' is empty; the future-known covariates of a forecast step are needed"));
        }
        extras.future.push_back(x);
      }
    }
    if (calendar) {
      extras.timestamps.insert(extras.timestamps.end(), times.begin() + first,
                               times.begin() + first + span);
    }
    if (!labels.empty()) extras.series.push_back(labels[static_cast<size_t>(first)]);
  }
  if (!args.series.empty()) extras.series = {args.series};
  return windows;
}

int RunPredict(Context& context, const PredictArgs& args) {
  if (args.csv.empty() == args.json_input.empty()) {
    return UsageError("give the input with --csv FILE or --json-input FILE ('-' reads stdin)");
  }
  const std::string& path = args.csv.empty() ? args.json_input : args.csv;
  absl::StatusOr<std::string> text = ReadInput(path);
  if (!text.ok()) return UsageError(text.status().message());
  const bool json = path == "-" ? LooksLikeJson(*text) : !args.json_input.empty();
  if (json && (args.windows > 0 || args.all)) {
    return UsageError("--windows and --all cut windows from a CSV series; JSON input is windows");
  }

  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::ModelStatus> model = (*client)->GetModel(args.model);
  if (!model.ok()) return ServerError(model.status());
  const v1::ModelConfig& config = model->config();
  const std::vector<std::string> features(config.feature_names().begin(),
                                          config.feature_names().end());
  const std::string source = path == "-" ? "stdin" : path;
  const bool ahead =
      config.covariates().future_size() > 0 || config.covariates().calendar_size() > 0;
  if (config.series_size() == 0 && (!args.series.empty() || !args.series_column.empty())) {
    return UsageError(absl::StrCat("model '", args.model,
                                   "' was trained on one series; drop --series and "
                                   "--series-column"));
  }
  if (config.series_size() > 0 && args.series.empty() && args.series_column.empty()) {
    return UsageError(
        absl::StrCat("model '", args.model, "' was trained on ", config.series_size(), " series (",
                     FewNames(config.series()),
                     "): name the windows' series with --series NAME or --series-column COLUMN"));
  }
  if (json && (ahead || !args.series_column.empty())) {
    return UsageError(absl::StrCat(
        ahead ? absl::StrCat("model '", args.model,
                             "' has future-known covariates or calendar features, which JSON "
                             "windows do not carry: give --csv, ",
                             config.lookback(), " + ", config.horizon(), " rows per forecast")
              : "--series-column reads a CSV column; name the series of JSON windows with "
                "--series"));
  }
  if (config.covariates().calendar_size() > 0 && args.timestamp_column.empty()) {
    return UsageError(absl::StrCat("model '", args.model,
                                   "' has calendar features: name the CSV's time column with "
                                   "--timestamp-column"));
  }

  absl::StatusOr<Windows> windows = absl::UnknownError("unset");
  Extras extras;
  if (json) {
    windows = ParseJsonWindows(*text);
    if (!windows.ok()) return UsageError(absl::StrCat(source, ": ", windows.status().message()));
    if (windows->lookback != config.lookback() ||
        windows->features != static_cast<int64_t>(features.size())) {
      return UsageError(absl::StrCat(source, ": windows of ", windows->lookback, " steps x ",
                                     windows->features, " features; model '", args.model,
                                     "' takes ", config.lookback(), " steps x ", features.size(),
                                     " features (", absl::StrJoin(features, ", "), ")"));
    }
    if (!args.series.empty()) extras.series = {args.series};
  } else if (ahead || config.series_size() > 0) {
    windows = CsvWindowsWithExtras(*text, config, args,
                                   args.all ? 0 : (args.windows > 0 ? args.windows : 1), extras);
    if (!windows.ok()) return UsageError(absl::StrCat(source, ": ", windows.status().message()));
  } else {
    absl::StatusOr<Series> series = ParseCsvSeries(*text, features);
    if (!series.ok()) return UsageError(absl::StrCat(source, ": ", series.status().message()));
    windows = SlidingWindows(*series, config.lookback(),
                             args.all ? 0 : (args.windows > 0 ? args.windows : 1));
    if (!windows.ok()) return UsageError(absl::StrCat(source, ": ", windows.status().message()));
  }

  // The server refuses a batch above the model's max_batch_size, so more windows go in
  // several requests; their forecasts are concatenated and their timings added up.
  const int64_t max_batch =
      config.batching().max_batch_size() > 0 ? config.batching().max_batch_size() : 32;
  const int64_t window_values = windows->lookback * windows->features;
  v1::PredictResponse merged;
  Forecasts all;
  int requests = 0;
  for (int64_t begin = 0; begin < windows->count; begin += max_batch) {
    const int64_t B = std::min(max_batch, windows->count - begin);
    v1::PredictRequest request;
    request.set_model(args.model);
    request.set_version(args.version);
    request.set_priority(args.priority);
    request.set_timeout_us(args.timeout_us);
    v1::Tensor* inputs = request.mutable_inputs();
    inputs->add_shape(B);
    inputs->add_shape(windows->lookback);
    inputs->add_shape(windows->features);
    const auto first = windows->values.begin() + begin * window_values;
    inputs->set_raw(RawBytes(std::vector<float>(first, first + B * window_values)));
    if (!extras.future.empty()) {
      const int64_t per_window = static_cast<int64_t>(extras.future.size()) / windows->count;
      v1::Tensor* future = request.mutable_future();
      future->add_shape(B);
      future->add_shape(config.horizon());
      future->add_shape(config.covariates().future_size());
      const auto from = extras.future.begin() + begin * per_window;
      future->set_raw(RawBytes(std::vector<float>(from, from + B * per_window)));
    }
    if (!extras.timestamps.empty()) {
      const int64_t per_window = static_cast<int64_t>(extras.timestamps.size()) / windows->count;
      const auto from = extras.timestamps.begin() + begin * per_window;
      request.mutable_timestamps()->Add(from, from + B * per_window);
    }
    if (extras.series.size() == 1) {
      request.add_series(extras.series.front());
    } else {
      for (int64_t b = begin; b < begin + B && b < static_cast<int64_t>(extras.series.size());
           ++b) {
        request.add_series(extras.series[static_cast<size_t>(b)]);
      }
    }
    absl::StatusOr<v1::PredictResponse> response = (*client)->Predict(request);
    if (!response.ok()) return ServerError(response.status());
    absl::StatusOr<Forecasts> forecasts = ReadForecasts(*response);
    if (!forecasts.ok()) return ServerError(forecasts.status());
    if (requests++ == 0) {
      merged = *std::move(response);
      all = *std::move(forecasts);
      continue;
    }
    all.B += forecasts->B;
    all.values.insert(all.values.end(), forecasts->values.begin(), forecasts->values.end());
    v1::Timing& t = *merged.mutable_timing();
    const v1::Timing& more = response->timing();
    t.set_queue_us(t.queue_us() + more.queue_us());
    t.set_compute_us(t.compute_us() + more.compute_us());
    t.set_total_us(t.total_us() + more.total_us());
    t.set_batch_size(std::max(t.batch_size(), more.batch_size()));
  }
  merged.mutable_forecasts()->clear_raw();
  merged.mutable_forecasts()->clear_values();
  merged.mutable_forecasts()->set_shape(0, all.B);

  const std::string output = context.flags.json ? "json" : args.output;
  if (output == "json") {
    PrintJsonForecasts(merged, all, *windows, requests);
  } else if (output == "csv") {
    PrintCsv(merged, all);
  } else {
    PrintTable(merged, all, *windows, requests);
  }
  return kExitOk;
}

}  // namespace

void AddPredictCommand(CLI::App& app, Context& context) {
  auto args = std::make_shared<PredictArgs>();
  CLI::App* predict = AddCommand(
      app, "predict", "Forecast with a model from a CSV series or from JSON windows",
      "  forecastctl predict demo_lstm --csv models/sample_input.csv\n"
      "  forecastctl predict demo_lstm --csv series.csv --windows 24 --output csv > f.csv\n"
      "  forecastctl predict demo_lstm --json-input windows.json --output json\n"
      "  cat series.csv | forecastctl predict demo_lstm --csv -\n"
      "  forecastctl predict events --csv events.csv --timestamp-column time --series AAPL\n"
      "CSV: a header naming the model's features (any order; other columns such as a timestamp\n"
      "are ignored). JSON: {\"inputs\": [[[...]]]} or a bare array [window][step][feature].\n"
      "A model with future-known covariates or calendar features reads T + P rows per forecast:\n"
      "the T rows of its window, then the P rows of the steps it forecasts, whose covariate\n"
      "columns (and times) must be filled in and whose other cells may be empty; the last\n"
      "forecast ends with the CSV's last row. Its calendar features come from the times in\n"
      "--timestamp-column (Unix seconds or ISO 8601, UTC unless an offset is given). A model\n"
      "trained on several series is told the windows' series with --series, or takes each\n"
      "window's from --series-column (windows then never cross from one series to another).");
  predict->add_option("MODEL", args->model, "model name")->required();
  CLI::Option* csv = predict->add_option(
      "--csv", args->csv, "CSV series with the model's feature columns ('-': stdin)");
  CLI::Option* json_input = predict->add_option(
      "--json-input", args->json_input, "JSON windows, [window][step][feature] ('-': stdin)");
  csv->excludes(json_input);
  CLI::Option* windows = predict->add_option("--windows", args->windows,
                                             "CSV: predict the last N sliding windows (default 1)");
  windows->check(Positive());
  CLI::Option* all = predict->add_flag("--all", args->all, "CSV: predict every sliding window");
  windows->excludes(all);
  predict->add_option("--version", args->version, "model version (default: the serving one)")
      ->check(NonNegative());
  predict->add_option("--priority", args->priority,
                      "priority level, 1 the highest (default: the model's default)");
  predict->add_option("--timeout-us", args->timeout_us,
                      "queue timeout in microseconds, if the model's policy allows overrides");
  predict->add_option("--timestamp-column", args->timestamp_column,
                      "CSV: the rows' times, for a model with calendar features");
  CLI::Option* series = predict->add_option("--series", args->series,
                                            "the windows' series, for a model trained on several");
  CLI::Option* series_column = predict->add_option(
      "--series-column", args->series_column,
      "CSV: the column naming each row's series, for a model trained on several");
  series->excludes(series_column);
  predict->add_option("--output,-o", args->output, "table, csv or json (--json = -o json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json"}));
  predict->callback([&context, args] {
    context.action = [&context, args] { return RunPredict(context, *args); };
  });
}

}  // namespace forecastd::ctl
