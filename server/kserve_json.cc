#include "server/kserve_json.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/descriptor.h"
#include "google/protobuf/reflection.h"
#include "kernels/base/status.h"

namespace forecastd::kserve {
namespace {

using nlohmann::json;

constexpr char kBinaryDataSize[] = "binary_data_size";
constexpr char kBinaryData[] = "binary_data";
constexpr char kBinaryDataOutput[] = "binary_data_output";

// Strings from clients may hold invalid UTF-8; the error body must still be written.
std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

absl::Status Invalid(absl::string_view what, absl::string_view problem) {
  return absl::InvalidArgumentError(absl::StrCat(what, ": ", problem));
}

// Appends the leaves of `data` (a flat or nested array), row-major, through `add`, which
// returns false for a leaf of the wrong JSON type.
template <typename Add>
absl::Status Flatten(const json& data, absl::string_view what, absl::string_view datatype,
                     Add& add) {
  if (data.is_array()) {
    for (const json& element : data) {
      if (absl::Status status = Flatten(element, what, datatype, add); !status.ok()) return status;
    }
    return absl::OkStatus();
  }
  if (!add(data)) {
    return Invalid(
        what, absl::StrCat("'data' holds ", Dump(data), ", which is not a ", datatype, " value"));
  }
  return absl::OkStatus();
}

// JSON "data" of `datatype` into the tensor's contents.
absl::Status ReadData(const json& data, absl::string_view what, const std::string& datatype,
                      inference::InferTensorContents* contents) {
  const auto integer_in = [](const json& v, int64_t lo, int64_t hi) {
    if (!v.is_number_integer()) return false;
    if (v.is_number_unsigned()) return v.get<uint64_t>() <= static_cast<uint64_t>(hi);
    const int64_t x = v.get<int64_t>();
    return x >= lo && x <= hi;
  };
  if (datatype == "FP32") {
    auto add = [&](const json& v) {
      if (!v.is_number()) return false;
      // A double beyond float's range has no FP32 value (and converting it is undefined).
      const double x = v.get<double>();
      if (std::abs(x) > std::numeric_limits<float>::max()) return false;
      contents->add_fp32_contents(static_cast<float>(x));
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "FP64") {
    auto add = [&](const json& v) {
      if (!v.is_number()) return false;
      contents->add_fp64_contents(v.get<double>());
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "BOOL") {
    auto add = [&](const json& v) {
      if (!v.is_boolean()) return false;
      contents->add_bool_contents(v.get<bool>());
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "BYTES") {
    auto add = [&](const json& v) {
      if (!v.is_string()) return false;
      contents->add_bytes_contents(v.get<std::string>());
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  struct IntegerType {
    const char* name;
    int64_t lo;
    int64_t hi;
  };
  for (const IntegerType& type :
       {IntegerType{"INT8", INT8_MIN, INT8_MAX}, IntegerType{"INT16", INT16_MIN, INT16_MAX},
        IntegerType{"INT32", INT32_MIN, INT32_MAX}, IntegerType{"UINT8", 0, UINT8_MAX},
        IntegerType{"UINT16", 0, UINT16_MAX}, IntegerType{"UINT32", 0, UINT32_MAX}}) {
    if (datatype != type.name) continue;
    const bool is_unsigned = type.lo == 0;
    auto add = [&](const json& v) {
      if (!integer_in(v, type.lo, type.hi)) return false;
      if (is_unsigned) {
        contents->add_uint_contents(static_cast<uint32_t>(v.get<uint64_t>()));
      } else {
        contents->add_int_contents(static_cast<int32_t>(v.get<int64_t>()));
      }
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "INT64") {
    auto add = [&](const json& v) {
      if (!integer_in(v, INT64_MIN, INT64_MAX)) return false;
      contents->add_int64_contents(v.get<int64_t>());
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "UINT64") {
    auto add = [&](const json& v) {
      if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0)) {
        return false;
      }
      contents->add_uint64_contents(v.get<uint64_t>());
      return true;
    };
    return Flatten(data, what, datatype, add);
  }
  if (datatype == "FP16" || datatype == "BF16") {
    return Invalid(what, absl::StrCat(datatype,
                                      " tensors have no JSON form: send them as binary data "
                                      "(the parameter 'binary_data_size')"));
  }
  return Invalid(what, absl::StrCat("unknown datatype '", datatype, "'"));
}

// A non-negative integer parameter ("binary_data_size").
absl::StatusOr<uint64_t> SizeParameter(const json& value, absl::string_view what) {
  if (!value.is_number_integer() || (!value.is_number_unsigned() && value.get<int64_t>() < 0)) {
    return Invalid(what, absl::StrCat("parameter '", kBinaryDataSize,
                                      "' must be a non-negative integer, not ", Dump(value)));
  }
  return value.get<uint64_t>();
}

json ParameterToJson(const inference::InferParameter& parameter) {
  switch (parameter.parameter_choice_case()) {
    case inference::InferParameter::kBoolParam:
      return parameter.bool_param();
    case inference::InferParameter::kInt64Param:
      return parameter.int64_param();
    case inference::InferParameter::kUint64Param:
      return parameter.uint64_param();
    case inference::InferParameter::kDoubleParam:
      return parameter.double_param();
    case inference::InferParameter::kStringParam:
      return parameter.string_param();
    case inference::InferParameter::PARAMETER_CHOICE_NOT_SET:
      break;
  }
  return nullptr;
}

json ScalarToJson(const google::protobuf::Message& message,
                  const google::protobuf::FieldDescriptor* field, int index);

json FieldToJson(const google::protobuf::Message& message,
                 const google::protobuf::FieldDescriptor* field) {
  const google::protobuf::Reflection* reflection = message.GetReflection();
  if (field->is_map()) {
    json object = json::object();
    const google::protobuf::FieldDescriptor* key = field->message_type()->map_key();
    const google::protobuf::FieldDescriptor* value = field->message_type()->map_value();
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      const google::protobuf::Message& entry = reflection->GetRepeatedMessage(message, field, i);
      json k = ScalarToJson(entry, key, -1);
      object[k.is_string() ? k.get<std::string>() : Dump(k)] = ScalarToJson(entry, value, -1);
    }
    return object;
  }
  if (field->is_repeated()) {
    json array = json::array();
    for (int i = 0; i < reflection->FieldSize(message, field); ++i) {
      array.push_back(ScalarToJson(message, field, i));
    }
    return array;
  }
  return ScalarToJson(message, field, -1);
}

// One value of `field` (element `index` of a repeated field; -1 for a singular one).
json ScalarToJson(const google::protobuf::Message& message,
                  const google::protobuf::FieldDescriptor* field, int index) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = message.GetReflection();
  const bool repeated = index >= 0;
  switch (field->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      return repeated ? r->GetRepeatedInt32(message, field, index) : r->GetInt32(message, field);
    case FieldDescriptor::CPPTYPE_INT64:
      return repeated ? r->GetRepeatedInt64(message, field, index) : r->GetInt64(message, field);
    case FieldDescriptor::CPPTYPE_UINT32:
      return repeated ? r->GetRepeatedUInt32(message, field, index) : r->GetUInt32(message, field);
    case FieldDescriptor::CPPTYPE_UINT64:
      return repeated ? r->GetRepeatedUInt64(message, field, index) : r->GetUInt64(message, field);
    case FieldDescriptor::CPPTYPE_DOUBLE:
      return repeated ? r->GetRepeatedDouble(message, field, index) : r->GetDouble(message, field);
    case FieldDescriptor::CPPTYPE_FLOAT:
      return repeated ? r->GetRepeatedFloat(message, field, index) : r->GetFloat(message, field);
    case FieldDescriptor::CPPTYPE_BOOL:
      return repeated ? r->GetRepeatedBool(message, field, index) : r->GetBool(message, field);
    case FieldDescriptor::CPPTYPE_ENUM: {
      const google::protobuf::EnumValueDescriptor* value =
          repeated ? r->GetRepeatedEnum(message, field, index) : r->GetEnum(message, field);
      return value->name();
    }
    case FieldDescriptor::CPPTYPE_STRING:
      return repeated ? r->GetRepeatedString(message, field, index) : r->GetString(message, field);
    case FieldDescriptor::CPPTYPE_MESSAGE:
      return MessageToJson(repeated ? r->GetRepeatedMessage(message, field, index)
                                    : r->GetMessage(message, field));
  }
  return nullptr;
}

}  // namespace

absl::Status ReadParameters(const json& object, absl::string_view what,
                            google::protobuf::Map<std::string, inference::InferParameter>* out) {
  if (!object.is_object()) return Invalid(what, "'parameters' must be a JSON object");
  for (const auto& [key, value] : object.items()) {
    inference::InferParameter& parameter = (*out)[key];
    if (value.is_boolean()) {
      parameter.set_bool_param(value.get<bool>());
    } else if (value.is_number_unsigned() &&
               value.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)) {
      parameter.set_uint64_param(value.get<uint64_t>());
    } else if (value.is_number_integer()) {
      parameter.set_int64_param(value.get<int64_t>());
    } else if (value.is_number_float()) {
      parameter.set_double_param(value.get<double>());
    } else if (value.is_string()) {
      parameter.set_string_param(value.get<std::string>());
    } else {
      return Invalid(
          what, absl::StrCat("parameter '", key, "' must be a boolean, a number or a string, not ",
                             Dump(value)));
    }
  }
  return absl::OkStatus();
}

absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> json_bytes,
                               inference::ModelInferRequest* request, OutputEncoding* encoding) {
  constexpr absl::string_view kWhat = "inference request";
  if (json_bytes.has_value() && *json_bytes > body.size()) {
    return Invalid(kWhat, absl::StrCat("Inference-Header-Content-Length is ", *json_bytes,
                                       " but the body has only ", body.size(), " bytes"));
  }
  const absl::string_view header = body.substr(0, json_bytes.value_or(body.size()));
  absl::string_view binary = body.substr(header.size());
  const json root = json::parse(header.begin(), header.end(), nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded()) return Invalid(kWhat, "the body is not valid JSON");
  if (!root.is_object()) return Invalid(kWhat, "the body must be a JSON object");

  if (const auto id = root.find("id"); id != root.end()) {
    if (!id->is_string()) return Invalid(kWhat, "'id' must be a string");
    request->set_id(id->get<std::string>());
  }
  if (const auto parameters = root.find("parameters"); parameters != root.end()) {
    RETURN_IF_ERROR(ReadParameters(*parameters, kWhat, request->mutable_parameters()));
    auto& map = *request->mutable_parameters();
    if (const auto it = map.find(kBinaryDataOutput); it != map.end()) {
      if (!it->second.has_bool_param()) {
        return Invalid(kWhat,
                       absl::StrCat("parameter '", kBinaryDataOutput, "' must be a boolean"));
      }
      encoding->binary_by_default = it->second.bool_param();
      map.erase(it);
    }
  }

  const auto inputs = root.find("inputs");
  if (inputs == root.end() || !inputs->is_array()) {
    return Invalid(kWhat, "'inputs' must be an array of tensors");
  }
  for (const json& tensor : *inputs) {
    const std::string position = absl::StrCat("input ", request->inputs_size());
    if (!tensor.is_object()) return Invalid(position, "must be a JSON object");
    inference::ModelInferRequest::InferInputTensor* input = request->add_inputs();
    const auto name = tensor.find("name");
    if (name == tensor.end() || !name->is_string()) {
      return Invalid(position, "'name' must be a string");
    }
    input->set_name(name->get<std::string>());
    const std::string what = absl::StrCat("input '", input->name(), "'");
    const auto datatype = tensor.find("datatype");
    if (datatype == tensor.end() || !datatype->is_string()) {
      return Invalid(what, "'datatype' must be a string");
    }
    input->set_datatype(datatype->get<std::string>());
    const auto shape = tensor.find("shape");
    if (shape == tensor.end() || !shape->is_array()) {
      return Invalid(what, "'shape' must be an array of integers");
    }
    for (const json& dim : *shape) {
      if (!dim.is_number_integer() || (!dim.is_number_unsigned() && dim.get<int64_t>() < 0) ||
          (dim.is_number_unsigned() && dim.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
        return Invalid(what, absl::StrCat("'shape' holds ", Dump(dim),
                                          ", which is not a non-negative integer"));
      }
      input->add_shape(dim.get<int64_t>());
    }
    std::optional<uint64_t> binary_size;
    if (const auto parameters = tensor.find("parameters"); parameters != tensor.end()) {
      if (!parameters->is_object()) return Invalid(what, "'parameters' must be a JSON object");
      for (const auto& [key, value] : parameters->items()) {
        if (key == kBinaryDataSize) {
          ASSIGN_OR_RETURN(binary_size, SizeParameter(value, what));
        } else {
          json one = json::object();
          one[key] = value;
          RETURN_IF_ERROR(ReadParameters(one, what, input->mutable_parameters()));
        }
      }
    }
    const auto data = tensor.find("data");
    if (binary_size.has_value()) {
      if (data != tensor.end()) {
        return Invalid(what, absl::StrCat("has both 'data' and the parameter '", kBinaryDataSize,
                                          "'; send its values one way"));
      }
      if (*binary_size > binary.size()) {
        return Invalid(what,
                       absl::StrCat("'", kBinaryDataSize, "' is ", *binary_size, " bytes but only ",
                                    binary.size(), " bytes of binary data are left in the body"));
      }
      request->add_raw_input_contents(std::string(binary.substr(0, *binary_size)));
      binary.remove_prefix(*binary_size);
    } else if (data == tensor.end() && input->parameters().contains("shared_memory_region")) {
      // Its data is in a shared-memory region, which the service reads (or refuses) by name.
    } else {
      if (data == tensor.end()) {
        return Invalid(
            what, absl::StrCat("has neither 'data' nor the parameter '", kBinaryDataSize, "'"));
      }
      RETURN_IF_ERROR(ReadData(*data, what, input->datatype(), input->mutable_contents()));
    }
  }
  if (!binary.empty()) {
    return Invalid(kWhat, absl::StrCat(binary.size(),
                                       " bytes of binary data after the JSON header belong to no "
                                       "input (each binary input gives its 'binary_data_size')"));
  }

  if (const auto outputs = root.find("outputs"); outputs != root.end()) {
    if (!outputs->is_array()) return Invalid(kWhat, "'outputs' must be an array");
    for (const json& tensor : *outputs) {
      const std::string position = absl::StrCat("output ", request->outputs_size());
      if (!tensor.is_object()) return Invalid(position, "must be a JSON object");
      const auto name = tensor.find("name");
      if (name == tensor.end() || !name->is_string()) {
        return Invalid(position, "'name' must be a string");
      }
      auto* output = request->add_outputs();
      output->set_name(name->get<std::string>());
      const std::string what = absl::StrCat("output '", output->name(), "'");
      bool binary_output = false;
      if (const auto parameters = tensor.find("parameters"); parameters != tensor.end()) {
        RETURN_IF_ERROR(ReadParameters(*parameters, what, output->mutable_parameters()));
        auto& map = *output->mutable_parameters();
        if (const auto it = map.find(kBinaryData); it != map.end()) {
          if (!it->second.has_bool_param()) {
            return Invalid(what, absl::StrCat("parameter '", kBinaryData, "' must be a boolean"));
          }
          binary_output = it->second.bool_param();
          map.erase(it);
        }
      }
      encoding->binary[output->name()] = binary_output;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<HttpBody> WriteInferResponse(const inference::ModelInferResponse& response,
                                            const OutputEncoding& encoding) {
  json root = json::object();
  root["model_name"] = response.model_name();
  root["model_version"] = response.model_version();
  if (!response.id().empty()) root["id"] = response.id();
  if (!response.parameters().empty()) {
    json parameters = json::object();
    for (const auto& [key, value] : response.parameters()) parameters[key] = ParameterToJson(value);
    root["parameters"] = std::move(parameters);
  }
  std::string binary;
  json outputs = json::array();
  for (int i = 0; i < response.outputs_size(); ++i) {
    const auto& tensor = response.outputs(i);
    json output = json::object();
    output["name"] = tensor.name();
    output["datatype"] = tensor.datatype();
    output["shape"] = json::array();
    for (const int64_t dim : tensor.shape()) output["shape"].push_back(dim);
    if (tensor.parameters().contains("shared_memory_region")) {
      // Its data is in the region the client named: name, datatype and shape alone. No
      // "parameters" either: tritonclient's C++ HTTP client (perf_analyzer) reads an output
      // with parameters as one with binary data and needs "binary_data_size" in them.
      outputs.push_back(std::move(output));
      continue;
    }
    if (i >= response.raw_output_contents_size()) {
      return absl::InternalError(absl::StrCat("output '", tensor.name(), "' has no data"));
    }
    const std::string& bytes = response.raw_output_contents(i);
    if (encoding.Binary(tensor.name())) {
      output["parameters"] = {{kBinaryDataSize, bytes.size()}};
      binary += bytes;
    } else {
      if (tensor.datatype() != "FP32" || bytes.size() % sizeof(float) != 0) {
        return absl::InternalError(absl::StrCat("output '", tensor.name(), "' of datatype ",
                                                tensor.datatype(), " has no JSON form here"));
      }
      json data = json::array();
      const size_t n = bytes.size() / sizeof(float);
      for (size_t k = 0; k < n; ++k) {
        float value = 0;
        std::memcpy(&value, bytes.data() + k * sizeof(float), sizeof(float));
        data.push_back(value);
      }
      output["data"] = std::move(data);
    }
    outputs.push_back(std::move(output));
  }
  root["outputs"] = std::move(outputs);
  HttpBody out;
  out.body = Dump(root);
  if (!binary.empty()) {
    out.json_bytes = out.body.size();
    out.body += binary;
  }
  return out;
}

json MessageToJson(const google::protobuf::Message& message) {
  json object = json::object();
  const google::protobuf::Descriptor* descriptor = message.GetDescriptor();
  const google::protobuf::Reflection* reflection = message.GetReflection();
  for (int i = 0; i < descriptor->field_count(); ++i) {
    const google::protobuf::FieldDescriptor* field = descriptor->field(i);
    const bool optional_kind =
        field->containing_oneof() != nullptr ||
        field->cpp_type() == google::protobuf::FieldDescriptor::CPPTYPE_MESSAGE;
    if (!field->is_repeated() && optional_kind && !reflection->HasField(message, field)) continue;
    object[field->name()] = FieldToJson(message, field);
  }
  return object;
}

std::string ErrorBody(absl::string_view message) {
  return Dump(json{{"error", std::string(message)}});
}

}  // namespace forecastd::kserve
