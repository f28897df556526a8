#include "engine/train/cuda_training_engine.h"

#include <cuda_runtime.h>

#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/instance_streams.h"
#include "backends/cuda/nccl_communicator.h"
#include "engine/models/cuda_data_ops.h"
#include "engine/serving/cuda_execution_device.h"
#include "engine/train/data_parallel.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/fill.h"
#include "kernels/cuda/loss.h"
#include "kernels/cuda/optimizer.h"

namespace forecastd {
namespace {

constexpr int64_t kFloat = sizeof(float);

// The tape's buffers, from the GPU's allocator. A buffer is given back only between steps (the
// engine synchronises at the end of each), so nothing queued still reads it.
class DeviceTapeMemory final : public TapeMemory {
 public:
  explicit DeviceTapeMemory(CudaAllocator* allocator) : allocator_(allocator) {}

  absl::StatusOr<float*> Allocate(int64_t n) override {
    ASSIGN_OR_RETURN(DeviceBuffer buffer, allocator_->Allocate(n * kFloat));
    float* const data = buffer.as<float>();
    buffers_.emplace(data, std::move(buffer));
    return data;
  }
  void Free(float* buffer) override { buffers_.erase(buffer); }

 private:
  CudaAllocator* const allocator_;
  absl::flat_hash_map<float*, DeviceBuffer> buffers_;
};

class CudaTrainingEngine final : public TrainingEngine {
 public:
  CudaTrainingEngine(Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss, int device)
      : model_(model), optimizer_(optimizer), loss_(loss), device_(device) {}

  ~CudaTrainingEngine() override {
    if (lease_.has_value()) lease_->Synchronize().IgnoreError();
    if (reduce_stream_ != nullptr) {
      cudaStreamSynchronize(reduce_stream_);
      cudaStreamDestroy(reduce_stream_);
    }
    if (backward_done_ != nullptr) cudaEventDestroy(backward_done_);
    if (reduced_ != nullptr) cudaEventDestroy(reduced_);
  }

  absl::Status Init(const CudaTrainingEngineOptions& options, const v1::TrainingConfig& config);

  std::string device() const override { return absl::StrCat("cuda:", device_); }
  absl::Status Push() override;
  absl::Status Pull() override;
  absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> dropout_seed) override;
  absl::StatusOr<double> StepShard(const float* x, const float* y, int64_t B, float lr,
                                   std::optional<uint64_t> dropout_seed, Communicator& communicator,
                                   float share) override;
  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override;
  absl::Status BroadcastState(Communicator& communicator) override;
  absl::Status HostCollective(float* values, int64_t n, Communicator& communicator,
                              std::optional<float> sum_scale) override;
  int64_t steps_taken() const override { return steps_; }

 private:
  // Copies B windows and their targets in (through pinned memory) and queues the forward pass
  // and the loss with its gradient; the loss lands in loss_.
  absl::Status QueueForwardAndLoss(const float* x, const float* y, int64_t B);
  // Queues clipping and the optimiser's update of every trainable range.
  absl::Status QueueUpdate(float lr);
  // A whole step: forward and loss, backward, update.
  absl::Status QueueStep(const float* x, const float* y, int64_t B, float lr,
                         std::optional<uint64_t> dropout_seed);
  // A data-parallel rank's step: forward and loss (none for B = 0), backward, the gradient
  // summed over `communicator`'s ranks weighted by `share`, update.
  absl::Status QueueShardStep(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> dropout_seed, Communicator& communicator,
                              float share);
  // The arena offsets where a data-parallel step's bucketed sums start, in the order they are
  // queued: where the backward's finished blocks (GradientBlockStarts) first add up to
  // gradient_bucket_bytes. Empty: one sum after the backward.
  std::vector<int64_t> BucketPlan() const;
  // Queues the sum over the ranks of gradients [begin, end) on reduce_stream_, after what the
  // step's stream has queued so far.
  absl::Status QueueBucket(Communicator& communicator, int64_t begin, int64_t end, float share);
  // Queues the copy of the loss into pinned memory, which it returns; the loss is there once
  // the stream has reached the copy.
  absl::StatusOr<const void*> QueueLossCopy();
  // The loss once `queued` is OK; otherwise waits for what was queued and returns the error.
  // With a `communicator`, its Wait comes first, so a lost rank ends the wait.
  absl::StatusOr<double> Finish(const absl::Status& queued, Communicator* communicator = nullptr,
                                bool has_loss = true);
  absl::Status Upload(const DeviceBuffer& to, const float* from, int64_t n);
  absl::Status Download(float* to, const DeviceBuffer& from, int64_t n);

  Forecaster& model_;
  Optimizer& optimizer_;
  const TrainingLoss& loss_;
  const int device_;
  int64_t steps_ = 0;
  ref::LossSpec loss_spec_;  // quantiles point into quantiles_ (device)

  // Declared in the order they are made; destroyed in reverse (the allocator last).
  std::unique_ptr<CudaAllocator> own_allocator_;
  CudaAllocator* allocator_ = nullptr;
  std::unique_ptr<InstanceStreams> streams_;
  std::optional<StreamLease> lease_;
  std::unique_ptr<CudaBackend> backend_;
  std::unique_ptr<CudaDataOps> data_ops_;
  DeviceBuffer params_, grads_, m_, v_;  // arena-sized; m_ and v_ as the optimiser keeps them
  DeviceBuffer quantiles_, loss_value_, norm_sq_;
  int64_t batch_capacity_ = 0;
  DeviceBuffer x_, y_, pred_, dpred_;  // batch_capacity_ windows
  std::unique_ptr<DeviceTapeMemory> tape_memory_;
  std::optional<TrainingTape> tape_;
  // HostCollective's device copy of the values.
  DeviceBuffer share_;
  int64_t share_capacity_ = 0;
  // Data-parallel steps with bucketed sums: the bucket size, the stream the sums run on (made
  // on first use), and events ordering it after the backward's blocks and the update after it.
  int64_t bucket_bytes_ = 0;
  cudaStream_t reduce_stream_ = nullptr;
  cudaEvent_t backward_done_ = nullptr;
  cudaEvent_t reduced_ = nullptr;
};

absl::Status CudaTrainingEngine::Init(const CudaTrainingEngineOptions& options,
                                      const v1::TrainingConfig& config) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  allocator_ = options.allocator;
  bucket_bytes_ = options.gradient_bucket_bytes;
  if (allocator_ == nullptr) {
    CudaAllocator::Options allocator_options;
    allocator_options.device = device_;
    ASSIGN_OR_RETURN(own_allocator_, CudaAllocator::Create(allocator_options));
    allocator_ = own_allocator_.get();
  }
  InstanceStreams::Options stream_options;
  stream_options.device = device_;
  stream_options.num_streams = 1;
  stream_options.workspace_bytes = options.workspace_bytes;
  ASSIGN_OR_RETURN(streams_, InstanceStreams::Create(stream_options, allocator_));
  lease_.emplace(streams_->Lease());
  CudaBackend::Options backend_options;
  backend_options.math = CudaMathForPrecision(config.precision());
  backend_options.attention_scratch_bytes = options.attention_scratch_bytes;
  ASSIGN_OR_RETURN(backend_, CudaBackend::Create(lease_->context(), allocator_, backend_options));
  data_ops_ = std::make_unique<CudaDataOps>(lease_->stream());

  const int64_t n = model_.parameters().size();
  ASSIGN_OR_RETURN(params_, allocator_->Allocate(n * kFloat));
  ASSIGN_OR_RETURN(grads_, allocator_->Allocate(n * kFloat));
  RETURN_IF_ERROR(cuda::FillLaunch(grads_.as<float>(), 0.0f, n, lease_->stream()));
  for (const auto& [name, values] : optimizer_.state()) {
    DeviceBuffer& buffer = name == "v" ? v_ : m_;
    ASSIGN_OR_RETURN(buffer, allocator_->Allocate(n * kFloat));
  }
  ASSIGN_OR_RETURN(loss_value_, allocator_->Allocate(kFloat));
  ASSIGN_OR_RETURN(norm_sq_, allocator_->Allocate(kFloat));
  loss_spec_ = loss_.Spec();
  if (!loss_.quantiles().empty()) {
    const auto Q = static_cast<int64_t>(loss_.quantiles().size());
    ASSIGN_OR_RETURN(quantiles_, allocator_->Allocate(Q * kFloat));
    RETURN_IF_ERROR(Upload(quantiles_, loss_.quantiles().data(), Q));
    loss_spec_.quantiles = quantiles_.as<const float>();
  }
  tape_memory_ = std::make_unique<DeviceTapeMemory>(allocator_);
  TrainingPlacement placement;
  placement.weights = params_.as<const float>();
  placement.data_ops = data_ops_.get();
  placement.memory = tape_memory_.get();
  tape_.emplace(placement);
  return lease_->Synchronize();
}

absl::Status CudaTrainingEngine::Upload(const DeviceBuffer& to, const float* from, int64_t n) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to.data(), from, static_cast<size_t>(n * kFloat),
                                       cudaMemcpyHostToDevice, lease_->stream()));
  return absl::OkStatus();
}

absl::Status CudaTrainingEngine::Download(float* to, const DeviceBuffer& from, int64_t n) {
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(to, from.data(), static_cast<size_t>(n * kFloat),
                                       cudaMemcpyDeviceToHost, lease_->stream()));
  return absl::OkStatus();
}

absl::Status CudaTrainingEngine::Push() {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const int64_t n = model_.parameters().size();
  RETURN_IF_ERROR(Upload(params_, model_.parameters().data(), n));
  for (const auto& [name, values] : optimizer_.state()) {
    RETURN_IF_ERROR(Upload(name == "v" ? v_ : m_, values->data(), n));
  }
  steps_ = optimizer_.steps_taken();
  return lease_->Synchronize();
}

absl::Status CudaTrainingEngine::Pull() {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const int64_t n = model_.parameters().size();
  RETURN_IF_ERROR(Download(model_.parameters().data(), params_, n));
  std::vector<std::pair<std::string, std::vector<float>>> state;
  for (const auto& [name, values] : optimizer_.state()) {
    state.emplace_back(name, std::vector<float>(static_cast<size_t>(n)));
    RETURN_IF_ERROR(Download(state.back().second.data(), name == "v" ? v_ : m_, n));
  }
  RETURN_IF_ERROR(lease_->Synchronize());
  return optimizer_.Restore(state, steps_);
}

absl::Status CudaTrainingEngine::QueueForwardAndLoss(const float* x, const float* y, int64_t B) {
  const int64_t x_floats = B * model_.input_floats();
  const int64_t y_floats = B * loss_.per_window();
  const int64_t pred_floats = B * model_.num_outputs();
  if (B > batch_capacity_) {
    // Between steps: nothing queued reads the old buffers.
    ASSIGN_OR_RETURN(x_, allocator_->Allocate(x_floats * kFloat));
    ASSIGN_OR_RETURN(y_, allocator_->Allocate(y_floats * kFloat));
    ASSIGN_OR_RETURN(pred_, allocator_->Allocate(pred_floats * kFloat));
    ASSIGN_OR_RETURN(dpred_, allocator_->Allocate(pred_floats * kFloat));
    batch_capacity_ = B;
  }
  ASSIGN_OR_RETURN(void* const staging, lease_->HostStaging(StreamLease::Staging::kInput,
                                                            (x_floats + y_floats) * kFloat));
  auto* const staged = static_cast<float*>(staging);
  std::memcpy(staged, x, static_cast<size_t>(x_floats * kFloat));
  std::memcpy(staged + x_floats, y, static_cast<size_t>(y_floats * kFloat));
  RETURN_IF_ERROR(Upload(x_, staged, x_floats));
  RETURN_IF_ERROR(Upload(y_, staged + x_floats, y_floats));
  RETURN_IF_ERROR(
      model_.ForwardTrain(*backend_, pred_.as<float>(), x_.as<const float>(), B, *tape_));
  return cuda::LossForwardBackward(dpred_.as<float>(), loss_value_.as<float>(),
                                   pred_.as<const float>(), y_.as<const float>(),
                                   B * loss_.per_window(), loss_spec_, lease_->stream());
}

absl::Status CudaTrainingEngine::QueueUpdate(float lr) {
  const cudaStream_t stream = lease_->stream();
  const v1::OptimizerConfig& c = optimizer_.config();
  const int64_t n = model_.parameters().size();
  float* const grads = grads_.as<float>();
  if (c.clip_grad_norm() > 0.0f) {
    // Over the whole arena: Backward zeroes the untrained entries, so the norm is the
    // trainable ranges' and scaling leaves those zeros as they are.
    RETURN_IF_ERROR(cuda::GradNormSquared(norm_sq_.as<float>(), grads, n, stream));
    RETURN_IF_ERROR(
        cuda::ScaleByClip(grads, n, norm_sq_.as<const float>(), c.clip_grad_norm(), stream));
  }
  ++steps_;
  float* const p = params_.as<float>();
  if (c.kind() == v1::OPTIMIZER_SGD) {
    const ref::SgdHyper hyper{lr, c.momentum(), 0.0f, c.weight_decay(), c.nesterov()};
    for (const auto& [offset, count] : optimizer_.trainable_ranges()) {
      RETURN_IF_ERROR(cuda::SgdUpdate(p + offset, m_.empty() ? nullptr : m_.as<float>() + offset,
                                      grads + offset, count, hyper, steps_ == 1, stream));
    }
    return absl::OkStatus();
  }
  const ref::AdamHyper hyper{lr,      c.beta1(),        c.beta2(),
                             c.eps(), c.weight_decay(), c.kind() == v1::OPTIMIZER_ADAMW};
  for (const auto& [offset, count] : optimizer_.trainable_ranges()) {
    RETURN_IF_ERROR(cuda::AdamUpdate(p + offset, m_.as<float>() + offset, v_.as<float>() + offset,
                                     grads + offset, count, steps_, hyper, stream));
  }
  return absl::OkStatus();
}

absl::StatusOr<const void*> CudaTrainingEngine::QueueLossCopy() {
  ASSIGN_OR_RETURN(void* const staging, lease_->HostStaging(StreamLease::Staging::kOutput, kFloat));
  CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging, loss_value_.data(), kFloat, cudaMemcpyDeviceToHost,
                                       lease_->stream()));
  return staging;
}

absl::Status CudaTrainingEngine::QueueStep(const float* x, const float* y, int64_t B, float lr,
                                           std::optional<uint64_t> dropout_seed) {
  tape_->dropout_seed = dropout_seed;
  RETURN_IF_ERROR(QueueForwardAndLoss(x, y, B));
  // The update is queued before the loss is seen: a non-finite loss ends the job, which then
  // keeps nothing of this step.
  RETURN_IF_ERROR(model_.Backward(*backend_, grads_.as<float>(), dpred_.as<const float>(), *tape_));
  return QueueUpdate(lr);
}

absl::StatusOr<double> CudaTrainingEngine::Finish(const absl::Status& queued,
                                                  Communicator* communicator, bool has_loss) {
  absl::Status status = queued;
  // The loss's copy is queued before the wait, so that one wait covers the step and the copy.
  const void* loss_copy = nullptr;
  if (status.ok() && has_loss) {
    absl::StatusOr<const void*> copy = QueueLossCopy();
    status = copy.status();
    if (copy.ok()) loss_copy = *copy;
  }
  if (status.ok()) {
    status = communicator != nullptr ? communicator->Wait(lease_->stream()) : lease_->Synchronize();
  }
  if (!status.ok()) {
    // What was queued before the error may still read buffers the next step replaces. (An
    // aborted communicator has ended its pending collectives, so these waits end.)
    if (reduce_stream_ != nullptr) cudaStreamSynchronize(reduce_stream_);
    lease_->Synchronize().IgnoreError();
    return status;
  }
  if (loss_copy == nullptr) return 0.0;
  float loss = 0.0f;
  std::memcpy(&loss, loss_copy, sizeof(loss));
  return static_cast<double>(loss);
}

absl::Status CudaTrainingEngine::BroadcastState(Communicator& communicator) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  const int64_t n = model_.parameters().size();
  const auto queue = [&]() -> absl::Status {
    RETURN_IF_ERROR(communicator.Broadcast(params_.as<float>(), n, 0, lease_->stream()));
    for (DeviceBuffer* state : {&m_, &v_}) {
      if (!state->empty()) {
        RETURN_IF_ERROR(communicator.Broadcast(state->as<float>(), n, 0, lease_->stream()));
      }
    }
    return absl::OkStatus();
  };
  return Finish(queue(), &communicator, /*has_loss=*/false).status();
}

absl::Status CudaTrainingEngine::HostCollective(float* values, int64_t n,
                                                Communicator& communicator,
                                                std::optional<float> sum_scale) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  if (n > share_capacity_) {
    ASSIGN_OR_RETURN(share_, allocator_->Allocate(n * kFloat));
    share_capacity_ = n;
  }
  ASSIGN_OR_RETURN(void* const staging,
                   lease_->HostStaging(StreamLease::Staging::kOutput, n * kFloat));
  const auto queue = [&]() -> absl::Status {
    RETURN_IF_ERROR(Upload(share_, values, n));
    RETURN_IF_ERROR(
        sum_scale.has_value()
            ? communicator.AllReduceScaledSum(share_.as<float>(), n, *sum_scale, lease_->stream())
            : communicator.Broadcast(share_.as<float>(), n, 0, lease_->stream()));
    // Into pinned memory, so the copy waits on the stream and not the thread: Finish's wait
    // is the one that watches for a lost rank.
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(staging, share_.data(), static_cast<size_t>(n * kFloat),
                                         cudaMemcpyDeviceToHost, lease_->stream()));
    return absl::OkStatus();
  };
  RETURN_IF_ERROR(Finish(queue(), &communicator, /*has_loss=*/false).status());
  std::memcpy(values, staging, static_cast<size_t>(n * kFloat));
  return absl::OkStatus();
}

std::vector<int64_t> CudaTrainingEngine::BucketPlan() const {
  std::vector<int64_t> plan;
  if (bucket_bytes_ <= 0) return plan;
  int64_t end = model_.parameters().size();
  for (const int64_t from : model_.GradientBlockStarts()) {
    if ((end - from) * kFloat < bucket_bytes_) continue;
    plan.push_back(from);
    end = from;
  }
  return plan;
}

absl::Status CudaTrainingEngine::QueueBucket(Communicator& communicator, int64_t begin, int64_t end,
                                             float share) {
  if (reduce_stream_ == nullptr) {
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&reduce_stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&backward_done_, cudaEventDisableTiming));
    CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&reduced_, cudaEventDisableTiming));
  }
  CUDA_RETURN_IF_ERROR(cudaEventRecord(backward_done_, lease_->stream()));
  CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(reduce_stream_, backward_done_, 0));
  return communicator.AllReduceScaledSum(grads_.as<float>() + begin, end - begin, share,
                                         reduce_stream_);
}

absl::Status CudaTrainingEngine::QueueShardStep(const float* x, const float* y, int64_t B, float lr,
                                                std::optional<uint64_t> dropout_seed,
                                                Communicator& communicator, float share) {
  const int64_t n = model_.parameters().size();
  // Every rank queues the same collectives in the same order: the plan depends on the model
  // and the options alone, and a rank without windows follows it too.
  const std::vector<int64_t> plan = BucketPlan();
  size_t next = 0;
  int64_t summed_from = n;  // gradients [summed_from, n) are queued for summing
  const auto sum_down_to = [&](int64_t from) -> absl::Status {
    if (from == summed_from) return absl::OkStatus();
    RETURN_IF_ERROR(QueueBucket(communicator, from, summed_from, share));
    summed_from = from;
    return absl::OkStatus();
  };
  if (B > 0) {
    tape_->dropout_seed = dropout_seed;
    RETURN_IF_ERROR(QueueForwardAndLoss(x, y, B));
    if (!plan.empty()) {
      tape_->on_gradients_final = [&](int64_t from) -> absl::Status {
        if (next < plan.size() && from == plan[next]) {
          ++next;
          return sum_down_to(from);
        }
        return absl::OkStatus();
      };
    }
    const absl::Status backward =
        model_.Backward(*backend_, grads_.as<float>(), dpred_.as<const float>(), *tape_);
    tape_->on_gradients_final = nullptr;
    RETURN_IF_ERROR(backward);
    if (next != plan.size()) {
      return absl::InternalError(
          "the backward pass did not report the gradient blocks it declares");
    }
  } else {
    RETURN_IF_ERROR(cuda::FillLaunch(grads_.as<float>(), 0.0f, n, lease_->stream()));
    for (const int64_t from : plan) RETURN_IF_ERROR(sum_down_to(from));
  }
  if (plan.empty()) {
    // The whole arena in one collective, ordered after the backward on the step's stream.
    RETURN_IF_ERROR(
        communicator.AllReduceScaledSum(grads_.as<float>(), n, share, lease_->stream()));
  } else {
    // The rest, then the update waits for every bucket.
    RETURN_IF_ERROR(sum_down_to(0));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(reduced_, reduce_stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lease_->stream(), reduced_, 0));
  }
  return QueueUpdate(lr);
}

absl::StatusOr<double> CudaTrainingEngine::StepShard(const float* x, const float* y, int64_t B,
                                                     float lr, std::optional<uint64_t> dropout_seed,
                                                     Communicator& communicator, float share) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  return Finish(QueueShardStep(x, y, B, lr, dropout_seed, communicator, share), &communicator,
                /*has_loss=*/B > 0);
}

absl::StatusOr<double> CudaTrainingEngine::Step(const float* x, const float* y, int64_t B, float lr,
                                                std::optional<uint64_t> dropout_seed) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  return Finish(QueueStep(x, y, B, lr, dropout_seed));
}

absl::StatusOr<double> CudaTrainingEngine::Evaluate(const float* x, const float* y, int64_t B) {
  const ScopedCudaDevice scoped(device_);
  RETURN_IF_ERROR(scoped.status());
  tape_->dropout_seed.reset();
  return Finish(QueueForwardAndLoss(x, y, B));
}

}  // namespace

absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeCudaTrainingEngine(
    const CudaTrainingEngineOptions& options, Forecaster& model, Optimizer& optimizer,
    const TrainingLoss& loss, const v1::TrainingConfig& config) {
  if (config.precision() == v1::PRECISION_FP16) {
    return absl::InvalidArgumentError(
        "training precision PRECISION_FP16 is not supported (it needs loss scaling); use "
        "PRECISION_BF16 for mixed precision");
  }
  if (config.stateful().chunk_length() > 0) {
    // The model's chunk pair runs on any backend; what this engine lacks is device memory for
    // the carried states and the chunk-shaped batch buffers.
    return absl::FailedPreconditionError(absl::StrCat(
        "stateful training (training.stateful.chunk_length > 0) runs on the CPU only; this "
        "job would train on cuda:",
        options.device,
        " (start forecastd with --train-device cpu, "
        "or train on windows)"));
  }
  if (options.workspace_bytes < 0) {
    return absl::InvalidArgumentError("CudaTrainingEngineOptions: workspace_bytes must be >= 0");
  }
  if (options.allocator != nullptr && options.allocator->device() != options.device) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the allocator is for cuda:", options.allocator->device(), ", not cuda:", options.device));
  }
  auto engine = std::make_unique<CudaTrainingEngine>(model, optimizer, loss, options.device);
  RETURN_IF_ERROR(engine->Init(options, config));
  return engine;
}

TrainingEngineFactory MakeGpuTrainingEngineFactory(std::vector<CudaTrainingEngineOptions> ranks,
                                                   absl::Duration collective_timeout,
                                                   std::optional<RankGroup> group) {
  return [ranks = std::move(ranks), collective_timeout, group = std::move(group)](
             Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
             const v1::TrainingConfig& config) -> absl::StatusOr<std::unique_ptr<TrainingEngine>> {
    if (ranks.empty()) return absl::InvalidArgumentError("training on no GPU");
    if (ranks.size() == 1 && !group.has_value()) {
      return MakeCudaTrainingEngine(ranks.front(), model, optimizer, loss, config);
    }
    RankGroup g;
    if (group.has_value()) {
      g = *group;
    } else {
      // A new group per job, named by a fresh id.
      ASSIGN_OR_RETURN(g.unique_id, NewNcclUniqueId());
      g.world_size = static_cast<int>(ranks.size());
    }
    DataParallelOptions options;
    options.ranks = static_cast<int>(ranks.size());
    options.world_size = g.world_size;
    options.first_rank = g.first_rank;
    options.collective_margin = collective_timeout;
    // By value: the options live in the engine.
    options.make_communicator = [ranks, g, collective_timeout](int rank) {
      NcclCommunicatorOptions nccl;
      nccl.device = ranks[static_cast<size_t>(rank)].device;
      nccl.rank = g.first_rank + rank;
      nccl.size = g.world_size;
      nccl.unique_id = g.unique_id;
      nccl.timeout = collective_timeout;
      return CreateNcclCommunicator(nccl);
    };
    options.make_engine = [ranks](int rank, Forecaster& m, Optimizer& o, const TrainingLoss& l,
                                  const v1::TrainingConfig& c) {
      return MakeCudaTrainingEngine(ranks[static_cast<size_t>(rank)], m, o, l, c);
    };
    return MakeDataParallelTrainingEngine(std::move(options), model, optimizer, loss, config);
  };
}

}  // namespace forecastd
