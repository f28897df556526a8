// A forecaster as KServe's messages spell it: its tensor names, datatypes and shapes, its
// versions as text, and the parts of a ModelInferRequest that KServeService reads (parameters,
// the inputs, the requested outputs) before the admission step. Every forecaster takes the
// input INPUT, FP32 [B, T, F] (F its feature_names); a model with covariates or series takes
// more (InputSpecs): FUTURE, FP32 [B, P, covariates.future], the future-known covariates of
// each window's P forecast steps; TIMESTAMPS, INT64 [B, T + P], each window's rows' and
// forecast steps' times (Unix seconds) for calendar features; SERIES, BYTES [B, 1], each
// window's series name (one name, [1, 1], for every window; [B] is taken too). Used by
// KServeService, KServeSequences and ToTritonModelConfig. Thread-safe: functions of their
// arguments only.
#ifndef FORECASTD_SERVER_KSERVE_REQUEST_H_
#define FORECASTD_SERVER_KSERVE_REQUEST_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/models/forecaster.h"
#include "inference/grpc_service.pb.h"
#include "server/predict_call.h"
#include "server/shared_memory.h"

namespace forecastd {

// The tensor names every forecaster has under the KServe protocol.
inline constexpr char kKServeInputName[] = "INPUT";
inline constexpr char kKServeOutputName[] = "FORECAST";
// The inputs of a model with future-known covariates, calendar features or several series.
inline constexpr char kKServeFutureName[] = "FUTURE";
inline constexpr char kKServeTimestampsName[] = "TIMESTAMPS";
inline constexpr char kKServeSeriesName[] = "SERIES";
// ModelMetadata's and ModelConfig's `platform` (and ModelConfig's `backend`).
inline constexpr char kKServePlatform[] = "forecastd";
// The datatypes: of INPUT, FUTURE and FORECAST; of TIMESTAMPS; of SERIES.
inline constexpr char kKServeFp32[] = "FP32";
inline constexpr char kKServeInt64[] = "INT64";
inline constexpr char kKServeBytes[] = "BYTES";

namespace kserve {

// A version as the protocol spells it: "" for the one the server picks (0 here), else a
// positive decimal integer. "0" is NOT_FOUND (as Triton answers), anything else
// INVALID_ARGUMENT.
absl::StatusOr<int64_t> ParseVersion(const std::string& text);
std::string VersionString(int64_t version);

// One input of a model as its metadata and Triton config describe it.
struct InputSpec {
  std::string name;
  std::string datatype;       // KServe's name: "FP32", "INT64", "BYTES"
  std::vector<int64_t> dims;  // without the batch dimension
};
// The inputs `config` takes, in this order: INPUT [T, F]; FUTURE [P, covariates.future] with
// future-known covariates; TIMESTAMPS [T + P] with calendar features; SERIES [1] with several
// series.
std::vector<InputSpec> InputSpecs(const ModelConfig& config);

// (P, K) or (P, K, Q): a forecast of one window.
std::vector<int64_t> ForecastDims(int64_t P, int64_t K, int64_t Q, bool quantiles);
std::vector<int64_t> ForecastDims(const Forecaster& model);

// The request parameters ModelInfer honours ("priority", "timeout"; see kserve_service.h).
// INVALID_ARGUMENT for a bad value, and for a sequence_id: no model here is a sequence model.
struct RequestParameters {
  uint32_t priority = 0;
  absl::Duration timeout = absl::ZeroDuration();
};
absl::StatusOr<RequestParameters> ParseParameters(const inference::ModelInferRequest& request);

// Whether `request` carries Triton's sequence parameters: a "sequence_id" other than 0 or "".
bool CarriesSequence(const inference::ModelInferRequest& request);
// The INVALID_ARGUMENT such a request gets from a model that is not a sequence model.
absl::Status NotASequenceModel(const inference::ModelInferRequest& request);

// The tensors of a request that live in shared memory (Triton's parameters
// "shared_memory_region", "shared_memory_byte_size" and the optional "shared_memory_offset"
// on an input or output), resolved against the caller's registered regions: system regions
// (host bytes) or CUDA regions (device memory, DeviceSpan). The region references keep the
// mappings alive while the request uses them.
struct SharedMemoryTensors {
  // The input's bytes, when the input names a system region (`input_region` then non-null),
  // or its device memory, when it names a CUDA region.
  std::shared_ptr<const SharedMemoryRegion> input_region;
  absl::string_view input;
  DeviceSpan device_input;
  // Where the forecast goes, when the output names a system region (`output_region` then
  // non-null and `output` its first byte) or a CUDA region (`device_output`).
  std::shared_ptr<const SharedMemoryRegion> output_region;
  char* output = nullptr;
  DeviceSpan device_output;
  // Of either kind: the output's region, byte size and offset as the request names them.
  std::string output_region_name;
  int64_t output_bytes = 0;
  int64_t output_offset = 0;

  bool input_shared() const { return input_region != nullptr || !device_input.empty(); }
  bool output_shared() const { return !output_region_name.empty(); }
};
// NOT_FOUND for a region `owner` has not registered (or no registry: shared memory is off);
// INVALID_ARGUMENT naming the tensor and region for a missing or bad size or offset and for a
// range outside the region.
absl::StatusOr<SharedMemoryTensors> ResolveSharedMemory(const inference::ModelInferRequest& request,
                                                        const SharedMemoryRegistry* registry,
                                                        const std::string& owner);

// Points `call` at the (B, T, F) windows of the request's INPUT, and `call.extras` at its
// FUTURE, TIMESTAMPS and SERIES where the model takes them, after the checks only KServe's
// message needs (names, datatypes, where the values are, TIMESTAMPS [B, n + P] and SERIES
// [m, 1] or [m] beside an INPUT [B, n, F], value counts); the admission step checks the tensors
// themselves against `model`. An input the model does not take is INVALID_ARGUMENT; one it
// takes but the request lacks is left for the admission step to name. Raw contents belong, in
// order, to the inputs that are neither in shared memory nor carry contents. When `shared` has
// INPUT in a region, its bytes are there (host bytes, or device memory for a CUDA region), and
// the request must carry no data of its own for it; the other inputs are read from the request
// only.
absl::Status ReadInput(const inference::ModelInferRequest& request, const Forecaster& model,
                       int64_t max_batch_rows, PredictCall& call,
                       const SharedMemoryTensors* shared = nullptr);

// INVALID_ARGUMENT for an output other than the forecast or one asked for twice;
// UNIMPLEMENTED for one asking for classification.
absl::Status CheckRequestedOutputs(const inference::ModelInferRequest& request);

// UNIMPLEMENTED, naming the tensor and the region, for an input or output that names a
// shared-memory region ("shared_memory_region") in a request that cannot take one (a sequence
// request), so that such a request is never read as one without data.
absl::Status RefuseSharedMemory(const inference::ModelInferRequest& request, absl::string_view why);

}  // namespace kserve
}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_REQUEST_H_
