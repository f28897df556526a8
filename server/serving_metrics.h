// The forecastd_* series that describe serving and training (ARCHITECTURE.md,
// "Observability"), registered in the MetricsExposer's registry:
//   forecastd_requests_total{model,version,method,priority,code}      counter
//   forecastd_request_duration_seconds{model,priority}                 histogram, end to end
//   forecastd_queue_duration_seconds{model,priority}                   histogram
//   forecastd_compute_duration_seconds{model,priority}                 histogram
//   forecastd_batch_size{model}                                        histogram, rows
//   forecastd_deadline_misses_total{model}                             counter
//   forecastd_model_load_failures_total{model}                         counter
//   forecastd_queue_depth{model}, forecastd_models_loaded,
//   forecastd_train_jobs_running                                       gauges read at scrape
//   forecastd_train_loss{job_id,model,split}, forecastd_train_epoch{job_id,model},
//   forecastd_train_samples_per_second{job_id,model}                   gauges
//   forecastd_train_steps_total{model}                                 counter
//   forecastd_gpu_memory_used_bytes{gpu}, forecastd_gpu_memory_total_bytes{gpu},
//   forecastd_gpu_utilization_ratio{gpu}                               gauges read at scrape
//                                                                      (NVML; GPUs only)
// and, for Triton's dashboards and perf_analyzer --collect-metrics, Triton's names for the same
// measurements (counters, per model version; durations in microseconds, summed):
//   nv_inference_request_success{model,version},
//   nv_inference_request_failure{model,reason,version}
//       requests of a resolved model version, by outcome: Predict, KServe ModelInfer (gRPC and
//       REST) and ModelStreamInfer requests (ObserveRequest), and the ticks answered on tick
//       streams and Triton sequence requests (OnTick), one request per tick message; a failure's
//       reason is Triton's: REJECTED (its deadline or queue timeout passed), CANCELED, BACKEND
//       (its batch ran and failed) or OTHER (refused before running: bad input, queue full, ...)
//   nv_inference_request_duration_us, nv_inference_queue_duration_us,
//   nv_inference_compute_infer_duration_us{model,version}
//       of successful requests only, as Triton sums them (a request's compute is its batch's)
//   nv_inference_count{model,version}, nv_inference_exec_count{model,version}
//       rows and executions of the batches the version's batcher ran (every front door and
//       Benchmark); nv_inference_count also counts one per tick message a forward answered
//       (tick batches are not counted as executions)
//   nv_gpu_utilization{gpu_uuid} (0..1), nv_gpu_memory_used_bytes{gpu_uuid},
//   nv_gpu_memory_total_bytes{gpu_uuid}, nv_gpu_power_usage{gpu_uuid} (W)
//       gauges read at scrape where NVML gives them; absent without a GPU
// Thread-safe: every method may be called from any thread (prometheus-cpp is thread-safe and
// the label caches are guarded).
#ifndef FORECASTD_SERVER_SERVING_METRICS_H_
#define FORECASTD_SERVER_SERVING_METRICS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/serving/batcher.h"
#include "engine/serving/stream_hub.h"
#include "engine/train/train_job_manager.h"
#include "grpcpp/support/status.h"
#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace forecastd {

class ServingMetrics : public TrainJobObserver, public StreamObserver {
 public:
  // What the scrape-time gauges read: called on the exposer's thread at every scrape.
  // One GPU as a scrape sees it (forecastd_gpu_*{gpu="<CUDA ordinal>"}).
  struct GpuReading {
    std::string gpu;
    int64_t memory_used_bytes = 0;
    int64_t memory_total_bytes = 0;
    double utilization_ratio = 0;  // of the last sample period, in [0, 1]
    // NVML's "GPU-..." identifier, the label of Triton's nv_gpu_* series; empty: those series
    // leave this GPU out.
    std::string uuid;
    double power_watts = -1;  // < 0: NVML does not report it for this GPU
  };

  struct Probes {
    std::function<std::vector<std::pair<std::string, int64_t>>()> queue_depth_by_model;
    std::function<int64_t()> models_loaded;
    std::function<int64_t()> train_jobs_running;
    // The GPUs the server uses, read at each scrape; empty (or unset): no GPU series.
    std::function<std::vector<GpuReading>()> gpus;
    // Tick streams per model (open or kept) and their state bytes; unset: no stream gauges.
    std::function<std::map<std::string, StreamHub::ModelUsage>()> streams;
  };

  // Registers the families in `registry`; returns the collectable for the scrape-time gauges,
  // which the caller registers with the exposer.
  explicit ServingMetrics(prometheus::Registry& registry);
  ~ServingMetrics() override;
  std::shared_ptr<prometheus::Collectable> MakeStateCollectable(Probes probes);

  // One finished RPC. `priority` 0 is reported as "default". Durations are observed only for
  // Predict-like calls that reached the engine (queue or compute > 0 or OK). `version` is the
  // version the request resolved to, 0 when it never resolved to one; only requests with a
  // version count in Triton's nv_inference_request_* series, as Triton counts a request only
  // once it has found its model.
  void ObserveRequest(const std::string& model, int64_t version, const std::string& method,
                      uint32_t priority, grpc::StatusCode code, absl::Duration total,
                      absl::Duration queue, absl::Duration compute);
  void ObserveDeadlineMiss(const std::string& model);
  void ObserveLoadFailure(const std::string& model);

  // A BatcherObserver for one model version (owned here, alive as long as this object).
  BatcherObserver* ForModel(const std::string& model, int64_t version);

  // StreamObserver: ticks answered and their latency, streams ended by reason.
  void OnTick(const std::string& model, int64_t version, const absl::Status& status,
              const TickTiming& timing) override;
  void OnStreamEnded(const std::string& model, const char* reason) override;

  // TrainJobObserver.
  void OnProgress(const std::string& job_id, const std::string& model,
                  const TrainProgress& progress) override;
  void OnFinished(const JobSnapshot& job) override;

 private:
  class ModelObserver;
  // The series a successful request or answered tick adds to are made once per label set and
  // kept: Family::Add builds and hashes its labels on every call, too slow for every request.
  // Triton's per-request series of one model version; all null for version 0 (not counted).
  struct TritonOkSeries {
    prometheus::Counter* success = nullptr;
    prometheus::Counter* request_us = nullptr;
    prometheus::Counter* queue_us = nullptr;
    prometheus::Counter* compute_us = nullptr;
    void Observe(absl::Duration total, absl::Duration queue, absl::Duration compute) const;
  };
  struct TickSeries {
    prometheus::Counter* ticks_ok = nullptr;
    prometheus::Histogram* tick_seconds = nullptr;
    TritonOkSeries triton;
    prometheus::Counter* nv_inferences = nullptr;  // null for version 0
  };
  struct RequestSeries {
    prometheus::Counter* requests_ok = nullptr;
    prometheus::Histogram* request_seconds = nullptr;
    prometheus::Histogram* queue_seconds = nullptr;
    prometheus::Histogram* compute_seconds = nullptr;
    TritonOkSeries triton;
  };
  TritonOkSeries MakeTritonOkSeries(const std::string& model, int64_t version);
  const TickSeries& TickSeriesFor(const std::string& model, int64_t version)
      ABSL_LOCKS_EXCLUDED(mu_);
  const RequestSeries& RequestSeriesFor(const std::string& model, int64_t version,
                                        const std::string& method, uint32_t priority)
      ABSL_LOCKS_EXCLUDED(mu_);

  // Triton's failure series of a failed request, with its reason (`ran`: the request's batch
  // was computed); nothing for version 0. Successes go through TritonOkSeries.
  void ObserveTritonFailure(const std::string& model, int64_t version, grpc::StatusCode code,
                            bool ran);

  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_seconds_;
  prometheus::Family<prometheus::Histogram>& queue_seconds_;
  prometheus::Family<prometheus::Histogram>& compute_seconds_;
  prometheus::Family<prometheus::Histogram>& batch_size_;
  prometheus::Family<prometheus::Counter>& deadline_misses_;
  prometheus::Family<prometheus::Counter>& load_failures_;
  prometheus::Family<prometheus::Gauge>& train_loss_;
  prometheus::Family<prometheus::Gauge>& train_epoch_;
  prometheus::Family<prometheus::Gauge>& train_rate_;
  prometheus::Family<prometheus::Counter>& train_steps_;
  prometheus::Family<prometheus::Counter>& stream_ticks_;
  prometheus::Family<prometheus::Histogram>& stream_tick_seconds_;
  prometheus::Family<prometheus::Counter>& streams_ended_;
  // Triton's names (see the top of this file).
  prometheus::Family<prometheus::Counter>& nv_success_;
  prometheus::Family<prometheus::Counter>& nv_failure_;
  prometheus::Family<prometheus::Counter>& nv_inferences_;
  prometheus::Family<prometheus::Counter>& nv_executions_;
  prometheus::Family<prometheus::Counter>& nv_request_us_;
  prometheus::Family<prometheus::Counter>& nv_queue_us_;
  prometheus::Family<prometheus::Counter>& nv_compute_us_;

  absl::Mutex mu_;
  // By model and version.
  std::map<std::pair<std::string, int64_t>, std::unique_ptr<ModelObserver>> observers_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> last_step_ ABSL_GUARDED_BY(mu_);  // by job id
  // By model, then version; entries are never removed (nor are the series they point at).
  absl::flat_hash_map<std::string, absl::flat_hash_map<int64_t, std::unique_ptr<TickSeries>>>
      tick_series_ ABSL_GUARDED_BY(mu_);
  // By model, version, method and priority (one key string).
  absl::flat_hash_map<std::string, std::unique_ptr<RequestSeries>> request_series_
      ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_SERVING_METRICS_H_
