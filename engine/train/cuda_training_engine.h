// Training steps on one GPU (a TrainingEngine): the weights, gradients, optimiser state, the
// training tape and the batch all live in device memory. A step copies the batch in through
// pinned memory, then queues ForwardTrain, the loss kernel, Backward, gradient clipping and the
// optimiser's kernels on one stream, and copies back only the loss (the step's one
// synchronisation). The matrix products run in the arithmetic TrainingConfig.precision asks
// for (bf16 mixed precision: bf16 products, fp32 accumulation, fp32 master weights and
// state). Dropout masks are drawn on the device from the streams the CPU draws, so a seed gives
// the CPU's masks. Built with CUDA only. Thread-compatible: one training thread.
#ifndef FORECASTD_ENGINE_TRAIN_CUDA_TRAINING_ENGINE_H_
#define FORECASTD_ENGINE_TRAIN_CUDA_TRAINING_ENGINE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "engine/train/data_parallel.h"
#include "engine/train/training_engine.h"

namespace forecastd {

struct CudaTrainingEngineOptions {
  // The CUDA ordinal.
  int device = 0;
  // The GPU's allocator, shared with its serving instances so one memory limit covers both
  // (not owned; must outlive the engine). nullptr: an allocator of the engine's own.
  CudaAllocator* allocator = nullptr;
  // cuBLAS's and cuDNN's device workspace on the engine's stream. >= 0.
  int64_t workspace_bytes = int64_t{32} << 20;
  // The backend's chunk of attention scores (CudaBackend::Options::attention_scratch_bytes).
  int64_t attention_scratch_bytes = CudaBackend::Options{}.attention_scratch_bytes;
  // As one rank of a data-parallel job (StepShard): the gradients are summed over the ranks in
  // buckets of at least this many bytes, each queued on a stream of its own as soon as the
  // backward pass has finished it (Forecaster::GradientBlockStarts), so the sums overlap the
  // rest of the backward. 0, or a model whose backward reports no blocks: one sum of the whole
  // arena after the backward. Every rank of a job must use the same value. 0 by default: on
  // two H200s the buckets were no faster (bench/RESULTS.md).
  int64_t gradient_bucket_bytes = 0;
};

// INVALID_ARGUMENT for precision FP16 (it would need loss scaling); FAILED_PRECONDITION for
// stateful training (TrainingConfig.stateful), which runs on the CPU only; RESOURCE_EXHAUSTED when
// the weights, gradients and optimiser state do not fit; the CUDA error when the GPU cannot be
// used. The first Step allocates the tape for its batch size; a later, larger batch grows it.
absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeCudaTrainingEngine(
    const CudaTrainingEngineOptions& options, Forecaster& model, Optimizer& optimizer,
    const TrainingLoss& loss, const v1::TrainingConfig& config);

// The engine factory of a job on the GPUs `ranks` describe (one CudaTrainingEngineOptions each):
// one entry, that GPU's engine; several, a data-parallel engine (data_parallel.h) with one rank
// per GPU, joined over NCCL in a fresh group per engine, whose ranks give up on the others
// after `collective_timeout` (joining, the first step) and then `collective_timeout` beyond the
// slowest step seen (DataParallelOptions::collective_margin). Empty `ranks`: every engine it
// makes is INVALID_ARGUMENT.
// With `group`, the GPUs are its ranks in a group spread over several processes; always a
// data-parallel engine then, even of one local rank.
TrainingEngineFactory MakeGpuTrainingEngineFactory(std::vector<CudaTrainingEngineOptions> ranks,
                                                   absl::Duration collective_timeout,
                                                   std::optional<RankGroup> group = std::nullopt);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_CUDA_TRAINING_ENGINE_H_
