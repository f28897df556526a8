#include "server/serving_metrics.h"

#include <algorithm>
#include <cmath>
#include <optional>

#include "absl/strings/str_cat.h"
#include "prometheus/client_metric.h"
#include "prometheus/metric_family.h"
#include "server/grpc_status.h"

namespace forecastd {
namespace {

// Seconds, from 50 us to 10 s: Predict latencies on a CPU sit in the low milliseconds.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* buckets = new prometheus::Histogram::BucketBoundaries{
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
      50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};
  return *buckets;
}

const prometheus::Histogram::BucketBoundaries& BatchBuckets() {
  static const auto* buckets =
      new prometheus::Histogram::BucketBoundaries{1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024};
  return *buckets;
}

std::string PriorityLabel(uint32_t priority) {
  return priority == 0 ? "default" : absl::StrCat(priority);
}

// Triton's labels of a model version's series.
prometheus::Labels VersionLabels(const std::string& model, int64_t version) {
  return {{"model", model}, {"version", absl::StrCat(version)}};
}

// Triton's categories of failed requests (its metrics guide, "Failure Count Categories").
const char* FailureReason(grpc::StatusCode code, bool ran) {
  if (code == grpc::StatusCode::DEADLINE_EXCEEDED) return "REJECTED";
  if (code == grpc::StatusCode::CANCELLED) return "CANCELED";
  return ran ? "BACKEND" : "OTHER";
}

double Microseconds(absl::Duration d) { return std::max(0.0, absl::ToDoubleMicroseconds(d)); }

// Gauges computed when Prometheus scrapes, from the engine's own counters.
class StateCollectable final : public prometheus::Collectable {
 public:
  explicit StateCollectable(ServingMetrics::Probes probes) : probes_(std::move(probes)) {}

  std::vector<prometheus::MetricFamily> Collect() const override {
    std::vector<prometheus::MetricFamily> families;
    if (probes_.queue_depth_by_model) {
      prometheus::MetricFamily f{"forecastd_queue_depth",
                                 "Predict requests waiting in a model's queues.",
                                 prometheus::MetricType::Gauge,
                                 {}};
      for (const auto& [model, depth] : probes_.queue_depth_by_model()) {
        prometheus::ClientMetric m;
        m.label = {{"model", model}};
        m.gauge.value = static_cast<double>(depth);
        f.metric.push_back(m);
      }
      families.push_back(std::move(f));
    }
    const auto scalar = [&](const char* name, const char* help, double value) {
      prometheus::MetricFamily f{name, help, prometheus::MetricType::Gauge, {}};
      prometheus::ClientMetric m;
      m.gauge.value = value;
      f.metric.push_back(m);
      families.push_back(std::move(f));
    };
    if (probes_.streams) {
      prometheus::MetricFamily open{"forecastd_streams_open",
                                    "Tick streams open or kept for resumption, by model and mode.",
                                    prometheus::MetricType::Gauge,
                                    {}};
      prometheus::MetricFamily bytes{"forecastd_stream_state_bytes",
                                     "Memory of tick streams' states and ring buffers, by model.",
                                     prometheus::MetricType::Gauge,
                                     {}};
      for (const auto& [model, usage] : probes_.streams()) {
        prometheus::ClientMetric m;
        // In name order, as prometheus-cpp writes every other family's labels.
        m.label = {{"mode", usage.state_mode ? "state" : "window"}, {"model", model}};
        m.gauge.value = static_cast<double>(usage.streams);
        open.metric.push_back(m);
        prometheus::ClientMetric b;
        b.label = {{"model", model}};
        b.gauge.value = static_cast<double>(usage.state_bytes);
        bytes.metric.push_back(b);
      }
      families.push_back(std::move(open));
      families.push_back(std::move(bytes));
    }
    if (probes_.models_loaded) {
      scalar("forecastd_models_loaded", "Models with a version loaded and serving.",
             static_cast<double>(probes_.models_loaded()));
    }
    if (probes_.train_jobs_running) {
      scalar("forecastd_train_jobs_running", "Training jobs running now.",
             static_cast<double>(probes_.train_jobs_running()));
    }
    if (probes_.gpus) {
      const std::vector<ServingMetrics::GpuReading> gpus = probes_.gpus();
      const auto per_gpu = [&](const char* name, const char* help, auto value) {
        prometheus::MetricFamily f{name, help, prometheus::MetricType::Gauge, {}};
        for (const ServingMetrics::GpuReading& gpu : gpus) {
          prometheus::ClientMetric m;
          m.label = {{"gpu", gpu.gpu}};
          m.gauge.value = value(gpu);
          f.metric.push_back(m);
        }
        if (!f.metric.empty()) families.push_back(std::move(f));
      };
      using Reading = ServingMetrics::GpuReading;
      per_gpu("forecastd_gpu_memory_used_bytes", "Device memory in use on the GPU (NVML).",
              [](const Reading& g) { return static_cast<double>(g.memory_used_bytes); });
      per_gpu("forecastd_gpu_memory_total_bytes", "Device memory of the GPU (NVML).",
              [](const Reading& g) { return static_cast<double>(g.memory_total_bytes); });
      per_gpu("forecastd_gpu_utilization_ratio",
              "Share of the last sample period in which a kernel ran on the GPU (NVML).",
              [](const Reading& g) { return g.utilization_ratio; });
      // The same readings under Triton's names and label; a GPU whose UUID NVML did not give
      // is left out of them, and one without a power reading out of nv_gpu_power_usage.
      const auto triton_gpu = [&](const char* name, const char* help, auto value) {
        prometheus::MetricFamily f{name, help, prometheus::MetricType::Gauge, {}};
        for (const ServingMetrics::GpuReading& gpu : gpus) {
          const std::optional<double> v = value(gpu);
          if (gpu.uuid.empty() || !v.has_value()) continue;
          prometheus::ClientMetric m;
          m.label = {{"gpu_uuid", gpu.uuid}};
          m.gauge.value = *v;
          f.metric.push_back(m);
        }
        if (!f.metric.empty()) families.push_back(std::move(f));
      };
      using Maybe = std::optional<double>;
      triton_gpu("nv_gpu_utilization", "GPU utilization rate [0.0 - 1.0]",
                 [](const Reading& g) -> Maybe { return g.utilization_ratio; });
      triton_gpu(
          "nv_gpu_memory_total_bytes", "GPU total memory, in bytes",
          [](const Reading& g) -> Maybe { return static_cast<double>(g.memory_total_bytes); });
      triton_gpu(
          "nv_gpu_memory_used_bytes", "GPU used memory, in bytes",
          [](const Reading& g) -> Maybe { return static_cast<double>(g.memory_used_bytes); });
      triton_gpu("nv_gpu_power_usage", "GPU power usage in watts", [](const Reading& g) -> Maybe {
        return g.power_watts >= 0 ? Maybe(g.power_watts) : std::nullopt;
      });
    }
    return families;
  }

 private:
  const ServingMetrics::Probes probes_;
};

}  // namespace

// One model version's batches: forecastd_batch_size (per model) and Triton's inference and
// execution counts (per version). Benchmark traffic is in none of them: a batch of Benchmark
// tasks alone is not counted, and one that also carried requests counts as the batch they ran
// in (its whole size) with only their rows as inferences.
class ServingMetrics::ModelObserver final : public BatcherObserver {
 public:
  ModelObserver(prometheus::Histogram& batch_size, prometheus::Counter& inferences,
                prometheus::Counter& executions)
      : batch_size_(batch_size), inferences_(inferences), executions_(executions) {}
  void OnBatch(int64_t rows, int64_t /*tasks*/, int64_t benchmark_rows) override {
    if (benchmark_rows >= rows) return;
    batch_size_.Observe(static_cast<double>(rows));
    inferences_.Increment(static_cast<double>(rows - benchmark_rows));
    executions_.Increment();
  }

 private:
  prometheus::Histogram& batch_size_;
  prometheus::Counter& inferences_;
  prometheus::Counter& executions_;
};

ServingMetrics::ServingMetrics(prometheus::Registry& registry)
    : requests_(prometheus::BuildCounter()
                    .Name("forecastd_requests_total")
                    .Help("RPCs finished, by model, version, method, priority and gRPC code.")
                    .Register(registry)),
      request_seconds_(prometheus::BuildHistogram()
                           .Name("forecastd_request_duration_seconds")
                           .Help("Predict time from arrival to reply.")
                           .Register(registry)),
      queue_seconds_(prometheus::BuildHistogram()
                         .Name("forecastd_queue_duration_seconds")
                         .Help("Predict time waiting for its batch to start.")
                         .Register(registry)),
      compute_seconds_(prometheus::BuildHistogram()
                           .Name("forecastd_compute_duration_seconds")
                           .Help("Forward-pass time of the batch a Predict ran in.")
                           .Register(registry)),
      batch_size_(prometheus::BuildHistogram()
                      .Name("forecastd_batch_size")
                      .Help("Rows per executed batch.")
                      .Register(registry)),
      deadline_misses_(prometheus::BuildCounter()
                           .Name("forecastd_deadline_misses_total")
                           .Help("Requests whose deadline passed before they were computed.")
                           .Register(registry)),
      load_failures_(prometheus::BuildCounter()
                         .Name("forecastd_model_load_failures_total")
                         .Help("Failed attempts to load a model.")
                         .Register(registry)),
      train_loss_(prometheus::BuildGauge()
                      .Name("forecastd_train_loss")
                      .Help("Latest training loss of a job (split: train or validation).")
                      .Register(registry)),
      train_epoch_(prometheus::BuildGauge()
                       .Name("forecastd_train_epoch")
                       .Help("Epoch a training job is in (1-based).")
                       .Register(registry)),
      train_rate_(prometheus::BuildGauge()
                      .Name("forecastd_train_samples_per_second")
                      .Help("Training windows per second of a job.")
                      .Register(registry)),
      train_steps_(prometheus::BuildCounter()
                       .Name("forecastd_train_steps_total")
                       .Help("Optimiser steps taken, by model.")
                       .Register(registry)),
      stream_ticks_(prometheus::BuildCounter()
                        .Name("forecastd_stream_ticks_total")
                        .Help("Tick messages answered on tick streams, by model and gRPC code.")
                        .Register(registry)),
      stream_tick_seconds_(prometheus::BuildHistogram()
                               .Name("forecastd_stream_tick_duration_seconds")
                               .Help("Tick time from arrival to its forecast, by model.")
                               .Register(registry)),
      streams_ended_(prometheus::BuildCounter()
                         .Name("forecastd_streams_ended_total")
                         .Help("Tick streams ended, by model and reason (closed, idle, "
                               "disconnected, replaced).")
                         .Register(registry)),
      nv_success_(prometheus::BuildCounter()
                      .Name("nv_inference_request_success")
                      .Help("Number of successful inference requests, all batch sizes")
                      .Register(registry)),
      nv_failure_(prometheus::BuildCounter()
                      .Name("nv_inference_request_failure")
                      .Help("Number of failed inference requests, all batch sizes")
                      .Register(registry)),
      nv_inferences_(prometheus::BuildCounter()
                         .Name("nv_inference_count")
                         .Help("Number of inferences performed (does not include cached requests)")
                         .Register(registry)),
      nv_executions_(prometheus::BuildCounter()
                         .Name("nv_inference_exec_count")
                         .Help("Number of model executions performed (does not include cached "
                               "requests)")
                         .Register(registry)),
      nv_request_us_(prometheus::BuildCounter()
                         .Name("nv_inference_request_duration_us")
                         .Help("Cumulative inference request duration in microseconds (includes "
                               "cached requests)")
                         .Register(registry)),
      nv_queue_us_(prometheus::BuildCounter()
                       .Name("nv_inference_queue_duration_us")
                       .Help("Cumulative inference queuing duration in microseconds (includes "
                             "cached requests)")
                       .Register(registry)),
      nv_compute_us_(prometheus::BuildCounter()
                         .Name("nv_inference_compute_infer_duration_us")
                         .Help("Cumulative compute inference duration in microseconds (does not "
                               "include cached requests)")
                         .Register(registry)) {}

void ServingMetrics::TritonOkSeries::Observe(absl::Duration total, absl::Duration queue,
                                             absl::Duration compute) const {
  if (success == nullptr) return;  // version 0: Triton does not count it
  success->Increment();
  request_us->Increment(Microseconds(total));
  queue_us->Increment(Microseconds(queue));
  compute_us->Increment(Microseconds(compute));
}

ServingMetrics::TritonOkSeries ServingMetrics::MakeTritonOkSeries(const std::string& model,
                                                                  int64_t version) {
  TritonOkSeries series;
  if (version <= 0) return series;
  const prometheus::Labels labels = VersionLabels(model, version);
  series.success = &nv_success_.Add(labels);
  series.request_us = &nv_request_us_.Add(labels);
  series.queue_us = &nv_queue_us_.Add(labels);
  series.compute_us = &nv_compute_us_.Add(labels);
  return series;
}

const ServingMetrics::TickSeries& ServingMetrics::TickSeriesFor(const std::string& model,
                                                                int64_t version) {
  {
    absl::ReaderMutexLock lock(&mu_);
    const auto by_version = tick_series_.find(model);
    if (by_version != tick_series_.end()) {
      const auto it = by_version->second.find(version);
      if (it != by_version->second.end()) return *it->second;
    }
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<TickSeries>& series = tick_series_[model][version];
  if (series == nullptr) {
    series = std::make_unique<TickSeries>();
    const std::string ok = GrpcCodeName(grpc::StatusCode::OK);
    series->ticks_ok = &stream_ticks_.Add({{"model", model}, {"code", ok}});
    series->tick_seconds = &stream_tick_seconds_.Add({{"model", model}}, LatencyBuckets());
    series->triton = MakeTritonOkSeries(model, version);
    if (version > 0) series->nv_inferences = &nv_inferences_.Add(VersionLabels(model, version));
  }
  return *series;
}

const ServingMetrics::RequestSeries& ServingMetrics::RequestSeriesFor(const std::string& model,
                                                                      int64_t version,
                                                                      const std::string& method,
                                                                      uint32_t priority) {
  const std::string key = absl::StrCat(model, "\n", version, "\n", method, "\n", priority);
  {
    absl::ReaderMutexLock lock(&mu_);
    const auto it = request_series_.find(key);
    if (it != request_series_.end()) return *it->second;
  }
  absl::MutexLock lock(&mu_);
  std::unique_ptr<RequestSeries>& series = request_series_[key];
  if (series == nullptr) {
    series = std::make_unique<RequestSeries>();
    const std::string level = PriorityLabel(priority);
    series->requests_ok = &requests_.Add({{"model", model},
                                          {"version", absl::StrCat(version)},
                                          {"method", method},
                                          {"priority", level},
                                          {"code", GrpcCodeName(grpc::StatusCode::OK)}});
    const prometheus::Labels labels = {{"model", model}, {"priority", level}};
    series->request_seconds = &request_seconds_.Add(labels, LatencyBuckets());
    series->queue_seconds = &queue_seconds_.Add(labels, LatencyBuckets());
    series->compute_seconds = &compute_seconds_.Add(labels, LatencyBuckets());
    series->triton = MakeTritonOkSeries(model, version);
  }
  return *series;
}

void ServingMetrics::OnTick(const std::string& model, int64_t version, const absl::Status& status,
                            const TickTiming& timing) {
  if (status.ok()) {
    // The same series as below, through handles made once per model version.
    const TickSeries& series = TickSeriesFor(model, version);
    series.ticks_ok->Increment();
    series.tick_seconds->Observe(absl::ToDoubleSeconds(timing.total));
    series.triton.Observe(timing.total, timing.queue, timing.compute);
    if (timing.computed && series.nv_inferences != nullptr) series.nv_inferences->Increment();
    return;
  }
  const grpc::StatusCode code = ToGrpcStatus(status).error_code();
  stream_ticks_.Add({{"model", model}, {"code", GrpcCodeName(code)}}).Increment();
  // A tick message is one of Triton's sequence requests, of one inference when a forward gave
  // its forecast; that forward ran in a tick batch, which the batchers' execution count does
  // not see.
  ObserveTritonFailure(model, version, code, timing.computed);
  if (timing.computed && version > 0) {
    nv_inferences_.Add(VersionLabels(model, version)).Increment();
  }
}

void ServingMetrics::OnStreamEnded(const std::string& model, const char* reason) {
  streams_ended_.Add({{"model", model}, {"reason", reason}}).Increment();
}

ServingMetrics::~ServingMetrics() = default;

std::shared_ptr<prometheus::Collectable> ServingMetrics::MakeStateCollectable(Probes probes) {
  return std::make_shared<StateCollectable>(std::move(probes));
}

void ServingMetrics::ObserveRequest(const std::string& model, int64_t version,
                                    const std::string& method, uint32_t priority,
                                    grpc::StatusCode code, absl::Duration total,
                                    absl::Duration queue, absl::Duration compute) {
  if (code == grpc::StatusCode::OK) {
    // The same series as below, through handles made once per label set.
    const RequestSeries& series = RequestSeriesFor(model, version, method, priority);
    series.requests_ok->Increment();
    series.triton.Observe(total, queue, compute);
    series.request_seconds->Observe(absl::ToDoubleSeconds(total));
    series.queue_seconds->Observe(absl::ToDoubleSeconds(queue));
    series.compute_seconds->Observe(absl::ToDoubleSeconds(compute));
    return;
  }
  const std::string level = PriorityLabel(priority);
  requests_
      .Add({{"model", model},
            {"version", absl::StrCat(version)},
            {"method", method},
            {"priority", level},
            {"code", GrpcCodeName(code)}})
      .Increment();
  ObserveTritonFailure(model, version, code, compute > absl::ZeroDuration());
  const bool reached_engine = queue > absl::ZeroDuration() || compute > absl::ZeroDuration();
  if (!reached_engine) return;
  const prometheus::Labels labels = {{"model", model}, {"priority", level}};
  request_seconds_.Add(labels, LatencyBuckets()).Observe(absl::ToDoubleSeconds(total));
  queue_seconds_.Add(labels, LatencyBuckets()).Observe(absl::ToDoubleSeconds(queue));
  compute_seconds_.Add(labels, LatencyBuckets()).Observe(absl::ToDoubleSeconds(compute));
}

void ServingMetrics::ObserveTritonFailure(const std::string& model, int64_t version,
                                          grpc::StatusCode code, bool ran) {
  if (version <= 0) return;  // never reached a model version: Triton does not count it
  prometheus::Labels labels = VersionLabels(model, version);
  labels["reason"] = FailureReason(code, ran);
  nv_failure_.Add(labels).Increment();
}

void ServingMetrics::ObserveDeadlineMiss(const std::string& model) {
  deadline_misses_.Add({{"model", model}}).Increment();
}

void ServingMetrics::ObserveLoadFailure(const std::string& model) {
  load_failures_.Add({{"model", model}}).Increment();
}

BatcherObserver* ServingMetrics::ForModel(const std::string& model, int64_t version) {
  absl::MutexLock lock(&mu_);
  std::unique_ptr<ModelObserver>& observer = observers_[{model, version}];
  if (observer == nullptr) {
    const prometheus::Labels labels = VersionLabels(model, version);
    observer =
        std::make_unique<ModelObserver>(batch_size_.Add({{"model", model}}, BatchBuckets()),
                                        nv_inferences_.Add(labels), nv_executions_.Add(labels));
  }
  return observer.get();
}

void ServingMetrics::OnProgress(const std::string& job_id, const std::string& model,
                                const TrainProgress& progress) {
  const prometheus::Labels job = {{"job_id", job_id}, {"model", model}};
  train_epoch_.Add(job).Set(static_cast<double>(progress.epoch));
  train_rate_.Add(job).Set(progress.samples_per_second);
  train_loss_.Add({{"job_id", job_id}, {"model", model}, {"split", "train"}})
      .Set(progress.train_loss);
  if (progress.kind == TrainProgress::Kind::kEpoch && std::isfinite(progress.validation_loss)) {
    train_loss_.Add({{"job_id", job_id}, {"model", model}, {"split", "validation"}})
        .Set(progress.validation_loss);
  }
  int64_t new_steps = 0;
  {
    absl::MutexLock lock(&mu_);
    int64_t& last = last_step_[job_id];
    new_steps = progress.step - last;
    last = progress.step;
  }
  if (new_steps > 0) train_steps_.Add({{"model", model}}).Increment(static_cast<double>(new_steps));
}

void ServingMetrics::OnFinished(const JobSnapshot& job) {
  absl::MutexLock lock(&mu_);
  last_step_.erase(job.id);
}

}  // namespace forecastd
