#include "server/kserve_request.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <limits>
#include <map>
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

std::vector<InputSpec> InputSpecs(const ModelConfig& config) {
  const int64_t T = config.lookback(), P = config.horizon();
  std::vector<InputSpec> specs;
  specs.push_back({kKServeInputName, kKServeFp32, {T, NumInputColumns(config)}});
  if (NumFutureInputColumns(config) > 0) {
    specs.push_back({kKServeFutureName, kKServeFp32, {P, NumFutureInputColumns(config)}});
  }
  if (NeedsTimestamps(config)) specs.push_back({kKServeTimestampsName, kKServeInt64, {T + P}});
  if (NumSeries(config) > 0) specs.push_back({kKServeSeriesName, kKServeBytes, {1}});
  return specs;
}

namespace {

// "model 'm' takes one input, 'INPUT' (FP32 [B, 4, 2])", or its several inputs.
std::string ModelTakes(const ModelConfig& config, const std::vector<InputSpec>& specs) {
  std::vector<std::string> parts;
  for (const InputSpec& spec : specs) {
    parts.push_back(absl::StrCat("'", spec.name, "' (", spec.datatype, " [B, ",
                                 absl::StrJoin(spec.dims, ", "), "])"));
  }
  if (parts.size() == 1) {
    return absl::StrCat("model '", config.name(), "' takes one input, ", parts[0]);
  }
  const std::string last = parts.back();
  parts.pop_back();
  return absl::StrCat("model '", config.name(), "' takes the inputs ", absl::StrJoin(parts, ", "),
                      " and ", last);
}

// The values in all of a tensor's contents fields together.
int ContentCount(const inference::InferTensorContents& contents) {
  return contents.bool_contents_size() + contents.int_contents_size() +
         contents.int64_contents_size() + contents.uint_contents_size() +
         contents.uint64_contents_size() + contents.fp32_contents_size() +
         contents.fp64_contents_size() + contents.bytes_contents_size();
}

bool HasContents(const inference::InferTensorContents& contents) {
  return ContentCount(contents) > 0;
}

// Whether contents other than `kept` hold values (`kept`: the field the datatype uses).
bool HasOtherContents(const inference::InferTensorContents& contents, int kept) {
  return ContentCount(contents) > kept;
}

bool NamesRegion(const inference::ModelInferRequest::InferInputTensor& input) {
  return input.parameters().contains("shared_memory_region");
}

// The number of elements of `shape` (dims >= 0); nullopt beyond 2^48, far above any limit.
std::optional<int64_t> ElementCount(const google::protobuf::RepeatedField<int64_t>& shape) {
  int64_t n = 1;
  for (const int64_t dim : shape) {
    if (dim != 0 && n > (int64_t{1} << 48) / dim) return std::nullopt;
    n *= dim;
  }
  return n;
}

absl::Status ValueCount(const std::string& name, const std::string& datatype,
                        const google::protobuf::RepeatedField<int64_t>& shape, int64_t count) {
  const std::optional<int64_t> want = ElementCount(shape);
  if (!want.has_value() || *want != count) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "' holds ", count, " ", datatype, " values; its shape [",
                     absl::StrJoin(shape, ", "), "] needs ",
                     want.has_value() ? absl::StrCat(*want) : std::string("more")));
  }
  return absl::OkStatus();
}

// TIMESTAMPS: INT64 little-endian raw bytes or contents.int64_contents.
absl::StatusOr<std::vector<int64_t>> ReadTimestamps(
    const inference::ModelInferRequest::InferInputTensor& input, const absl::string_view* raw) {
  const std::string& name = input.name();
  std::vector<int64_t> out;
  if (raw != nullptr) {
    if (raw->size() % sizeof(int64_t) != 0) {
      return absl::InvalidArgumentError(absl::StrCat("input '", name, "' holds ", raw->size(),
                                                     " raw bytes, not a whole number of INT64s"));
    }
    out.resize(raw->size() / sizeof(int64_t));
    if (!out.empty()) std::memcpy(out.data(), raw->data(), raw->size());
  } else {
    out.assign(input.contents().int64_contents().begin(), input.contents().int64_contents().end());
  }
  RETURN_IF_ERROR(ValueCount(name, kKServeInt64, input.shape(), static_cast<int64_t>(out.size())));
  return out;
}

// SERIES: BYTES as raw bytes (each element a 4-byte little-endian length, then its bytes, as
// Triton serialises them) or contents.bytes_contents.
absl::StatusOr<std::vector<std::string>> ReadNames(
    const inference::ModelInferRequest::InferInputTensor& input, const absl::string_view* raw) {
  const std::string& name = input.name();
  std::vector<std::string> out;
  if (raw != nullptr) {
    absl::string_view rest = *raw;
    while (!rest.empty()) {
      uint32_t length = 0;
      if (rest.size() < sizeof(length)) {
        return absl::InvalidArgumentError(
            absl::StrCat("input '", name,
                         "': its raw bytes end inside an element's 4-byte length (BYTES "
                         "elements are a little-endian uint32 length, then that many bytes)"));
      }
      std::memcpy(&length, rest.data(), sizeof(length));
      rest.remove_prefix(sizeof(length));
      if (length > rest.size()) {
        return absl::InvalidArgumentError(absl::StrCat("input '", name, "': element ", out.size(),
                                                       " says ", length, " bytes but ", rest.size(),
                                                       " remain"));
      }
      out.emplace_back(rest.substr(0, length));
      rest.remove_prefix(length);
    }
  } else {
    out.assign(input.contents().bytes_contents().begin(), input.contents().bytes_contents().end());
  }
  RETURN_IF_ERROR(ValueCount(name, kKServeBytes, input.shape(), static_cast<int64_t>(out.size())));
  return out;
}

}  // namespace

absl::Status ReadInput(const inference::ModelInferRequest& request, const Forecaster& model,
                       int64_t max_batch_rows, PredictCall& call,
                       const SharedMemoryTensors* shared) {
  const ModelConfig& config = model.config();
  const std::string& name = config.name();
  const std::vector<InputSpec> specs = InputSpecs(config);
  const std::string takes = ModelTakes(config, specs);
  if (request.inputs_size() == 0) {
    return absl::InvalidArgumentError(absl::StrCat("the request has no input; ", takes));
  }
  // Each input checked against the model's inputs, by name: its index in request.inputs().
  std::map<std::string, int> given;
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& input = request.inputs(i);
    const auto spec = std::find_if(specs.begin(), specs.end(),
                                   [&input](const InputSpec& s) { return s.name == input.name(); });
    if (spec == specs.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", input.name(), "'; ", takes));
    }
    if (!given.emplace(input.name(), i).second) {
      int times = 0;
      for (const auto& other : request.inputs()) times += other.name() == input.name() ? 1 : 0;
      return absl::InvalidArgumentError(
          absl::StrCat("input '", input.name(), "' is given ", times, " times"));
    }
    if (input.datatype() != spec->datatype) {
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' has datatype '",
                                                     input.datatype(), "'; model '", name,
                                                     "' takes ", spec->datatype));
    }
    for (const int64_t dim : input.shape()) {
      if (dim < 0) {
        return absl::InvalidArgumentError(absl::StrCat(
            "input '", input.name(), "' has shape [", absl::StrJoin(input.shape(), ", "),
            "]; a request's dimensions must be concrete (>= 0)"));
      }
    }
    const inference::InferTensorContents& contents = input.contents();
    const int kept = spec->datatype == kKServeFp32    ? contents.fp32_contents_size()
                     : spec->datatype == kKServeInt64 ? contents.int64_contents_size()
                                                      : contents.bytes_contents_size();
    if (HasOtherContents(contents, kept)) {
      const char* field = spec->datatype == kKServeFp32    ? "fp32_contents"
                          : spec->datatype == kKServeInt64 ? "int64_contents"
                                                           : "bytes_contents";
      return absl::InvalidArgumentError(absl::StrCat("input '", input.name(), "' is ",
                                                     spec->datatype,
                                                     ": send its values in contents.", field));
    }
    if (input.name() != kKServeInputName && NamesRegion(input)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", input.name(), "' names a shared-memory region; forecastd reads only '",
          kKServeInputName, "' from shared memory: send '", input.name(), "' in the request"));
    }
  }
  if (!given.contains(kKServeInputName)) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kKServeInputName, "' is missing; ", takes));
  }
  const bool input_shared = shared != nullptr && shared->input_shared();
  const auto& input = request.inputs(given.at(kKServeInputName));
  // Raw contents go, in order, to the inputs that are neither shared nor carry contents (over
  // REST, the binary inputs beside those sent as JSON).
  const int raw_count = request.raw_input_contents_size();
  std::map<std::string, absl::string_view> raw;
  if (raw_count > 0) {
    std::vector<std::string> takers;
    const std::string* with_contents = nullptr;
    for (const auto& in : request.inputs()) {
      if (HasContents(in.contents())) {
        if (with_contents == nullptr) with_contents = &in.name();
      } else if (!(in.name() == kKServeInputName && input_shared)) {
        takers.push_back(in.name());
      }
    }
    const int expected = static_cast<int>(takers.size());
    if (raw_count > expected && with_contents != nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", *with_contents,
                       "' has both contents and raw_input_contents; send one of them"));
    }
    if (raw_count > expected && input_shared) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeInputName,
          "' names a shared-memory region and also carries data in the request; send one"));
    }
    if (raw_count != expected) {
      return absl::InvalidArgumentError(absl::StrCat(
          "raw_input_contents has ", raw_count, " entries for ", expected,
          expected == 1 ? " input" : " inputs", "; send one per input, in the order of 'inputs'"));
    }
    for (int i = 0; i < raw_count; ++i) {
      raw[takers[static_cast<size_t>(i)]] = request.raw_input_contents(i);
    }
  }
  const auto raw_of = [&raw](const std::string& input_name) -> const absl::string_view* {
    const auto it = raw.find(input_name);
    return it == raw.end() ? nullptr : &it->second;
  };

  // INPUT.
  const auto& shape = input.shape();
  call.shape = absl::Span<const int64_t>(shape.data(), static_cast<size_t>(shape.size()));
  if (input_shared) {
    if (input.contents().fp32_contents_size() > 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeInputName,
          "' names a shared-memory region and also carries data in the request; send one"));
    }
    call.raw = shared->input;
    call.values = {};
    call.device_input = shared->device_input;
    call.input_context = absl::StrCat("input '", kKServeInputName, "' (shared memory): ");
  } else {
    const absl::string_view* input_raw = raw_of(kKServeInputName);
    const absl::string_view bytes = input_raw != nullptr ? *input_raw : absl::string_view();
    // An empty raw entry for a non-empty shape is a byte-size mismatch, which CheckWindows
    // (seeing neither raw bytes nor values) would word as a missing value count.
    if (input_raw != nullptr && bytes.empty() && shape.size() == 3 && shape[0] >= 1 &&
        shape[0] <= max_batch_rows && shape[1] == model.lookback() &&
        shape[2] == NumInputColumns(config)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeInputName, "': raw inputs hold 0 bytes; shape [",
          absl::StrJoin(shape, ", "), "] of float32 needs ", shape[0] * shape[1] * shape[2] * 4));
    }
    call.raw = bytes;
    call.values =
        absl::Span<const float>(input.contents().fp32_contents().data(),
                                static_cast<size_t>(input.contents().fp32_contents_size()));
    call.input_context = absl::StrCat("input '", kKServeInputName, "': ");
  }

  // FUTURE, TIMESTAMPS, SERIES: beside an INPUT [B, n, F], [B, P, Fk], [B, n + P] and [m, 1].
  RequestExtras& extras = call.extras;
  extras.future_name = absl::StrCat("input '", kKServeFutureName, "'");
  extras.timestamps_name = absl::StrCat("input '", kKServeTimestampsName, "'");
  extras.series_name = absl::StrCat("input '", kKServeSeriesName, "'");
  const bool rank3 = shape.size() == 3;
  if (const auto it = given.find(kKServeFutureName); it != given.end()) {
    const auto& future = request.inputs(it->second);
    const absl::string_view* future_raw = raw_of(kKServeFutureName);
    extras.future =
        FloatTensorView{.shape = absl::Span<const int64_t>(
                            future.shape().data(), static_cast<size_t>(future.shape().size())),
                        .raw = future_raw != nullptr ? *future_raw : absl::string_view(),
                        .values = absl::Span<const float>(
                            future.contents().fp32_contents().data(),
                            static_cast<size_t>(future.contents().fp32_contents_size()))};
  }
  if (const auto it = given.find(kKServeTimestampsName); it != given.end()) {
    const auto& times = request.inputs(it->second);
    const int64_t P = model.horizon();
    if (rank3 && (times.shape().size() != 2 || times.shape(0) != shape[0] ||
                  times.shape(1) != shape[1] + P)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeTimestampsName, "' has shape [", absl::StrJoin(times.shape(), ", "),
          "]; beside input '", kKServeInputName, "' [", absl::StrJoin(shape, ", "), "] model '",
          name, "' takes INT64 [", shape[0], ", ", shape[1] + P, "] (each window's ", shape[1],
          " rows' times, then its ", P, " forecast steps', Unix seconds)"));
    }
    ASSIGN_OR_RETURN(std::vector<int64_t> values,
                     ReadTimestamps(times, raw_of(kKServeTimestampsName)));
    extras.timestamps = std::move(values);
  }
  if (const auto it = given.find(kKServeSeriesName); it != given.end()) {
    const auto& series = request.inputs(it->second);
    const auto& dims = series.shape();
    if (dims.empty() || dims.size() > 2 || dims[0] < 1 || (dims.size() == 2 && dims[1] != 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeSeriesName, "' has shape [", absl::StrJoin(dims, ", "), "]; model '",
          name, "' takes BYTES [B, 1], each window's series name (or [1, 1]: one for all)"));
    }
    ASSIGN_OR_RETURN(std::vector<std::string> names, ReadNames(series, raw_of(kKServeSeriesName)));
    extras.series = std::move(names);
  }
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
