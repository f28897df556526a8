// Reads the Prometheus text exposition format (what /metrics serves) well enough for tests
// to add up the samples of one metric whose labels match: `name{k="v",...} value [ts]`.
// Comment lines and unparsable lines are skipped. Stateless; thread-safe.
#ifndef FORECASTD_TESTS_TESTING_PROMETHEUS_TEXT_H_
#define FORECASTD_TESTS_TESTING_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

namespace forecastd::testing {

struct PrometheusSample {
  std::string name;  // with any _count / _sum / _bucket suffix
  std::map<std::string, std::string> labels;
  double value = 0.0;
};

std::vector<PrometheusSample> ParsePrometheusText(const std::string& body);

struct SampleSum {
  int series = 0;  // samples that matched
  double sum = 0.0;
};

// The samples of `name` whose labels include every pair of `match` (others may be present).
SampleSum SumSamples(const std::string& body, const std::string& name,
                     const std::map<std::string, std::string>& match = {});

}  // namespace forecastd::testing

#endif  // FORECASTD_TESTS_TESTING_PROMETHEUS_TEXT_H_
