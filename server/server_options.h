// Everything the forecastd daemon is configured with. main() fills it from the command line
// (server/command_line.h); Server::Create validates what only the host can tell (can the
// addresses be bound, does the repository exist, are the devices present). A value type.
#ifndef FORECASTD_SERVER_SERVER_OPTIONS_H_
#define FORECASTD_SERVER_SERVER_OPTIONS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "backends/device.h"
#include "server/logging.h"
#include "server/tls_credentials.h"

namespace forecastd {

struct ServerOptions {
  // host:port for every gRPC service (health, and the forecasting services to come).
  // Triton's default gRPC port, so tools built for Triton find forecastd.
  std::string grpc_address = "127.0.0.1:8001";

  // host:port of KServe v2 REST (Triton's HTTP API, server/kserve_http.h); Triton's default
  // port. "": no REST port.
  std::string http_address = "127.0.0.1:8000";
  // REST connections served at once (each waits on its thread for its forecast).
  int http_threads = 16;

  // host:port of the Prometheus text exposition, served at /metrics. Triton's default.
  std::string metrics_address = "127.0.0.1:8002";

  // Directory holding one sub-directory per model (config.json plus numbered versions).
  std::string model_repository = "models";

  // Devices to serve and train on; see ParseDeviceList for the spelling.
  std::vector<DeviceSpec> devices = {{DeviceKind::kCpu, 0}};

  LogOptions log;

  // On SIGTERM/SIGINT, after the drain: how long gRPC waits for calls still open and for
  // client connections to close before it cancels them and the process exits.
  absl::Duration shutdown_grace = absl::Seconds(1);

  // The models loaded at start; empty: every model of the repository.
  std::vector<std::string> load_models;

  // On SIGTERM/SIGINT, and for Unload and version switches: how long queued and in-flight
  // Predict work may take to finish before what is left is refused.
  absl::Duration drain_timeout = absl::Seconds(30);

  // Where tick streams are kept across restarts: `<state_dir>/streams.pb`, written on drain
  // (after every accepted tick is answered) and every stream_snapshot_interval, and read at
  // start. Empty: `<model_repository>/.streams`. A zero interval: only on drain.
  std::string state_dir;
  absl::Duration stream_snapshot_interval = absl::Seconds(30);
  // The states and ring buffers of all tick streams together, at most; an open beyond it is
  // refused RESOURCE_EXHAUSTED. (One tick request's own rows count against
  // max_request_memory_bytes.)
  int64_t max_stream_memory_bytes = int64_t{4} << 30;

  // Where training CSV files are looked up (DataConfig.csv_path is relative to it).
  std::string data_dir = "data";
  // Where training checkpoints go; "": each model's own `<model_repository>/<model>/.checkpoints`.
  std::string checkpoint_dir;
  // Training jobs that may run at once.
  int max_training_jobs = 2;
  // Where training steps run: "cpu" or "cuda:<i>", one of `devices`; "": the first GPU of
  // `devices`, else the CPU. A GPU's training steps take turns with its inference batches
  // (a step runs only while no batch waits).
  std::string train_device;
  // How long a rank of a multi-GPU training job waits for the others in a collective (an NCCL
  // all-reduce) beyond the slowest step seen (and for them to join) before the job is failed
  // as having lost a rank.
  absl::Duration train_collective_timeout = absl::Seconds(10);
  // How this daemon reaches the worker daemons of the jobs it coordinates
  // (TrainingConfig.workers): a file holding a bearer token with the `train` role on them ("":
  // none), and for workers serving TLS, the CA their certificates chain to and, for mutual TLS,
  // this daemon's client certificate and key (PEM files; all "": plaintext).
  std::string train_worker_token_file;
  std::string train_worker_ca_file;
  std::string train_worker_cert_file;
  std::string train_worker_key_file;

  // CPU worker slots running batches; 0: one per physical core (backends/cpu_topology.h).
  int cpu_workers = 0;
  // Which CPUs each worker may run on: "auto" (per NUMA node where there are several),
  // "none", "node" or "core" (backends/cpu_topology.h).
  std::string cpu_pinning = "auto";
  // With one OpenMP thread a worker: the most idle workers whose threads a forecast's recurrent
  // layers may borrow (DeviceScheduler::Options::max_helpers); -1: as many as keep half of the
  // workers free; 0: none.
  int cpu_helpers = -1;
  // Instances of every model on each GPU of `devices` (each with its own stream), >= 1.
  int gpu_instances = 2;
  // Capture a CUDA graph of each GPU instance's forward pass per batch size at load (batches
  // are padded to the next captured size); false: GPU batches run eagerly.
  bool gpu_graphs = true;
  // A Predict / ModelInfer request (or a tick) that finds its model and the device idle runs
  // at once on the gRPC thread that read it, without the batching delay and the hand-off to a
  // worker thread; under load requests batch as usual (--no-inline-when-idle: always batch).
  bool inline_when_idle = true;
  // On a GPU such a request's batch is queued on the GPU and the gRPC thread returns; the
  // GPU's completion thread writes the reply when the batch ends (--no-gpu-completion-thread:
  // the gRPC thread waits for the GPU and replies itself).
  bool gpu_completion_thread = true;
  // Tick-stream steps of few streams on a GPU run on a resident kernel that leaves after this
  // many microseconds without a step (CudaExecutionDevice::Options::resident_step_idle_us);
  // 0: a launch per step.
  int64_t gpu_resident_step_idle_us = 2000;
  // Tick-stream batches of one model version computing at once, at most; ticks arriving
  // meanwhile queue and go out together in the next batch. 0: one per worker slot; -1: one on
  // the CPU, one per instance on a GPU (ModelRegistry::Options::max_tick_batches).
  int64_t tick_batches_per_model = -1;
  // The fewest rows a CPU batch is cut to when idle workers share what is queued
  // (ModelRegistry::Options::cpu_min_batch_rows); 0: what the model's kernels compute a row
  // cheapest from (4 for an LSTM or GRU on a CPU with AVX2, else 1).
  int64_t cpu_min_batch_rows = 0;
  // Largest gRPC message accepted or sent, in bytes.
  int max_message_bytes = 64 << 20;
  // Accept NaN and Inf in Predict inputs (refused by default).
  bool allow_non_finite_inputs = false;

  // --- Security. The metrics endpoint is not covered by either: it stays plaintext HTTP
  // without authentication, so bind it where only the scraper reaches it.

  // TLS or mutual TLS for the gRPC port and the REST port; by default plaintext.
  TlsOptions tls;
  // The bearer tokens and their roles (server/token_store.h), re-read on SIGHUP; "": no
  // authentication, every gRPC and REST call is allowed.
  std::string token_file;

  // --- Limits on what one request may ask for (max_message_bytes and max_training_jobs above
  // are limits too). Each refusal names the flag.

  // Windows in one Predict or ModelInfer request, on top of each model's max_batch_size
  // (INVALID_ARGUMENT above it). Also bounds Benchmark's batch sizes.
  int64_t max_batch_rows = 1024;
  // The memory one Predict or ModelInfer request is estimated to need (its decoded inputs, its
  // forecasts twice and the model's activations for its windows; EstimatePredictBytes in
  // server/predict_input.h), checked before anything is allocated: RESOURCE_EXHAUSTED above.
  int64_t max_request_memory_bytes = int64_t{512} << 20;
  // Rows of one training series, inline or CSV (INVALID_ARGUMENT above it).
  int64_t max_train_series_rows = 10'000'000;
  // Estimated memory of one training step (weights, gradients, optimiser moments, saved
  // activations; EstimateTrainStepBytes in engine/train/train_job.h), checked when a Train
  // request arrives: RESOURCE_EXHAUSTED above it.
  int64_t max_train_memory_bytes = int64_t{8} << 30;
  // Requests one model version holds queued per priority level: caps max_queue_size of every
  // queue policy in the models' BatchingConfig (a model's own smaller size stays);
  // RESOURCE_EXHAUSTED when full. 0: no cap from the server.
  uint32_t max_queue_per_model = 1024;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_SERVER_OPTIONS_H_
