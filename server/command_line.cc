#include "server/command_line.h"

#include <limits>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu_topology.h"
#include "backends/device.h"
#include "kernels/base/version.h"

namespace forecastd {
namespace {

CommandLine UsageError(absl::string_view message) {
  CommandLine result;
  result.should_exit = true;
  result.exit_code = kExitUsageError;
  result.message = absl::StrCat("forecastd: ", message, "\nRun 'forecastd --help' for usage.\n");
  return result;
}

}  // namespace

std::string VersionString() {
  return absl::StrCat("forecastd ", kForecastdVersion, ", ", GpuBuildInfo());
}

absl::Status ValidateHostPort(absl::string_view flag, absl::string_view address) {
  const size_t colon = address.rfind(':');
  const auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad ", flag, " '", address, "': ", why, " (expected host:port)"));
  };
  if (colon == absl::string_view::npos) return bad("no port");
  const absl::string_view host = address.substr(0, colon);
  const absl::string_view port_text = address.substr(colon + 1);
  if (host.empty()) return bad("no host");
  if (host.front() == '[' && host.back() != ']') return bad("unclosed IPv6 bracket");
  if (host.front() != '[' && host.find(':') != absl::string_view::npos) {
    return bad("an IPv6 host needs brackets, as in [::1]:8001");
  }
  int port = 0;
  if (!absl::SimpleAtoi(port_text, &port) || port < 0 || port > 65535) {
    return bad("the port must be a number from 0 to 65535");
  }
  return absl::OkStatus();
}

CommandLine ParseCommandLine(const std::vector<std::string>& args) {
  CommandLine result;
  ServerOptions& options = result.options;

  CLI::App app("forecastd: serves and trains time-series forecasting models over gRPC.",
               "forecastd");
  app.set_version_flag("--version", VersionString());
  app.footer(
      "Example:\n  forecastd --model-repository models --grpc-address 127.0.0.1:8001 "
      "--metrics-address 127.0.0.1:8002 --devices cpu");

  std::string devices = "cpu";
  std::string log_level = "info";
  std::string log_format = "text";
  double shutdown_grace_seconds = absl::ToDoubleSeconds(options.shutdown_grace);
  app.add_option("--grpc-address", options.grpc_address, "host:port for the gRPC services")
      ->capture_default_str();
  app.add_option("--http-address", options.http_address,
                 "host:port for KServe v2 REST (Triton's HTTP API); empty: no REST port")
      ->capture_default_str();
  app.add_option("--http-threads", options.http_threads, "REST connections served at once")
      ->capture_default_str();
  app.add_option("--metrics-address", options.metrics_address,
                 "host:port for Prometheus metrics at /metrics")
      ->capture_default_str();
  app.add_option("--model-repository", options.model_repository,
                 "directory with one sub-directory per model")
      ->capture_default_str();
  app.add_option("--devices", devices,
                 "devices to use: cpu, cuda, cuda:<i>, all (comma-separated); a model whose config "
                 "names no devices serves on the first GPU, else on the CPU")
      ->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error, critical or off")
      ->capture_default_str();
  app.add_option("--log-format", log_format, "text or json (one JSON object per line)")
      ->capture_default_str();
  app.add_option("--shutdown-grace-seconds", shutdown_grace_seconds,
                 "after the drain on SIGTERM/SIGINT, how long open calls and client connections "
                 "may take to close")
      ->capture_default_str();
  double drain_timeout_seconds = absl::ToDoubleSeconds(options.drain_timeout);
  app.add_option("--drain-timeout", drain_timeout_seconds,
                 "seconds queued and in-flight predictions may take to finish on shutdown, "
                 "unload or a version switch")
      ->capture_default_str();
  app.add_option("--state-dir", options.state_dir,
                 "where tick streams are kept across restarts (streams.pb); default: "
                 "<model repository>/.streams");
  double snapshot_seconds = absl::ToDoubleSeconds(options.stream_snapshot_interval);
  app.add_option("--stream-snapshot-interval", snapshot_seconds,
                 "seconds between periodic snapshots of the tick streams (0: only on drain); a "
                 "killed daemon loses at most the ticks since the last one")
      ->capture_default_str();
  app.add_option("--max-stream-memory-bytes", options.max_stream_memory_bytes,
                 "memory all tick streams' states and ring buffers may hold together")
      ->capture_default_str();
  app.add_option("--load-model", options.load_models,
                 "load only these models at start (repeatable); default: every model");
  app.add_option("--data-dir", options.data_dir,
                 "directory that training CSV paths are relative to")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", options.checkpoint_dir,
                 "where training checkpoints go (default: each model's own "
                 "<model-repository>/<model>/.checkpoints)");
  app.add_option("--max-training-jobs", options.max_training_jobs,
                 "training jobs that may run at once")
      ->capture_default_str();
  app.add_option(
         "--cpu-workers", options.cpu_workers,
         "CPU worker threads running batches, each on cores / workers OpenMP threads (0: one "
         "per physical core this process may use; fewer: faster single requests, fewer per "
         "second)")
      ->capture_default_str();
  app.add_option("--cpu-helpers", options.cpu_helpers,
                 "idle CPU workers whose threads one forecast may borrow for its recurrent "
                 "layers, while at least half of the workers stay idle (workers of one thread "
                 "each; -1: as many as that leaves; 0: none)")
      ->capture_default_str();
  app.add_option("--cpu-min-batch-rows", options.cpu_min_batch_rows,
                 "the fewest rows a CPU batch is cut to when idle workers share what is queued "
                 "(0: what the model's kernels compute a row cheapest from: 4 for an LSTM or GRU "
                 "with AVX2, else 1)")
      ->capture_default_str();
  app.add_option("--cpu-pinning", options.cpu_pinning,
                 "which CPUs each CPU worker runs on: auto (per NUMA node when the cores span "
                 "several, else unpinned), none, node, or core (each worker its own cores)")
      ->capture_default_str();
  app.add_option("--gpu-instances", options.gpu_instances,
                 "instances of every model per GPU, each on its own stream")
      ->capture_default_str();
  app.add_option("--train-device", options.train_device,
                 "where training runs: cpu or cuda:<i>, one of --devices (default: the first GPU "
                 "of --devices, else the CPU)");
  double collective_timeout_seconds = absl::ToDoubleSeconds(options.train_collective_timeout);
  app.add_option("--train-collective-timeout", collective_timeout_seconds,
                 "seconds beyond the slowest step seen that a rank of a multi-GPU training "
                 "job waits for the others in a collective (and for them to join) before the "
                 "job fails as having lost a rank")
      ->capture_default_str();
  app.add_option("--train-worker-token-file", options.train_worker_token_file,
                 "bearer token (a file) this daemon presents to the worker daemons of the jobs "
                 "it coordinates (training.workers); they must grant it the train role");
  app.add_option("--train-worker-ca", options.train_worker_ca_file,
                 "PEM CA bundle the workers' TLS certificates chain to (TLS to the workers)");
  app.add_option("--train-worker-cert", options.train_worker_cert_file,
                 "PEM client certificate for workers that require mutual TLS (with its key)");
  app.add_option("--train-worker-key", options.train_worker_key_file,
                 "PEM key of --train-worker-cert");
  app.add_flag("!--no-gpu-graphs", options.gpu_graphs,
               "run GPU batches eagerly instead of replaying a CUDA graph per batch size");
  app.add_flag("!--no-inline-when-idle", options.inline_when_idle,
               "always hand requests to the batcher and a worker thread, with each model's "
               "max_queue_delay, even when the model and the device are idle");
  app.add_flag("!--no-gpu-completion-thread", options.gpu_completion_thread,
               "a request that runs at once on a GPU waits for the GPU on its gRPC thread and "
               "replies from there, instead of a per-GPU thread replying when the batch ends");
  app.add_option("--gpu-resident-step-idle-us", options.gpu_resident_step_idle_us,
                 "on a GPU, a state-mode tick step of up to 8 streams runs on a kernel kept "
                 "resident between steps (one model version per GPU at a time; it keeps a "
                 "cluster of SMs polling), which leaves after this many microseconds without a "
                 "step (0: launch every step)")
      ->check(CLI::Range(int64_t{0}, int64_t{60'000'000}))
      ->capture_default_str();
  app.add_option("--tick-batches-per-model", options.tick_batches_per_model,
                 "tick-stream batches of one model version computing at once, at most; ticks "
                 "arriving meanwhile wait and go out together in the next batch (0: one per "
                 "worker slot; -1: one on the CPU, one per instance on a GPU)")
      ->check(CLI::Range(int64_t{-1}, std::numeric_limits<int64_t>::max()))
      ->capture_default_str();
  app.add_option("--max-message-bytes", options.max_message_bytes,
                 "largest gRPC message accepted or sent (and REST request body)")
      ->capture_default_str();
  app.add_flag("--allow-non-finite-inputs", options.allow_non_finite_inputs,
               "accept NaN and Inf in Predict inputs (refused by default)");

  // Security. The metrics port is covered by neither TLS nor tokens.
  app.add_option("--tls-cert", options.tls.cert_path,
                 "PEM certificate chain for the gRPC and REST ports; with --tls-key they serve TLS "
                 "only (default: plaintext). The metrics port stays plaintext HTTP");
  app.add_option("--tls-key", options.tls.key_path, "PEM private key of --tls-cert (unencrypted)");
  app.add_option("--tls-client-ca", options.tls.client_ca_path,
                 "PEM CA bundle: clients must present a certificate signed by it (mutual TLS)");
  app.add_option("--token-file", options.token_file,
                 "bearer tokens and their roles, one '<roles> <token> [name]' per line (roles: "
                 "predict, train, admin, comma-separated; chmod 600), re-read on SIGHUP. "
                 "Without it there is no authentication: every gRPC and REST call is allowed");

  // Limits on one request.
  app.add_option("--max-batch-rows", options.max_batch_rows,
                 "windows one Predict/ModelInfer request may hold, whatever the model's "
                 "max_batch_size")
      ->capture_default_str();
  app.add_option("--max-request-memory-bytes", options.max_request_memory_bytes,
                 "estimated memory one Predict/ModelInfer request may need (inputs, forecasts, "
                 "activations); checked before allocating, RESOURCE_EXHAUSTED above it")
      ->capture_default_str();
  app.add_option("--max-train-series-rows", options.max_train_series_rows,
                 "rows a training series (inline or CSV) may have")
      ->capture_default_str();
  app.add_option("--max-train-memory-bytes", options.max_train_memory_bytes,
                 "estimated memory one training step may need (weights, gradients, optimiser "
                 "state, activations); a Train request above it gets RESOURCE_EXHAUSTED")
      ->capture_default_str();
  app.add_option("--max-queue-per-model", options.max_queue_per_model,
                 "requests a model version may hold queued per priority level; caps the "
                 "models' max_queue_size (0: no cap)")
      ->capture_default_str();

  std::vector<const char*> argv;
  argv.reserve(args.size());
  for (const std::string& arg : args) argv.push_back(arg.c_str());
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::CallForHelp&) {
    result.should_exit = true;
    result.exit_code = kExitOk;
    result.message = app.help();
    return result;
  } catch (const CLI::CallForVersion&) {
    result.should_exit = true;
    result.exit_code = kExitOk;
    result.message = VersionString() + "\n";
    return result;
  } catch (const CLI::ParseError& e) {
    return UsageError(e.what());
  }

  if (absl::Status s = ValidateHostPort("--grpc-address", options.grpc_address); !s.ok()) {
    return UsageError(s.message());
  }
  if (!options.http_address.empty()) {
    if (absl::Status s = ValidateHostPort("--http-address", options.http_address); !s.ok()) {
      return UsageError(s.message());
    }
  }
  if (options.http_threads < 1) return UsageError("--http-threads must be >= 1");
  if (absl::Status s = ValidateHostPort("--metrics-address", options.metrics_address); !s.ok()) {
    return UsageError(s.message());
  }
  if (options.model_repository.empty()) return UsageError("--model-repository is empty");
  absl::StatusOr<std::vector<DeviceSpec>> device_specs = ParseDeviceList(devices);
  if (!device_specs.ok())
    return UsageError(absl::StrCat("--devices: ", device_specs.status().message()));
  options.devices = *std::move(device_specs);
  if (!options.train_device.empty() && options.train_device != "cpu") {
    absl::StatusOr<std::vector<DeviceSpec>> train = ParseDeviceList(options.train_device);
    if (!train.ok() || train->size() != 1 || (*train)[0].kind != DeviceKind::kCuda ||
        (*train)[0].index == DeviceSpec::kEveryIndex) {
      return UsageError(
          absl::StrCat("--train-device ", options.train_device, ": expected cpu or cuda:<i>"));
    }
  }
  absl::StatusOr<spdlog::level::level_enum> level = ParseLogLevel(log_level);
  if (!level.ok()) return UsageError(absl::StrCat("--log-level: ", level.status().message()));
  options.log.level = *level;
  absl::StatusOr<LogFormat> format = ParseLogFormat(log_format);
  if (!format.ok()) return UsageError(absl::StrCat("--log-format: ", format.status().message()));
  options.log.format = *format;
  if (!(shutdown_grace_seconds >= 0 && shutdown_grace_seconds <= 3600)) {
    return UsageError("--shutdown-grace-seconds must be between 0 and 3600");
  }
  options.shutdown_grace = absl::Seconds(shutdown_grace_seconds);
  if (!(drain_timeout_seconds >= 0 && drain_timeout_seconds <= 3600)) {
    return UsageError("--drain-timeout must be between 0 and 3600 seconds");
  }
  options.drain_timeout = absl::Seconds(drain_timeout_seconds);
  if (!(snapshot_seconds >= 0 && snapshot_seconds <= 86400)) {
    return UsageError("--stream-snapshot-interval must be between 0 and 86400 seconds");
  }
  options.stream_snapshot_interval = absl::Seconds(snapshot_seconds);
  if (!(collective_timeout_seconds > 0 && collective_timeout_seconds <= 3600)) {
    return UsageError("--train-collective-timeout must be above 0 and at most 3600 seconds");
  }
  options.train_collective_timeout = absl::Seconds(collective_timeout_seconds);
  if (options.max_training_jobs < 1) return UsageError("--max-training-jobs must be >= 1");
  if (options.cpu_workers < 0 || options.cpu_workers > 1024) {
    return UsageError("--cpu-workers must be between 0 and 1024");
  }
  if (options.cpu_helpers < -1 || options.cpu_helpers > 1023) {
    return UsageError("--cpu-helpers must be between -1 and 1023");
  }
  if (options.cpu_min_batch_rows < 0 || options.cpu_min_batch_rows > 1 << 20) {
    return UsageError("--cpu-min-batch-rows must be between 0 and 1048576");
  }
  if (const absl::StatusOr<CpuPinning> pinning = ParseCpuPinning(options.cpu_pinning);
      !pinning.ok()) {
    return UsageError(absl::StrCat("--cpu-pinning: ", pinning.status().message()));
  }
  if (options.gpu_instances < 1 || options.gpu_instances > 64) {
    return UsageError("--gpu-instances must be between 1 and 64");
  }
  if (options.max_message_bytes < 1024) return UsageError("--max-message-bytes must be >= 1024");
  if (options.tls.key_path.empty() != options.tls.cert_path.empty()) {
    return UsageError("--tls-cert and --tls-key go together");
  }
  if (options.tls.mutual() && !options.tls.enabled()) {
    return UsageError("--tls-client-ca needs --tls-cert and --tls-key");
  }
  if (options.max_batch_rows < 1) return UsageError("--max-batch-rows must be >= 1");
  if (options.max_request_memory_bytes < 1024) {
    return UsageError("--max-request-memory-bytes must be >= 1024");
  }
  if (options.max_train_series_rows < 1) return UsageError("--max-train-series-rows must be >= 1");
  if (options.max_stream_memory_bytes < 0) {
    return UsageError("--max-stream-memory-bytes must be >= 0 (0: no limit)");
  }
  if (options.max_train_memory_bytes < 1) {
    return UsageError("--max-train-memory-bytes must be >= 1");
  }
  return result;
}

}  // namespace forecastd
