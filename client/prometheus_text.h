// Reads the Prometheus text exposition format (what forecastd serves at /metrics) into
// metric families, and summarises a histogram's buckets the way PromQL's histogram_quantile
// does. forecastctl's `metrics` command prints what it reads. Stateless; thread-safe.
#ifndef FORECASTD_CLIENT_PROMETHEUS_TEXT_H_
#define FORECASTD_CLIENT_PROMETHEUS_TEXT_H_

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

namespace forecastd {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;  // in text order

struct MetricSample {
  std::string name;  // with its _bucket / _sum / _count suffix, if any
  MetricLabels labels;
  double value = 0.0;
};

struct MetricFamily {
  std::string name;
  std::string type = "untyped";  // counter, gauge, histogram, summary or untyped
  std::string help;
  std::vector<MetricSample> samples;
};

// The families in the order they first appear. A sample belongs to the family its `# TYPE`
// line named (with the suffixes of its type); a sample without one gets an untyped family of
// its own name. Malformed lines are skipped: this reads for display, it does not validate.
std::vector<MetricFamily> ParsePrometheusText(absl::string_view text);

// One labelled series of a histogram family.
struct HistogramSeries {
  MetricLabels labels;  // without "le"
  double count = 0.0;
  double sum = 0.0;
  // (upper bound, cumulative count), ascending by bound; the last bound is +Inf.
  std::vector<std::pair<double, double>> buckets;
};

// The series of a histogram family, in order of first appearance.
std::vector<HistogramSeries> GroupHistogram(const MetricFamily& family);

// The bucket (lower, upper] that holds the nearest-rank q-quantile (0 < q <= 1): the
// observation of rank ceil(q * count), 1-based, in ascending order. A histogram knows no
// more than that: the quantile is some value in the bucket, not a point in it. lower is the
// previous bucket's bound (-Inf for the first bucket); upper is +Inf for the overflow bucket.
struct HistogramBucket {
  double lower = 0.0;
  double upper = 0.0;
};
// std::nullopt without observations.
std::optional<HistogramBucket> HistogramNearestRank(const HistogramSeries& series, double q);

// The value of label `key`, or "" when absent.
std::string LabelValue(const MetricLabels& labels, absl::string_view key);

}  // namespace forecastd

#endif  // FORECASTD_CLIENT_PROMETHEUS_TEXT_H_
