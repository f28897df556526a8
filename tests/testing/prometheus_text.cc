#include "tests/testing/prometheus_text.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace forecastd::testing {
namespace {

// Parses `{k="v",...}` starting at line[pos] == '{'; returns the position after '}', or npos.
size_t ParseLabels(absl::string_view line, size_t pos, std::map<std::string, std::string>& labels) {
  ++pos;
  while (pos < line.size() && line[pos] != '}') {
    const size_t eq = line.find('=', pos);
    if (eq == absl::string_view::npos || eq + 1 >= line.size() || line[eq + 1] != '"') {
      return absl::string_view::npos;
    }
    const std::string key(absl::StripAsciiWhitespace(line.substr(pos, eq - pos)));
    std::string value;
    size_t i = eq + 2;
    for (; i < line.size() && line[i] != '"'; ++i) {
      if (line[i] == '\\' && i + 1 < line.size()) {
        ++i;
        value.push_back(line[i] == 'n' ? '\n' : line[i]);
      } else {
        value.push_back(line[i]);
      }
    }
    if (i >= line.size()) return absl::string_view::npos;
    labels[key] = std::move(value);
    pos = i + 1;
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  return pos < line.size() ? pos + 1 : absl::string_view::npos;
}

}  // namespace

std::vector<PrometheusSample> ParsePrometheusText(const std::string& body) {
  std::vector<PrometheusSample> samples;
  for (const absl::string_view line : absl::StrSplit(body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t name_end = line.find_first_of("{ ");
    if (name_end == absl::string_view::npos) continue;
    PrometheusSample sample;
    sample.name = std::string(line.substr(0, name_end));
    size_t pos = name_end;
    if (line[pos] == '{') {
      pos = ParseLabels(line, pos, sample.labels);
      if (pos == absl::string_view::npos) continue;
    }
    const std::vector<absl::string_view> rest =
        absl::StrSplit(line.substr(pos), ' ', absl::SkipEmpty());
    if (rest.empty() || !absl::SimpleAtod(rest[0], &sample.value)) continue;
    samples.push_back(std::move(sample));
  }
  return samples;
}

SampleSum SumSamples(const std::string& body, const std::string& name,
                     const std::map<std::string, std::string>& match) {
  SampleSum total;
  for (const PrometheusSample& sample : ParsePrometheusText(body)) {
    if (sample.name != name) continue;
    const bool matches = std::all_of(match.begin(), match.end(), [&](const auto& kv) {
      const auto it = sample.labels.find(kv.first);
      return it != sample.labels.end() && it->second == kv.second;
    });
    if (!matches) continue;
    ++total.series;
    total.sum += sample.value;
  }
  return total;
}

}  // namespace forecastd::testing
