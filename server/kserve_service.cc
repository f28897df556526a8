#include "server/kserve_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"
#include "server/grpc_status.h"
#include "server/predict_call.h"
#include "server/predict_input.h"

namespace forecastd {
namespace {

constexpr char kMethod[] = "ModelInfer";
constexpr char kFp32[] = "FP32";

// A version as the protocol spells it: "" for the one the server picks (0 here), else a
// positive decimal integer.
absl::StatusOr<int64_t> ParseVersion(const std::string& text) {
  if (text.empty()) return 0;
  int64_t version = 0;
  if (!absl::SimpleAtoi(text, &version) || version < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model version '", text, "' is not a positive integer (empty: the serving version)"));
  }
  return version;
}

std::string VersionString(int64_t version) { return absl::StrCat(version); }

// (P, K) or (P, K, Q): a forecast of one window.
std::vector<int64_t> ForecastDims(int64_t P, int64_t K, int64_t Q, bool quantiles) {
  std::vector<int64_t> dims = {P, K};
  if (quantiles) dims.push_back(Q);
  return dims;
}

std::vector<int64_t> ForecastDims(const Forecaster& model) {
  return ForecastDims(model.horizon(), model.num_targets(), model.num_quantiles(),
                      !model.config().quantiles().empty());
}

// An unsigned integer request parameter (Triton's clients send int64 or uint64): nullopt
// when absent; INVALID_ARGUMENT for another type, a negative value or one above `max`.
absl::StatusOr<std::optional<uint64_t>> UnsignedParameter(
    const google::protobuf::Map<std::string, inference::InferParameter>& parameters,
    const std::string& key, uint64_t max) {
  const auto it = parameters.find(key);
  if (it == parameters.end()) return std::nullopt;
  uint64_t value = 0;
  switch (it->second.parameter_choice_case()) {
    case inference::InferParameter::kInt64Param:
      if (it->second.int64_param() < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "parameter '", key, "' is ", it->second.int64_param(), "; it must not be negative"));
      }
      value = static_cast<uint64_t>(it->second.int64_param());
      break;
    case inference::InferParameter::kUint64Param:
      value = it->second.uint64_param();
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("parameter '", key, "' must be an int64 or uint64 value"));
  }
  if (value > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("parameter '", key, "' is ", value, "; it must be at most ", max));
  }
  return value;
}

struct RequestParameters {
  uint32_t priority = 0;
  absl::Duration timeout = absl::ZeroDuration();
};

absl::StatusOr<RequestParameters> ParseParameters(const inference::ModelInferRequest& request) {
  RequestParameters out;
  const auto& parameters = request.parameters();
  ASSIGN_OR_RETURN(std::optional<uint64_t> priority,
                   UnsignedParameter(parameters, "priority", std::numeric_limits<uint32_t>::max()));
  if (priority.has_value()) out.priority = static_cast<uint32_t>(*priority);
  ASSIGN_OR_RETURN(
      std::optional<uint64_t> timeout_us,
      UnsignedParameter(parameters, "timeout",
                        static_cast<uint64_t>(std::numeric_limits<int64_t>::max() / 1000)));
  if (timeout_us.has_value()) out.timeout = absl::Microseconds(static_cast<int64_t>(*timeout_us));
  if (const auto it = parameters.find("sequence_id"); it != parameters.end()) {
    const inference::InferParameter& id = it->second;
    const bool set = (id.has_int64_param() && id.int64_param() != 0) ||
                     (id.has_uint64_param() && id.uint64_param() != 0) ||
                     (id.has_string_param() && !id.string_param().empty());
    if (set) {
      return absl::InvalidArgumentError(absl::StrCat(
          "model '", request.model_name(), "' is not a sequence model; drop 'sequence_id'"));
    }
  }
  return out;
}

// Points `call` at the (B, T, F) windows of the request's one input, after the checks only
// KServe's message needs (names, datatype, where the values are); the admission step checks
// the windows themselves against `model`.
absl::Status ReadInput(const inference::ModelInferRequest& request, const Forecaster& model,
                       int64_t max_batch_rows, PredictCall& call) {
  const std::string& name = model.config().name();
  const std::string takes =
      absl::StrCat("model '", name, "' takes one input, '", kKServeInputName, "' (FP32 [B, ",
                   model.lookback(), ", ", model.num_features(), "])");
  if (request.inputs_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the request has no input; ", takes));
  }
  for (const auto& input : request.inputs()) {
    if (input.name() != kKServeInputName) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", input.name(), "'; ", takes));
    }
  }
  if (request.inputs_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kKServeInputName, "' is given ", request.inputs_size(), " times"));
  }
  const auto& input = request.inputs(0);
  if (input.datatype() != kFp32) {
    return absl::InvalidArgumentError(absl::StrCat("input '", kKServeInputName, "' has datatype '",
                                                   input.datatype(), "'; model '", name,
                                                   "' takes FP32"));
  }
  for (const int64_t dim : input.shape()) {
    if (dim < 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeInputName, "' has shape [", absl::StrJoin(input.shape(), ", "),
          "]; a request's dimensions must be concrete (>= 0)"));
    }
  }
  const inference::InferTensorContents& contents = input.contents();
  if (contents.bool_contents_size() + contents.int_contents_size() +
          contents.int64_contents_size() + contents.uint_contents_size() +
          contents.uint64_contents_size() + contents.fp64_contents_size() +
          contents.bytes_contents_size() >
      0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", kKServeInputName, "' is FP32: send its values in contents.fp32_contents"));
  }
  if (request.raw_input_contents_size() > 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("raw_input_contents has ", request.raw_input_contents_size(),
                     " entries for 1 input; send one per input, in the order of 'inputs'"));
  }
  const bool has_raw = request.raw_input_contents_size() == 1;
  const absl::string_view raw = has_raw ? absl::string_view(request.raw_input_contents(0)) : "";
  const absl::Span<const float> values(contents.fp32_contents().data(),
                                       static_cast<size_t>(contents.fp32_contents_size()));
  if (has_raw && !values.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kKServeInputName,
                     "' has both contents and raw_input_contents; send one of them"));
  }
  // An empty raw entry for a non-empty shape is a byte-size mismatch, which DecodeWindows
  // (seeing neither raw bytes nor values) would word as a missing value count.
  const auto& shape = input.shape();
  if (has_raw && raw.empty() && shape.size() == 3 && shape[0] >= 1 && shape[0] <= max_batch_rows &&
      shape[1] == model.lookback() && shape[2] == model.num_features()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", kKServeInputName, "': raw inputs hold 0 bytes; shape [",
        absl::StrJoin(shape, ", "), "] of float32 needs ", shape[0] * shape[1] * shape[2] * 4));
  }
  call.shape = absl::Span<const int64_t>(shape.data(), static_cast<size_t>(shape.size()));
  call.raw = raw;
  call.values = values;
  call.input_context = absl::StrCat("input '", kKServeInputName, "': ");
  return absl::OkStatus();
}

absl::Status CheckRequestedOutputs(const inference::ModelInferRequest& request) {
  std::set<std::string> seen;
  for (const auto& output : request.outputs()) {
    if (output.name() != kKServeOutputName) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown output '", output.name(), "'; model '", request.model_name(),
                       "' has one output, '", kKServeOutputName, "'"));
    }
    if (!seen.insert(output.name()).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", output.name(), "' is requested more than once"));
    }
    if (const auto it = output.parameters().find("classification");
        it != output.parameters().end() && it->second.int64_param() != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("output '", output.name(), "': classification is not supported"));
    }
  }
  return absl::OkStatus();
}

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}

inference::ModelQueuePolicy ToTritonPolicy(const PriorityQueue::Policy& policy) {
  inference::ModelQueuePolicy out;
  out.set_timeout_action(policy.timeout_action == PriorityQueue::Policy::TimeoutAction::kDelay
                             ? inference::ModelQueuePolicy::DELAY
                             : inference::ModelQueuePolicy::REJECT);
  out.set_default_timeout_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(policy.default_timeout)));
  out.set_allow_timeout_override(policy.allow_timeout_override);
  out.set_max_queue_size(policy.max_queue_size);
  return out;
}

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

absl::Status RepositoryNameSupported(const std::string& repository_name) {
  if (repository_name.empty()) return absl::OkStatus();
  return absl::UnimplementedError(
      absl::StrCat("repository_name '", repository_name,
                   "' is not supported: forecastd serves one repository; leave it empty"));
}

}  // namespace

// Cumulative ModelInfer statistics per model version, as ModelStatistics reports them.
// execution_count and batch_stats count batches, which the service does not see: each
// successful request adds rows / batch_rows of an execution, so the requests of one batch add
// up to one (requests of other services that shared a batch are not seen, so a batch they
// shared counts as part of one). Thread-safe.
class KServeService::Statistics {
 public:
  void RecordSuccess(const std::string& model, int64_t version, int64_t rows, int64_t batch_rows,
                     absl::Duration total, absl::Duration queue, absl::Duration compute) {
    absl::MutexLock lock(&mu_);
    PerVersion& stats = stats_[{model, version}];
    stats.last_inference_ms = absl::ToUnixMillis(absl::Now());
    stats.inference_count += static_cast<uint64_t>(rows);
    Add(stats.success, total);
    Add(stats.queue, queue);
    Add(stats.compute_infer, compute);
    if (batch_rows > 0) {
      const double share = static_cast<double>(rows) / static_cast<double>(batch_rows);
      stats.executions += share;
      PerBatchSize& batch = stats.batches[batch_rows];
      batch.executions += share;
      batch.compute_ns += share * static_cast<double>(Nanos(compute));
    }
  }

  void RecordFailure(const std::string& model, int64_t version, absl::Duration total) {
    absl::MutexLock lock(&mu_);
    PerVersion& stats = stats_[{model, version}];
    stats.last_inference_ms = absl::ToUnixMillis(absl::Now());
    Add(stats.fail, total);
  }

  // The versions of `model` that have statistics.
  std::set<int64_t> Versions(const std::string& model) const {
    absl::MutexLock lock(&mu_);
    std::set<int64_t> versions;
    for (auto it = stats_.lower_bound({model, 0}); it != stats_.end() && it->first.first == model;
         ++it) {
      versions.insert(it->first.second);
    }
    return versions;
  }

  std::set<std::string> Models() const {
    absl::MutexLock lock(&mu_);
    std::set<std::string> models;
    for (const auto& [key, stats] : stats_) models.insert(key.first);
    return models;
  }

  // The statistics of `version` of `model`; zeros when it has none.
  inference::ModelStatistics Report(const std::string& model, int64_t version) const {
    inference::ModelStatistics out;
    out.set_name(model);
    out.set_version(VersionString(version));
    absl::MutexLock lock(&mu_);
    const auto it = stats_.find({model, version});
    const PerVersion stats = it == stats_.end() ? PerVersion() : it->second;
    out.set_last_inference(static_cast<uint64_t>(std::max<int64_t>(0, stats.last_inference_ms)));
    out.set_inference_count(stats.inference_count);
    out.set_execution_count(static_cast<uint64_t>(std::llround(stats.executions)));
    inference::InferStatistics* infer = out.mutable_inference_stats();
    Set(*infer->mutable_success(), stats.success);
    Set(*infer->mutable_fail(), stats.fail);
    Set(*infer->mutable_queue(), stats.queue);
    Set(*infer->mutable_compute_infer(), stats.compute_infer);
    // Staging inputs and outputs is part of the forward pass here; the counts match
    // compute_infer so that clients averaging ns / count see 0, not a division by zero.
    infer->mutable_compute_input()->set_count(stats.compute_infer.count);
    infer->mutable_compute_output()->set_count(stats.compute_infer.count);
    for (const auto& [batch_rows, batch] : stats.batches) {
      const auto executions = static_cast<uint64_t>(std::llround(batch.executions));
      if (executions == 0) continue;
      inference::InferBatchStatistics* b = out.add_batch_stats();
      b->set_batch_size(static_cast<uint64_t>(batch_rows));
      b->mutable_compute_infer()->set_count(executions);
      b->mutable_compute_infer()->set_ns(static_cast<uint64_t>(std::llround(batch.compute_ns)));
      b->mutable_compute_input()->set_count(executions);
      b->mutable_compute_output()->set_count(executions);
    }
    return out;
  }

 private:
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  struct PerBatchSize {
    double executions = 0;
    double compute_ns = 0;
  };
  struct PerVersion {
    int64_t last_inference_ms = 0;
    uint64_t inference_count = 0;
    double executions = 0;
    Duration success, fail, queue, compute_infer;
    std::map<int64_t, PerBatchSize> batches;  // by batch rows
  };

  static void Add(Duration& d, absl::Duration value) {
    ++d.count;
    d.ns += Nanos(value);
  }
  static void Set(inference::StatisticDuration& out, const Duration& d) {
    out.set_count(d.count);
    out.set_ns(d.ns);
  }

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int64_t>, PerVersion> stats_ ABSL_GUARDED_BY(mu_);
};

absl::StatusOr<inference::ModelConfig> ToTritonModelConfig(const v1::ModelConfig& config) {
  ASSIGN_OR_RETURN(const Batcher::Options batching, BatcherOptionsFromConfig(config.batching()));
  inference::ModelConfig out;
  out.set_name(config.name());
  out.set_platform(kKServePlatform);
  out.set_backend(kKServePlatform);
  if (config.serving_version() > 0) {
    out.mutable_version_policy()->mutable_specific()->add_versions(config.serving_version());
  } else {
    out.mutable_version_policy()->mutable_latest()->set_num_versions(1);
  }
  out.set_max_batch_size(static_cast<int32_t>(batching.max_batch_size));

  inference::ModelInput* input = out.add_input();
  input->set_name(kKServeInputName);
  input->set_data_type(inference::TYPE_FP32);
  input->add_dims(config.lookback());
  input->add_dims(NumFeatures(config));
  inference::ModelOutput* output = out.add_output();
  output->set_name(kKServeOutputName);
  output->set_data_type(inference::TYPE_FP32);
  for (const int64_t dim : ForecastDims(config.horizon(), NumTargets(config), NumQuantiles(config),
                                        !config.quantiles().empty())) {
    output->add_dims(dim);
  }

  inference::ModelDynamicBatching* dynamic = out.mutable_dynamic_batching();
  for (const int64_t size : batching.preferred_batch_sizes) {
    dynamic->add_preferred_batch_size(static_cast<int32_t>(size));
  }
  dynamic->set_max_queue_delay_microseconds(
      static_cast<uint64_t>(absl::ToInt64Microseconds(batching.max_queue_delay)));
  dynamic->set_priority_levels(batching.queue.levels);
  dynamic->set_default_priority_level(batching.queue.default_level);
  *dynamic->mutable_default_queue_policy() = ToTritonPolicy(batching.queue.default_policy);
  for (const auto& [level, policy] : batching.queue.level_policies) {
    (*dynamic->mutable_priority_queue_policy())[level] = ToTritonPolicy(policy);
  }

  // InstanceConfig: replicas per device; devices "cpu" and "cuda:N", empty for every device.
  const int count = std::max(1, config.instances().count());
  std::vector<int32_t> gpus;
  bool cpu = false;
  for (const std::string& device : config.instances().devices()) {
    absl::string_view rest = device;
    int32_t gpu = 0;
    if (device == "cpu") {
      cpu = true;
    } else if (absl::ConsumePrefix(&rest, "cuda:") && absl::SimpleAtoi(rest, &gpu)) {
      gpus.push_back(gpu);
    }
  }
  if (config.instances().devices().empty()) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_AUTO);
    group->set_count(count);
  }
  if (cpu) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_CPU);
    group->set_count(count);
  }
  if (!gpus.empty()) {
    inference::ModelInstanceGroup* group = out.add_instance_group();
    group->set_kind(inference::ModelInstanceGroup::KIND_GPU);
    group->set_count(count);
    for (const int32_t gpu : gpus) group->add_gpus(gpu);
  }
  return out;
}

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
      statistics_(std::make_shared<Statistics>()) {}

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
  absl::StatusOr<int64_t> version = ParseVersion(request->version());
  if (!version.ok()) return ToGrpcStatus(version.status());
  // An unknown model is simply not ready, as Triton answers.
  response->set_ready(ready() && options_.registry->GetLoadedModel(request->name(), *version).ok());
  return grpc::Status::OK;
}

grpc::Status KServeService::ServerMetadata(grpc::ServerContext* context,
                                           const inference::ServerMetadataRequest* /*request*/,
                                           inference::ServerMetadataResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  response->set_name("forecastd");
  response->set_version(kForecastdVersion);
  for (const char* extension :
       {"model_repository", "model_configuration", "schedule_policy", "statistics"}) {
    response->add_extensions(extension);
  }
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelMetadata(grpc::ServerContext* context,
                                          const inference::ModelMetadataRequest* request,
                                          inference::ModelMetadataResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  absl::StatusOr<int64_t> version = ParseVersion(request->version());
  if (!version.ok()) return ToGrpcStatus(version.status());
  absl::StatusOr<LoadedModel> loaded = options_.registry->GetLoadedModel(request->name(), *version);
  if (!loaded.ok()) return ToGrpcStatus(loaded.status());
  const Forecaster& model = *loaded->model;
  response->set_name(request->name());
  response->add_versions(VersionString(loaded->version));
  response->set_platform(kKServePlatform);
  auto* input = response->add_inputs();
  input->set_name(kKServeInputName);
  input->set_datatype(kFp32);
  for (const int64_t dim :
       {int64_t{-1}, int64_t{model.lookback()}, int64_t{model.num_features()}}) {
    input->add_shape(dim);
  }
  auto* output = response->add_outputs();
  output->set_name(kKServeOutputName);
  output->set_datatype(kFp32);
  output->add_shape(-1);
  for (const int64_t dim : ForecastDims(model)) output->add_shape(dim);
  return grpc::Status::OK;
}

grpc::ServerUnaryReactor* KServeService::ModelInfer(grpc::CallbackServerContext* context,
                                                    const inference::ModelInferRequest* request,
                                                    inference::ModelInferResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  Clock* clock = clock_;
  ServingMetrics* metrics = options_.metrics;
  const absl::Time arrival = clock->Now();
  const std::string model_name = request->model_name();
  uint32_t priority = 0;
  int64_t stats_version = 0;  // known once the model is: failures are counted from then on
  const auto fail = [&](const absl::Status& status) {
    const grpc::Status grpc_status = ToGrpcStatus(status);
    const absl::Duration total = clock->Now() - arrival;
    if (metrics != nullptr) {
      metrics->ObserveRequest(model_name, stats_version, kMethod, priority,
                              grpc_status.error_code(), total, absl::ZeroDuration(),
                              absl::ZeroDuration());
    }
    if (stats_version > 0) statistics_->RecordFailure(model_name, stats_version, total);
    reactor->Finish(grpc_status);
    return reactor;
  };
  if (!ready()) {
    return fail(absl::UnavailableError("forecastd is not ready: it is starting or shutting down"));
  }
  absl::StatusOr<int64_t> version = ParseVersion(request->model_version());
  if (!version.ok()) return fail(version.status());
  absl::StatusOr<LoadedModel> pinned = admission_.Pin(model_name, *version);
  if (!pinned.ok()) return fail(pinned.status());
  stats_version = pinned->version;
  absl::StatusOr<RequestParameters> parameters = ParseParameters(*request);
  if (!parameters.ok()) return fail(parameters.status());
  // Metrics label the level the request runs at (0 is the model's default level).
  priority = PredictAdmission::LevelOf(*pinned, parameters->priority);
  PredictCall call;
  if (absl::Status status = ReadInput(*request, *pinned->model, pinned->max_batch_size, call);
      !status.ok()) {
    return fail(status);
  }
  if (absl::Status status = CheckRequestedOutputs(*request); !status.ok()) return fail(status);
  call.priority = parameters->priority;
  call.deadline = EngineDeadline(*context, *clock);
  call.timeout_override = parameters->timeout;
  // The forecasts go straight into the reply's one raw output.
  const int64_t per_row = pinned->model->num_outputs();
  const auto reply_buffer = [response, per_row](int64_t rows) -> char* {
    std::string* raw = response->add_raw_output_contents();
    raw->resize(static_cast<size_t>(rows * per_row) * sizeof(float));
    return raw->data();
  };
  auto done = [reactor, response, metrics, clock, arrival, model_name, priority,
               statistics = statistics_, id = request->id(), fallback_version = pinned->version,
               forecaster = pinned->model, rows = call.shape[0]](PredictResult result) {
    const int64_t version = result.version > 0 ? result.version : fallback_version;
    const absl::Duration total = clock->Now() - arrival;
    if (result.status.ok()) {
      response->set_model_name(model_name);
      response->set_model_version(VersionString(version));
      response->set_id(id);
      auto* output = response->add_outputs();
      output->set_name(kKServeOutputName);
      output->set_datatype(kFp32);
      output->add_shape(rows);
      for (const int64_t dim : ForecastDims(*forecaster)) output->add_shape(dim);
      statistics->RecordSuccess(model_name, version, rows, result.batch_rows, total,
                                result.queue_time, result.compute_time);
    } else {
      statistics->RecordFailure(model_name, version, total);
    }
    const grpc::Status status = ToGrpcStatus(result.status);
    if (metrics != nullptr) {
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        metrics->ObserveDeadlineMiss(model_name);
      }
      metrics->ObserveRequest(model_name, version, kMethod, priority, status.error_code(), total,
                              result.queue_time, result.compute_time);
    }
    reactor->Finish(status);
  };
  if (absl::Status status = admission_.Admit(*pinned, call, reply_buffer, std::move(done));
      !status.ok()) {
    return fail(status);
  }
  return reactor;
}

grpc::Status KServeService::ModelConfig(grpc::ServerContext* context,
                                        const inference::ModelConfigRequest* request,
                                        inference::ModelConfigResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  absl::StatusOr<int64_t> version = ParseVersion(request->version());
  if (!version.ok()) return ToGrpcStatus(version.status());
  absl::StatusOr<LoadedModel> loaded = options_.registry->GetLoadedModel(request->name(), *version);
  absl::StatusOr<inference::ModelConfig> config;
  if (loaded.ok()) {
    config = ToTritonModelConfig(loaded->model->config());
  } else if (loaded.status().code() == absl::StatusCode::kNotFound) {
    return ToGrpcStatus(loaded.status());
  } else {
    // On disk but not serving: report the config the registry last read.
    absl::StatusOr<ModelStatus> status = options_.registry->GetModel(request->name());
    if (!status.ok()) return ToGrpcStatus(status.status());
    if (!status->config.has_value()) return ToGrpcStatus(loaded.status());
    config = ToTritonModelConfig(*status->config);
  }
  if (!config.ok()) return ToGrpcStatus(config.status());
  *response->mutable_config() = *std::move(config);
  return grpc::Status::OK;
}

grpc::Status KServeService::ModelStatistics(grpc::ServerContext* context,
                                            const inference::ModelStatisticsRequest* request,
                                            inference::ModelStatisticsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  absl::StatusOr<int64_t> version = ParseVersion(request->version());
  if (!version.ok()) return ToGrpcStatus(version.status());
  std::vector<ModelStatus> models;
  if (request->name().empty()) {
    models = options_.registry->ListModels();
  } else {
    absl::StatusOr<ModelStatus> status = options_.registry->GetModel(request->name());
    if (!status.ok()) return ToGrpcStatus(status.status());
    models.push_back(*std::move(status));
  }
  for (const ModelStatus& model : models) {
    // Every loaded version (zeros before its first request, so a client can take a first
    // snapshot) and every version with statistics.
    std::set<int64_t> versions = statistics_->Versions(model.name);
    for (const LoadedVersionStatus& loaded : model.loaded) versions.insert(loaded.version);
    if (*version > 0) {
      const bool on_disk = std::find(model.versions_on_disk.begin(), model.versions_on_disk.end(),
                                     *version) != model.versions_on_disk.end();
      if (!versions.contains(*version) && !on_disk) {
        return ToGrpcStatus(absl::NotFoundError(
            absl::StrCat("model '", model.name, "' has no version ", *version)));
      }
      versions = {*version};
    }
    for (const int64_t v : versions) {
      *response->add_model_stats() = statistics_->Report(model.name, v);
    }
  }
  return grpc::Status::OK;
}

grpc::Status KServeService::RepositoryIndex(grpc::ServerContext* context,
                                            const inference::RepositoryIndexRequest* request,
                                            inference::RepositoryIndexResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (absl::Status status = RepositoryNameSupported(request->repository_name()); !status.ok()) {
    return ToGrpcStatus(status);
  }
  for (const ModelStatus& model : options_.registry->ListModels()) {
    const auto add = [&](int64_t version, const char* state, const std::string& reason) {
      if (request->ready() && absl::string_view(state) != "READY") return;
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
  return grpc::Status::OK;
}

grpc::Status KServeService::RepositoryModelLoad(
    grpc::ServerContext* context, const inference::RepositoryModelLoadRequest* request,
    inference::RepositoryModelLoadResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (absl::Status status = RepositoryNameSupported(request->repository_name()); !status.ok()) {
    return ToGrpcStatus(status);
  }
  if (!request->parameters().empty()) {
    return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
        "load parameter '", request->parameters().begin()->first,
        "' is not supported: forecastd loads config.json and the weights from its repository")));
  }
  return ToGrpcStatus(options_.registry->Load(request->model_name()));
}

grpc::Status KServeService::RepositoryModelUnload(
    grpc::ServerContext* context, const inference::RepositoryModelUnloadRequest* request,
    inference::RepositoryModelUnloadResponse* /*response*/) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (absl::Status status = RepositoryNameSupported(request->repository_name()); !status.ok()) {
    return ToGrpcStatus(status);
  }
  for (const auto& [key, value] : request->parameters()) {
    // Models here have no dependents, so asking to unload them too changes nothing.
    if (key == "unload_dependents" && value.has_bool_param()) continue;
    return ToGrpcStatus(
        absl::InvalidArgumentError(absl::StrCat("unload parameter '", key, "' is not supported")));
  }
  return ToGrpcStatus(options_.registry->Unload(request->model_name()));
}

}  // namespace forecastd
