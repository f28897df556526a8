// The one admission step of every prediction front door (forecastd's Predict, KServe's
// ModelInfer, and any later one): pin the model version once (ModelRegistry::GetLoadedModel),
// check the request's windows against that pin and the server's limits without copying them,
// point the task at the request's bytes and at the reply's forecast buffer, and enqueue it with
// its priority and deadline. Front doors only translate their message into a PredictCall and
// the PredictResult back into theirs. Thread-safe: stateless beyond constant options.
#ifndef FORECASTD_SERVER_PREDICT_CALL_H_
#define FORECASTD_SERVER_PREDICT_CALL_H_

#include <cstdint>
#include <functional>
#include <string>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/clock.h"
#include "engine/serving/device_memory.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/predict_task.h"
#include "grpcpp/server_context.h"
#include "server/predict_input.h"

namespace forecastd {

// One prediction request as its front door decoded it. The spans and views point into the
// request message, which must stay alive until the call's `done` has run.
struct PredictCall {
  // (B, T, F) windows, F the model's input columns (NumInputColumns): exactly one of `raw`
  // (little-endian float32 bytes) and `values`.
  absl::Span<const int64_t> shape;
  absl::string_view raw;
  absl::Span<const float> values;
  // The windows in a client's device memory instead (CUDA shared memory; `raw` and `values`
  // then empty): its byte count must be the shape's. The server never reads them on the host:
  // the batch checks them for non-finite values where it reads them.
  DeviceSpan device_input;
  // The forecasts go to a client's device memory instead of the reply's buffer when set: at
  // least the forecasts' bytes (the front door checks), of which Admit takes what they need.
  DeviceSpan device_output;
  // Put before messages about the windows ("input 'INPUT__0': "); may be empty.
  std::string input_context;
  // What the request carries beside the windows, for a model with covariates or series: the
  // admission step builds the model's input records from them (a copy, so a request to such a
  // model does not stay in its message), and refuses them for a model that takes none. Windows
  // in device memory are for models without them only.
  RequestExtras extras;
  // Priority level, 1 the highest; 0: the model's default level.
  uint32_t priority = 0;
  // Queue timeout the client asks for (PredictTask::timeout_override); zero: none.
  absl::Duration timeout_override = absl::ZeroDuration();
  // When the client stops waiting, on the engine's clock (EngineDeadline).
  absl::Time deadline = absl::InfiniteFuture();
};

class PredictAdmission {
 public:
  struct Options {
    // Not owned; required; must outlive every call admitted.
    ModelRegistry* registry = nullptr;
    // The server's --max-batch-rows (windows per request whatever the model); 0: none.
    int64_t max_batch_rows = 0;
    // The server's --max-request-memory-bytes, against EstimatePredictBytes; 0: none.
    int64_t max_request_memory_bytes = 0;
    // The server's --allow-non-finite-inputs.
    bool allow_non_finite_inputs = false;
  };

  explicit PredictAdmission(Options options) : options_(options) {}

  // Step 1: the version `version` of `model` (0: the serving version) pinned for this request;
  // the registry's codes (NOT_FOUND, UNAVAILABLE).
  absl::StatusOr<LoadedModel> Pin(const std::string& model, int64_t version) const;

  // The level a request of `priority` runs at on `pinned`: the model's default for 0.
  static uint32_t LevelOf(const LoadedModel& pinned, uint32_t priority) {
    return priority == 0 ? pinned.default_priority_level : priority;
  }

  // Step 2: checks `call` against `pinned` and the server's limits (PredictInput's codes), asks
  // `output_buffer` for the bytes the forecasts go to (rows * num_outputs float32s of the
  // reply, which must stay valid until `done` has run; nullptr when `call.device_output` takes
  // them), and enqueues. `done` is called exactly
  // once, on an engine thread, iff this returns OK; its result's `output` is then empty, the
  // forecasts being in the reply's buffer.
  absl::Status Admit(const LoadedModel& pinned, const PredictCall& call,
                     absl::FunctionRef<char*(int64_t rows)> output_buffer,
                     std::function<void(PredictResult)> done) const;

 private:
  const Options options_;
};

// The client's gRPC deadline on the engine's clock; InfiniteFuture for none.
absl::Time EngineDeadline(const grpc::ServerContextBase& context, Clock& clock);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_PREDICT_CALL_H_
