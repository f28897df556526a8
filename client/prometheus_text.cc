#include "client/prometheus_text.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_split.h"

namespace forecastd {
namespace {

bool IsNameChar(char c, bool first) {
  return absl::ascii_isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':' ||
         (!first && absl::ascii_isdigit(static_cast<unsigned char>(c)));
}

// Undoes the exposition format's escapes (\\, \" and \n).
std::string Unescape(absl::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 1 < s.size()) {
      ++i;
      out.push_back(s[i] == 'n' ? '\n' : s[i]);
    } else {
      out.push_back(s[i]);
    }
  }
  return out;
}

// A number as the format writes it: decimal, NaN, +Inf, -Inf.
std::optional<double> ParseValue(absl::string_view text) {
  const std::string s(text);
  if (s.empty()) return std::nullopt;
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

// `name{k="v",...} value [timestamp]`.
std::optional<MetricSample> ParseSampleLine(absl::string_view line) {
  MetricSample sample;
  size_t i = 0;
  while (i < line.size() && IsNameChar(line[i], i == 0)) ++i;
  if (i == 0) return std::nullopt;
  sample.name = std::string(line.substr(0, i));
  if (i < line.size() && line[i] == '{') {
    ++i;
    while (true) {
      while (i < line.size() && (line[i] == ' ' || line[i] == ',')) ++i;
      if (i >= line.size()) return std::nullopt;
      if (line[i] == '}') {
        ++i;
        break;
      }
      const size_t key_start = i;
      while (i < line.size() && IsNameChar(line[i], i == key_start)) ++i;
      const std::string key(line.substr(key_start, i - key_start));
      if (key.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
        return std::nullopt;
      }
      i += 2;
      const size_t value_start = i;
      while (i < line.size() && line[i] != '"') i += line[i] == '\\' ? 2 : 1;
      if (i >= line.size()) return std::nullopt;
      sample.labels.emplace_back(key, Unescape(line.substr(value_start, i - value_start)));
      ++i;  // the closing quote
    }
  }
  const std::vector<absl::string_view> rest =
      absl::StrSplit(line.substr(i), ' ', absl::SkipWhitespace());
  if (rest.empty()) return std::nullopt;
  const std::optional<double> value = ParseValue(rest[0]);
  if (!value.has_value()) return std::nullopt;
  sample.value = *value;
  return sample;
}

bool HasSuffixedName(const std::string& sample, const std::string& family,
                     std::initializer_list<absl::string_view> suffixes) {
  if (!absl::StartsWith(sample, family)) return false;
  const absl::string_view suffix = absl::string_view(sample).substr(family.size());
  return std::find(suffixes.begin(), suffixes.end(), suffix) != suffixes.end();
}

}  // namespace

std::string LabelValue(const MetricLabels& labels, absl::string_view key) {
  for (const auto& [k, v] : labels) {
    if (k == key) return v;
  }
  return "";
}

std::vector<MetricFamily> ParsePrometheusText(absl::string_view text) {
  std::vector<MetricFamily> families;
  std::map<std::string, size_t> by_name;
  const auto family_index = [&](const std::string& name) {
    const auto [it, inserted] = by_name.emplace(name, families.size());
    if (inserted) {
      families.emplace_back();
      families.back().name = name;
    }
    return it->second;
  };
  // The family of the last # TYPE line: samples normally follow their family's header.
  std::optional<size_t> current;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty()) continue;
    if (line.front() == '#') {
      const std::vector<absl::string_view> words =
          absl::StrSplit(line, absl::MaxSplits(' ', 3), absl::SkipWhitespace());
      if (words.size() < 3 || (words[1] != "TYPE" && words[1] != "HELP")) continue;
      const size_t index = family_index(std::string(words[2]));
      const std::string rest = words.size() > 3 ? std::string(words[3]) : "";
      if (words[1] == "TYPE") {
        families[index].type = rest;
        current = index;
      } else {
        families[index].help = Unescape(rest);
      }
      continue;
    }
    std::optional<MetricSample> sample = ParseSampleLine(line);
    if (!sample.has_value()) continue;
    size_t index = 0;
    if (const auto it = by_name.find(sample->name); it != by_name.end()) {
      index = it->second;
    } else if (current.has_value() &&
               ((families[*current].type == "histogram" &&
                 HasSuffixedName(sample->name, families[*current].name,
                                 {"_bucket", "_sum", "_count"})) ||
                (families[*current].type == "summary" &&
                 HasSuffixedName(sample->name, families[*current].name, {"_sum", "_count"})))) {
      index = *current;
    } else {
      index = family_index(sample->name);
    }
    families[index].samples.push_back(*std::move(sample));
  }
  return families;
}

std::vector<HistogramSeries> GroupHistogram(const MetricFamily& family) {
  std::vector<HistogramSeries> series;
  const auto series_for = [&](const MetricLabels& labels) -> HistogramSeries& {
    MetricLabels key;
    for (const auto& label : labels) {
      if (label.first != "le") key.push_back(label);
    }
    for (HistogramSeries& s : series) {
      if (s.labels == key) return s;
    }
    series.emplace_back();
    series.back().labels = key;
    return series.back();
  };
  for (const MetricSample& sample : family.samples) {
    HistogramSeries& s = series_for(sample.labels);
    if (absl::EndsWith(sample.name, "_bucket")) {
      const std::optional<double> bound = ParseValue(LabelValue(sample.labels, "le"));
      if (bound.has_value()) s.buckets.emplace_back(*bound, sample.value);
    } else if (absl::EndsWith(sample.name, "_sum")) {
      s.sum = sample.value;
    } else if (absl::EndsWith(sample.name, "_count")) {
      s.count = sample.value;
    }
  }
  for (HistogramSeries& s : series) std::sort(s.buckets.begin(), s.buckets.end());
  return series;
}

std::optional<HistogramBucket> HistogramNearestRank(const HistogramSeries& series, double q) {
  if (series.buckets.empty()) return std::nullopt;
  const double total = series.buckets.back().second;
  if (!(total > 0)) return std::nullopt;
  const double rank = std::max(1.0, std::ceil(std::clamp(q, 0.0, 1.0) * total));
  double lower = -std::numeric_limits<double>::infinity();
  for (const auto& [bound, count] : series.buckets) {
    if (count >= rank) return HistogramBucket{lower, bound};
    lower = bound;
  }
  return HistogramBucket{lower, std::numeric_limits<double>::infinity()};
}

}  // namespace forecastd
