// `forecastctl metrics`: fetches /metrics over plain HTTP and prints the forecastd_ series by
// family: counters and gauges as tables by label, histograms as count / mean and, for p50 /
// p90 / p99, the bucket that holds that nearest-rank percentile (a histogram says no more).
// --raw prints the exposition text as served.
#include <algorithm>
#include <cmath>
#include <iostream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/output.h"
#include "client/http_get.h"
#include "client/prometheus_text.h"

namespace forecastd::ctl {
namespace {

struct MetricsArgs {
  std::string pattern;
  bool raw = false;
  bool all = false;
};

// Every label key of the series: model and job first (what an operator looks for), then the
// others in order of first appearance.
std::vector<std::string> LabelKeys(const std::vector<MetricLabels>& series) {
  std::vector<std::string> keys;
  for (const char* first : {"model", "job_id"}) {
    for (const MetricLabels& labels : series) {
      if (LabelValue(labels, first).empty()) continue;
      keys.push_back(first);
      break;
    }
  }
  for (const MetricLabels& labels : series) {
    for (const auto& label : labels) {
      if (std::find(keys.begin(), keys.end(), label.first) == keys.end()) {
        keys.push_back(label.first);
      }
    }
  }
  return keys;
}

std::string LabelsJson(const MetricLabels& labels) {
  std::vector<std::string> parts;
  for (const auto& [k, v] : labels) parts.push_back(absl::StrCat(JsonQuote(k), ": ", JsonQuote(v)));
  return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
}

// How a histogram's value reads best: durations for _seconds, sizes for _bytes.
std::string FormatValue(const std::string& family, double value) {
  if (absl::EndsWith(family, "_seconds")) return FormatMicros(value * 1e6);
  if (absl::EndsWith(family, "_bytes")) return FormatBytes(value);
  return FormatNumber(value);
}

// A counter's or gauge's value: sizes for _bytes; large values (counts, Unix times) whole.
std::string FormatSampleValue(const std::string& family, double value) {
  if (absl::EndsWith(family, "_bytes")) return FormatBytes(value);
  if (std::isfinite(value) && std::fabs(value) >= 1e6) return absl::StrFormat("%.0f", value);
  return FormatNumber(value);
}

bool Selected(const MetricFamily& family, const MetricsArgs& args) {
  if (!args.all && !absl::StartsWith(family.name, "forecastd_")) return false;
  return args.pattern.empty() || absl::StrContains(family.name, args.pattern);
}

constexpr double kQuantiles[] = {0.5, 0.9, 0.99};

// The bucket (lower, upper] as a cell: "<=250us" for the first bucket, "100us..250us", ">5s"
// for the overflow bucket; "-" without observations.
std::string BucketCell(const std::string& family, const std::optional<HistogramBucket>& b) {
  if (!b.has_value()) return "-";
  if (std::isinf(b->upper)) return absl::StrCat(">", FormatValue(family, b->lower));
  if (std::isinf(b->lower)) return absl::StrCat("<=", FormatValue(family, b->upper));
  return absl::StrCat(FormatValue(family, b->lower), "..", FormatValue(family, b->upper));
}

void PrintFamily(const MetricFamily& family) {
  std::cout << family.name << " (" << family.type << ")";
  if (!family.help.empty()) std::cout << ": " << family.help;
  std::cout << "\n";
  std::string table;
  if (family.type == "histogram") {
    const std::vector<HistogramSeries> series = GroupHistogram(family);
    std::vector<MetricLabels> labels;
    for (const HistogramSeries& s : series) labels.push_back(s.labels);
    const std::vector<std::string> keys = LabelKeys(labels);
    std::vector<std::string> headers;
    for (const std::string& k : keys) headers.push_back(absl::AsciiStrToUpper(k));
    for (const char* h : {"COUNT", "MEAN", "P50", "P90", "P99"}) headers.push_back(h);
    TextTable t(headers);
    for (const HistogramSeries& s : series) {
      std::vector<std::string> row;
      for (const std::string& k : keys) row.push_back(LabelValue(s.labels, k));
      row.push_back(FormatNumber(s.count));
      row.push_back(s.count > 0 ? FormatValue(family.name, s.sum / s.count) : "-");
      for (const double q : kQuantiles) {
        row.push_back(BucketCell(family.name, HistogramNearestRank(s, q)));
      }
      t.AddRow(std::move(row));
    }
    table = absl::StrCat(t.Render(),
                         "(P50, P90, P99: the bucket, lower bound excluded, that holds the "
                         "nearest-rank percentile)\n");
  } else {
    std::vector<MetricLabels> labels;
    for (const MetricSample& s : family.samples) labels.push_back(s.labels);
    const std::vector<std::string> keys = LabelKeys(labels);
    std::vector<std::string> headers;
    for (const std::string& k : keys) headers.push_back(absl::AsciiStrToUpper(k));
    headers.push_back("VALUE");
    TextTable t(headers);
    for (const MetricSample& s : family.samples) {
      std::vector<std::string> row;
      for (const std::string& k : keys) row.push_back(LabelValue(s.labels, k));
      // A summary's _sum and _count rows are told apart by their sample name.
      row.push_back(s.name == family.name ? FormatSampleValue(family.name, s.value)
                                          : absl::StrCat(FormatNumber(s.value), " (",
                                                         s.name.substr(family.name.size()), ")"));
      t.AddRow(std::move(row));
    }
    table = t.Render();
  }
  for (absl::string_view line : absl::StrSplit(table, '\n', absl::SkipEmpty())) {
    std::cout << "  " << line << "\n";
  }
}

std::string FamilyJson(const MetricFamily& family) {
  std::vector<std::string> series;
  if (family.type == "histogram") {
    for (const HistogramSeries& s : GroupHistogram(family)) {
      std::string item =
          absl::StrCat("{\"labels\": ", LabelsJson(s.labels), ", \"count\": ", JsonDouble(s.count),
                       ", \"sum\": ", JsonDouble(s.sum),
                       ", \"mean\": ", JsonDouble(s.count > 0 ? s.sum / s.count : NAN));
      for (const double q : kQuantiles) {
        // {"gt": lower, "le": upper}: null for an infinite bound; null without observations.
        const std::optional<HistogramBucket> b = HistogramNearestRank(s, q);
        absl::StrAppend(&item, ", \"p", static_cast<int>(q * 100), "\": ",
                        b.has_value() ? absl::StrCat("{\"gt\": ", JsonDouble(b->lower),
                                                     ", \"le\": ", JsonDouble(b->upper), "}")
                                      : "null");
      }
      series.push_back(item + "}");
    }
  } else {
    for (const MetricSample& s : family.samples) {
      series.push_back(absl::StrCat("{\"name\": ", JsonQuote(s.name),
                                    ", \"labels\": ", LabelsJson(s.labels),
                                    ", \"value\": ", JsonDouble(s.value), "}"));
    }
  }
  return absl::StrCat("{\"name\": ", JsonQuote(family.name), ", \"type\": ", JsonQuote(family.type),
                      ", \"help\": ", JsonQuote(family.help), ", \"series\": [\n      ",
                      absl::StrJoin(series, ",\n      "), "]}");
}

int RunMetrics(Context& context, const MetricsArgs& args) {
  absl::StatusOr<std::string> text = HttpGet(context.flags.metrics_address, "/metrics",
                                             absl::Seconds(context.flags.timeout_seconds));
  if (!text.ok()) {
    if (absl::IsInvalidArgument(text.status())) return UsageError(text.status().message());
    return ServerError(text.status());
  }
  if (args.raw) {
    std::cout << *text;
    return kExitOk;
  }
  std::vector<MetricFamily> families = ParsePrometheusText(*text);
  std::vector<const MetricFamily*> shown;
  int empty = 0;
  for (const MetricFamily& family : families) {
    if (!Selected(family, args)) continue;
    if (family.samples.empty()) {
      ++empty;
      continue;
    }
    shown.push_back(&family);
  }
  if (context.flags.json) {
    std::vector<std::string> items;
    for (const MetricFamily* family : shown) items.push_back(FamilyJson(*family));
    std::cout << "{\"families\": [\n    " << absl::StrJoin(items, ",\n    ") << "\n]}\n";
    return kExitOk;
  }
  for (size_t i = 0; i < shown.size(); ++i) {
    if (i > 0) std::cout << "\n";
    PrintFamily(*shown[i]);
  }
  if (shown.empty()) {
    std::cout << "no " << (args.all ? "" : "forecastd_ ") << "series"
              << (args.pattern.empty() ? "" : " matching '" + args.pattern + "'") << " at "
              << context.flags.metrics_address << "\n";
  }
  if (empty > 0)
    std::cout << "\n(" << empty << " famil" << (empty == 1 ? "y" : "ies")
              << " without samples not shown)\n";
  return kExitOk;
}

}  // namespace

void AddMetricsCommand(CLI::App& app, Context& context) {
  auto args = std::make_shared<MetricsArgs>();
  CLI::App* metrics = AddCommand(
      app, "metrics", "Show the server's Prometheus metrics, grouped and summarised",
      "  forecastctl metrics\n  forecastctl metrics request_duration\n"
      "  forecastctl --metrics-address 10.0.0.5:8002 metrics --raw | grep forecastd_queue\n"
      "Fetches GET /metrics from --metrics-address. Counters and gauges print as tables by\n"
      "label; histograms as count, mean and, for p50/p90/p99, the bucket that holds that\n"
      "nearest-rank percentile (lower bound excluded, upper included).");
  metrics->add_option("PATTERN", args->pattern, "only families whose name contains this");
  metrics->add_flag("--raw", args->raw, "print the exposition text as served");
  metrics->add_flag("--all", args->all, "include series not named forecastd_*");
  metrics->callback([&context, args] {
    context.action = [&context, args] { return RunMetrics(context, *args); };
  });
}

}  // namespace forecastd::ctl
