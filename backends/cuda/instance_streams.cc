#include "backends/cuda/instance_streams.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_devices.h"
#include "backends/cuda/library_status.h"
#include "kernels/cuda/cuda_status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

// --- StreamLease

StreamLease::StreamLease(StreamLease&& other) noexcept
    : owner_(std::exchange(other.owner_, nullptr)), index_(std::exchange(other.index_, -1)) {}

StreamLease& StreamLease::operator=(StreamLease&& other) noexcept {
  if (this != &other) {
    if (owner_ != nullptr) owner_->Return(index_);
    owner_ = std::exchange(other.owner_, nullptr);
    index_ = std::exchange(other.index_, -1);
  }
  return *this;
}

StreamLease::~StreamLease() {
  if (owner_ != nullptr) owner_->Return(index_);
}

const CudaStreamContext& StreamLease::context() const { return owner_->slots_[index_]->context; }

absl::StatusOr<void*> StreamLease::HostStaging(Staging which, int64_t bytes) {
  return owner_->GrowStaging(index_, which, bytes);
}

absl::Status StreamLease::Synchronize() {
  const ScopedCudaDevice scoped(device());
  RETURN_IF_ERROR(scoped.status());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream()));
  return absl::OkStatus();
}

// --- InstanceStreams

namespace {

// Pinned buffers grow to the next multiple of 1 MiB, so a run of slightly larger batches does
// not reallocate each time.
int64_t StagingRound(int64_t bytes) {
  constexpr int64_t kRound = int64_t{1} << 20;
  return (bytes + kRound - 1) / kRound * kRound;
}

}  // namespace

absl::StatusOr<std::unique_ptr<InstanceStreams>> InstanceStreams::Create(const Options& options,
                                                                         CudaAllocator* allocator) {
  if (options.num_streams < 1) {
    return absl::InvalidArgumentError("InstanceStreams: num_streams must be >= 1");
  }
  if (options.workspace_bytes < 0 || options.staging_bytes < 0) {
    return absl::InvalidArgumentError(
        "InstanceStreams: workspace_bytes and staging_bytes must be >= 0");
  }
  if (allocator == nullptr || allocator->device() != options.device) {
    return absl::InvalidArgumentError(
        absl::StrCat("InstanceStreams: needs the allocator of cuda:", options.device));
  }
  std::unique_ptr<InstanceStreams> streams(new InstanceStreams(options, allocator));
  const ScopedCudaDevice scoped(options.device);
  RETURN_IF_ERROR(scoped.status());
  for (int i = 0; i < options.num_streams; ++i) {
    auto slot = std::make_unique<Slot>();
    slot->context.device = options.device;
    const absl::Status status = streams->CreateSlot(*slot);
    // The slot joins the others even when half made, so that the destructor frees what it holds.
    streams->slots_.push_back(std::move(slot));
    if (!status.ok()) {
      absl::MutexLock lock(&streams->mu_);
      for (int j = 0; j < static_cast<int>(streams->slots_.size()); ++j)
        streams->free_.push_back(j);
      return status;
    }
  }
  absl::MutexLock lock(&streams->mu_);
  for (int i = options.num_streams - 1; i >= 0; --i) streams->free_.push_back(i);
  return streams;
}

absl::Status InstanceStreams::CreateSlot(Slot& slot) {
  CudaStreamContext& c = slot.context;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&c.stream, cudaStreamNonBlocking));
  ASSIGN_OR_RETURN(slot.workspace, allocator_->Allocate(options_.workspace_bytes));
  c.workspace = slot.workspace.data();
  c.workspace_bytes = options_.workspace_bytes;
  CUBLAS_RETURN_IF_ERROR(cublasCreate(&c.cublas));
  // cublasSetStream resets the handle's workspace to cuBLAS's own pool, so it goes first.
  CUBLAS_RETURN_IF_ERROR(cublasSetStream(c.cublas, c.stream));
  if (c.workspace_bytes > 0) {
    CUBLAS_RETURN_IF_ERROR(
        cublasSetWorkspace(c.cublas, c.workspace, static_cast<size_t>(c.workspace_bytes)));
  }
  CUBLAS_RETURN_IF_ERROR(cublasLtCreate(&c.cublas_lt));
  CUDNN_RETURN_IF_ERROR(cudnnCreate(&c.cudnn));
  CUDNN_RETURN_IF_ERROR(cudnnSetStream(c.cudnn, c.stream));
  for (PinnedBuffer& staging : slot.staging) {
    if (options_.staging_bytes == 0) continue;
    const int64_t bytes = StagingRound(options_.staging_bytes);
    CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&staging.data, static_cast<size_t>(bytes), cudaHostAllocDefault));
    staging.bytes = bytes;
  }
  return absl::OkStatus();
}

void InstanceStreams::DestroySlot(Slot& slot) {
  CudaStreamContext& c = slot.context;
  // Errors here have no caller to go to; the stream's queued work is what could still fail.
  if (c.stream != nullptr && cudaStreamSynchronize(c.stream) != cudaSuccess) {
    spdlog::warn("InstanceStreams(cuda:{}): a stream failed while draining: {}", options_.device,
                 cudaGetErrorString(cudaGetLastError()));
  }
  if (c.cudnn != nullptr) cudnnDestroy(c.cudnn);
  if (c.cublas_lt != nullptr) cublasLtDestroy(c.cublas_lt);
  if (c.cublas != nullptr) cublasDestroy(c.cublas);
  for (PinnedBuffer& staging : slot.staging) {
    if (staging.data != nullptr) cudaFreeHost(staging.data);
    staging = PinnedBuffer{};
  }
  slot.workspace.Reset();  // after the drain above, so nothing queued still uses it
  if (c.stream != nullptr) cudaStreamDestroy(c.stream);
  c = CudaStreamContext{};
}

InstanceStreams::~InstanceStreams() {
  {
    absl::MutexLock lock(&mu_);
    if (free_.size() != slots_.size()) {
      spdlog::error("InstanceStreams(cuda:{}) destroyed with {} of {} streams still leased",
                    options_.device, slots_.size() - free_.size(), slots_.size());
    }
  }
  const ScopedCudaDevice scoped(options_.device);
  for (auto& slot : slots_) DestroySlot(*slot);
}

StreamLease InstanceStreams::Lease() {
  absl::MutexLock lock(&mu_);
  mu_.Await(absl::Condition(this, &InstanceStreams::HasFreeLocked));
  const int index = free_.back();
  free_.pop_back();
  return StreamLease(this, index);
}

std::optional<StreamLease> InstanceStreams::TryLease() {
  absl::MutexLock lock(&mu_);
  if (free_.empty()) return std::nullopt;
  const int index = free_.back();
  free_.pop_back();
  return StreamLease(this, index);
}

void InstanceStreams::Return(int index) {
  absl::MutexLock lock(&mu_);
  free_.push_back(index);
}

int InstanceStreams::leased() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(slots_.size() - free_.size());
}

absl::StatusOr<void*> InstanceStreams::GrowStaging(int index, StreamLease::Staging which,
                                                   int64_t bytes) {
  if (bytes < 0) return absl::InvalidArgumentError("HostStaging: negative size");
  Slot& slot = *slots_[index];
  PinnedBuffer& staging = slot.staging[which == StreamLease::Staging::kInput ? 0 : 1];
  if (bytes <= staging.bytes) return staging.data;
  const ScopedCudaDevice scoped(options_.device);
  RETURN_IF_ERROR(scoped.status());
  CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(slot.context.stream));
  if (staging.data != nullptr) {
    CUDA_RETURN_IF_ERROR(cudaFreeHost(staging.data));
    staging = PinnedBuffer{};
  }
  const int64_t rounded = StagingRound(bytes);
  const cudaError_t error =
      cudaHostAlloc(&staging.data, static_cast<size_t>(rounded), cudaHostAllocDefault);
  if (error != cudaSuccess) {
    cudaGetLastError();
    staging = PinnedBuffer{};
    return CudaStatus(error, FD_VENDOR_CALL_SITE(cudaHostAlloc));
  }
  staging.bytes = rounded;
  return staging.data;
}

}  // namespace forecastd
