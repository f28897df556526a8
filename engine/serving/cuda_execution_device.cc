#include "engine/serving/cuda_execution_device.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/cuda_graph.h"
#include "backends/cuda/instance_streams.h"
#include "engine/models/cuda_data_ops.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/finite.h"
#include "spdlog/spdlog.h"

namespace forecastd {

// Runs what follows GPU work started without waiting for it (CudaModelInstance::Start), on
// one thread per GPU that polls the work's events: it sleeps while nothing is pending, polls
// (yielding its core) while anything is, and keeps polling for kLinger after the last
// completion, because a client that was just answered usually sends its next request within
// that time, and a sleeping thread takes longer to wake than a short batch takes to compute.
class CudaCompletionThread {
 public:
  using Done = absl::AnyInvocable<void(absl::Status) &&>;
  static constexpr std::chrono::microseconds kLinger{2000};

  explicit CudaCompletionThread(int device) : device_(device), thread_([this] { Loop(); }) {}
  // Returns once everything added has completed.
  ~CudaCompletionThread() {
    {
      absl::MutexLock lock(&mu_);  // so that the sleeping thread's condition sees it
      stopping_.store(true, std::memory_order_release);
    }
    thread_.join();
  }

  // Calls `done` on this thread once `event` (recorded on this GPU) has completed: OK, or the
  // CUDA error the event reports.
  void Add(cudaEvent_t event, Done done) {
    absl::MutexLock lock(&mu_);
    added_.push_back(Pending{event, std::move(done)});
    has_added_.store(true, std::memory_order_release);
  }

 private:
  struct Pending {
    cudaEvent_t event;
    Done done;
  };
  using SteadyClock = std::chrono::steady_clock;

  void Loop() {
    if (const cudaError_t error = cudaSetDevice(device_); error != cudaSuccess) {
      spdlog::error("cuda:{} completion thread: cudaSetDevice failed: {}", device_,
                    cudaGetErrorString(error));
    }
    std::vector<Pending> pending;
    SteadyClock::time_point last_done = SteadyClock::now();
    while (true) {
      if (has_added_.load(std::memory_order_acquire)) {
        absl::MutexLock lock(&mu_);
        for (Pending& p : added_) pending.push_back(std::move(p));
        added_.clear();
        has_added_.store(false, std::memory_order_relaxed);
      }
      if (pending.empty()) {
        if (!stopping_.load(std::memory_order_acquire) &&
            SteadyClock::now() - last_done < kLinger) {
          std::this_thread::yield();
          continue;
        }
        absl::MutexLock lock(&mu_);
        auto wake = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
          return !added_.empty() || stopping_.load(std::memory_order_relaxed);
        };
        mu_.Await(absl::Condition(&wake));
        if (added_.empty()) return;  // stopping, nothing left
        continue;
      }
      bool any = false;
      for (size_t i = 0; i < pending.size();) {
        const cudaError_t state = cudaEventQuery(pending[i].event);
        if (state == cudaErrorNotReady) {
          ++i;
          continue;
        }
        absl::Status status = absl::OkStatus();
        if (state != cudaSuccess) {
          status = absl::InternalError(
              absl::StrCat("CUDA error on cuda:", device_, ": ", cudaGetErrorString(state)));
        }
        Done done = std::move(pending[i].done);
        pending.erase(pending.begin() + static_cast<std::ptrdiff_t>(i));
        std::move(done)(std::move(status));
        any = true;
      }
      if (any) {
        last_done = SteadyClock::now();
      } else {
        std::this_thread::yield();
      }
    }
  }

  const int device_;
  std::atomic<bool> has_added_{false};
  std::atomic<bool> stopping_{false};  // set under mu_
  absl::Mutex mu_;
  std::vector<Pending> added_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;  // last: starts once the rest is made
};

namespace {

// One instance: a stream of its own, a backend on it, device buffers for max_batch_size rows
// and a graph per fixed batch size. Only its worker runs it once made.
class CudaModelInstance final : public ModelInstance {
 public:
  struct Options {
    int64_t max_batch_size = 1;
    // Sizes to capture, ascending; empty: eager only.
    std::vector<int64_t> graph_batch_sizes;
    CudaBackend::Options::Math math = CudaBackend::Options::Math::kFp32;
    int64_t workspace_bytes = 0;
    // State mode: the version's state slab, (state_slots + 1, StateFloats) floats, the last row
    // the padding rows' slot; nullptr: none. Steps of up to max_step_rows ticks, captured at
    // step_graph_sizes (ascending; empty: eager only).
    std::shared_ptr<DeviceBuffer> slab;
    int64_t state_slots = 0;
    int64_t max_step_rows = 0;
    std::vector<int64_t> step_graph_sizes;
    // The version's resident step on this GPU (shared by its instances), which takes the steps
    // of few streams once the instance is made; nullptr: none.
    std::shared_ptr<ResidentStep> resident;
    // Where Start's batches complete; nullptr: Start waits for the GPU itself (Run).
    CudaCompletionThread* completions = nullptr;
    // What compute() says.
    std::string compute;
  };

  static absl::StatusOr<std::unique_ptr<CudaModelInstance>> Create(
      std::shared_ptr<const Forecaster> model, std::shared_ptr<const DeviceBuffer> weights,
      CudaAllocator* allocator, const Options& options);

  ~CudaModelInstance() override {
    // A started batch's completion reads the staging buffer until it clears started_.
    while (started_.load(std::memory_order_acquire)) std::this_thread::yield();
    // Buffers go back to the allocator below; nothing queued may still read them.
    if (lease_.has_value()) lease_->Synchronize().IgnoreError();
    if (done_event_ != nullptr) cudaEventDestroy(done_event_);
  }

  absl::Status Run(const float* input, int64_t rows, float* output) override;
  // With a completion thread: queues the batch and an event after it, and returns; the
  // thread copies the forecasts out and calls `finish` when the event completes.
  void Start(const float* input, int64_t rows, float* output,
             absl::AnyInvocable<void(absl::Status) &&> finish) override;
  // Rows in device memory (any GPU's: copies between devices go peer to peer where the GPUs
  // allow it) are copied into the input buffer after the host rows, checked for non-finite
  // values there when asked, and copied from the output buffer to where they go.
  bool takes_device_rows() const override { return true; }
  absl::Status RunWithDeviceRows(const float* input, int64_t rows, float* output,
                                 const DeviceRowsIo& device) override;
  void StartWithDeviceRows(const float* input, int64_t rows, float* output,
                           const DeviceRowsIo& device,
                           absl::AnyInvocable<void(absl::Status) &&> finish) override;

  absl::Status Step(const int32_t* slots, const uint8_t* zero, const float* x, int64_t rows,
                    float* output) override;
  absl::Status ReadState(int32_t slot, float* state) override;
  absl::Status WriteState(int32_t slot, const float* state) override;

  float* input_staging() override { return static_cast<float*>(staging_input_); }
  float* output_staging() override { return static_cast<float*>(staging_output_); }
  std::string compute() const override { return compute_; }

  int64_t ComputedRows(int64_t rows) const override {
    const auto graph = graphs_.lower_bound(rows);
    return graph != graphs_.end() ? graph->first : rows;
  }

 private:
  CudaModelInstance(std::shared_ptr<const Forecaster> model,
                    std::shared_ptr<const DeviceBuffer> weights, int64_t max_batch_size)
      : model_(std::move(model)), weights_(std::move(weights)), max_batch_size_(max_batch_size) {}

  // Forecaster::Forward on the device buffers at `rows` rows, queued on the stream.
  absl::Status QueueForward(int64_t rows);
  // Run's work up to the copy of its forecasts into the output staging buffer, queued, with
  // the rows `device` names in device memory.
  absl::Status QueueRun(const float* input, int64_t rows, const DeviceRowsIo& device);
  // The flags of `rows` rows QueueRun copied into the pinned buffer, into `non_finite` (may be
  // null: none asked), once the stream is done.
  void ReportNonFinite(uint8_t* non_finite, int64_t rows) const {
    if (non_finite != nullptr) std::memcpy(non_finite, non_finite_host_, static_cast<size_t>(rows));
  }
  // Start and StartWithDeviceRows.
  void StartRun(const float* input, int64_t rows, float* output, const DeviceRowsIo& device,
                absl::AnyInvocable<void(absl::Status) &&> finish);
  // Forecaster::Step on the step buffers at `rows` rows, queued on the stream.
  absl::Status QueueStep(int64_t rows);
  // QueueStep between the copies of its inputs from the staging buffer ([slots (rows) | ticks
  // (rows, F)]) and of its output back to the output staging buffer: what a step graph holds,
  // so that a step is one launch.
  absl::Status QueueStepWithCopies(int64_t rows);
  absl::Status CheckSlot(int32_t slot) const;

  const std::shared_ptr<const Forecaster> model_;
  const std::shared_ptr<const DeviceBuffer> weights_;  // the version's, shared per GPU
  const int64_t max_batch_size_;
  std::string compute_;  // set once by Create

  // Declared in the order they are made; destroyed in reverse (the stream outlives all else).
  std::unique_ptr<InstanceStreams> streams_;  // this instance's one stream
  std::optional<StreamLease> lease_;
  DeviceBuffer input_;   // (max_batch_size, T, F)
  DeviceBuffer output_;  // (max_batch_size, num_outputs)
  DeviceBuffer scratch_;
  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<CudaDataOps> data_ops_;
  std::optional<Workspace> workspace_;
  void* staging_input_ = nullptr;   // pinned, max_batch_size rows
  void* staging_output_ = nullptr;  // pinned, max_batch_size rows
  // Rows read from device memory that hold a non-finite value: (max_batch_size) flags on the
  // device, and pinned after the output staging rows.
  DeviceBuffer non_finite_;
  uint8_t* non_finite_host_ = nullptr;
  std::map<int64_t, CudaGraph> graphs_;
  CudaCompletionThread* completions_ = nullptr;  // the device's; nullptr: Start is Run
  cudaEvent_t done_event_ = nullptr;             // recorded after a started batch
  std::atomic<bool> started_{false};             // a started batch has not completed

  // State mode (slab_ set).
  std::shared_ptr<DeviceBuffer> slab_;  // shared by the version's instances
  int64_t state_slots_ = 0;
  int64_t max_step_rows_ = 0;
  DeviceBuffer step_slots_;   // (max_step_rows) int32
  DeviceBuffer step_x_;       // (max_step_rows, F)
  DeviceBuffer step_output_;  // (max_step_rows, num_outputs)
  std::map<int64_t, CudaGraph> step_graphs_;
  // Last, so destroyed first: its kernel (when this holds the last reference) stops before the
  // buffers above go.
  std::shared_ptr<ResidentStep> resident_;
};

absl::StatusOr<std::unique_ptr<CudaModelInstance>> CudaModelInstance::Create(
    std::shared_ptr<const Forecaster> model, std::shared_ptr<const DeviceBuffer> weights,
    CudaAllocator* allocator, const Options& options) {
  const Forecaster& m = *model;
  const int64_t B = options.max_batch_size;
  const int64_t in_floats = m.input_floats();
  const int64_t out_floats = m.num_outputs();
  std::unique_ptr<CudaModelInstance> instance(
      new CudaModelInstance(std::move(model), std::move(weights), B));
  CudaModelInstance& s = *instance;
  s.compute_ = options.compute;

  InstanceStreams::Options stream_options;
  stream_options.device = allocator->device();
  stream_options.num_streams = 1;
  stream_options.workspace_bytes = options.workspace_bytes;
  const int64_t step_rows = options.slab != nullptr ? options.max_step_rows : 0;
  const int64_t F = m.num_features();
  // Staged together: a step's slots (int32) and ticks, and its forecasts.
  const int64_t step_in_bytes = step_rows * (F + 1) * int64_t{sizeof(float)};
  const int64_t in_bytes = std::max(B * in_floats * int64_t{sizeof(float)}, step_in_bytes);
  const int64_t forecast_bytes = std::max(B, step_rows) * out_floats * int64_t{sizeof(float)};
  // The output staging buffer ends with one flag per row (non_finite_host_).
  const int64_t out_bytes = forecast_bytes + B;
  stream_options.staging_bytes = std::max(in_bytes, out_bytes);
  ASSIGN_OR_RETURN(s.streams_, InstanceStreams::Create(stream_options, allocator));
  s.lease_.emplace(s.streams_->Lease());
  ASSIGN_OR_RETURN(s.staging_input_, s.lease_->HostStaging(StreamLease::Staging::kInput, in_bytes));
  ASSIGN_OR_RETURN(s.staging_output_,
                   s.lease_->HostStaging(StreamLease::Staging::kOutput, out_bytes));

  s.non_finite_host_ = static_cast<uint8_t*>(s.staging_output_) + forecast_bytes;
  ASSIGN_OR_RETURN(s.non_finite_, allocator->Allocate(B));
  ASSIGN_OR_RETURN(s.input_, allocator->Allocate(B * in_floats * int64_t{sizeof(float)}));
  ASSIGN_OR_RETURN(s.output_, allocator->Allocate(B * out_floats * int64_t{sizeof(float)}));
  const int64_t workspace_floats =
      std::max(m.WorkspaceFloats(B), step_rows > 0 ? m.StepWorkspaceFloats(step_rows) : 0);
  ASSIGN_OR_RETURN(s.scratch_, allocator->Allocate(workspace_floats * int64_t{sizeof(float)}));
  s.workspace_.emplace(s.scratch_.as<float>(), workspace_floats);

  CudaBackend::Options backend_options;
  backend_options.math = options.math;
  ASSIGN_OR_RETURN(s.backend_,
                   CudaBackend::Create(s.lease_->context(), allocator, backend_options));
  s.data_ops_ = std::make_unique<CudaDataOps>(s.lease_->stream());

  if (options.completions != nullptr) {
    const ScopedCudaDevice on_device(allocator->device());
    RETURN_IF_ERROR(on_device.status());
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&s.done_event_, cudaEventDisableTiming));
    s.completions_ = options.completions;
  }

  // Every row of the input starts as a neutral window, so rows a padded batch computes but
  // never returns hold finite values from the start (later, earlier batches' windows).
  const ScopedCudaDevice scoped(allocator->device());
  RETURN_IF_ERROR(scoped.status());
  const std::vector<float> neutral = m.NeutralWindows(B);
  CUDA_RETURN_IF_ERROR(cudaMemcpy(s.input_.data(), neutral.data(), neutral.size() * sizeof(float),
                                  cudaMemcpyHostToDevice));

  // One eager pass at every size first, largest first, so the backend's scratch and cuDNN
  // plans exist at their final addresses before any graph records them.
  std::vector<int64_t> sizes = options.graph_batch_sizes;
  std::sort(sizes.rbegin(), sizes.rend());
  for (const int64_t rows : sizes) RETURN_IF_ERROR(s.QueueForward(rows));
  RETURN_IF_ERROR(s.lease_->Synchronize());
  for (const int64_t rows : sizes) {
    absl::StatusOr<CudaGraph> graph =
        CudaGraph::Capture(s.lease_->stream(), [&s, rows]() { return s.QueueForward(rows); });
    if (!graph.ok()) {
      // Eager calls still serve this size: slower, never wrong.
      spdlog::warn("model '{}': no CUDA graph at batch size {}, running it eagerly: {}",
                   m.config().name(), rows, graph.status().ToString());
      continue;
    }
    s.graphs_.emplace(rows, *std::move(graph));
  }
  if (step_rows == 0) return instance;

  // State mode: every step row starts at the padding slot with zero ticks, so rows a padded
  // step computes but never returns read and write only that slot.
  s.slab_ = options.slab;
  s.state_slots_ = options.state_slots;
  s.max_step_rows_ = step_rows;
  ASSIGN_OR_RETURN(s.step_slots_, allocator->Allocate(step_rows * int64_t{sizeof(int32_t)}));
  ASSIGN_OR_RETURN(s.step_x_, allocator->Allocate(step_rows * F * int64_t{sizeof(float)}));
  ASSIGN_OR_RETURN(s.step_output_,
                   allocator->Allocate(step_rows * out_floats * int64_t{sizeof(float)}));
  const std::vector<int32_t> padding(static_cast<size_t>(step_rows),
                                     static_cast<int32_t>(options.state_slots));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(s.step_slots_.data(), padding.data(),
                                  padding.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(cudaMemset(s.step_x_.data(), 0, step_rows * F * sizeof(float)));
  std::vector<int64_t> step_sizes = options.step_graph_sizes;
  std::sort(step_sizes.rbegin(), step_sizes.rend());
  for (const int64_t rows : step_sizes) RETURN_IF_ERROR(s.QueueStep(rows));
  RETURN_IF_ERROR(s.lease_->Synchronize());
  for (const int64_t rows : step_sizes) {
    if (m.StepIsOneCall(*s.backend_, rows)) continue;  // one launch, no copies: Step runs it
    absl::StatusOr<CudaGraph> graph = CudaGraph::Capture(
        s.lease_->stream(), [&s, rows]() { return s.QueueStepWithCopies(rows); });
    if (!graph.ok()) {
      spdlog::warn("model '{}': no CUDA graph for steps of {} ticks, running them eagerly: {}",
                   m.config().name(), rows, graph.status().ToString());
      continue;
    }
    s.step_graphs_.emplace(rows, *std::move(graph));
  }
  // The warm-up steps wrote the padding slot only; it starts clean all the same.
  const int64_t S = m.StateFloats();
  CUDA_RETURN_IF_ERROR(
      cudaMemset(s.slab_->as<float>() + options.state_slots * S, 0, S * sizeof(float)));
  s.resident_ = options.resident;
  s.backend_->set_resident_step(s.resident_.get());
  return instance;
}

absl::Status CudaModelInstance::QueueStep(int64_t rows) {
  const ForwardPlacement placement{weights_->as<const float>(), data_ops_.get()};
  return model_->Step(*backend_, step_output_.as<float>(), step_x_.as<const float>(),
                      slab_->as<float>(), step_slots_.as<const int32_t>(), rows, *workspace_,
                      placement);
}

absl::Status CudaModelInstance::QueueStepWithCopies(int64_t rows) {
  const cudaStream_t stream = lease_->stream();
  const int64_t F = model_->num_features();
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_slots_.data(), staging_input_,
                                       static_cast<size_t>(rows) * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, stream));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(step_x_.data(), static_cast<float*>(staging_input_) + rows,
                                       static_cast<size_t>(rows * F) * sizeof(float),
                                       cudaMemcpyHostToDevice, stream));
  RETURN_IF_ERROR(QueueStep(rows));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(staging_output_, step_output_.data(),
                      static_cast<size_t>(rows * model_->num_outputs()) * sizeof(float),
                      cudaMemcpyDeviceToHost, stream));
  return absl::OkStatus();
}

absl::Status CudaModelInstance::CheckSlot(int32_t slot) const {
  if (slab_ == nullptr) return absl::UnimplementedError("this instance keeps no stream states");
  if (slot < 0 || slot >= state_slots_) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot ", slot, " outside [0, ", state_slots_, ")"));
  }
  return absl::OkStatus();
}

absl::Status CudaModelInstance::Step(const int32_t* slots, const uint8_t* zero, const float* x,
                                     int64_t rows, float* output) {
  if (slab_ == nullptr) return absl::UnimplementedError("this instance keeps no stream states");
  if (rows < 1 || rows > max_step_rows_) {
    return absl::InvalidArgumentError(
        absl::StrCat("step of ", rows, " ticks; this instance takes 1 to ", max_step_rows_));
  }
  const int64_t F = model_->num_features(), S = model_->StateFloats();
  // Few streams: one launch reads the staged slots and ticks from pinned host memory and
  // writes the forecasts back into it, so the step has no copies and needs no graph.
  const bool one_call = model_->StepIsOneCall(*backend_, rows);
  const auto graph = one_call ? step_graphs_.end() : step_graphs_.lower_bound(rows);
  const int64_t computed = graph != step_graphs_.end() ? graph->first : rows;
  const cudaStream_t stream = lease_->stream();
  const ScopedCudaDevice scoped(lease_->device());
  RETURN_IF_ERROR(scoped.status());
  // Staged as [slots (computed) | ticks (rows, F)]; the padding rows' slots point at the
  // padding slot, their ticks stay what the device buffer held.
  auto* staged_slots = static_cast<int32_t*>(staging_input_);
  float* staged_x = static_cast<float*>(staging_input_) + computed;
  for (int64_t r = 0; r < rows; ++r) {
    RETURN_IF_ERROR(CheckSlot(slots[r]));
    staged_slots[r] = slots[r];
  }
  std::fill(staged_slots + rows, staged_slots + computed, static_cast<int32_t>(state_slots_));
  std::memcpy(staged_x, x, static_cast<size_t>(rows * F) * sizeof(float));
  bool zeroed = false;
  for (int64_t r = 0; r < rows; ++r) {
    if (!zero[r]) continue;
    CUDA_RETURN_IF_ERROR(cudaMemsetAsync(slab_->as<float>() + int64_t{slots[r]} * S, 0,
                                         static_cast<size_t>(S) * sizeof(float), stream));
    zeroed = true;
  }
  // The resident kernel is not ordered after this stream's work: the new states must be there
  // before it may read them.
  if (zeroed && one_call && resident_ != nullptr) RETURN_IF_ERROR(lease_->Synchronize());
  const int64_t out_bytes = rows * model_->num_outputs() * int64_t{sizeof(float)};
  if (one_call) {
    const ForwardPlacement placement{weights_->as<const float>(), data_ops_.get()};
    RETURN_IF_ERROR(model_->Step(*backend_, static_cast<float*>(staging_output_), staged_x,
                                 slab_->as<float>(), staged_slots, rows, *workspace_, placement));
  } else if (graph != step_graphs_.end()) {
    // The graph copies the staged inputs in and the output out itself: one launch. Padding
    // rows' ticks are whatever the staging buffer held; they step the padding slot only.
    RETURN_IF_ERROR(graph->second.Launch(stream));
  } else {
    RETURN_IF_ERROR(QueueStepWithCopies(rows));
  }
  // A step the resident kernel ran has finished and queued nothing.
  if (!(one_call && backend_->TakeStepFinished())) RETURN_IF_ERROR(lease_->Synchronize());
  std::memcpy(output, staging_output_, static_cast<size_t>(out_bytes));
  return absl::OkStatus();
}

absl::Status CudaModelInstance::ReadState(int32_t slot, float* state) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const int64_t S = model_->StateFloats();
  const ScopedCudaDevice scoped(lease_->device());
  RETURN_IF_ERROR(scoped.status());
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(state, slab_->as<float>() + int64_t{slot} * S,
                                       static_cast<size_t>(S) * sizeof(float),
                                       cudaMemcpyDeviceToHost, lease_->stream()));
  return lease_->Synchronize();
}

absl::Status CudaModelInstance::WriteState(int32_t slot, const float* state) {
  RETURN_IF_ERROR(CheckSlot(slot));
  const int64_t S = model_->StateFloats();
  const ScopedCudaDevice scoped(lease_->device());
  RETURN_IF_ERROR(scoped.status());
  float* row = slab_->as<float>() + int64_t{slot} * S;
  if (state == nullptr) {
    CUDA_RETURN_IF_ERROR(
        cudaMemsetAsync(row, 0, static_cast<size_t>(S) * sizeof(float), lease_->stream()));
  } else {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(row, state, static_cast<size_t>(S) * sizeof(float),
                                         cudaMemcpyHostToDevice, lease_->stream()));
  }
  return lease_->Synchronize();
}

absl::Status CudaModelInstance::QueueForward(int64_t rows) {
  const ForwardPlacement placement{weights_->as<const float>(), data_ops_.get()};
  return model_->Forward(*backend_, output_.as<float>(), input_.as<const float>(), rows,
                         *workspace_, placement);
}

absl::Status CudaModelInstance::QueueRun(const float* input, int64_t rows,
                                         const DeviceRowsIo& device) {
  if (rows < 1 || rows > max_batch_size_) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch of ", rows, " rows; this instance takes 1 to ", max_batch_size_));
  }
  const int64_t in_bytes = rows * model_->input_floats() * int64_t{sizeof(float)};
  const int64_t out_bytes = rows * model_->num_outputs() * int64_t{sizeof(float)};
  const cudaStream_t stream = lease_->stream();
  const ScopedCudaDevice scoped(lease_->device());
  RETURN_IF_ERROR(scoped.status());

  // A batch staged in our pinned buffers (Batcher::Options::staging) is not copied again.
  if (input != staging_input_) std::memcpy(staging_input_, input, static_cast<size_t>(in_bytes));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(input_.data(), staging_input_, static_cast<size_t>(in_bytes),
                                       cudaMemcpyHostToDevice, stream));
  const int64_t row_in_bytes = in_bytes / rows;
  const int64_t row_out_bytes = out_bytes / rows;
  for (const DeviceRows& run : device.runs) {
    if (run.first_row < 0 || run.rows < 1 || run.first_row + run.rows > rows) {
      return absl::InvalidArgumentError(absl::StrCat("device rows [", run.first_row, ", ",
                                                     run.first_row + run.rows,
                                                     ") outside the batch of ", rows));
    }
    if (run.input == nullptr) continue;
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(input_.as<char>() + run.first_row * row_in_bytes,
                                         run.input, static_cast<size_t>(run.rows * row_in_bytes),
                                         cudaMemcpyDefault, stream));
  }
  if (device.non_finite_rows != nullptr) {
    RETURN_IF_ERROR(cuda::NonFiniteRowsLaunch(non_finite_.as<uint8_t>(), input_.as<float>(), rows,
                                              row_in_bytes / int64_t{sizeof(float)}, stream));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(non_finite_host_, non_finite_.data(),
                                         static_cast<size_t>(rows), cudaMemcpyDeviceToHost,
                                         stream));
  }
  const auto graph = graphs_.lower_bound(rows);
  if (graph != graphs_.end()) {
    RETURN_IF_ERROR(graph->second.Launch(stream));
  } else {
    RETURN_IF_ERROR(QueueForward(rows));
  }
  for (const DeviceRows& run : device.runs) {
    if (run.output == nullptr) continue;
    CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(run.output, output_.as<char>() + run.first_row * row_out_bytes,
                        static_cast<size_t>(run.rows * row_out_bytes), cudaMemcpyDefault, stream));
  }
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging_output_, output_.data(),
                                       static_cast<size_t>(out_bytes), cudaMemcpyDeviceToHost,
                                       stream));
  return absl::OkStatus();
}

absl::Status CudaModelInstance::Run(const float* input, int64_t rows, float* output) {
  return RunWithDeviceRows(input, rows, output, DeviceRowsIo{});
}

absl::Status CudaModelInstance::RunWithDeviceRows(const float* input, int64_t rows, float* output,
                                                  const DeviceRowsIo& device) {
  const absl::Status queued = QueueRun(input, rows, device);
  // Whatever was queued finishes before the buffers are used again.
  const absl::Status synced = lease_->Synchronize();
  RETURN_IF_ERROR(queued);
  RETURN_IF_ERROR(synced);
  if (output != staging_output_) {
    std::memcpy(output, staging_output_,
                static_cast<size_t>(rows * model_->num_outputs()) * sizeof(float));
  }
  ReportNonFinite(device.non_finite_rows, rows);
  return absl::OkStatus();
}

void CudaModelInstance::Start(const float* input, int64_t rows, float* output,
                              absl::AnyInvocable<void(absl::Status) &&> finish) {
  StartRun(input, rows, output, DeviceRowsIo{}, std::move(finish));
}

void CudaModelInstance::StartWithDeviceRows(const float* input, int64_t rows, float* output,
                                            const DeviceRowsIo& device,
                                            absl::AnyInvocable<void(absl::Status) &&> finish) {
  StartRun(input, rows, output, device, std::move(finish));
}

void CudaModelInstance::StartRun(const float* input, int64_t rows, float* output,
                                 const DeviceRowsIo& device,
                                 absl::AnyInvocable<void(absl::Status) &&> finish) {
  if (completions_ == nullptr) {
    std::move(finish)(RunWithDeviceRows(input, rows, output, device));
    return;
  }
  absl::Status queued = QueueRun(input, rows, device);
  if (queued.ok()) {
    const ScopedCudaDevice scoped(lease_->device());
    queued = scoped.status();
    if (queued.ok()) {
      if (const cudaError_t error = cudaEventRecord(done_event_, lease_->stream());
          error != cudaSuccess) {
        queued = absl::InternalError(
            absl::StrCat("cudaEventRecord failed: ", cudaGetErrorString(error)));
      }
    }
  }
  if (!queued.ok()) {
    lease_->Synchronize().IgnoreError();  // nothing queued may still use the buffers
    std::move(finish)(std::move(queued));
    return;
  }
  started_.store(true, std::memory_order_release);
  const size_t out_bytes = static_cast<size_t>(rows * model_->num_outputs()) * sizeof(float);
  completions_->Add(done_event_,
                    [this, output, out_bytes, rows, non_finite = device.non_finite_rows,
                     finish = std::move(finish)](absl::Status status) mutable {
                      if (status.ok()) {
                        if (output != staging_output_)
                          std::memcpy(output, staging_output_, out_bytes);
                        ReportNonFinite(non_finite, rows);
                      }
                      started_.store(false, std::memory_order_release);
                      std::move(finish)(std::move(status));
                    });
}

}  // namespace

CudaBackend::Options::Math CudaMathForPrecision(v1::Precision precision) {
  using Math = CudaBackend::Options::Math;
  switch (precision) {
    case v1::PRECISION_TF32:
      return Math::kTf32;
    case v1::PRECISION_BF16:
      return Math::kBf16;
    case v1::PRECISION_FP16:
      return Math::kFp16;
    default:
      return Math::kFp32;
  }
}

absl::StatusOr<std::unique_ptr<CudaExecutionDevice>> CudaExecutionDevice::Create(
    const Options& options) {
  if (options.instances_per_model < 1) {
    return absl::InvalidArgumentError("CudaExecutionDevice: instances_per_model must be >= 1");
  }
  if (options.workspace_bytes_per_instance < 0 || options.memory_limit_bytes < 0) {
    return absl::InvalidArgumentError("CudaExecutionDevice: negative byte count");
  }
  if (options.resident_step_idle_us < 0 || options.resident_step_max_run_us < 1) {
    return absl::InvalidArgumentError(
        "CudaExecutionDevice: resident_step_idle_us must be >= 0 and resident_step_max_run_us >= "
        "1");
  }
  CudaAllocator::Options allocator_options;
  allocator_options.device = options.device;
  allocator_options.limit_bytes = options.memory_limit_bytes;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaAllocator> allocator,
                   CudaAllocator::Create(allocator_options));
  DeviceScheduler::Options scheduler_options;
  scheduler_options.num_workers = options.instances_per_model;
  const int device = options.device;
  scheduler_options.on_worker_start = [device](int worker) {
    if (const cudaError_t error = cudaSetDevice(device); error != cudaSuccess) {
      spdlog::error("cuda:{} worker {}: cudaSetDevice failed: {}", device, worker,
                    cudaGetErrorString(error));
    }
  };
  ASSIGN_OR_RETURN(std::unique_ptr<DeviceScheduler> scheduler,
                   DeviceScheduler::Create(scheduler_options));
  return std::unique_ptr<CudaExecutionDevice>(
      new CudaExecutionDevice(options, std::move(allocator), std::move(scheduler)));
}

CudaExecutionDevice::CudaExecutionDevice(const Options& options,
                                         std::unique_ptr<CudaAllocator> allocator,
                                         std::unique_ptr<DeviceScheduler> scheduler)
    : options_(options),
      id_(absl::StrCat("cuda:", options.device)),
      allocator_(std::move(allocator)),
      scheduler_(std::move(scheduler)) {
  if (options.completion_thread) {
    completions_ = std::make_unique<CudaCompletionThread>(options.device);
  }
}

CudaExecutionDevice::~CudaExecutionDevice() { scheduler_->Shutdown(); }

absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CudaExecutionDevice::CreateInstances(
    std::shared_ptr<const Forecaster> model, const InstanceOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateInstances: no model");
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError("CreateInstances: max_batch_size must be >= 1");
  }
  const ScopedCudaDevice scoped(options_.device);
  RETURN_IF_ERROR(scoped.status());
  const ParameterArena& arena = model->parameters();
  ASSIGN_OR_RETURN(DeviceBuffer weights,
                   allocator_->Allocate(arena.size() * int64_t{sizeof(float)}));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(weights.data(), arena.data(), arena.size() * sizeof(float),
                                  cudaMemcpyHostToDevice));
  const auto shared_weights = std::make_shared<const DeviceBuffer>(std::move(weights));

  RETURN_IF_ERROR(CheckStateOptions(*model, options));
  CudaModelInstance::Options instance_options;
  instance_options.max_batch_size = options.max_batch_size;
  if (options.state_slots > 0) {
    // One extra row: the slot padded step rows read and write.
    const int64_t slab_floats = (options.state_slots + 1) * model->StateFloats();
    ASSIGN_OR_RETURN(DeviceBuffer slab, allocator_->Allocate(slab_floats * int64_t{sizeof(float)}));
    CUDA_RETURN_IF_ERROR(cudaMemset(slab.data(), 0, slab_floats * sizeof(float)));
    instance_options.slab = std::make_shared<DeviceBuffer>(std::move(slab));
    instance_options.state_slots = options.state_slots;
    instance_options.max_step_rows = options.max_step_rows;
    if (options_.resident_step_idle_us > 0) {
      ResidentStep::Options resident;
      resident.device = options_.device;
      resident.turn = resident_turn_.get();
      resident.idle_us = options_.resident_step_idle_us;
      resident.max_run_us = options_.resident_step_max_run_us;
      resident.keep_alive = std::make_shared<
          std::pair<std::shared_ptr<const DeviceBuffer>, std::shared_ptr<DeviceBuffer>>>(
          shared_weights, instance_options.slab);
      ASSIGN_OR_RETURN(std::unique_ptr<ResidentStep> step, ResidentStep::Create(resident));
      instance_options.resident = std::move(step);
    }
    if (options_.use_graphs) {
      ExecutionDevice::InstanceOptions step_sizes;
      step_sizes.max_batch_size = options.max_step_rows;
      instance_options.step_graph_sizes = FixedBatchSizes(step_sizes);
    }
  }
  if (options_.use_graphs) instance_options.graph_batch_sizes = FixedBatchSizes(options);
  instance_options.math = CudaMathForPrecision(model->config().precision());
  const v1::Precision precision = model->config().precision();
  instance_options.compute = absl::StrCat(PrecisionName(precision), " on ", id_);
  instance_options.workspace_bytes = options_.workspace_bytes_per_instance;
  instance_options.completions = completions_.get();
  std::vector<std::unique_ptr<ModelInstance>> instances;
  for (int i = 0; i < options_.instances_per_model; ++i) {
    ASSIGN_OR_RETURN(
        std::unique_ptr<CudaModelInstance> instance,
        CudaModelInstance::Create(model, shared_weights, allocator_.get(), instance_options));
    instances.push_back(std::move(instance));
  }
  spdlog::info("model '{}' on {}: {} instances, {}, CUDA graphs at batch sizes [{}]",
               model->config().name(), id_, instances.size(),
               v1::Precision_Name(model->config().precision()),
               absl::StrJoin(instance_options.graph_batch_sizes, ", "));
  return instances;
}

}  // namespace forecastd
