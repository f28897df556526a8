#include "server/serving_metrics.h"

#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "prometheus/registry.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

// One GPU's reading; no UUID and no power reading unless given.
ServingMetrics::GpuReading Gpu(const std::string& gpu, int64_t used_bytes, int64_t total_bytes,
                               double utilization, const std::string& uuid = "",
                               double power_watts = -1) {
  ServingMetrics::GpuReading reading;
  reading.gpu = gpu;
  reading.memory_used_bytes = used_bytes;
  reading.memory_total_bytes = total_bytes;
  reading.utilization_ratio = utilization;
  reading.uuid = uuid;
  reading.power_watts = power_watts;
  return reading;
}

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
  std::vector<ServingMetrics::GpuReading> readings = {Gpu("0", 1 << 20, 80LL << 30, 0.25),
                                                      Gpu("3", 5, 10, 1.0)};
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
  readings = {Gpu("3", 7, 10, 0.5)};
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

// The value of the one sample of `name` whose labels are exactly `labels`; -1 when absent.
double Value(const std::vector<prometheus::MetricFamily>& families, const std::string& name,
             const std::map<std::string, std::string>& labels) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const prometheus::ClientMetric::Label& l : m.label) got[l.name] = l.value;
      if (got != labels) continue;
      return f.type == prometheus::MetricType::Counter ? m.counter.value : m.gauge.value;
    }
  }
  return -1;
}

TEST_CASE("Triton's GPU gauges are labelled by UUID, with power only where NVML reports it",
          "[unit][metrics]") {
  prometheus::Registry registry;
  ServingMetrics metrics(registry);
  ServingMetrics::Probes probes;
  probes.gpus = []() {
    return std::vector<ServingMetrics::GpuReading>{
        Gpu("0", 3 << 20, 80LL << 30, 0.75, "GPU-aaaa", 312.5),
        Gpu("1", 5, 10, 0.5, "GPU-bbbb"),  // no power reading
        Gpu("2", 1, 2, 0.0)};              // no UUID
  };
  const std::vector<prometheus::MetricFamily> families =
      metrics.MakeStateCollectable(probes)->Collect();
  const auto a = std::map<std::string, std::string>{{"gpu_uuid", "GPU-aaaa"}};
  const auto b = std::map<std::string, std::string>{{"gpu_uuid", "GPU-bbbb"}};
  REQUIRE(Value(families, "nv_gpu_utilization", a) == 0.75);
  REQUIRE(Value(families, "nv_gpu_memory_used_bytes", a) == 3 << 20);
  REQUIRE(Value(families, "nv_gpu_memory_total_bytes", a) == static_cast<double>(80LL << 30));
  REQUIRE(Value(families, "nv_gpu_power_usage", a) == 312.5);
  REQUIRE(Value(families, "nv_gpu_utilization", b) == 0.5);
  REQUIRE(Value(families, "nv_gpu_power_usage", b) == -1);
  for (const prometheus::MetricFamily& f : families) {
    if (f.name.rfind("nv_gpu_", 0) != 0) continue;
    CAPTURE(f.name);
    REQUIRE(f.type == prometheus::MetricType::Gauge);
    REQUIRE(f.metric.size() == (f.name == "nv_gpu_power_usage" ? 1u : 2u));
  }
  // forecastd's own GPU series still name all three by CUDA ordinal.
  REQUIRE(GpuGauges(families)["forecastd_gpu_memory_used_bytes"].size() == 3);

  ServingMetrics::Probes none;
  none.gpus = []() { return std::vector<ServingMetrics::GpuReading>{}; };
  for (const prometheus::MetricFamily& f : metrics.MakeStateCollectable(none)->Collect()) {
    REQUIRE(f.name.rfind("nv_gpu_", 0) != 0);
  }
}

TEST_CASE("Triton's request counters follow requests, batches and ticks per model version",
          "[unit][metrics]") {
  prometheus::Registry registry;
  ServingMetrics metrics(registry);
  const std::map<std::string, std::string> v3 = {{"model", "m"}, {"version", "3"}};
  const auto us = [](int n) { return absl::Microseconds(n); };

  // Two requests in one batch of 5 rows, one failure, one that never found a version.
  BatcherObserver* batches = metrics.ForModel("m", 3);
  REQUIRE(metrics.ForModel("m", 3) == batches);
  batches->OnBatch(5, 2, 0);
  // Benchmark traffic is in none of the series: a batch of it alone is not counted; in a batch
  // with a request, only the request's rows are inferences (the batch is executed once).
  batches->OnBatch(8, 1, 8);
  batches->OnBatch(4, 2, 3);
  metrics.ObserveRequest("m", 3, "Predict", 0, grpc::StatusCode::OK, us(100), us(30), us(50));
  metrics.ObserveRequest("m", 3, "ModelInfer", 1, grpc::StatusCode::OK, us(90), us(20), us(50));
  metrics.ObserveRequest("m", 3, "ModelInfer", 0, grpc::StatusCode::INVALID_ARGUMENT, us(7),
                         absl::ZeroDuration(), absl::ZeroDuration());
  metrics.ObserveRequest("m", 0, "Predict", 0, grpc::StatusCode::NOT_FOUND, us(5),
                         absl::ZeroDuration(), absl::ZeroDuration());
  // A tick message answered by a forward, one still filling its window, one refused.
  metrics.OnTick("m", 3, absl::OkStatus(),
                 {.total = us(40), .queue = us(10), .compute = us(20), .computed = true});
  metrics.OnTick("m", 3, absl::OkStatus(), {.total = us(4)});
  metrics.OnTick("m", 3, absl::InvalidArgumentError("bad tick"), {.total = us(1)});
  // Failures of each of Triton's reasons: timed out in the queue, cancelled, failed computing.
  metrics.ObserveRequest("m", 3, "Predict", 0, grpc::StatusCode::DEADLINE_EXCEEDED, us(9), us(9),
                         absl::ZeroDuration());
  metrics.ObserveRequest("m", 3, "Predict", 0, grpc::StatusCode::CANCELLED, us(3),
                         absl::ZeroDuration(), absl::ZeroDuration());
  metrics.ObserveRequest("m", 3, "Predict", 0, grpc::StatusCode::INTERNAL, us(60), us(10), us(40));

  const std::vector<prometheus::MetricFamily> families = registry.Collect();
  REQUIRE(Value(families, "nv_inference_request_success", v3) == 4);
  const auto failures = [&](const char* reason) {
    return Value(families, "nv_inference_request_failure",
                 {{"model", "m"}, {"reason", reason}, {"version", "3"}});
  };
  REQUIRE(failures("OTHER") == 2);  // the refused ModelInfer and tick
  REQUIRE(failures("REJECTED") == 1);
  REQUIRE(failures("CANCELED") == 1);
  REQUIRE(failures("BACKEND") == 1);
  REQUIRE(Value(families, "nv_inference_count", v3) == 5 + 1 + 1);
  REQUIRE(Value(families, "nv_inference_exec_count", v3) == 2);
  REQUIRE(Value(families, "nv_inference_request_duration_us", v3) == 100 + 90 + 40 + 4);
  REQUIRE(Value(families, "nv_inference_queue_duration_us", v3) == 30 + 20 + 10);
  REQUIRE(Value(families, "nv_inference_compute_infer_duration_us", v3) == 50 + 50 + 20);
  for (const prometheus::MetricFamily& f : families) {
    if (f.name.rfind("nv_", 0) != 0) continue;
    CAPTURE(f.name);
    REQUIRE(f.type == prometheus::MetricType::Counter);
    for (const prometheus::ClientMetric& m : f.metric) {
      REQUIRE(m.label.size() == (f.name == "nv_inference_request_failure" ? 3u : 2u));
      REQUIRE(m.label.back().name == "version");
      REQUIRE(m.label.back().value == "3");  // no version-0 series
    }
  }
  // forecastd's own request counter still counts the request that found no version.
  REQUIRE(Value(families, "forecastd_requests_total",
                {{"model", "m"},
                 {"version", "0"},
                 {"method", "Predict"},
                 {"priority", "default"},
                 {"code", "NOT_FOUND"}}) == 1);
}

}  // namespace
}  // namespace forecastd
