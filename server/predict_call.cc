#include "server/predict_call.h"

#include <chrono>
#include <memory>
#include <utility>

#include "absl/strings/str_cat.h"
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
  absl::StatusOr<absl::string_view> windows =
      CheckWindows(model, call.shape, call.raw, call.values,
                   {.max_batch_rows = pinned.max_batch_size,
                    .server_max_batch_rows = options_.max_batch_rows,
                    .max_request_bytes = options_.max_request_memory_bytes,
                    .allow_non_finite = options_.allow_non_finite_inputs});
  if (!windows.ok()) {
    if (call.input_context.empty()) return windows.status();
    return absl::Status(windows.status().code(),
                        absl::StrCat(call.input_context, windows.status().message()));
  }
  auto task = std::make_unique<PredictTask>();
  task->rows = call.shape[0];
  task->input_bytes = *windows;
  task->output = output_buffer(task->rows);
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
