// `forecastctl stream MODEL --csv FILE`: replays a CSV series as one tick stream
// (Forecaster.Stream), one row per tick and one tick in flight, printing each forecast and a
// round-trip summary (for a model with future-known covariates or calendar features each tick
// also carries the covariates and times of the P rows after it); `forecastctl streams [MODEL]`:
// the tick streams the server keeps (Admin.ListStreams).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/list_view.h"
#include "client/forecastctl/output.h"
#include "client/input_windows.h"
#include "kernels/base/status.h"

namespace forecastd::ctl {
namespace {

using SteadyClock = std::chrono::steady_clock;
using TickStream = grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;

struct StreamArgs {
  std::string model;
  std::string csv;
  std::string key = "forecastctl";
  double rate_hz = 0;
  int64_t version = 0;
  bool resume = false;
  bool keep = false;
  std::string output = "table";
  std::string timestamp_column;  // calendar features: the CSV's time column
  std::string series;            // several series: the stream's
};

enum class Format { kTable, kCsv, kJson };

absl::Status FromStreamError(const v1::StreamError& error) {
  return absl::Status(static_cast<absl::StatusCode>(error.code()), error.message());
}

// One column per (step, target[, quantile]) of a forecast, in the tensor's order (P, targets,
// Q): "load+1", or "load+1 p90" ("load+1_p90" in CSV).
std::vector<std::string> ForecastColumns(const v1::ModelConfig& config,
                                         absl::string_view quantile_separator) {
  std::vector<std::string> columns;
  for (int32_t p = 1; p <= config.horizon(); ++p) {
    for (const std::string& target : config.target_names()) {
      if (config.quantiles().empty()) {
        columns.push_back(absl::StrCat(target, "+", p));
        continue;
      }
      for (const float q : config.quantiles()) {
        columns.push_back(absl::StrCat(target, "+", p, quantile_separator, QuantileLabel(q)));
      }
    }
  }
  return columns;
}

// Prints the forecasts one line each as they arrive (a stream has no end to wait for before
// aligning a table, so table columns have a fixed width).
class ForecastPrinter {
 public:
  ForecastPrinter(Format format, const v1::ModelConfig& config, const std::string& key)
      : format_(format),
        key_(key),
        columns_(ForecastColumns(config, format == Format::kCsv ? "_" : " ")) {}

  void Header() const {
    if (format_ == Format::kCsv) {
      std::cout << "sequence,version,ticks_needed," << absl::StrJoin(columns_, ",") << "\n";
    } else if (format_ == Format::kTable) {
      std::string line = absl::StrFormat("%8s  %7s", "SEQ", "VERSION");
      for (const std::string& c : columns_) absl::StrAppend(&line, "  ", Cell(c));
      std::cout << line << "\n";
    }
    std::cout.flush();
  }

  void Forecast(const v1::StreamForecast& f, double round_trip_us) const {
    const std::vector<float> values(f.forecast().values().begin(), f.forecast().values().end());
    switch (format_) {
      case Format::kCsv: {
        std::string line = absl::StrCat(f.sequence(), ",", f.version(), ",", f.ticks_needed());
        for (size_t i = 0; i < columns_.size(); ++i) {
          absl::StrAppend(&line, ",", i < values.size() ? JsonFloat(values[i]) : "");
        }
        std::cout << line << "\n";
        break;
      }
      case Format::kJson: {
        std::vector<std::string> numbers;
        for (const float v : values) numbers.push_back(JsonFloat(v));
        std::cout << absl::StrCat(
            "{\"key\": ", JsonQuote(key_), ", \"sequence\": ", f.sequence(),
            ", \"version\": ", f.version(), ", \"ticksNeeded\": ", f.ticks_needed(),
            ", \"shape\": [", absl::StrJoin(f.forecast().shape(), ", "), "], \"forecast\": [",
            absl::StrJoin(numbers, ", "), "], \"timing\": {\"queueUs\": ", f.timing().queue_us(),
            ", \"computeUs\": ", f.timing().compute_us(), ", \"totalUs\": ", f.timing().total_us(),
            ", \"batchSize\": ", f.timing().batch_size(),
            "}, \"roundTripUs\": ", JsonDouble(std::round(round_trip_us)), "}\n");
        break;
      }
      case Format::kTable: {
        std::string line = absl::StrFormat("%8d  %7d", f.sequence(), f.version());
        if (f.ticks_needed() > 0) {
          absl::StrAppend(&line, "  needs ", f.ticks_needed(), " more tick",
                          f.ticks_needed() == 1 ? "" : "s");
        } else {
          for (const float v : values) absl::StrAppend(&line, "  ", Cell(FormatValue(v)));
        }
        std::cout << line << "\n";
        break;
      }
    }
    std::cout.flush();
  }

 private:
  static constexpr size_t kCellWidth = 10;
  static std::string Cell(const std::string& s) {
    return s.size() >= kCellWidth ? s : std::string(kCellWidth - s.size(), ' ') + s;
  }
  static std::string FormatValue(float value) {
    const double v = std::fabs(value);
    if (v != 0 && (v < 1e-3 || v >= 1e6)) return absl::StrFormat("%.4g", value);
    return absl::StrFormat("%.4f", value);
  }

  const Format format_;
  const std::string key_;
  const std::vector<std::string> columns_;
};

// Nearest-rank percentile of sorted values.
double Percentile(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(std::max(0.0, std::ceil(q * sorted.size()) - 1));
  return sorted[std::min(i, sorted.size() - 1)];
}

// "ticks N (E errors), round trip us p50 .. p90 .. p99 .. max .., server total_us mean ..":
// on stdout after a table, on stderr after CSV (which stays a clean CSV), as a last JSON line.
void PrintSummary(Format format, int64_t ticks, int64_t errors, std::vector<double> round_trip_us,
                  double server_total_us_sum, int64_t forecasts) {
  std::sort(round_trip_us.begin(), round_trip_us.end());
  const double p50 = Percentile(round_trip_us, 0.5), p90 = Percentile(round_trip_us, 0.9),
               p99 = Percentile(round_trip_us, 0.99),
               max = round_trip_us.empty() ? 0 : round_trip_us.back();
  const double server_mean = forecasts == 0 ? 0 : server_total_us_sum / forecasts;
  if (format == Format::kJson) {
    std::cout << absl::StrFormat(
        "{\"summary\": {\"ticks\": %d, \"errors\": %d, \"roundTripUs\": {\"p50\": %.0f, "
        "\"p90\": %.0f, \"p99\": %.0f, \"max\": %.0f}, \"serverTotalUsMean\": %.0f}}\n",
        ticks, errors, p50, p90, p99, max, server_mean);
    return;
  }
  const std::string line = absl::StrFormat(
      "summary: %d ticks, %d errors; round trip us: p50 %.0f, p90 %.0f, p99 %.0f, max %.0f; "
      "server total_us mean %.0f\n",
      ticks, errors, p50, p90, p99, max, server_mean);
  if (format == Format::kCsv) {
    std::fputs(line.c_str(), stderr);
  } else {
    std::cout << "\n" << line;
  }
}

// Reads the answer to the key's last request; false when the call itself has ended.
bool ReadReply(TickStream& stream, v1::StreamResponse& response) {
  response.Clear();
  return stream.Read(&response);
}

// Half-closes and returns the call's final status.
absl::Status EndCall(TickStream& stream) {
  stream.WritesDone();
  return FromGrpcStatus(stream.Finish());
}

int RunStream(Context& context, const StreamArgs& args) {
  absl::StatusOr<std::string> text = ReadInput(args.csv);
  if (!text.ok()) return UsageError(text.status().message());
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::ModelStatus> model = (*client)->GetModel(args.model);
  if (!model.ok()) return ServerError(model.status());
  const v1::ModelConfig& config = model->config();
  const std::vector<std::string> features(config.feature_names().begin(),
                                          config.feature_names().end());
  // A model with future-known covariates or calendar features: each tick carries the
  // covariates and times of the P rows after it, so the last P rows are not ticks themselves
  // (their other cells may be empty).
  const bool calendar = config.covariates().calendar_size() > 0;
  const int64_t ahead =
      config.covariates().future_size() > 0 || calendar ? int64_t{config.horizon()} : 0;
  if (calendar && args.timestamp_column.empty()) {
    return UsageError(absl::StrCat("model '", args.model,
                                   "' has calendar features: name the CSV's time column with "
                                   "--timestamp-column"));
  }
  if (config.series_size() > 0 && args.series.empty() && !args.resume) {
    return UsageError(absl::StrCat("model '", args.model, "' was trained on ", config.series_size(),
                                   " series: name the stream's series with --series"));
  }
  absl::StatusOr<Series> series =
      ahead > 0 ? ParseCsvSeriesWithGaps(*text, features) : ParseCsvSeries(*text, features);
  const std::string source = args.csv == "-" ? "stdin" : args.csv;
  if (!series.ok()) return UsageError(absl::StrCat(source, ": ", series.status().message()));
  if (series->rows <= ahead) {
    return UsageError(absl::StrCat(source, ": no data rows",
                                   ahead > 0 ? absl::StrCat(" before the last ", ahead,
                                                            " (the forecast steps of the last "
                                                            "tick)")
                                             : ""));
  }
  const int64_t F = static_cast<int64_t>(features.size());
  const int64_t ticks = series->rows - ahead;
  std::vector<int64_t> future_columns;
  for (const std::string& name : config.covariates().future()) {
    future_columns.push_back(std::find(features.begin(), features.end(), name) - features.begin());
  }
  std::vector<int64_t> times;
  if (calendar) {
    absl::StatusOr<std::vector<std::string>> cells = ParseCsvColumn(*text, args.timestamp_column);
    if (!cells.ok()) return UsageError(absl::StrCat(source, ": ", cells.status().message()));
    for (size_t r = 0; r < cells->size(); ++r) {
      absl::StatusOr<int64_t> t = ParseUnixSeconds((*cells)[r]);
      if (!t.ok()) {
        return UsageError(absl::StrCat(source, ": data row ", r + 1, ", column '",
                                       args.timestamp_column, "': ", t.status().message()));
      }
      times.push_back(*t);
    }
  }
  for (int64_t r = 0; r < series->rows; ++r) {
    for (int64_t f = 0; f < F; ++f) {
      const bool covariate =
          std::find(future_columns.begin(), future_columns.end(), f) != future_columns.end();
      if (std::isnan(series->values[static_cast<size_t>(r * F + f)]) && (r < ticks || covariate)) {
        return UsageError(absl::StrCat(source, ": data row ", r + 1, ", column '",
                                       features[static_cast<size_t>(f)], "' is empty"));
      }
    }
  }
  const Format format = context.flags.json || args.output == "json" ? Format::kJson
                        : args.output == "csv"                      ? Format::kCsv
                                                                    : Format::kTable;

  grpc::ClientContext call_context;
  std::unique_ptr<TickStream> stream = (*client)->Stream(call_context);
  v1::StreamRequest request;
  v1::StreamResponse response;
  request.set_key(args.key);
  v1::StreamOpen* open = request.mutable_open();
  open->set_model(args.model);
  open->set_version(args.version);
  open->set_resume(args.resume);
  open->set_series(args.series);
  if (!stream->Write(request) || !ReadReply(*stream, response)) {
    return ServerError(EndCall(*stream));
  }
  if (response.has_error()) {
    const absl::Status refused = FromStreamError(response.error());
    EndCall(*stream).IgnoreError();
    return ServerError(refused);
  }
  if (format == Format::kTable) {
    const v1::StreamStatus& s = response.status();
    std::cout << "stream '" << args.key << "' of model " << args.model << " version " << s.version()
              << ", "
              << absl::AsciiStrToLower(
                     ShortName(v1::StreamingConfig::Mode_Name(s.mode()), "STREAM_MODE_"))
              << " mode, lookback " << s.lookback()
              << (s.resumed() ? absl::StrCat(", resumed after tick ", s.sequence()) : "") << "\n";
  }
  const ForecastPrinter printer(format, config, args.key);
  printer.Header();

  std::vector<double> round_trip_us;
  round_trip_us.reserve(static_cast<size_t>(ticks));
  int64_t errors = 0, forecasts = 0;
  double server_total_us = 0;
  const auto start = SteadyClock::now();
  for (int64_t r = 0; r < ticks; ++r) {
    if (args.rate_hz > 0) {
      std::this_thread::sleep_until(
          start + std::chrono::duration_cast<SteadyClock::duration>(
                      std::chrono::duration<double>(static_cast<double>(r) / args.rate_hz)));
    }
    request.Clear();
    request.set_key(args.key);
    const float* row = series->values.data() + r * F;
    request.mutable_ticks()->mutable_values()->Add(row, row + F);
    for (int64_t p = 1; p <= ahead && !future_columns.empty(); ++p) {
      for (const int64_t f : future_columns) {
        request.mutable_ticks()->add_future(series->values[static_cast<size_t>((r + p) * F + f)]);
      }
    }
    if (calendar) {
      request.mutable_ticks()->mutable_timestamps()->Add(times.begin() + r,
                                                         times.begin() + r + 1 + ahead);
    }
    const auto sent = SteadyClock::now();
    if (!stream->Write(request) || !ReadReply(*stream, response)) {
      return ServerError(EndCall(*stream));
    }
    const double us = std::chrono::duration<double, std::micro>(SteadyClock::now() - sent).count();
    if (response.has_error()) {
      ++errors;
      const absl::Status error = FromStreamError(response.error());
      std::cout.flush();
      std::fprintf(stderr, "error: data row %lld: %s: %s\n", static_cast<long long>(r + 1),
                   absl::StatusCodeToString(error.code()).c_str(),
                   std::string(error.message()).c_str());
      continue;
    }
    round_trip_us.push_back(us);
    ++forecasts;
    server_total_us += static_cast<double>(response.forecast().timing().total_us());
    printer.Forecast(response.forecast(), us);
  }
  PrintSummary(format, ticks, errors, std::move(round_trip_us), server_total_us, forecasts);

  if (!args.keep) {
    request.Clear();
    request.set_key(args.key);
    request.mutable_close();
    if (!stream->Write(request) || !ReadReply(*stream, response)) {
      return ServerError(EndCall(*stream));
    }
    if (response.has_error()) {
      EndCall(*stream).IgnoreError();
      return ServerError(FromStreamError(response.error()));
    }
  }
  if (absl::Status ended = EndCall(*stream); !ended.ok()) return ServerError(ended);
  return errors == 0 ? kExitOk : kExitServerError;
}

absl::StatusOr<Listing> ListStreams(ForecastdClient& client, const std::string& model) {
  ASSIGN_OR_RETURN(v1::ListStreamsResponse list, client.ListStreams(model));
  Listing listing{nullptr,
                  ListTable({{"KEY"},
                             {"MODEL"},
                             {"VERSION"},
                             {"PINNED", true},
                             {"MODE"},
                             {"TICKS"},
                             {"BUFFERED"},
                             {"LOOKBACK", true},
                             {"SERIES", true},
                             {"CONNECTED"},
                             {"IDLE"}}),
                  model.empty() ? "no tick streams" : "no tick streams of model " + model};
  for (const v1::StreamInfo& s : list.streams()) {
    const ListCell version =
        s.version() > 0 ? ListCell(absl::StrCat(s.version())) : ListCell("-", "");
    const double idle_s = static_cast<double>(s.idle_ms()) / 1e3;
    listing.table.AddRow(
        {s.key(), s.model(),
         s.requested_version() > 0
             ? ListCell(absl::StrCat(version.text, " (pinned)"), version.plain)
             : version,
         s.requested_version() > 0 ? "yes" : "no",
         absl::AsciiStrToLower(ShortName(v1::StreamingConfig::Mode_Name(s.mode()), "STREAM_MODE_")),
         absl::StrCat(s.sequence()),
         ListCell(absl::StrCat(s.ticks_buffered(), "/", s.lookback()),
                  absl::StrCat(s.ticks_buffered())),
         absl::StrCat(s.lookback()), s.series().empty() ? ListCell("-", "") : ListCell(s.series()),
         s.connected() ? "yes" : "no", ListCell(FormatSeconds(idle_s), absl::StrCat(idle_s))});
  }
  listing.response = std::make_unique<v1::ListStreamsResponse>(std::move(list));
  return listing;
}

}  // namespace

void AddStreamCommands(CLI::App& app, Context& context) {
  auto args = std::make_shared<StreamArgs>();
  CLI::App* stream = AddCommand(
      app, "stream",
      "Replay a CSV series as a tick stream: one row per tick, each answered with the forecast "
      "after it, then a round-trip latency summary",
      "  forecastctl stream demo_lstm --csv models/sample_input.csv\n"
      "  forecastctl stream demo_lstm --csv ticks.csv --key AAPL --rate 10 -o csv > f.csv\n"
      "  forecastctl stream demo_lstm --csv more.csv --key AAPL --resume --keep\n"
      "CSV: a header naming the model's features (any order; other columns are ignored), as for\n"
      "'predict'. One tick is in flight at a time; --rate caps ticks per second. The key is\n"
      "closed at the end unless --keep (then 'forecastctl streams' lists it and --resume goes\n"
      "on from it). A model with future-known covariates or calendar features (window mode)\n"
      "sends each tick with the covariates (and, from --timestamp-column, the times) of the P\n"
      "rows after it: the last P rows of the CSV are those of the last tick's forecast steps,\n"
      "and only their covariate and time cells need values. A model trained on several series\n"
      "names the stream's with --series.");
  stream->add_option("MODEL", args->model, "model name")->required();
  stream->add_option("--csv", args->csv, "CSV series with the model's feature columns ('-': stdin)")
      ->required();
  stream->add_option("--key", args->key, "the stream's key (e.g. an instrument id)")
      ->capture_default_str()
      ->check([](const std::string& v) { return v.empty() ? "the key is empty" : ""; });
  stream->add_option("--rate", args->rate_hz, "at most HZ ticks per second (0: as answers come)")
      ->check(NonNegative());
  stream->add_option("--version", args->version, "model version (default: the serving one)")
      ->check(NonNegative());
  stream->add_flag("--resume", args->resume,
                   "continue the key's kept stream (its state and sequence numbers)");
  stream->add_flag("--keep", args->keep, "leave the key open at the end instead of closing it");
  stream->add_option("--timestamp-column", args->timestamp_column,
                     "the rows' times, for a model with calendar features");
  stream->add_option("--series", args->series,
                     "the stream's series, for a model trained on several");
  stream->add_option("--output,-o", args->output, "table, csv or json (--json = -o json)")
      ->capture_default_str()
      ->check(CLI::IsMember({"table", "csv", "json"}));
  stream->callback([&context, args] {
    context.action = [&context, args] { return RunStream(context, *args); };
  });

  auto model = std::make_shared<std::string>();
  CLI::App* streams = AddCommand(
      app, "streams",
      "List the tick streams the server keeps: key, model, version, mode, ticks, ring buffer, "
      "whether a connection holds it, idle time",
      "  forecastctl streams\n  forecastctl streams demo_lstm -o json\n  forecastctl streams "
      "--watch");
  streams->add_option("MODEL", *model, "only this model's streams");
  auto list_flags = std::make_shared<ListFlags>();
  AddListFlags(*streams, *list_flags);
  streams->callback([&context, model, list_flags] {
    context.action = [&context, model, list_flags] {
      return RunList(context, *list_flags,
                     [model](ForecastdClient& client) { return ListStreams(client, *model); });
    };
  });
}

}  // namespace forecastd::ctl
