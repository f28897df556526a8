#include "backends/cuda/resident_step.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <new>
#include <utility>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_devices.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

namespace {

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

void Pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

bool SameForecast(const cuda::StepForecast& a, const cuda::StepForecast& b) {
  if (a.x_mean != b.x_mean || a.x_std != b.x_std || a.head_weight != b.head_weight ||
      a.head_bias != b.head_bias || a.outputs != b.outputs || a.y_mean != b.y_mean ||
      a.y_std != b.y_std || a.targets != b.targets || a.quantiles != b.quantiles) {
    return false;
  }
  for (int k = 0; k < a.targets && k < cuda::kStepForecastMaxTargets; ++k) {
    if (a.target_feature[k] != b.target_feature[k]) return false;
  }
  return true;
}

bool SameModel(const ResidentStep::Model& a, const ResidentStep::Model& b) {
  if (a.slab != b.slab || a.cell != b.cell || a.I != b.I || a.H != b.H || a.layers != b.layers ||
      !SameForecast(a.forecast, b.forecast)) {
    return false;
  }
  for (int l = 0; l < a.layers; ++l) {
    const ref::RecurrentDirectionWeights &x = a.weights[l], &y = b.weights[l];
    if (x.w_ih != y.w_ih || x.w_hh != y.w_hh || x.b_ih != y.b_ih || x.b_hh != y.b_hh) return false;
  }
  return true;
}

// A step that has not finished after this long makes the host look at the kernel's stream
// (a step takes about 10 us).
constexpr int64_t kCheckAfterNs = 200'000;
// ... and after this long, while the kernel still runs, it is reported as stuck.
constexpr int64_t kGiveUpAfterNs = 5'000'000'000;

}  // namespace

absl::StatusOr<std::unique_ptr<ResidentStep>> ResidentStep::Create(const Options& options) {
  if (options.turn == nullptr) return absl::InvalidArgumentError("ResidentStep: no Turn");
  if (options.idle_us < 1 || options.max_run_us < 1) {
    return absl::InvalidArgumentError("ResidentStep: idle_us and max_run_us must be >= 1");
  }
  const ScopedCudaDevice scoped(options.device);
  RETURN_IF_ERROR(scoped.status());
  // The highest priority, so that the kernel's blocks go first when it is launched beside
  // other work.
  int least = 0, greatest = 0;
  CUDA_RETURN_IF_ERROR(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  cudaStream_t stream = nullptr;
  CUDA_RETURN_IF_ERROR(cudaStreamCreateWithPriority(&stream, cudaStreamNonBlocking, greatest));
  void* memory = nullptr;
  const cudaError_t allocated =
      cudaHostAlloc(&memory, sizeof(cuda::ResidentStepMailbox), cudaHostAllocPortable);
  if (allocated != cudaSuccess) {
    cudaStreamDestroy(stream);
    CUDA_RETURN_IF_ERROR(allocated);
  }
  auto* box = new (memory) cuda::ResidentStepMailbox();
  return std::unique_ptr<ResidentStep>(new ResidentStep(options, stream, box));
}

ResidentStep::ResidentStep(const Options& options, cudaStream_t stream,
                           cuda::ResidentStepMailbox* box)
    : options_(options), stream_(stream), box_(box) {}

ResidentStep::~ResidentStep() {
  {
    absl::MutexLock lock(&mu_);
    const absl::Status stopped = StopLocked();
    if (!stopped.ok())
      spdlog::error("ResidentStep(cuda:{}): {}", options_.device, stopped.ToString());
  }
  {
    absl::MutexLock lock(&options_.turn->mu_);
    if (options_.turn->holder_ == this) options_.turn->holder_ = nullptr;
  }
  const ScopedCudaDevice scoped(options_.device);
  cudaStreamDestroy(stream_);
  box_->~ResidentStepMailbox();
  cudaFreeHost(box_);
}

int64_t ResidentStep::steps() const {
  absl::MutexLock lock(&mu_);
  return steps_;
}

int64_t ResidentStep::launches() const {
  absl::MutexLock lock(&mu_);
  return launches_;
}

std::pair<int64_t, int64_t> ResidentStep::last_kernel_ns() const {
  absl::MutexLock lock(&mu_);
  return {last_step_ns_gpu_, last_kernel_ns_};
}

bool ResidentStep::KernelRunning() const { return cudaStreamQuery(stream_) == cudaErrorNotReady; }

absl::Status ResidentStep::StopLocked() {
  if (!launched_) return absl::OkStatus();
  __atomic_store_n(&box_->stop, 1u, __ATOMIC_RELEASE);
  const cudaError_t synced = cudaStreamSynchronize(stream_);
  __atomic_store_n(&box_->stop, 0u, __ATOMIC_RELEASE);
  launched_ = false;
  CUDA_RETURN_IF_ERROR(synced);
  return absl::OkStatus();
}

absl::StatusOr<bool> ResidentStep::LaunchLocked(const Model& model) {
  // Under the turn's mutex, so that no other ResidentStep sees this one's kernel as not
  // running between the check and the launch.
  absl::MutexLock turn(&options_.turn->mu_);
  ResidentStep* const holder = options_.turn->holder_;
  if (holder != nullptr && holder != this && holder->KernelRunning()) return false;
  options_.turn->holder_ = this;
  const ScopedCudaDevice scoped(options_.device);
  RETURN_IF_ERROR(scoped.status());
  const absl::Status launched = cuda::LaunchResidentStep(
      box_, model.slab, model.weights.data(), model.cell, model.I, model.H, model.layers,
      model.forecast, posted_, options_.idle_us, options_.max_run_us, stream_);
  if (!launched.ok()) {
    // A GPU that cannot hold the cluster for good (a partition with too few SMs, say) still
    // serves every step by a launch of its own: this ResidentStep stays off.
    cudaGetLastError();  // a launch error is not sticky; clear it
    spdlog::warn("cuda:{}: tick steps launch one by one, the resident step could not start: {}",
                 options_.device, launched.ToString());
    disabled_ = true;
    return false;
  }
  launched_ = true;
  running_ = model;
  launched_at_ns_ = last_step_ns_ = NowNs();
  ++launches_;
  return true;
}

absl::StatusOr<bool> ResidentStep::TryRun(const Model& model, float* y, const int32_t* slots,
                                          const float* x, int64_t B) {
  if (B < 1 || B > cuda::kResidentStepMaxStreams || model.layers < 1 ||
      model.layers > cuda::kResidentStepMaxLayers ||
      !cuda::ResidentStepFits(model.I, model.H, model.layers, model.forecast)) {
    return false;
  }
  if (!mu_.TryLock()) return false;
  absl::StatusOr<bool> ran = disabled_ ? false : TryRunLocked(model, y, slots, x, B);
  mu_.Unlock();
  return ran;
}

absl::StatusOr<bool> ResidentStep::TryRunLocked(const Model& model, float* y, const int32_t* slots,
                                                const float* x, int64_t B) {
  const int64_t now = NowNs();
  if (launched_) {
    // Half of either limit gone: the kernel may be close to leaving on its own, and a step
    // posted then could wait for nobody. Stop it and start another.
    const bool near_end = now - last_step_ns_ > options_.idle_us * 500 ||
                          now - launched_at_ns_ > options_.max_run_us * 500;
    if (near_end || !SameModel(running_, model)) RETURN_IF_ERROR(StopLocked());
  }
  if (!launched_) {
    ASSIGN_OR_RETURN(const bool launched, LaunchLocked(model));
    if (!launched) return false;
  }
  ++step_number_;
  const uint32_t step = step_number_ * cuda::kResidentRequestRows + static_cast<uint32_t>(B);
  // The payload [slots | ticks] into the chunks, each chunk's tag stored after its words,
  // chunk 0 last (the one the kernel polls).
  const int64_t words = B * (1 + model.I);
  constexpr int64_t kPayload = cuda::kResidentChunkWords - 1;
  const int64_t count = (words + kPayload - 1) / kPayload;
  const auto word = [&](int64_t p) -> uint32_t {
    if (p < B) return static_cast<uint32_t>(slots[p]);
    uint32_t bits;
    std::memcpy(&bits, x + (p - B), sizeof(bits));
    return bits;
  };
  for (int64_t c = count - 1; c >= 0; --c) {
    uint32_t* chunk = box_->chunks[c];
    for (int64_t at = 1; at < cuda::kResidentChunkWords; ++at) {
      const int64_t p = c * kPayload + at - 1;
      if (p < words) chunk[at] = word(p);
    }
    __atomic_store_n(&chunk[0], step, __ATOMIC_RELEASE);
  }
  posted_ = step;
  const int64_t posted_at = NowNs();
  for (int64_t spin = 1;; ++spin) {
    if (__atomic_load_n(&box_->done, __ATOMIC_ACQUIRE) == step) break;
    Pause();
    if (spin % 256 != 0) continue;
    const int64_t waited = NowNs() - posted_at;
    if (waited < kCheckAfterNs) continue;
    const cudaError_t state = cudaStreamQuery(stream_);
    if (state == cudaErrorNotReady) {
      if (waited < kGiveUpAfterNs) continue;
      return absl::DeadlineExceededError(
          absl::StrCat("the resident step kernel on cuda:", options_.device,
                       " did not finish a step in ", kGiveUpAfterNs / 1'000'000'000, " s"));
    }
    launched_ = false;
    CUDA_RETURN_IF_ERROR(state);
    if (__atomic_load_n(&box_->done, __ATOMIC_ACQUIRE) == step) break;
    // The kernel left without taking the step (the next kernel starts past its number).
    return false;
  }
  std::copy(box_->y, box_->y + B * model.forecast.outputs, y);
  last_step_ns_ = NowNs();
  last_step_ns_gpu_ = box_->step_ns;
  last_kernel_ns_ = box_->kernel_ns;
  ++steps_;
  return true;
}

}  // namespace forecastd
