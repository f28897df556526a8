#include "server/server.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/strip.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/cpu_topology.h"
#include "backends/device.h"
#if FORECASTD_WITH_CUDA
#include "backends/cuda/nccl_communicator.h"
#include "backends/cuda/nvml.h"
#include "engine/serving/cuda_execution_device.h"
#endif
#include "client/client_security.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"
#include "server/kserve_service.h"
#include "server/tls_credentials.h"
#include "server/train_workers.h"
#include "server/training_placement.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

absl::Status CheckModelRepository(const std::string& path) {
  std::error_code error;
  const std::filesystem::file_status status = std::filesystem::status(path, error);
  if (error || !std::filesystem::exists(status)) {
    return absl::NotFoundError(absl::StrCat("model repository '", path, "' does not exist"));
  }
  if (!std::filesystem::is_directory(status)) {
    return absl::FailedPreconditionError(
        absl::StrCat("model repository '", path, "' is not a directory"));
  }
  return absl::OkStatus();
}

// This process's resident memory, from /proc/self/statm (0 where unavailable).
int64_t ResidentBytes() {
  std::ifstream statm("/proc/self/statm");
  int64_t pages = 0, resident = 0;
  if (!(statm >> pages >> resident)) return 0;
  return resident * sysconf(_SC_PAGESIZE);
}

// Whether `address` (host:port, as ValidateHostPort accepts it) only accepts local callers.
bool IsLoopback(const std::string& address) {
  absl::string_view host = absl::string_view(address).substr(0, address.rfind(':'));
  if (absl::ConsumePrefix(&host, "[")) absl::ConsumeSuffix(&host, "]");
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

// An idle REST keep-alive connection holds a thread that shutdown waits for, so it is closed
// after the shutdown grace (at least 1 s, cpp-httplib's unit).
int KeepAliveSeconds(const ServerOptions& options) {
  return std::max<int>(1,
                       static_cast<int>(std::ceil(absl::ToDoubleSeconds(options.shutdown_grace))));
}

int64_t TotalMemoryBytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  return pages > 0 ? static_cast<int64_t>(pages) * sysconf(_SC_PAGESIZE) : 0;
}

// The scrape-time reader of the GPUs among `devices`, through NVML; empty when there are none,
// when this build has no CUDA, or when NVML cannot be loaded (said once, at start). A GPU that
// NVML cannot answer for at a scrape is left out of that scrape.
std::function<std::vector<ServingMetrics::GpuReading>()> GpuReadings(
    const std::vector<Device>& devices) {
  std::vector<int> gpus;
  for (const Device& d : devices) {
    if (d.kind == DeviceKind::kCuda) gpus.push_back(d.index);
  }
  if (gpus.empty()) return nullptr;
#if FORECASTD_WITH_CUDA
  absl::StatusOr<std::unique_ptr<Nvml>> loaded = Nvml::Load();
  if (!loaded.ok()) {
    spdlog::warn("no GPU memory or utilisation metrics: {}", loaded.status().ToString());
    return nullptr;
  }
  std::shared_ptr<Nvml> nvml = *std::move(loaded);
  return [nvml, gpus]() {
    std::vector<ServingMetrics::GpuReading> readings;
    for (const int gpu : gpus) {
      const absl::StatusOr<GpuUsage> usage = nvml->Usage(gpu);
      if (!usage.ok()) continue;
      readings.push_back({.gpu = absl::StrCat(gpu),
                          .memory_used_bytes = usage->memory_used_bytes,
                          .memory_total_bytes = usage->memory_total_bytes,
                          .utilization_ratio = usage->utilization_percent / 100.0,
                          .uuid = usage->uuid,
                          .power_watts = usage->power_milliwatts < 0
                                             ? -1.0
                                             : static_cast<double>(usage->power_milliwatts) / 1e3});
    }
    return readings;
  };
#else
  return nullptr;
#endif
}

}  // namespace

// Connects the registry's load events and batchers to the Prometheus series.
class Server::RegistryMetrics final : public RegistryObserver {
 public:
  explicit RegistryMetrics(ServingMetrics* metrics) : metrics_(metrics) {}

  std::unique_ptr<BatcherObserver> NewBatcherObserver(const std::string& model,
                                                      int64_t version) override {
    return std::make_unique<Forwarding>(metrics_->ForModel(model, version));
  }
  void OnLoadFailed(const std::string& model, int64_t /*version*/,
                    const absl::Status& /*error*/) override {
    metrics_->ObserveLoadFailure(model);
  }

 private:
  // The registry owns its observers; the series they feed live in ServingMetrics.
  class Forwarding final : public BatcherObserver {
   public:
    explicit Forwarding(BatcherObserver* target) : target_(target) {}
    void OnBatch(int64_t rows, int64_t tasks, int64_t benchmark_rows) override {
      target_->OnBatch(rows, tasks, benchmark_rows);
    }
    void OnTaskDone(uint32_t priority, const absl::Status& status, absl::Duration queue,
                    absl::Duration compute) override {
      target_->OnTaskDone(priority, status, queue, compute);
    }

   private:
    BatcherObserver* target_;
  };

  ServingMetrics* metrics_;
};

absl::StatusOr<std::unique_ptr<Server>> Server::Create(const ServerOptions& options) {
  RETURN_IF_ERROR(CheckModelRepository(options.model_repository));
  // Credentials first: a bad certificate or token file stops the start before any model loads.
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   MakeServerCredentials(options.tls));
  std::unique_ptr<TokenStore> tokens;
  if (!options.token_file.empty()) {
    ASSIGN_OR_RETURN(tokens, TokenStore::Create({.path = options.token_file}));
    if (tokens->size() == 0) {
      spdlog::warn(
          "token file '{}' holds no tokens: every call but health and reflection will "
          "be refused",
          options.token_file);
    }
  }

  const DeviceRegistry device_registry = DeviceRegistry::Discover();
  ASSIGN_OR_RETURN(std::vector<Device> devices, device_registry.Resolve(options.devices));
  std::vector<std::string> device_names;
  for (const Device& d : devices) device_names.push_back(absl::StrCat(d.Id(), " (", d.name, ")"));
  spdlog::info("devices: {}", absl::StrJoin(device_names, ", "));

  ASSIGN_OR_RETURN(
      std::unique_ptr<MetricsExposer> metrics,
      MetricsExposer::Create({.address = options.metrics_address, .version = kForecastdVersion}));

  std::unique_ptr<Server> server(new Server(options, std::move(devices), std::move(metrics)));
  Server& s = *server;
  s.serving_metrics_ = std::make_unique<ServingMetrics>(s.metrics_->registry());
  if (tokens != nullptr) {
    s.tokens_ = std::move(tokens);
    s.authenticator_ = std::make_unique<CallAuthenticator>(
        CallAuthenticator::Options{.tokens = s.tokens_.get(), .registry = &s.metrics_->registry()});
  }
  std::function<absl::Status(const grpc::ServerContextBase&)> authorize;
  std::function<absl::Status(const grpc::ServerContextBase&)> authorize_promote;
  // Whose shared-memory regions a KServe call may use: its token's.
  std::function<std::string(const grpc::ServerContextBase&)> identify;
  if (s.authenticator_ != nullptr) {
    authorize = CheckAuthorized;
    identify = CallerIdentity;
    authorize_promote = [](const grpc::ServerContextBase& context) {
      return CheckRole(context, Role::kAdmin, "Train with promote");
    };
  }

  // The CPU runs every model: the CUDA backend serves from the GPU issue on.
  ASSIGN_OR_RETURN(std::unique_ptr<DnnlBackend> dnnl, DnnlBackend::Create({}));
  s.backend_ = std::move(dnnl);
  // bf16 models run their products in bf16 where oneDNN has bf16 kernels for this CPU.
  if (DnnlBackend::CpuRunsBf16()) {
    ASSIGN_OR_RETURN(std::unique_ptr<DnnlBackend> bf16,
                     DnnlBackend::Create({.math = DnnlBackend::Options::Math::kBf16}));
    s.bf16_backend_ = std::move(bf16);
  }
  spdlog::info("cpu: oneDNN on {}; bf16 models compute {}", DnnlBackend::CpuIsa(),
               s.bf16_backend_ != nullptr ? "bf16" : "fp32 (no AVX512-BF16 or AMX)");
  // The cores this process may use (its affinity mask: taskset, a container's cpuset), and
  // the workers planned from them (backends/cpu_topology.h).
  const CpuTopology topology = ThisProcessCpuTopology();
  ASSIGN_OR_RETURN(const CpuPinning pinning, ParseCpuPinning(options.cpu_pinning));
  ASSIGN_OR_RETURN(const CpuWorkerPlan plan,
                   PlanCpuWorkers(topology, options.cpu_workers, pinning));
  spdlog::info("cpu: {}; {}{}", topology.Describe(), plan.Describe(),
               plan.threads_per_worker == 1 && options.cpu_helpers != 0 && plan.workers >= 4
                   ? (options.cpu_helpers < 0
                          ? std::string("; a forecast may borrow idle workers' threads while half "
                                        "of the workers stay free")
                          : absl::StrCat("; a forecast may borrow up to ", options.cpu_helpers,
                                         " idle workers' threads"))
                   : std::string());
  const int workers = plan.workers;
  // Cores shared out between the workers, so that a worker's OpenMP threads never compete
  // with another worker's. Workers also run a few nice levels below the gRPC threads: when
  // the cores are saturated, admitting, refusing and health-checking requests goes first, so
  // overload is refused at once instead of every call waiting behind the compute.
  const int threads_per_worker = plan.threads_per_worker;
  s.cpu_threads_per_worker_ = threads_per_worker;
  constexpr int kWorkerNiceIncrement = 5;
  ASSIGN_OR_RETURN(
      s.scheduler_,
      DeviceScheduler::Create(
          {.num_workers = workers,
           .on_worker_start =
               [=](int worker) {
                 if (!plan.worker_cpus.empty()) {
                   if (absl::Status pinned =
                           PinCallingThread(plan.worker_cpus[static_cast<size_t>(worker)]);
                       !pinned.ok()) {
                     spdlog::warn("worker {}: {}", worker, std::string(pinned.message()));
                   }
                 }
                 DnnlBackend::SetThreadsForCallingThread(threads_per_worker);
                 // Linux: the nice value is per thread (a tid names the
                 // thread).
                 const id_t tid = static_cast<id_t>(syscall(SYS_gettid));
                 errno = 0;
                 const int nice = getpriority(PRIO_PROCESS, tid);
                 if ((nice == -1 && errno != 0) ||
                     setpriority(PRIO_PROCESS, tid, nice + kWorkerNiceIncrement) != 0) {
                   spdlog::warn("worker {}: cannot lower its priority: {}", worker,
                                std::strerror(errno));
                 }
               },
           .on_inline =
               [=](int /*worker*/) { DnnlBackend::SetThreadsForCallingThread(threads_per_worker); },
           // Several OpenMP threads a worker: their teams stay on the
           // workers (see DeviceScheduler::Options::allow_inline).
           .allow_inline = threads_per_worker == 1,
           // One thread a worker: idle workers lend theirs to a quiet server's forecasts.
           .max_helpers = threads_per_worker != 1   ? 0
                          : options.cpu_helpers < 0 ? workers
                                                    : options.cpu_helpers}));
  // This thread loads and warms up the models (ModelRegistry::Start) on the CPU backend: one
  // OpenMP thread, so that it keeps no team of its own beside the workers' (which would make
  // libgomp count more threads than cores and stop spinning at the workers' barriers).
  DnnlBackend::SetThreadsForCallingThread(1);

  // Models serve on the --devices, GPUs first: a model whose config names no devices serves on
  // the first GPU, or on the CPU when there is none. Training runs on --train-device, by
  // default the same first GPU.
  std::vector<Device> serving_order = s.devices_;
  std::stable_partition(serving_order.begin(), serving_order.end(),
                        [](const Device& d) { return d.kind == DeviceKind::kCuda; });
  for (const Device& d : serving_order) {
    if (d.kind == DeviceKind::kCpu) {
      s.execution_devices_.push_back(std::make_unique<CpuExecutionDevice>(
          s.backend_.get(), s.scheduler_.get(), /*instances=*/0, s.bf16_backend_.get()));
      continue;
    }
#if FORECASTD_WITH_CUDA
    CudaExecutionDevice::Options gpu;
    gpu.device = d.index;
    gpu.instances_per_model = options.gpu_instances;
    gpu.use_graphs = options.gpu_graphs;
    gpu.completion_thread = options.gpu_completion_thread;
    gpu.resident_step_idle_us = options.gpu_resident_step_idle_us;
    absl::StatusOr<std::unique_ptr<CudaExecutionDevice>> cuda = CudaExecutionDevice::Create(gpu);
    if (!cuda.ok()) {
      return absl::Status(cuda.status().code(),
                          absl::StrCat(d.Id(), ": ", cuda.status().message()));
    }
    s.execution_devices_.push_back(*std::move(cuda));
#else
    return absl::FailedPreconditionError(
        absl::StrCat(d.Id(), ": this forecastd was built without CUDA"));
#endif
  }

#if FORECASTD_WITH_CUDA
  // NCCL's first communicator in a process stalls the GPUs it touches for a couple of hundred
  // milliseconds (measured on two H200s: Predict calls in flight took 160-214 ms while a
  // two-GPU job's ranks joined, 2-8 ms after this): set it up now, before the GPUs serve,
  // rather than when a training job first joins its ranks.
  for (const Device& d : s.devices_) {
    if (d.kind != DeviceKind::kCuda) continue;
    absl::StatusOr<std::string> id = NewNcclUniqueId();
    absl::StatusOr<std::unique_ptr<Communicator>> warm =
        id.ok() ? CreateNcclCommunicator({.device = d.index,
                                          .rank = 0,
                                          .size = 1,
                                          .unique_id = *id,
                                          .timeout = absl::Seconds(30)})
                : id.status();
    if (!warm.ok()) spdlog::warn("{}: NCCL not ready: {}", d.Id(), warm.status().ToString());
  }
#endif
  s.registry_metrics_ = std::make_unique<RegistryMetrics>(s.serving_metrics_.get());
  ModelRegistry::Options registry_options;
  registry_options.repository_path = options.model_repository;
  for (const std::unique_ptr<ExecutionDevice>& d : s.execution_devices_) {
    registry_options.devices.push_back(d.get());
  }
  registry_options.backend = s.backend_.get();
  registry_options.scheduler = s.scheduler_.get();
  registry_options.models_to_load = options.load_models;
  registry_options.drain_timeout = options.drain_timeout;
  // One batch waiting per model at most: while the workers are busy the queue grows and the
  // next batch is larger, which is what dynamic batching is for.
  registry_options.max_enqueued_batches = 1;
  // A request that finds its model and the device idle runs on the gRPC thread that read it,
  // without the batching delay: nothing to batch it with, and no thread hand-off.
  registry_options.run_inline_when_idle = options.inline_when_idle;
  registry_options.max_tick_batches = options.tick_batches_per_model;
  registry_options.cpu_min_batch_rows = options.cpu_min_batch_rows;
  registry_options.max_queue_size = options.max_queue_per_model;
  registry_options.observer = s.registry_metrics_.get();
  ASSIGN_OR_RETURN(s.registry_, ModelRegistry::Create(registry_options));
  RETURN_IF_ERROR(s.registry_->Start());
  ASSIGN_OR_RETURN(s.streams_,
                   StreamHub::Create({.registry = s.registry_.get(),
                                      .clock = nullptr,
                                      .allow_non_finite_inputs = options.allow_non_finite_inputs,
                                      .observer = s.serving_metrics_.get(),
                                      .snapshot_path = s.StreamSnapshotPath(),
                                      .snapshot_interval = options.stream_snapshot_interval,
                                      .max_state_bytes = options.max_stream_memory_bytes,
                                      .max_request_bytes = options.max_request_memory_bytes}));
  s.RestoreStreams();

  TrainJobManager::Options job_options;
  job_options.repository = options.model_repository;
  job_options.data_dir = options.data_dir;
  // By default each model's checkpoints stay in its directory, so that removing a model
  // removes them too.
  job_options.checkpoint_dir = options.checkpoint_dir;
  job_options.checkpoints_in_model_dirs = options.checkpoint_dir.empty();
  // Jobs outlive the daemon: their records stay in the repository.
  job_options.jobs_dir = absl::StrCat(options.model_repository, "/.jobs");
  job_options.backend = s.backend_.get();
  ExecutionDevice* train_device = nullptr;
  for (const std::unique_ptr<ExecutionDevice>& d : s.execution_devices_) {
    if (options.train_device.empty() ? d->id() != "cpu" : d->id() == options.train_device) {
      train_device = d.get();
      break;
    }
  }
  if (!options.train_device.empty() && options.train_device != "cpu" && train_device == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(
        "--train-device ", options.train_device, " is not one of the devices in use (--devices)"));
  }
  TrainingDevices training_devices;
  for (const std::unique_ptr<ExecutionDevice>& d : s.execution_devices_) {
    training_devices.devices.push_back(d.get());
  }
  training_devices.cpu_scheduler = s.scheduler_.get();
  training_devices.collective_timeout = options.train_collective_timeout;
  training_devices.default_device = train_device != nullptr ? train_device->id() : "cpu";
  // A job that names no devices trains on the default one.
  ASSIGN_OR_RETURN(JobPlacement default_placement,
                   PlaceTrainingJob(training_devices, v1::TrainingConfig()));
  job_options.engine_factory = std::move(default_placement.engine_factory);
  job_options.schedulers = std::move(default_placement.schedulers);
  job_options.place = [training_devices](const v1::TrainingConfig& config) {
    return PlaceTrainingJob(training_devices, config);
  };
  TrainWorkerClient worker_client;
  worker_client.self = options.grpc_address;
  if (!options.train_worker_token_file.empty()) {
    ASSIGN_OR_RETURN(worker_client.bearer_token, ReadBearerToken(options.train_worker_token_file));
  }
  const ClientTlsFiles worker_tls{.enabled = false,
                                  .ca_path = options.train_worker_ca_file,
                                  .cert_path = options.train_worker_cert_file,
                                  .key_path = options.train_worker_key_file};
  if (worker_tls.any()) {
    ASSIGN_OR_RETURN(worker_client.credentials, MakeChannelCredentials(worker_tls));
  }
  job_options.join_workers = [training_devices, worker_client](const std::string& model,
                                                               const ModelConfig& config,
                                                               const v1::TrainingConfig& training) {
    return JoinWorkers(training_devices, worker_client, model, config, training);
  };
  spdlog::info("training runs on {}", training_devices.default_device);
  job_options.max_running_jobs = options.max_training_jobs;
  job_options.max_series_rows = options.max_train_series_rows;
  job_options.max_step_bytes = options.max_train_memory_bytes;
  ModelRegistry* registry = s.registry_.get();
  job_options.on_published = [registry](const std::string& model, int64_t version, bool promote) {
    return registry->OnVersionPublished(model, version, promote);
  };
  job_options.observer = s.serving_metrics_.get();
  // A job's steps hold one CPU worker (DeviceScheduler::AcquireTrainingLease), so they fan out
  // to that worker's threads, no more: a wider team would compete with the other workers, and
  // once the process has more OpenMP threads than cores libgomp stops spinning at barriers,
  // which made each step of a small model wait on the kernel (10x slower epochs) as soon as any
  // other thread had started a team.
  job_options.on_job_thread_start = [threads = s.cpu_threads_per_worker_] {
    DnnlBackend::SetThreadsForCallingThread(threads);
  };
  ASSIGN_OR_RETURN(s.jobs_, TrainJobManager::Create(std::move(job_options)));

  ServingMetrics::Probes probes;
  probes.queue_depth_by_model = [registry]() {
    std::vector<std::pair<std::string, int64_t>> depths;
    for (const ModelStatus& model : registry->ListModels()) {
      int64_t queued = 0;
      for (const LoadedVersionStatus& v : model.loaded) queued += v.queued_tasks;
      if (!model.loaded.empty()) depths.emplace_back(model.name, queued);
    }
    return depths;
  };
  probes.models_loaded = [registry]() { return int64_t{registry->loaded_model_count()}; };
  TrainJobManager* jobs = s.jobs_.get();
  probes.train_jobs_running = [jobs]() { return jobs->running_jobs(); };
  probes.gpus = GpuReadings(s.devices_);
  StreamHub* streams = s.streams_.get();
  probes.streams = [streams]() { return streams->Usage(); };
  s.state_metrics_ = s.serving_metrics_->MakeStateCollectable(std::move(probes));
  s.metrics_->AddCollectable(s.state_metrics_);

  std::atomic<bool>* accepting = &s.accepting_;
  const auto is_accepting = [accepting]() { return accepting->load(); };
  s.forecaster_ = std::make_unique<ForecasterService>(
      ForecasterService::Options{.registry = registry,
                                 .jobs = jobs,
                                 .metrics = s.serving_metrics_.get(),
                                 .streams = s.streams_.get(),
                                 .clock = nullptr,
                                 .allow_non_finite_inputs = options.allow_non_finite_inputs,
                                 .accepting = is_accepting,
                                 .authorize = authorize,
                                 .authorize_promote = authorize_promote,
                                 .max_batch_rows = options.max_batch_rows,
                                 .max_request_memory_bytes = options.max_request_memory_bytes});
  Server* self = server.get();
  s.admin_ = std::make_unique<AdminService>(
      AdminService::Options{.registry = registry,
                            .streams = s.streams_.get(),
                            .jobs = jobs,
                            .server_status = [self]() { return self->Status(); },
                            .accepting = is_accepting,
                            .authorize = authorize,
                            .join_train_job =
                                [training_devices, jobs](const v1::JoinTrainJobRequest& request) {
                                  return JoinAsWorker(training_devices, *jobs, request);
                                }});

  ASSIGN_OR_RETURN(
      std::unique_ptr<KServeService> kserve,
      KServeService::Create({.registry = registry,
                             .metrics = s.serving_metrics_.get(),
                             .clock = nullptr,
                             .ready = is_accepting,
                             .allow_non_finite_inputs = options.allow_non_finite_inputs,
                             .authorize = authorize,
                             .max_batch_rows = options.max_batch_rows,
                             .max_request_memory_bytes = options.max_request_memory_bytes,
                             .identify = identify,
                             .tick_streams = s.streams_.get()}));
  s.kserve_ = std::move(kserve);

  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.RegisterService(s.health_.get());
  builder.RegisterService(s.forecaster_.get());
  builder.RegisterService(s.admin_.get());
  builder.RegisterService(s.kserve_.get());
  // Without this a second daemon could silently share the port with the first.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.SetMaxReceiveMessageSize(options.max_message_bytes);
  builder.SetMaxSendMessageSize(options.max_message_bytes);
  if (s.authenticator_ != nullptr) {
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> creators;
    creators.push_back(s.authenticator_->NewInterceptorFactory());
    builder.experimental().SetInterceptorCreators(std::move(creators));
  }
  builder.AddListeningPort(options.grpc_address, credentials, &s.grpc_port_);
  s.grpc_server_ = builder.BuildAndStart();
  if (s.grpc_server_ == nullptr || s.grpc_port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve gRPC on ", options.grpc_address, " (is the port in use?)"));
  }
  if (!options.http_address.empty()) {
    ASSIGN_OR_RETURN(s.http_server_,
                     KServeHttpServer::Create({.address = options.http_address,
                                               .service = s.kserve_.get(),
                                               .authenticator = s.authenticator_.get(),
                                               .tls = options.tls,
                                               .max_body_bytes = options.max_message_bytes,
                                               .threads = options.http_threads,
                                               .keep_alive_timeout_s = KeepAliveSeconds(options)}));
    spdlog::info("KServe REST on {}://{} (port {})", options.tls.enabled() ? "https" : "http",
                 options.http_address, s.http_server_->port());
  }
  for (const char* service :
       {"", "forecastd.v1.Forecaster", "forecastd.v1.Admin", "inference.GRPCInferenceService"}) {
    s.health_->SetStatus(service, grpc::health::v1::HealthCheckResponse::SERVING);
  }
  spdlog::info(
      "forecastd {} serving gRPC on {} (port {}), metrics on http://{}/metrics, "
      "model repository '{}' ({} models ready), {} CPU workers",
      kForecastdVersion, options.grpc_address, s.grpc_port_, options.metrics_address,
      options.model_repository, registry->loaded_model_count(), workers);
  spdlog::info("gRPC security: {}, {}",
               !options.tls.enabled() ? "plaintext"
               : options.tls.mutual() ? "mutual TLS (client certificates required)"
                                      : "TLS",
               s.tokens_ != nullptr ? absl::StrCat("bearer tokens from '", options.token_file,
                                                   "' (", s.tokens_->size(), " tokens)")
                                    : std::string("no authentication"));
  for (const auto& [what, address] :
       {std::pair<const char*, const std::string&>{"gRPC", options.grpc_address},
        {"REST", options.http_address}}) {
    if (address.empty() || IsLoopback(address)) continue;
    if (s.tokens_ == nullptr && !options.tls.mutual()) {
      spdlog::warn(
          "{} on {} accepts calls from the network without authentication: anyone "
          "who reaches the port may predict, train, load and unload; set --token-file "
          "(and TLS)",
          what, address);
    } else if (s.tokens_ != nullptr && !options.tls.enabled()) {
      spdlog::warn(
          "{} on {} is plaintext: bearer tokens cross the network readable by "
          "anyone on the path; set --tls-cert and --tls-key",
          what, address);
    }
  }
  if (!IsLoopback(options.metrics_address)) {
    spdlog::info("metrics on {} are plaintext HTTP without authentication",
                 options.metrics_address);
  }
  return server;
}

Server::Server(ServerOptions options, std::vector<Device> devices,
               std::unique_ptr<MetricsExposer> metrics)
    : options_(std::move(options)),
      devices_(std::move(devices)),
      start_time_(absl::Now()),
      metrics_(std::move(metrics)),
      health_(std::make_unique<HealthService>()) {}

Server::~Server() { Shutdown(); }

v1::ServerStatus Server::Status() const {
  v1::ServerStatus status;
  status.set_version(kForecastdVersion);
  status.set_ready(accepting_.load());
  status.set_uptime_ms(absl::ToInt64Milliseconds(absl::Now() - start_time_));
  for (const Device& device : devices_) {
    v1::DeviceStatus* d = status.add_devices();
    d->set_id(device.Id());
    d->set_name(device.name);
    for (const std::unique_ptr<ExecutionDevice>& serving : execution_devices_) {
      if (serving->id() != device.Id()) continue;
      d->set_workers(serving->scheduler().num_workers());
      d->set_busy_workers(static_cast<int32_t>(serving->scheduler().busy_workers()));
      d->set_lent_teams(serving->scheduler().lent_teams());
    }
    if (device.kind == DeviceKind::kCpu) {
      d->set_memory_total_bytes(TotalMemoryBytes());
      d->set_memory_used_bytes(ResidentBytes());
    }
  }
  if (registry_ != nullptr) {
    status.set_models_loaded(registry_->loaded_model_count());
    status.set_requests_queued(registry_->total_queued_tasks());
  }
  if (jobs_ != nullptr) {
    status.set_train_jobs_running(jobs_->running_jobs());
    status.set_train_jobs_total(jobs_->total_jobs());
  }
  return status;
}

absl::Status Server::ReloadTokens() {
  if (tokens_ == nullptr) {
    spdlog::info("nothing to reload: forecastd runs without --token-file");
    return absl::FailedPreconditionError("forecastd runs without --token-file");
  }
  if (absl::Status status = tokens_->Reload(); !status.ok()) {
    spdlog::error("token reload failed, the {} tokens read before stay in force: {}",
                  tokens_->size(), status.ToString());
    return status;
  }
  spdlog::info("token file '{}' reloaded: {} tokens", tokens_->path(), tokens_->size());
  return absl::OkStatus();
}

std::string Server::StreamSnapshotPath() const {
  const std::string dir = options_.state_dir.empty()
                              ? absl::StrCat(options_.model_repository, "/.streams")
                              : options_.state_dir;
  return absl::StrCat(dir, "/streams.pb");
}

void Server::RestoreStreams() {
  const std::string path = StreamSnapshotPath();
  int64_t restored = 0;
  absl::StatusOr<v1::StreamSnapshot> snapshot =
      streams_->LoadSnapshot(path, &restored, options_.drain_timeout);
  if (absl::IsNotFound(snapshot.status())) return;
  if (!snapshot.ok()) {
    spdlog::error("tick streams: cannot restore {}: {}", path, snapshot.status().ToString());
    return;
  }
  const std::string written =
      absl::FormatTime(absl::FromUnixMillis(snapshot->written_unix_ms()), absl::UTCTimeZone());
  if (snapshot->clean()) {
    spdlog::info("tick streams: {} restored from {} (written on drain at {})", restored, path,
                 written);
  } else {
    spdlog::warn(
        "tick streams: {} restored from {}, a periodic snapshot written at {}: the daemon did "
        "not drain, so ticks answered after that time are lost",
        restored, path, written);
  }
  // From here on the file on disk is no longer the drain's: a crash must not pass it off as one.
  if (absl::Status saved = streams_->SaveSnapshot(path, /*clean=*/false, options_.drain_timeout);
      !saved.ok()) {
    spdlog::warn("tick streams: cannot rewrite {}: {}", path, saved.ToString());
  }
}

void Server::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  // Probes see NOT_SERVING and new work is refused before anything stops, so load balancers
  // move traffic away while the queued work finishes.
  accepting_.store(false);
  health_->Shutdown();
  if (streams_ != nullptr) {
    // Every tick already taken is answered, then every stream is written down, before the
    // versions that hold their states drain.
    streams_->StopAccepting();
    if (!streams_->AwaitIdle(options_.drain_timeout)) {
      spdlog::warn("tick streams: still computing after {}",
                   absl::FormatDuration(options_.drain_timeout));
    }
    const std::string path = StreamSnapshotPath();
    if (absl::Status saved = streams_->SaveSnapshot(path, /*clean=*/true, options_.drain_timeout);
        !saved.ok()) {
      spdlog::error("tick streams: cannot write {}: {}", path, saved.ToString());
    } else {
      spdlog::info("tick streams: {} written to {}", streams_->List("").size(), path);
    }
  }
  if (registry_ != nullptr) registry_->Shutdown(options_.drain_timeout);
  // The streams' requests are answered now; each ends once its answers are written.
  if (kserve_ != nullptr) kserve_->CloseStreams();
  // REST requests still in progress were answered by the drain (later ones got 503).
  if (http_server_ != nullptr) http_server_->Shutdown();
  if (jobs_ != nullptr) jobs_->Shutdown();
  if (grpc_server_ != nullptr) {
    // Every call of ours has ended by now (predictions drained, streams closed, jobs and their
    // watchers finished); gRPC's shutdown also waits for idle client connections to close, up to
    // the deadline, and then cancels what is left.
    const auto deadline =
        std::chrono::system_clock::now() + absl::ToChronoMilliseconds(options_.shutdown_grace);
    grpc_server_->Shutdown(deadline);
    grpc_server_->Wait();
  }
  if (forecaster_ != nullptr) {
    const ForecasterService::PredictCounts counts = forecaster_->predict_counts();
    spdlog::info("Predict: {} calls accepted, {} answered", counts.accepted, counts.answered);
  }
  for (const std::unique_ptr<ExecutionDevice>& d : execution_devices_) d->scheduler().Shutdown();
  if (scheduler_ != nullptr) scheduler_->Shutdown();
  spdlog::info("forecastd stopped");
}

}  // namespace forecastd
