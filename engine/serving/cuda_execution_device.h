// One GPU as a serving device: its caching allocator, a DeviceScheduler whose workers (one
// per instance slot, each thread bound to the GPU) run the batches, and the factory of CUDA
// model instances. A version's weights are uploaded once per GPU and shared by its instances.
// Each instance owns a stream (with its cuBLAS and cuDNN handles, workspace and pinned staging
// buffers), a CudaBackend on it, device buffers for max_batch_size rows and, unless graphs are
// off, one CUDA graph of the whole forward pass per size of FixedBatchSizes(): a batch of r
// rows is copied in through the pinned buffer, runs the graph of the smallest captured size
// >= r (the padding rows hold earlier windows and are never copied out), and its r forecasts
// come back the same way. Rows whose windows or forecasts are in a client's device memory (CUDA
// shared memory: ModelInstance::RunWithDeviceRows) are copied device to device instead, and
// their windows checked for non-finite values on the GPU. A state-mode step of few streams,
// where the model's step is one backend call (Forecaster::StepIsOneCall), is one kernel launch
// that reads the staged ticks from the pinned buffer and writes the forecasts into it (or, up to
// kResidentStepMaxStreams streams, a step posted to the version's resident kernel: no launch);
// larger steps run a captured step graph with copies. A batch that runs inline on the thread that
// received its request is started there (ModelInstance::Start) and completed by the GPU's
// completion thread, which polls the batch's event and writes the replies. After an instance is
// made, its batches allocate no device memory. Each model computes in the precision its config asks
// for (CudaMathForPrecision). Built with CUDA only. Thread-safe.
#ifndef FORECASTD_ENGINE_SERVING_CUDA_EXECUTION_DEVICE_H_
#define FORECASTD_ENGINE_SERVING_CUDA_EXECUTION_DEVICE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/resident_step.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_instance.h"

namespace forecastd {

class CudaCompletionThread;

// The CUDA backend's math for a model config's precision: FP32 and unspecified -> kFp32, TF32
// -> kTf32, BF16 -> kBf16, FP16 -> kFp16.
CudaBackend::Options::Math CudaMathForPrecision(v1::Precision precision);

class CudaExecutionDevice final : public ExecutionDevice {
 public:
  struct Options {
    // The CUDA ordinal.
    int device = 0;
    // Instances of every version on this GPU, and so the scheduler's workers: batches of one
    // model that run at once. Two let one batch's copies overlap another's kernels. >= 1.
    int instances_per_model = 2;
    // Capture a CUDA graph per batch size at load; false: every batch runs the forward pass
    // eagerly at its own size (no padding).
    bool use_graphs = true;
    // Device workspace of each instance's stream (cuBLAS's and cuDNN's). >= 0.
    int64_t workspace_bytes_per_instance = int64_t{32} << 20;
    // Bytes the GPU's allocator may hold (CudaAllocator::Options::limit_bytes); 0: no limit.
    int64_t memory_limit_bytes = 0;
    // A batch that runs inline on the thread that received its request (Batcher's
    // start_batch) is queued on the GPU and that thread returns; one thread of this GPU's
    // notices the batch's end and writes the replies. false: the receiving thread waits for
    // the GPU and replies itself.
    bool completion_thread = true;
    // State-mode steps of up to kResidentStepMaxStreams streams run on a resident kernel
    // (backends/cuda/resident_step.h), one model version's at a time on this GPU, which leaves
    // after this long without a step (and relaunches at the next); 0: every step is a launch.
    int64_t resident_step_idle_us = 2000;
    // ... and at the latest this long after it started. >= 1.
    int64_t resident_step_max_run_us = 20000;
  };

  // INVALID_ARGUMENT for bad options; the CUDA error when the GPU cannot be used.
  static absl::StatusOr<std::unique_ptr<CudaExecutionDevice>> Create(const Options& options);
  // Shuts the scheduler down (running batches finish). Every instance must be gone before.
  ~CudaExecutionDevice() override;

  const std::string& id() const override { return id_; }
  DeviceScheduler& scheduler() override { return *scheduler_; }
  // Uploads the weights once, then makes the instances (streams, buffers, warm-up at every
  // batch size, graph capture). RESOURCE_EXHAUSTED when the GPU's memory runs out.
  absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CreateInstances(
      std::shared_ptr<const Forecaster> model, const InstanceOptions& options) override;

  // The GPU's allocator: for tests and metrics, and for training on this GPU, which shares
  // its memory limit.
  const CudaAllocator& allocator() const { return *allocator_; }
  CudaAllocator& allocator() { return *allocator_; }

 private:
  CudaExecutionDevice(const Options& options, std::unique_ptr<CudaAllocator> allocator,
                      std::unique_ptr<DeviceScheduler> scheduler);

  // Constant after construction. The destructor shuts the scheduler down first, which waits
  // for batches still completing on the completion thread; then the members go in reverse.
  const Options options_;
  const std::string id_;
  const std::unique_ptr<CudaAllocator> allocator_;
  std::unique_ptr<CudaCompletionThread> completions_;  // nullptr: Options::completion_thread off
  // Which version's resident step kernel may run on this GPU (every instance's ResidentStep
  // refers to it, so it outlives them).
  const std::unique_ptr<ResidentStep::Turn> resident_turn_ = std::make_unique<ResidentStep::Turn>();
  const std::unique_ptr<DeviceScheduler> scheduler_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_CUDA_EXECUTION_DEVICE_H_
