#include "server/kserve_request.h"

#include <cstdint>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "kernels/base/status.h"

namespace forecastd::kserve {
namespace {

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

}  // namespace

absl::StatusOr<int64_t> ParseVersion(const std::string& text) {
  if (text.empty()) return 0;
  int64_t version = 0;
  if (absl::SimpleAtoi(text, &version) && version == 0) {
    // As Triton answers: a version that cannot exist is not found.
    return absl::NotFoundError(absl::StrCat("model version '", text,
                                            "' does not exist: versions start at 1 (empty: the "
                                            "serving version)"));
  }
  if (!absl::SimpleAtoi(text, &version) || version < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model version '", text, "' is not a positive integer (empty: the serving version)"));
  }
  return version;
}

std::string VersionString(int64_t version) { return absl::StrCat(version); }

std::vector<int64_t> ForecastDims(int64_t P, int64_t K, int64_t Q, bool quantiles) {
  std::vector<int64_t> dims = {P, K};
  if (quantiles) dims.push_back(Q);
  return dims;
}

std::vector<int64_t> ForecastDims(const Forecaster& model) {
  return ForecastDims(model.horizon(), model.num_targets(), model.num_quantiles(),
                      !model.config().quantiles().empty());
}
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
  if (CarriesSequence(request)) return NotASequenceModel(request);
  return out;
}

bool CarriesSequence(const inference::ModelInferRequest& request) {
  const auto it = request.parameters().find("sequence_id");
  if (it == request.parameters().end()) return false;
  // Triton's correlation id: 0 and "" mean none.
  const inference::InferParameter& id = it->second;
  return (id.has_int64_param() && id.int64_param() != 0) ||
         (id.has_uint64_param() && id.uint64_param() != 0) ||
         (id.has_string_param() && !id.string_param().empty());
}

absl::Status NotASequenceModel(const inference::ModelInferRequest& request) {
  return absl::InvalidArgumentError(
      absl::StrCat("model '", request.model_name(),
                   "' is not a sequence model (sequence batching is not configured for it); "
                   "drop 'sequence_id' and send each window whole"));
}

absl::Status ReadInput(const inference::ModelInferRequest& request, const Forecaster& model,
                       int64_t max_batch_rows, PredictCall& call,
                       const SharedMemoryTensors* shared) {
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
  if (input.datatype() != kKServeFp32) {
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
  if (shared != nullptr && shared->input_shared()) {
    if (request.raw_input_contents_size() > 0 || contents.fp32_contents_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeInputName,
          "' names a shared-memory region and also carries data in the request; send one"));
    }
    call.shape =
        absl::Span<const int64_t>(input.shape().data(), static_cast<size_t>(input.shape().size()));
    call.raw = shared->input;
    call.values = {};
    call.device_input = shared->device_input;
    call.input_context = absl::StrCat("input '", kKServeInputName, "' (shared memory): ");
    return absl::OkStatus();
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
      return absl::UnimplementedError(
          absl::StrCat("output '", output.name(),
                       "': forecastd does not support Triton's classification extension; ask "
                       "for the forecast without the parameter 'classification'"));
    }
  }
  return absl::OkStatus();
}
absl::StatusOr<SharedMemoryTensors> ResolveSharedMemory(const inference::ModelInferRequest& request,
                                                        const SharedMemoryRegistry* registry,
                                                        const std::string& owner) {
  SharedMemoryTensors out;
  // One tensor's region, of either kind; `name` empty when it names none.
  struct Resolved {
    std::string name;
    std::shared_ptr<const SharedMemoryRegion> system;
    char* data = nullptr;  // in `system`
    DeviceSpan device;
    int64_t offset = 0;
    int64_t bytes = 0;
  };
  const auto resolve =
      [&](const std::string& what,
          const google::protobuf::Map<std::string, inference::InferParameter>& parameters)
      -> absl::StatusOr<Resolved> {
    const auto it = parameters.find("shared_memory_region");
    if (it == parameters.end()) {
      if (parameters.contains("shared_memory_byte_size") ||
          parameters.contains("shared_memory_offset")) {
        return absl::InvalidArgumentError(absl::StrCat(
            what, " has a shared-memory size or offset but no 'shared_memory_region'"));
      }
      return Resolved{};
    }
    if (!it->second.has_string_param() || it->second.string_param().empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": 'shared_memory_region' must be a region's name (a string)"));
    }
    const std::string& name = it->second.string_param();
    const std::string context = absl::StrCat(what, " (shared-memory region '", name, "')");
    ASSIGN_OR_RETURN(std::optional<uint64_t> byte_size,
                     UnsignedParameter(parameters, "shared_memory_byte_size",
                                       static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
    if (!byte_size.has_value()) {
      return absl::InvalidArgumentError(
          absl::StrCat(context, " needs the parameter 'shared_memory_byte_size'"));
    }
    ASSIGN_OR_RETURN(std::optional<uint64_t> offset,
                     UnsignedParameter(parameters, "shared_memory_offset",
                                       static_cast<uint64_t>(std::numeric_limits<int64_t>::max())));
    if (registry == nullptr) {
      return absl::NotFoundError(
          absl::StrCat(context, ": shared-memory region '", name, "' is not registered"));
    }
    ASSIGN_OR_RETURN(SharedMemoryRegistry::Acquired region, registry->AcquireAny(owner, name));
    Resolved resolved;
    resolved.name = name;
    resolved.offset = static_cast<int64_t>(offset.value_or(0));
    resolved.bytes = static_cast<int64_t>(*byte_size);
    if (region.system != nullptr) {
      ASSIGN_OR_RETURN(resolved.data, region.system->Slice(what, resolved.offset, resolved.bytes));
      resolved.system = std::move(region.system);
    } else {
      RETURN_IF_ERROR(
          CheckInsideRegion(what, name, resolved.offset, resolved.bytes, region.cuda->byte_size()));
      resolved.device = DeviceSpan{
          .region = std::move(region.cuda), .offset = resolved.offset, .bytes = resolved.bytes};
    }
    return resolved;
  };
  for (const auto& input : request.inputs()) {
    ASSIGN_OR_RETURN(Resolved resolved,
                     resolve(absl::StrCat("input '", input.name(), "'"), input.parameters()));
    if (resolved.name.empty()) continue;
    // ReadInput refuses a second input; only the first can be the one read.
    if (!out.input_shared()) {
      out.input_region = std::move(resolved.system);
      if (out.input_region != nullptr) {
        out.input = absl::string_view(resolved.data, static_cast<size_t>(resolved.bytes));
      }
      out.device_input = std::move(resolved.device);
    }
  }
  for (const auto& output : request.outputs()) {
    ASSIGN_OR_RETURN(Resolved resolved,
                     resolve(absl::StrCat("output '", output.name(), "'"), output.parameters()));
    if (resolved.name.empty()) continue;
    out.output_region = std::move(resolved.system);
    out.output = resolved.data;
    out.device_output = std::move(resolved.device);
    out.output_region_name = resolved.name;
    out.output_bytes = resolved.bytes;
    out.output_offset = resolved.offset;
  }
  return out;
}

absl::Status RefuseSharedMemory(const inference::ModelInferRequest& request,
                                absl::string_view why) {
  const auto named_region =
      [](const google::protobuf::Map<std::string, inference::InferParameter>& parameters)
      -> std::string {
    const auto it = parameters.find("shared_memory_region");
    if (it == parameters.end()) return "";
    return it->second.has_string_param() ? it->second.string_param() : std::string("?");
  };
  const auto refuse = [why](absl::string_view what, const std::string& name,
                            const std::string& region) {
    return absl::UnimplementedError(
        absl::StrCat(what, " '", name, "' names the shared-memory region '", region, "': ", why,
                     "; send the tensor in the request (raw_input_contents or contents; over "
                     "REST, JSON 'data' or binary data)"));
  };
  for (const auto& input : request.inputs()) {
    if (std::string region = named_region(input.parameters()); !region.empty()) {
      return refuse("input", input.name(), region);
    }
  }
  for (const auto& output : request.outputs()) {
    if (std::string region = named_region(output.parameters()); !region.empty()) {
      return refuse("output", output.name(), region);
    }
  }
  return absl::OkStatus();
}

}  // namespace forecastd::kserve
