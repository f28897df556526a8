#include "server/kserve_service.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"
#include "server/grpc_status.h"
#include "server/kserve_log_settings.h"
#include "server/kserve_statistics.h"
#include "server/predict_call.h"
#include "server/predict_input.h"

namespace forecastd {

using kserve::CheckRequestedOutputs;
using kserve::ForecastDims;
using kserve::ParseParameters;
using kserve::ParseVersion;
using kserve::ReadInput;
using kserve::RequestParameters;
using kserve::VersionString;

namespace {

constexpr char kMethod[] = "ModelInfer";
constexpr char kStreamMethod[] = "ModelStreamInfer";

// Triton's state words for a model's state.
const char* TritonState(ModelState state) {
  switch (state) {
    case ModelState::kLoading:
      return "LOADING";
    case ModelState::kReady:
      return "READY";
    case ModelState::kUnloading:
      return "UNLOADING";
    case ModelState::kUnavailable:
    case ModelState::kUnloaded:
    case ModelState::kFailed:
      break;
  }
  return "UNAVAILABLE";
}

std::string StateReason(const ModelStatus& status) {
  switch (status.state) {
    case ModelState::kUnavailable:
      return "not loaded";
    case ModelState::kUnloaded:
      return "unloaded";
    case ModelState::kFailed:
      return std::string(status.last_error.message());
    case ModelState::kReady:
      if (!status.last_error.ok()) {
        return absl::StrCat("the last load failed: ", status.last_error.message());
      }
      return "";
    case ModelState::kLoading:
    case ModelState::kUnloading:
      break;
  }
  return "";
}

// Triton's protocol extensions forecastd serves, as ServerMetadata names them over gRPC and
// REST alike ("sequence" only with tick streams, "cuda_shared_memory" only in a build with
// CUDA). Those it does not serve (classification, trace, generate) answer UNIMPLEMENTED (501
// over REST) with a message naming them.
constexpr const char* kExtensions[] = {
    "model_repository",
    "model_repository(unload_dependents)",
    "model_configuration",
    "schedule_policy",
    "sequence",
    "statistics",
    "binary_tensor_data",
    "logging",
    "system_shared_memory",
#if FORECASTD_WITH_CUDA
    "cuda_shared_memory",
#endif
};

constexpr char kSequenceNoSharedMemory[] =
    "a sequence request (sequence_id) takes its tensors in the request, not in shared memory";

absl::Status RepositoryNameSupported(const std::string& repository_name) {
  if (repository_name.empty()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("repository_name '", repository_name,
                   "' is not supported: forecastd serves one repository; leave it empty"));
}

}  // namespace

absl::StatusOr<std::unique_ptr<KServeService>> KServeService::Create(Options options) {
  if (options.registry == nullptr) {
    return absl::InvalidArgumentError("KServeService needs a model registry");
  }
  Clock* clock = options.clock != nullptr ? options.clock : Clock::Real();
  return std::unique_ptr<KServeService>(new KServeService(std::move(options), clock));
}

KServeService::KServeService(Options options, Clock* clock)
    : options_(std::move(options)),
      clock_(clock),
      admission_({.registry = options_.registry,
                  .max_batch_rows = options_.max_batch_rows,
                  .max_request_memory_bytes = options_.max_request_memory_bytes,
                  .allow_non_finite_inputs = options_.allow_non_finite_inputs}),
      statistics_(std::make_shared<KServeStatistics>()),
      streams_(std::make_shared<KServeStreams>()),
      shared_memory_(std::make_unique<SharedMemoryRegistry>()) {
  if (options_.tick_streams != nullptr) {
    sequences_ =
        std::make_unique<KServeSequences>(options_.tick_streams, options_.registry, statistics_);
  }
}

grpc::Status KServeService::ServerLive(grpc::ServerContext* context,
                                       const inference::ServerLiveRequest* /*request*/,
                                       inference::ServerLiveResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  response->set_live(true);
  return grpc::Status::OK;
}

grpc::Status KServeService::ServerReady(grpc::ServerContext* context,
                                        const inference::ServerReadyRequest* /*request*/,
                                        inference::ServerReadyResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  response->set_ready(ready());
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelReady(grpc::ServerContext* context,
                                       const inference::ModelReadyRequest* request,
                                       inference::ModelReadyResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(CheckModelReady(*request, response));
}

absl::Status KServeService::CheckModelReady(const inference::ModelReadyRequest& request,
                                            inference::ModelReadyResponse* response) const {
  const absl::StatusOr<int64_t> parsed = ParseVersion(request.version());
  if (parsed.status().code() == absl::StatusCode::kNotFound) {
    response->set_ready(false);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(const int64_t version, parsed);
  // An unknown model is simply not ready, as Triton answers.
  response->set_ready(ready() && options_.registry->GetLoadedModel(request.name(), version).ok());
  return absl::OkStatus();
}

grpc::Status KServeService::ServerMetadata(grpc::ServerContext* context,
                                           const inference::ServerMetadataRequest* /*request*/,
                                           inference::ServerMetadataResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  DescribeServer(response);
  return grpc::Status::OK;
}

void KServeService::DescribeServer(inference::ServerMetadataResponse* response) const {
  response->set_name("forecastd");
  response->set_version(kForecastdVersion);
  for (const char* extension : kExtensions) {
    if (absl::string_view(extension) == "sequence" && sequences_ == nullptr) continue;
    response->add_extensions(extension);
  }
}

grpc::Status KServeService::ModelMetadata(grpc::ServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(DescribeModel(*request, response));
}

absl::Status KServeService::DescribeModel(const inference::ModelMetadataRequest& request,
                                          inference::ModelMetadataResponse* response) const {
  ASSIGN_OR_RETURN(const int64_t version, ParseVersion(request.version()));
  ASSIGN_OR_RETURN(const LoadedModel loaded,
                   options_.registry->GetLoadedModel(request.name(), version));
  const Forecaster& model = *loaded.model;
  response->set_name(request.name());
  response->add_versions(VersionString(loaded.version));
  response->set_platform(kKServePlatform);
  for (const kserve::InputSpec& spec : kserve::InputSpecs(model.config())) {
    auto* input = response->add_inputs();
    input->set_name(spec.name);
    input->set_datatype(spec.datatype);
    input->add_shape(-1);
    for (const int64_t dim : spec.dims) input->add_shape(dim);
  }
  auto* output = response->add_outputs();
  output->set_name(kKServeOutputName);
  output->set_datatype(kKServeFp32);
  output->add_shape(-1);
  for (const int64_t dim : ForecastDims(model)) output->add_shape(dim);
  return absl::OkStatus();
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* context,
                                                    const inference::ModelInferRequest* request,
                                                    inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  auto finish = [reactor](const absl::Status& status) { reactor->Finish(ToGrpcStatus(status)); };
  InferAuthorized(kMethod, Owner(*context), EngineDeadline(*context, *clock_), *request, response,
                  std::move(finish));
  return reactor;
}

void KServeService::InferAuthorized(const char* method, const std::string& owner,
                                    absl::Time deadline,
                                    const inference::ModelInferRequest& request,
                                    inference::ModelInferResponse* response,
                                    std::function<void(const absl::Status&)> finish) {
  if (kserve::CarriesSequence(request) && sequences_ != nullptr) {
    if (absl::Status status = kserve::RefuseSharedMemory(request, kSequenceNoSharedMemory);
        !status.ok()) {
      return finish(status);
    }
    if (!ready())
      return finish(absl::UnavailableError("forecastd is not ready (starting or draining)"));
    return sequences_->Infer(request, response, std::move(finish));
  }
  Infer(method, owner, deadline, request, response, std::move(finish));
}

void KServeService::Infer(const char* method, const std::string& owner, absl::Time deadline,
                          const inference::ModelInferRequest& request,
                          inference::ModelInferResponse* response,
                          std::function<void(const absl::Status&)> finish) {
  Clock* clock = clock_;
  ServingMetrics* metrics = options_.metrics;
  const absl::Time arrival = clock->Now();
  const std::string model_name = request.model_name();
  uint32_t priority = 0;
  int64_t stats_version = 0;  // known once the model is: failures are counted from then on
  const auto fail = [&](const absl::Status& status) {
    const absl::Duration total = clock->Now() - arrival;
    if (metrics != nullptr) {
      metrics->ObserveRequest(model_name, stats_version, method, priority,
                              ToGrpcStatus(status).error_code(), total, absl::ZeroDuration(),
                              absl::ZeroDuration());
    }
    if (stats_version > 0) statistics_->RecordFailure(model_name, stats_version, total);
    finish(status);
  };
  if (!ready()) {
    return fail(absl::UnavailableError("forecastd is not ready: it is starting or shutting down"));
  }
  absl::StatusOr<int64_t> version = ParseVersion(request.model_version());
  if (!version.ok()) return fail(version.status());
  absl::StatusOr<LoadedModel> pinned = admission_.Pin(model_name, *version);
  if (!pinned.ok()) return fail(pinned.status());
  stats_version = pinned->version;
  absl::StatusOr<RequestParameters> parameters = ParseParameters(request);
  if (!parameters.ok()) return fail(parameters.status());
  // Metrics label the level the request runs at (0 is the model's default level).
  priority = PredictAdmission::LevelOf(*pinned, parameters->priority);
  // Tensors in shared memory: the references keep their regions mapped until `done` has run,
  // even if the client unregisters them meanwhile.
  absl::StatusOr<kserve::SharedMemoryTensors> shared =
      kserve::ResolveSharedMemory(request, shared_memory_.get(), owner);
  if (!shared.ok()) return fail(shared.status());
  PredictCall call;
  if (absl::Status status =
          ReadInput(request, *pinned->model, pinned->max_batch_size, call, &*shared);
      !status.ok()) {
    return fail(status);
  }
  if (absl::Status status = CheckRequestedOutputs(request); !status.ok()) return fail(status);
  const int64_t per_row = pinned->model->num_outputs();
  if (shared->output_shared() && !call.shape.empty()) {
    // Division, not shape[0] * bytes_per_row: a window count the admission step has not yet
    // bounded must not overflow here.
    const int64_t bytes_per_row = per_row * static_cast<int64_t>(sizeof(float));
    if (call.shape[0] > shared->output_bytes / bytes_per_row) {
      return fail(absl::InvalidArgumentError(absl::StrCat(
          "output '", kKServeOutputName, "' (shared-memory region '", shared->output_region_name,
          "'): shared_memory_byte_size is ", shared->output_bytes, " but the forecast of ",
          call.shape[0], " windows takes ", bytes_per_row, " bytes per window")));
    }
  }
  call.device_output = shared->device_output;
  call.priority = parameters->priority;
  call.deadline = deadline;
  call.timeout_override = parameters->timeout;
  // The forecasts go straight into the reply's one raw output, or into the output's region
  // (for a CUDA region the batch writes them there: no host buffer).
  char* const shared_output = shared->output;
  const bool output_shared = shared->output_shared();
  const auto reply_buffer = [response, per_row, shared_output,
                             output_shared](int64_t rows) -> char* {
    if (output_shared) {
      // An empty entry, as Triton sends, keeps raw_output_contents in line with the outputs
      // (tritonclient's InferResultGrpc reads one entry per output).
      response->add_raw_output_contents();
      return shared_output;
    }
    std::string* raw = response->add_raw_output_contents();
    raw->resize(static_cast<size_t>(rows * per_row) * sizeof(float));
    return raw->data();
  };
  auto done = [finish, response, metrics, clock, arrival, model_name, priority, method,
               statistics = statistics_, id = request.id(), fallback_version = pinned->version,
               forecaster = pinned->model, rows = call.shape[0],
               shared = *std::move(shared)](PredictResult result) {
    const int64_t version = result.version > 0 ? result.version : fallback_version;
    const absl::Duration total = clock->Now() - arrival;
    if (result.status.ok()) {
      response->set_model_name(model_name);
      response->set_model_version(VersionString(version));
      response->set_id(id);
      auto* output = response->add_outputs();
      output->set_name(kKServeOutputName);
      output->set_datatype(kKServeFp32);
      output->add_shape(rows);
      for (const int64_t dim : ForecastDims(*forecaster)) output->add_shape(dim);
      if (shared.output_shared()) {
        // As Triton answers: the data is in the region, which the output names.
        auto& parameters = *output->mutable_parameters();
        parameters["shared_memory_region"].set_string_param(shared.output_region_name);
        parameters["shared_memory_byte_size"].set_int64_param(rows * forecaster->num_outputs() *
                                                              static_cast<int64_t>(sizeof(float)));
        if (shared.output_offset != 0) {
          parameters["shared_memory_offset"].set_int64_param(shared.output_offset);
        }
      }
      statistics->RecordSuccess(model_name, version, rows, result.batch_rows, total,
                                result.queue_time, result.compute_time);
    } else {
      statistics->RecordFailure(model_name, version, total);
    }
    if (metrics != nullptr) {
      const grpc::StatusCode code = ToGrpcStatus(result.status).error_code();
      if (code == grpc::StatusCode::DEADLINE_EXCEEDED) metrics->ObserveDeadlineMiss(model_name);
      metrics->ObserveRequest(model_name, version, method, priority, code, total, result.queue_time,
                              result.compute_time);
    }
    finish(result.status);
  };
  if (absl::Status status = admission_.Admit(*pinned, call, reply_buffer, std::move(done));
      !status.ok()) {
    return fail(status);
  }
}

grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
KServeService::ModelStreamInfer(grpc::CallbackServerContext* context) {
  KServeInferStream* stream = KServeInferStream::Start(
      streams_, [this, context](std::shared_ptr<StreamInferCall> call, InferReply reply) {
        DispatchStreamRequest(*context, std::move(call), std::move(reply));
      });
  // A refused caller gets the stream's status and no answer to any request.
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) stream->Close(allowed);
  return stream;
}

void KServeService::DispatchStreamRequest(const grpc::CallbackServerContext& context,
                                          std::shared_ptr<StreamInferCall> call, InferReply reply) {
  if (kserve::CarriesSequence(call->request)) {
    if (sequences_ == nullptr) return reply(kserve::NotASequenceModel(call->request));
    if (absl::Status status = kserve::RefuseSharedMemory(call->request, kSequenceNoSharedMemory);
        !status.ok()) {
      return reply(status);
    }
    if (!ready())
      return reply(absl::UnavailableError("forecastd is not ready (starting or draining)"));
    // `reply` holds `call`, so its request and response outlive the sequence's answer.
    StreamInferCall& c = *call;
    sequences_->Infer(c.request, &c.response, std::move(reply));
    return;
  }
  // `reply` holds `call`, so its request and response outlive the task.
  StreamInferCall& c = *call;
  Infer(kStreamMethod, Owner(context), EngineDeadline(context, *clock_), c.request, &c.response,
        std::move(reply));
}

void KServeService::CloseStreams() {
  streams_->CloseAll(
      absl::UnavailableError("forecastd is shutting down: open a new stream to another replica"));
}

grpc::Status KServeService::ModelConfig(grpc::ServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(GetModelConfig(*request, response));
}

absl::Status KServeService::GetModelConfig(const inference::ModelConfigRequest& request,
                                           inference::ModelConfigResponse* response) const {
  ASSIGN_OR_RETURN(const int64_t version, ParseVersion(request.version()));
  absl::StatusOr<LoadedModel> loaded = options_.registry->GetLoadedModel(request.name(), version);
  absl::StatusOr<inference::ModelConfig> config;
  if (loaded.ok()) {
    config = ToTritonModelConfig(loaded->model->config());
  } else if (loaded.status().code() == absl::StatusCode::kNotFound) {
    return loaded.status();
  } else {
    // On disk but not serving: report the config the registry last read.
    ASSIGN_OR_RETURN(const ModelStatus status, options_.registry->GetModel(request.name()));
    if (!status.config.has_value()) return loaded.status();
    config = ToTritonModelConfig(*status.config);
  }
  if (!config.ok()) return config.status();
  *response->mutable_config() = *std::move(config);
  return absl::OkStatus();
}

grpc::Status KServeService::ModelStatistics(grpc::ServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(GetStatistics(*request, response));
}

absl::Status KServeService::GetStatistics(const inference::ModelStatisticsRequest& request,
                                          inference::ModelStatisticsResponse* response) const {
  ASSIGN_OR_RETURN(const int64_t version, ParseVersion(request.version()));
  std::vector<ModelStatus> models;
  if (request.name().empty()) {
    models = options_.registry->ListModels();
  } else {
    ASSIGN_OR_RETURN(ModelStatus status, options_.registry->GetModel(request.name()));
    models.push_back(std::move(status));
  }
  for (const ModelStatus& model : models) {
    // Every loaded version (zeros before its first request, so a client can take a first
    // snapshot) and every version with statistics.
    std::set<int64_t> versions = statistics_->Versions(model.name);
    for (const LoadedVersionStatus& loaded : model.loaded) versions.insert(loaded.version);
    if (version > 0) {
      const bool on_disk = std::find(model.versions_on_disk.begin(), model.versions_on_disk.end(),
                                     version) != model.versions_on_disk.end();
      if (!versions.contains(version) && !on_disk) {
        return absl::NotFoundError(
            absl::StrCat("model '", model.name, "' has no version ", version));
      }
      versions = {version};
    }
    for (const int64_t v : versions) {
      *response->add_model_stats() = statistics_->Report(model.name, v);
    }
  }
  return absl::OkStatus();
}

grpc::Status KServeService::RepositoryIndex(grpc::ServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(ListRepository(*request, response));
}

absl::Status KServeService::ListRepository(const inference::RepositoryIndexRequest& request,
                                           inference::RepositoryIndexResponse* response) const {
  RETURN_IF_ERROR(RepositoryNameSupported(request.repository_name()));
  for (const ModelStatus& model : options_.registry->ListModels()) {
    const auto add = [&](int64_t version, const char* state, const std::string& reason) {
      if (request.ready() && absl::string_view(state) != "READY") return;
      auto* entry = response->add_models();
      entry->set_name(model.name);
      if (version > 0) entry->set_version(VersionString(version));
      entry->set_state(state);
      entry->set_reason(reason);
    };
    if (model.state == ModelState::kReady) {
      for (const LoadedVersionStatus& loaded : model.loaded) {
        if (loaded.serving && !loaded.draining) {
          add(loaded.version, "READY", StateReason(model));
        } else {
          add(loaded.version, "UNLOADING", "replaced; finishing its requests");
        }
      }
    } else {
      add(model.serving_version, TritonState(model.state), StateReason(model));
    }
  }
  return absl::OkStatus();
}

grpc::Status KServeService::RepositoryModelLoad(
    grpc::ServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(LoadModel(*request));
}

absl::Status KServeService::LoadModel(const inference::RepositoryModelLoadRequest& request) {
  RETURN_IF_ERROR(RepositoryNameSupported(request.repository_name()));
  if (!request.parameters().empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "load parameter '", request.parameters().begin()->first,
        "' is not supported: forecastd loads config.json and the weights from its repository"));
  }
  return options_.registry->Load(request.model_name());
}

grpc::Status KServeService::RepositoryModelUnload(
    grpc::ServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(UnloadModel(*request));
}

absl::Status KServeService::UnloadModel(const inference::RepositoryModelUnloadRequest& request) {
  RETURN_IF_ERROR(RepositoryNameSupported(request.repository_name()));
  for (const auto& [key, value] : request.parameters()) {
    // Models here have no dependents, so asking to unload them too changes nothing.
    if (key == "unload_dependents" && value.has_bool_param()) continue;
    return absl::InvalidArgumentError(
        absl::StrCat("unload parameter '", key, "' is not supported"));
  }
  absl::Status unloaded = options_.registry->Unload(request.model_name());
  // As Triton: unloading what is not there leaves it not there, which is what was asked.
  if (unloaded.code() == absl::StatusCode::kNotFound) return absl::OkStatus();
  return unloaded;
}

grpc::Status KServeService::SystemSharedMemoryStatus(
    grpc::ServerContext* context, const inference::SystemSharedMemoryStatusRequest* request,
    inference::SystemSharedMemoryStatusResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(SharedMemoryStatus(Owner(*context), *request, response));
}

grpc::Status KServeService::SystemSharedMemoryRegister(
    grpc::ServerContext* context, const inference::SystemSharedMemoryRegisterRequest* request,
    inference::SystemSharedMemoryRegisterResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(RegisterSharedMemory(Owner(*context), *request));
}

grpc::Status KServeService::SystemSharedMemoryUnregister(
    grpc::ServerContext* context, const inference::SystemSharedMemoryUnregisterRequest* request,
    inference::SystemSharedMemoryUnregisterResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(UnregisterSharedMemory(Owner(*context), *request));
}

absl::Status KServeService::RegisterSharedMemory(
    const std::string& owner, const inference::SystemSharedMemoryRegisterRequest& request) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (request.offset() > kMax || request.byte_size() > kMax) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory region '", request.name(),
                                                   "': offset and byte_size must be below 2^63"));
  }
  return shared_memory_->Register(owner, request.name(), request.key(),
                                  static_cast<int64_t>(request.offset()),
                                  static_cast<int64_t>(request.byte_size()));
}

absl::Status KServeService::UnregisterSharedMemory(
    const std::string& owner, const inference::SystemSharedMemoryUnregisterRequest& request) {
  return shared_memory_->Unregister(owner, request.name());
}

absl::Status KServeService::SharedMemoryStatus(
    const std::string& owner, const inference::SystemSharedMemoryStatusRequest& request,
    inference::SystemSharedMemoryStatusResponse* response) const {
  ASSIGN_OR_RETURN(const std::vector<SharedMemoryRegistry::RegionStatus> regions,
                   shared_memory_->Status(owner, request.name()));
  for (const SharedMemoryRegistry::RegionStatus& region : regions) {
    auto& entry = (*response->mutable_regions())[region.name];
    entry.set_name(region.name);
    entry.set_key(region.key);
    entry.set_offset(static_cast<uint64_t>(region.offset));
    entry.set_byte_size(static_cast<uint64_t>(region.byte_size));
  }
  return absl::OkStatus();
}

grpc::Status KServeService::CudaSharedMemoryStatus(
    grpc::ServerContext* context, const inference::CudaSharedMemoryStatusRequest* request,
    inference::CudaSharedMemoryStatusResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(CudaSharedMemoryStatus(Owner(*context), *request, response));
}

grpc::Status KServeService::CudaSharedMemoryRegister(
    grpc::ServerContext* context, const inference::CudaSharedMemoryRegisterRequest* request,
    inference::CudaSharedMemoryRegisterResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(RegisterCudaSharedMemory(Owner(*context), *request));
}

grpc::Status KServeService::CudaSharedMemoryUnregister(
    grpc::ServerContext* context, const inference::CudaSharedMemoryUnregisterRequest* request,
    inference::CudaSharedMemoryUnregisterResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(UnregisterCudaSharedMemory(Owner(*context), *request));
}

absl::Status KServeService::RegisterCudaSharedMemory(
    const std::string& owner, const inference::CudaSharedMemoryRegisterRequest& request) {
  constexpr uint64_t kMax = static_cast<uint64_t>(std::numeric_limits<int64_t>::max());
  if (request.byte_size() > kMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("shared-memory region '", request.name(), "': byte_size must be below 2^63"));
  }
  if (request.device_id() < 0 || request.device_id() > std::numeric_limits<int>::max()) {
    return absl::NotFoundError(absl::StrCat("shared-memory region '", request.name(),
                                            "': there is no GPU ", request.device_id()));
  }
  return shared_memory_->RegisterCuda(owner, request.name(), request.raw_handle(),
                                      static_cast<int>(request.device_id()),
                                      static_cast<int64_t>(request.byte_size()));
}

absl::Status KServeService::UnregisterCudaSharedMemory(
    const std::string& owner, const inference::CudaSharedMemoryUnregisterRequest& request) {
  return shared_memory_->UnregisterCuda(owner, request.name());
}

absl::Status KServeService::CudaSharedMemoryStatus(
    const std::string& owner, const inference::CudaSharedMemoryStatusRequest& request,
    inference::CudaSharedMemoryStatusResponse* response) const {
  ASSIGN_OR_RETURN(const std::vector<SharedMemoryRegistry::CudaRegionStatus> regions,
                   shared_memory_->CudaStatus(owner, request.name()));
  for (const SharedMemoryRegistry::CudaRegionStatus& region : regions) {
    auto& entry = (*response->mutable_regions())[region.name];
    entry.set_name(region.name);
    entry.set_device_id(static_cast<uint64_t>(region.device_id));
    entry.set_byte_size(static_cast<uint64_t>(region.byte_size));
  }
  return absl::OkStatus();
}

grpc::Status KServeService::TraceSetting(grpc::ServerContext* context,
                                         const inference::TraceSettingRequest* /*request*/,
                                         inference::TraceSettingResponse* /*response*/) {
  return Unsupported(*context,
                     "forecastd does not support Triton's request tracing (TraceSetting); its "
                     "Prometheus metrics give queue and compute time per model");
}

grpc::Status KServeService::LogSettings(grpc::ServerContext* context,
                                        const inference::LogSettingsRequest* request,
                                        inference::LogSettingsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(UpdateLogSettings(*request, response));
}

absl::Status KServeService::UpdateLogSettings(const inference::LogSettingsRequest& request,
                                              inference::LogSettingsResponse* response) {
  return kserve::ApplyLogSettings(request, response);
}

grpc::Status KServeService::Unsupported(const grpc::ServerContextBase& context,
                                        absl::string_view what) const {
  if (absl::Status allowed = Authorize(context); !allowed.ok()) return ToGrpcStatus(allowed);
  return ToGrpcStatus(absl::UnimplementedError(what));
}

}  // namespace forecastd
