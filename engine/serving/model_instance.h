// Where a loaded model version runs. A ModelInstance is one replica of one version on one
// device: it turns a batch of raw host windows into raw host forecasts, with whatever memory,
// streams and captured graphs that device needs. An ExecutionDevice is a device the registry
// serves on: its DeviceScheduler (one worker per instance slot) and the factory that makes a
// version's instances, one per worker, so that the batch running on worker w uses instance w.
// The CPU's device is CpuExecutionDevice (below); a GPU's is CudaExecutionDevice
// (engine/serving/cuda_execution_device.h, CUDA builds only).
// Thread-safety: an instance is thread-compatible (its worker runs one batch at a time); an
// ExecutionDevice is thread-safe.
#ifndef FORECASTD_ENGINE_SERVING_MODEL_INSTANCE_H_
#define FORECASTD_ENGINE_SERVING_MODEL_INSTANCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/any_invocable.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "engine/models/forecaster.h"
#include "engine/serving/device_memory.h"
#include "engine/serving/device_scheduler.h"

namespace forecastd {

class ModelInstance {
 public:
  virtual ~ModelInstance() = default;
  // output (rows, num_outputs()) raw forecasts from input (rows, input_floats()) raw input
  // records (the windows, for a model without covariates or series), both host memory; rows in
  // [1, the max_batch_size the instance was made for] (INVALID_ARGUMENT otherwise). Returns once
  // output is written.
  virtual absl::Status Run(const float* input, int64_t rows, float* output) = 0;
  // Run's work, started: calls `finish` exactly once with Run's status when `output` is
  // written, either before returning (this default, which is Run) or later on another thread
  // (a GPU instance whose device's completion thread notices the end of the batch). `input`
  // and `output` must stay valid, and the instance gets no other call, until then.
  virtual void Start(const float* input, int64_t rows, float* output,
                     absl::AnyInvocable<void(absl::Status) &&> finish);
  // Whether the instance reads and writes rows in device memory itself (RunWithDeviceRows,
  // StartWithDeviceRows): an instance on a GPU, which copies them between that memory and its
  // own without crossing host memory. false: the batcher copies them through host memory.
  virtual bool takes_device_rows() const { return false; }
  // Run and Start of a batch some of whose rows are in device memory (DeviceRowsIo): their
  // windows are read from there instead of `input`, their forecasts written there as well as
  // to `output`, and `device.non_finite_rows` (if set) gets the batch's non-finite flags
  // (DeviceRowsIo). Both only where takes_device_rows(); UNIMPLEMENTED otherwise (this default).
  virtual absl::Status RunWithDeviceRows(const float* input, int64_t rows, float* output,
                                         const DeviceRowsIo& device);
  virtual void StartWithDeviceRows(const float* input, int64_t rows, float* output,
                                   const DeviceRowsIo& device,
                                   absl::AnyInvocable<void(absl::Status) &&> finish);
  // Host buffers of max_batch_size rows that Run takes as input and output without copying
  // them (a GPU instance's pinned staging buffers, a CPU instance's own arrays): a batch
  // staged in them crosses host memory once each way (Batcher::Options::staging).
  virtual float* input_staging() = 0;   // (max_batch_size, input_floats)
  virtual float* output_staging() = 0;  // (max_batch_size, num_outputs)
  // The batch size the device actually computes for `rows` rows: rows itself, or the captured
  // size a GPU instance pads it to.
  virtual int64_t ComputedRows(int64_t rows) const { return rows; }
  // The batch rows from which a row costs about the least (Batcher::Options::min_spread_rows);
  // 1 where more rows cost about as much each.
  virtual int64_t efficient_batch_rows() const { return 1; }

  // --- State mode (InstanceOptions::state_slots > 0): the version's tick streams keep their
  // recurrent states in one state slab on the device, shared by all its instances, one row of
  // Forecaster::StateFloats() floats per slot. A slot is used by one call at a time.
  // output (rows, num_outputs) raw forecasts after one time step of x (rows, F) raw ticks for
  // the streams at `slots` (rows distinct slots in [0, state_slots)), whose states are read and
  // replaced in the slab; a row whose `zero` is nonzero starts from a zero state. All host
  // memory; rows in [1, max_step_rows]. Returns once output is written. UNIMPLEMENTED without a
  // slab.
  virtual absl::Status Step(const int32_t* slots, const uint8_t* zero, const float* x, int64_t rows,
                            float* output);
  // state (StateFloats floats, host) = the state at `slot`, and the reverse (nullptr: zeros).
  virtual absl::Status ReadState(int32_t slot, float* state);
  virtual absl::Status WriteState(int32_t slot, const float* state);

  // How the instance computes, for operators: its precision and instruction set ("fp32 on
  // avx2", "bf16 on avx512_core_amx", "bf16 on cuda:0"), and why where that is not what the
  // model's config asks.
  virtual std::string compute() const = 0;
};

class ExecutionDevice {
 public:
  struct InstanceOptions {
    // Rows in one batch at most, >= 1.
    int64_t max_batch_size = 1;
    // The batcher's preferred batch sizes, each in [1, max_batch_size]; a device that
    // computes fixed batch sizes (captured CUDA graphs) includes them among its sizes.
    std::vector<int64_t> preferred_batch_sizes;
    // State mode: stream slots of the version's state slab (0: no slab; Step is unavailable),
    // and the ticks one Step computes at most (>= 1 with a slab). The device makes one slab per
    // CreateInstances call, shared by the instances it returns.
    int64_t state_slots = 0;
    int64_t max_step_rows = 0;
  };

  virtual ~ExecutionDevice() = default;
  // "cpu" or "cuda:<index>", as `--devices` and a config's instances.devices spell it.
  virtual const std::string& id() const = 0;
  // Runs the batches of every version on this device. Lives as long as the device.
  virtual DeviceScheduler& scheduler() = 0;
  // scheduler().num_workers() instances of `model` (instances[w] for worker w), ready to run
  // batches of up to options.max_batch_size rows. The instances keep `model` alive and must
  // be destroyed before the device. RESOURCE_EXHAUSTED when the device's memory cannot hold
  // them; INVALID_ARGUMENT for bad options.
  virtual absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CreateInstances(
      std::shared_ptr<const Forecaster> model, const InstanceOptions& options) = 0;
};

// "fp32" (also for PRECISION_UNSPECIFIED), "bf16", "fp16", "tf32": how compute() names it.
std::string PrecisionName(v1::Precision precision);

// The batch sizes a device that computes fixed sizes (captured CUDA graphs) prepares for
// `options`: the powers of two below max_batch_size, the preferred sizes and max_batch_size,
// ascending, each once. A batch of r rows then runs at the smallest of them >= r: fewer than
// 2r rows.
std::vector<int64_t> FixedBatchSizes(const ExecutionDevice::InstanceOptions& options);

// INVALID_ARGUMENT when options ask for a state slab that `model` cannot use (no state mode) or
// is malformed; for ExecutionDevice implementations.
absl::Status CheckStateOptions(const Forecaster& model,
                               const ExecutionDevice::InstanceOptions& options);

// The CPU: every instance runs Forecaster::Forward on host memory with one shared Backend and
// a Workspace of its own. A model whose config asks for PRECISION_BF16 runs on `bf16_backend`
// where there is one (a CPU with AVX512-BF16 or AMX), any other model, and a bf16 one without
// it, on `backend` (fp32), and its instances' compute() says why.
class CpuExecutionDevice final : public ExecutionDevice {
 public:
  // `backend`, `scheduler` and `bf16_backend` (may be null) are not owned and must outlive
  // the device. `instances` per version: 0 means scheduler->num_workers(); otherwise at least
  // that many (a caller that hands workers out itself may want more).
  CpuExecutionDevice(Backend* backend, DeviceScheduler* scheduler, int instances = 0,
                     Backend* bf16_backend = nullptr);

  const std::string& id() const override { return id_; }
  DeviceScheduler& scheduler() override { return *scheduler_; }
  absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CreateInstances(
      std::shared_ptr<const Forecaster> model, const InstanceOptions& options) override;

 private:
  const std::string id_ = "cpu";
  Backend* const backend_;
  DeviceScheduler* const scheduler_;
  const int instances_;
  Backend* const bf16_backend_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_MODEL_INSTANCE_H_
