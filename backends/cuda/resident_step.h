// A tick-stream step kept resident on the GPU. A state-mode step of a few streams
// (RecurrentStepForecast's one launch) costs a launch and a synchronisation on top of its
// kernel: on an H100 about 22 us from the launch call to the host seeing it end, of which the
// kernel is 12. A ResidentStep keeps that kernel running between steps
// (kernels/cuda/recurrent_step.h's LaunchResidentStep) on a stream of its own: a step is
// written into a mailbox in pinned host memory and the host spins until the kernel posts the
// step's number back, so no CUDA call sits between a tick and its forecast.
//
// One ResidentStep serves one model version on one GPU (its weights and state slab); the
// instances of that version share it and a step runs on it only when nobody else's does (the
// others launch as usual). The resident kernel keeps a cluster of SMs busy polling the
// mailbox, so a GPU runs at most one at a time (a Turn per GPU): a ResidentStep launches its
// kernel only when no other's kernel is running there. The kernel leaves on its own after
// idle_us without a step (the GPU is then wholly free again) and after max_run_us in any case
// (a device-wide synchronisation elsewhere, such as cudaFree, waits for it at most that long);
// the host relaunches it at the next step, and stops and relaunches it itself before either
// limit is near, so that a step is never posted to a kernel about to leave.
//
// Thread-safe; one step at a time (TryRun returns false to a second caller meanwhile).
#ifndef FORECASTD_BACKENDS_CUDA_RESIDENT_STEP_H_
#define FORECASTD_BACKENDS_CUDA_RESIDENT_STEP_H_

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>
#include <memory>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "kernels/cuda/recurrent_step.h"
#include "kernels/ref/recurrent.h"

namespace forecastd {

class ResidentStep {
 public:
  // One GPU's turn at running a resident kernel. Outlives every ResidentStep given it.
  class Turn {
   private:
    friend class ResidentStep;
    absl::Mutex mu_;
    ResidentStep* holder_ ABSL_GUARDED_BY(mu_) = nullptr;
  };

  struct Options {
    int device = 0;
    Turn* turn = nullptr;
    // The kernel leaves after this long without a step. >= 1.
    int64_t idle_us = 2000;
    // ... and this long after it started, steps or not. >= 1.
    int64_t max_run_us = 20000;
    // Held until the kernel has left for good (the weights and the slab it reads), or nullptr.
    std::shared_ptr<const void> keep_alive;
  };

  // What a step computes, fixed while a kernel runs (a step with other values stops it and
  // launches another): RecurrentStepForecast's arguments but the streams'.
  struct Model {
    float* slab = nullptr;
    // Layer l's in weights[l], l < layers (a fixed array: a step allocates nothing).
    std::array<ref::RecurrentDirectionWeights, cuda::kResidentStepMaxLayers> weights = {};
    int layers = 0;
    cuda::StepCell cell = cuda::StepCell::kLstm;
    int64_t I = 0;
    int64_t H = 0;
    cuda::StepForecast forecast;
  };

  static absl::StatusOr<std::unique_ptr<ResidentStep>> Create(const Options& options);
  // Stops the kernel and waits for it to leave.
  ~ResidentStep();
  ResidentStep(const ResidentStep&) = delete;
  ResidentStep& operator=(const ResidentStep&) = delete;

  // Runs one step of B streams of `model` on the resident kernel, launching it first if it is
  // not running, and waits for it: true. y, slots and x as RecurrentStepForecast's, in host
  // memory (copied into and out of the mailbox). false, having computed nothing: B is outside [1,
  // kResidentStepMaxStreams], the sizes do not fit the kernel, another step is running on
  // this ResidentStep, another ResidentStep's kernel runs on this GPU, or the kernel could not
  // be launched at all (logged once; this ResidentStep stays off); the caller then launches the
  // step as usual. An error when the kernel failed (the GPU's sticky error).
  absl::StatusOr<bool> TryRun(const Model& model, float* y, const int32_t* slots, const float* x,
                              int64_t B);

  // Steps run on the kernel, and kernels launched, since Create.
  int64_t steps() const;
  int64_t launches() const;
  // The last step's time in the kernel from its seeing the step (ns): to the end of the
  // step's computation, and to just before the forecasts go out (ResidentStepMailbox).
  std::pair<int64_t, int64_t> last_kernel_ns() const;
  // Whether a kernel of this ResidentStep is on the GPU now (a query of its stream).
  bool kernel_running() const { return KernelRunning(); }

 private:
  ResidentStep(const Options& options, cudaStream_t stream, cuda::ResidentStepMailbox* box);

  absl::StatusOr<bool> TryRunLocked(const Model& model, float* y, const int32_t* slots,
                                    const float* x, int64_t B) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Whether the kernel has not left yet (a query of its stream).
  bool KernelRunning() const;
  // Sets the mailbox's stop flag and waits for the kernel to leave.
  absl::Status StopLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the GPU's turn and launches the kernel for `model`: false when another ResidentStep's
  // kernel runs.
  absl::StatusOr<bool> LaunchLocked(const Model& model) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  const cudaStream_t stream_;
  cuda::ResidentStepMailbox* const box_;  // pinned host memory

  mutable absl::Mutex mu_;
  // Whether a kernel was launched and has not been seen to leave; the model it computes.
  bool launched_ ABSL_GUARDED_BY(mu_) = false;
  Model running_ ABSL_GUARDED_BY(mu_);
  int64_t launched_at_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_step_ns_ ABSL_GUARDED_BY(mu_) = 0;
  // The request posted last (the kernel's `seen` at a launch), and the step number in it.
  uint32_t posted_ ABSL_GUARDED_BY(mu_) = 0;
  uint32_t step_number_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_step_ns_gpu_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t last_kernel_ns_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t steps_ ABSL_GUARDED_BY(mu_) = 0;
  // The kernel could not be launched (logged once): every step is the caller's.
  bool disabled_ ABSL_GUARDED_BY(mu_) = false;
  int64_t launches_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_CUDA_RESIDENT_STEP_H_
