#include "server/predict_call.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/status.h"
#include "server/predict_input.h"

namespace forecastd {

absl::StatusOr<LoadedModel> PredictAdmission::Pin(const std::string& model, int64_t version) const {
  return options_.registry->GetLoadedModel(model, version);
}

absl::Status PredictAdmission::Admit(const LoadedModel& pinned, const PredictCall& call,
                                     absl::FunctionRef<char*(int64_t rows)> output_buffer,
                                     std::function<void(PredictResult)> done) const {
  const Forecaster& model = *pinned.model;
  const WindowLimits limits{.max_batch_rows = pinned.max_batch_size,
                            .server_max_batch_rows = options_.max_batch_rows,
                            .max_request_bytes = options_.max_request_memory_bytes,
                            .allow_non_finite = options_.allow_non_finite_inputs};
  const auto with_context = [&call](const absl::Status& status) {
    if (call.input_context.empty()) return status;
    return absl::Status(status.code(), absl::StrCat(call.input_context, status.message()));
  };
  auto task = std::make_unique<PredictTask>();
  const bool records = HasRecordExtras(model.config());
  if (call.device_input.empty()) {
    absl::StatusOr<absl::string_view> windows =
        CheckWindows(model, call.shape, call.raw, call.values, limits);
    if (!windows.ok()) return with_context(windows.status());
    if (records) {
      ASSIGN_OR_RETURN(task->input, BuildRequestRecords(model, call.shape[0], *windows, call.extras,
                                                        limits.allow_non_finite));
    } else {
      RETURN_IF_ERROR(CheckNoExtras(model, call.extras));
      task->input_bytes = *windows;
    }
  } else {
    if (records) {
      return with_context(absl::InvalidArgumentError(absl::StrCat(
          "model '", model.config().name(),
          "' has covariates or series, whose input records the server builds on the host: send "
          "its windows in the request or in system shared memory, not in CUDA shared memory")));
    }
    RETURN_IF_ERROR(CheckNoExtras(model, call.extras));
    absl::StatusOr<int64_t> floats = CheckWindowShape(model, call.shape, limits);
    if (!floats.ok()) return with_context(floats.status());
    const int64_t bytes = *floats * int64_t{sizeof(float)};
    if (call.device_input.bytes != bytes) {
      return with_context(absl::InvalidArgumentError(
          absl::StrCat("the region holds ", call.device_input.bytes, " bytes of inputs; shape [",
                       absl::StrJoin(call.shape, ", "), "] of float32 needs ", bytes)));
    }
    task->device_input = call.device_input;
    task->allow_non_finite = options_.allow_non_finite_inputs;
  }
  task->rows = call.shape[0];
  task->output = output_buffer(task->rows);
  if (!call.device_output.empty()) {
    task->device_output = call.device_output;
    task->device_output.bytes = task->rows * model.num_outputs() * int64_t{sizeof(float)};
  }
  task->priority = call.priority;
  task->deadline = call.deadline;
  task->timeout_override = call.timeout_override;
  task->done = std::move(done);
  return options_.registry->Enqueue(pinned, task);
}

absl::Time EngineDeadline(const grpc::ServerContextBase& context, Clock& clock) {
  const auto deadline = context.deadline();
  if (deadline >= std::chrono::system_clock::time_point::max() - std::chrono::hours(24 * 365)) {
    return absl::InfiniteFuture();
  }
  return clock.Now() + (absl::FromChrono(deadline) - absl::Now());
}

}  // namespace forecastd
