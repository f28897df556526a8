// One Predict request on its way through the engine: its input windows, its priority and
// time limits, where its forecasts go, and the callback that completes it. The server builds
// one per call and hands it to the model's Batcher; ownership moves with it, and `done` is
// called exactly once, from an engine thread, with the forecasts or the reason there are none.
// A request's windows and forecasts cross host memory once each way: the batcher copies the
// input bytes straight into the batch's staging buffer and the batch's output rows straight
// into `output`, so a server points both into its request and response messages. A task
// whose windows or forecasts are in a client's GPU memory (CUDA shared memory) names them with
// `device_input` / `device_output` instead (engine/serving/device_memory.h).
#ifndef FORECASTD_ENGINE_SERVING_PREDICT_TASK_H_
#define FORECASTD_ENGINE_SERVING_PREDICT_TASK_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "engine/serving/device_memory.h"

namespace forecastd {

struct PredictResult {
  absl::Status status;          // OK, or why the task was not computed
  std::vector<float> output;    // (rows, P, targets[, Q]) raw forecasts when OK and the
                                // task had no `output` buffer (else empty: they are there)
  int64_t version = 0;          // the model version that computed them
  absl::Duration queue_time;    // enqueue until its batch started
  absl::Duration compute_time;  // its batch's forward pass
  int64_t batch_rows = 0;       // rows in the batch it ran in (its own included)
};

struct PredictTask {
  // (rows, input_floats) raw input records (Forecaster::input_floats(); for a model without
  // covariates or series the (rows, T, F) windows themselves), validated by the caller, as
  // float32 bytes in host order. Not owned: they belong to the caller (the request message, or
  // `input` below) and must stay valid until `done` has been called. Empty: they are `input`.
  absl::string_view input_bytes;
  // The records, when the caller owns no message to point into (benchmarks, tests, and the
  // records a front door builds for a model with covariates or series).
  std::vector<float> input;
  int64_t rows = 0;  // B of this request, >= 1
  // The windows in device memory, when set (`input_bytes` and `input` are then empty):
  // rows * T * F float32s. Unless `allow_non_finite` is set, a row holding a NaN or an infinity
  // fails the task with INVALID_ARGUMENT, found where the batch reads the rows (the host never
  // sees them at admission).
  DeviceSpan device_input;
  bool allow_non_finite = false;

  // Where the batcher writes the (rows, P, targets[, Q]) forecasts, as float32 bytes in host
  // order, before calling `done` with OK: rows * output floats per row * 4 bytes of the
  // caller's memory (the response message), valid until `done` has been called. nullptr:
  // they come in PredictResult::output.
  char* output = nullptr;
  // The forecasts go to device memory instead, when set (`output` is then nullptr): rows *
  // output floats per row float32s.
  DeviceSpan device_output;

  // Priority level: 1 is the highest; 0 asks for the model's default level. The queue
  // rewrites it to the level it assigned when it accepts the task.
  uint32_t priority = 0;
  // When the client stops waiting (its gRPC deadline); InfiniteFuture for none. A task whose
  // deadline has passed is never computed: it completes with DEADLINE_EXCEEDED.
  absl::Time deadline = absl::InfiniteFuture();
  // Queue timeout requested by the client; honoured only when the level's policy allows an
  // override, and only when shorter than the policy's default (or when the level has no
  // default timeout). Zero or negative: none requested.
  absl::Duration timeout_override = absl::ZeroDuration();

  // A Benchmark RPC's synthetic request: computed like any other, but left out of the model's
  // serving metrics (BatcherObserver::OnBatch).
  bool benchmark = false;

  // Set by the queue when it accepts the task.
  absl::Time enqueue_time;

  std::function<void(PredictResult)> done;

  // The windows' bytes: input_bytes, or `input`'s.
  absl::string_view InputBytes() const {
    if (!input_bytes.empty()) return input_bytes;
    return absl::string_view(reinterpret_cast<const char*>(input.data()),
                             input.size() * sizeof(float));
  }
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_PREDICT_TASK_H_
