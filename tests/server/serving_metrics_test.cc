#include "server/serving_metrics.h"

#include <map>
#include <string>
#include <vector>

#include "prometheus/registry.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

// name -> {label "gpu" -> value} of the gauges a scrape returns.
std::map<std::string, std::map<std::string, double>> GpuGauges(
    const std::vector<prometheus::MetricFamily>& families) {
  std::map<std::string, std::map<std::string, double>> out;
  for (const prometheus::MetricFamily& f : families) {
    if (f.name.rfind("forecastd_gpu_", 0) != 0) continue;
    REQUIRE(f.type == prometheus::MetricType::Gauge);
    for (const prometheus::ClientMetric& m : f.metric) {
      REQUIRE(m.label.size() == 1);
      REQUIRE(m.label[0].name == "gpu");
      out[f.name][m.label[0].value] = m.gauge.value;
    }
  }
  return out;
}

TEST_CASE("GPU memory and utilisation gauges come from the probe at each scrape",
          "[unit][metrics]") {
  prometheus::Registry registry;
  ServingMetrics metrics(registry);
  std::vector<ServingMetrics::GpuReading> readings = {
      {.gpu = "0",
       .memory_used_bytes = 1 << 20,
       .memory_total_bytes = 80LL << 30,
       .utilization_ratio = 0.25},
      {.gpu = "3", .memory_used_bytes = 5, .memory_total_bytes = 10, .utilization_ratio = 1.0}};
  int scrapes = 0;
  ServingMetrics::Probes probes;
  probes.gpus = [&]() {
    ++scrapes;
    return readings;
  };
  const auto collectable = metrics.MakeStateCollectable(probes);

  auto gauges = GpuGauges(collectable->Collect());
  REQUIRE(scrapes == 1);
  REQUIRE(gauges["forecastd_gpu_memory_used_bytes"] ==
          std::map<std::string, double>{{"0", 1 << 20}, {"3", 5}});
  REQUIRE(gauges["forecastd_gpu_memory_total_bytes"] ==
          std::map<std::string, double>{{"0", static_cast<double>(80LL << 30)}, {"3", 10}});
  REQUIRE(gauges["forecastd_gpu_utilization_ratio"] ==
          std::map<std::string, double>{{"0", 0.25}, {"3", 1.0}});

  // Read again at the next scrape; a GPU the probe cannot read is simply absent.
  readings = {
      {.gpu = "3", .memory_used_bytes = 7, .memory_total_bytes = 10, .utilization_ratio = 0.5}};
  gauges = GpuGauges(collectable->Collect());
  REQUIRE(scrapes == 2);
  REQUIRE(gauges["forecastd_gpu_memory_used_bytes"] == std::map<std::string, double>{{"3", 7}});

  // No GPUs: no GPU families at all (not empty ones).
  readings.clear();
  REQUIRE(GpuGauges(collectable->Collect()).empty());
  for (const prometheus::MetricFamily& f : collectable->Collect()) {
    REQUIRE(f.name.rfind("forecastd_gpu_", 0) != 0);
  }
}

TEST_CASE("Without a GPU probe no GPU series are exported", "[unit][metrics]") {
  prometheus::Registry registry;
  ServingMetrics metrics(registry);
  ServingMetrics::Probes probes;
  probes.models_loaded = []() { return int64_t{2}; };
  for (const prometheus::MetricFamily& f : metrics.MakeStateCollectable(probes)->Collect()) {
    REQUIRE(f.name.rfind("forecastd_gpu_", 0) != 0);
  }
}

}  // namespace
}  // namespace forecastd
