// KServe v2 REST bodies and the inference.* messages KServeService works on: the JSON tensor
// form of an inference request and response (which is not protobuf's JSON mapping: tensors are
// `{"name", "shape", "datatype", "data"}` with the values as one flat or nested array), Triton's
// binary tensor extension (a JSON header of Inference-Header-Content-Length bytes followed by
// the tensors' bytes, in input order, each input saying its size in the parameter
// "binary_data_size"; outputs come back the same way when the request asks with "binary_data"
// or "binary_data_output"), and the other answers as Triton's REST API spells them (field names
// as in the .proto, 64-bit integers as JSON numbers, enums by name). Used by the REST front door
// (server/kserve_http.h). Thread-safe: functions of their arguments only.
#ifndef FORECASTD_SERVER_KSERVE_JSON_H_
#define FORECASTD_SERVER_KSERVE_JSON_H_

#include <cstddef>
#include <map>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/message.h"
#include "inference/grpc_service.pb.h"
#include "nlohmann/json.hpp"

namespace forecastd::kserve {

// How the client wants each output back: as binary data after the JSON header, or as a JSON
// "data" array.
struct OutputEncoding {
  // The request parameter "binary_data_output": outputs the request does not name, binary.
  bool binary_by_default = false;
  // Each output the request names, with its "binary_data" parameter (false when absent).
  std::map<std::string, bool> binary;

  bool Binary(const std::string& name) const {
    const auto it = binary.find(name);
    return it != binary.end() ? it->second : binary_by_default;
  }
};

// Reads the body of POST .../infer into `request` (model name and version are the URL's, set
// by the caller) and `encoding`. `json_bytes` is the Inference-Header-Content-Length header:
// nullopt when the whole body is JSON, else the length of the JSON part, the binary inputs
// following it. JSON data becomes `contents` of the input's datatype; binary data becomes
// raw_input_contents, in input order (an input has one or the other; inputs of one request may
// differ, as Triton's REST API allows: KServeService gives the raw entries to the inputs without
// contents). INVALID_ARGUMENT naming the field or input at fault for anything malformed.
absl::Status ParseInferRequest(absl::string_view body, std::optional<size_t> json_bytes,
                               inference::ModelInferRequest* request, OutputEncoding* encoding);

// An HTTP body and, when binary outputs follow the JSON, the JSON's length (the response's
// Inference-Header-Content-Length).
struct HttpBody {
  std::string body;
  std::optional<size_t> json_bytes;
};

// ModelInfer's response as the REST body: each output from raw_output_contents (little-endian,
// as KServeService writes them), as a JSON "data" array or, where `encoding` asks, as binary
// data with its "binary_data_size". INTERNAL for an output this cannot decode (only FP32 is).
absl::StatusOr<HttpBody> WriteInferResponse(const inference::ModelInferResponse& response,
                                            const OutputEncoding& encoding);

// A request's "parameters" object as InferParameters: booleans, integers (int64, or uint64
// above its range), doubles and strings. INVALID_ARGUMENT for another JSON type, naming `what`.
absl::Status ReadParameters(const nlohmann::json& object, absl::string_view what,
                            google::protobuf::Map<std::string, inference::InferParameter>* out);

// A message as Triton's REST answers spell it: the .proto's field names, every scalar field
// (defaults too, so clients find every count), 64-bit integers as numbers, enums by name, maps
// as objects, messages and oneof members only when set.
nlohmann::json MessageToJson(const google::protobuf::Message& message);

// KServe's error body: {"error": "<message>"}.
std::string ErrorBody(absl::string_view message);

}  // namespace forecastd::kserve

#endif  // FORECASTD_SERVER_KSERVE_JSON_H_
