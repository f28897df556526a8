#include "engine/serving/device_scheduler.h"

#include <cstdlib>
#include <map>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {
constexpr int kMaxWorkers = 1024;
}  // namespace

// Each worker thread runs WorkerLoop(): it takes the first item of items_ unless its slot is
// leased. Invariants (under mu_): a worker is never both busy and leased; a lease is granted
// only while items_ is empty; nothing enters items_ once shutting_down_ is set, and a worker
// exits only when shutting_down_ is set and items_ is empty.
class DeviceScheduler::Impl {
 public:
  explicit Impl(const Options& options)
      : clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        num_workers_(options.num_workers),
        on_inline_(options.on_inline),
        allow_inline_(options.allow_inline),
        busy_(static_cast<size_t>(options.num_workers), false),
        leased_(static_cast<size_t>(options.num_workers), false) {
    threads_.reserve(static_cast<size_t>(num_workers_));
    for (int w = 0; w < num_workers_; ++w) {
      threads_.emplace_back([this, w, start = options.on_worker_start] {
        if (start) start(w);
        WorkerLoop(w);
      });
    }
  }

  ~Impl() {
    Shutdown();
    for (std::thread& thread : threads_) thread.join();
  }

  void Submit(uint32_t priority, absl::Time deadline, Work work) {
    {
      absl::MutexLock lock(&mu_);
      if (!shutting_down_) {
        items_.emplace(ItemKey(priority, deadline, next_seq_++), std::move(work));
        return;
      }
    }
    work(/*worker=*/-1, /*cancelled=*/true);
  }

  bool TryStartInline(const HeldWork& work) {
    // Work enqueued from inside running work, inline or on a worker (a completion's next
    // request), queues instead, so a stack holds one run and a batch's other completions
    // never wait behind another run.
    if (!allow_inline_ || running_work_) return false;
    int worker = -1;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_ || !items_.empty()) return false;
      worker = FindFreeWorkerLocked();
      if (worker < 0) return false;
      busy_[static_cast<size_t>(worker)] = true;
    }
    if (on_inline_) on_inline_(worker);
    running_work_ = true;
    work(worker, SlotHold(this, worker));
    running_work_ = false;
    return true;
  }

  void ReleaseSlot(int worker) {
    absl::MutexLock lock(&mu_);
    busy_[static_cast<size_t>(worker)] = false;
  }

  absl::StatusOr<int> AcquireLease(absl::Time deadline) {
    absl::MutexLock lock(&mu_);
    auto grantable = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return shutting_down_ || (items_.empty() && FindFreeWorkerLocked() >= 0);
    };
    clock_->AwaitWithDeadline(&mu_, absl::Condition(&grantable), deadline);
    if (shutting_down_) return absl::UnavailableError("device scheduler is shut down");
    if (!grantable()) {
      return absl::DeadlineExceededError("no worker became free for training before the deadline");
    }
    const int worker = FindFreeWorkerLocked();
    leased_[static_cast<size_t>(worker)] = true;
    return worker;
  }

  void ReleaseLease(int worker) {
    absl::MutexLock lock(&mu_);
    leased_[static_cast<size_t>(worker)] = false;
  }

  void Shutdown() {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
    auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      return items_.empty() && CountLocked(busy_) == 0;
    };
    mu_.Await(absl::Condition(&idle));
  }

  int num_workers() const { return num_workers_; }
  int64_t queued() const {
    absl::MutexLock lock(&mu_);
    return static_cast<int64_t>(items_.size());
  }
  int64_t busy_workers() const {
    absl::MutexLock lock(&mu_);
    return CountLocked(busy_);
  }
  int64_t leased_workers() const {
    absl::MutexLock lock(&mu_);
    return CountLocked(leased_);
  }

 private:
  // Lower first: priority level, then deadline, then submission order.
  using ItemKey = std::tuple<uint32_t, absl::Time, uint64_t>;

  void WorkerLoop(int worker) {
    const size_t w = static_cast<size_t>(worker);
    absl::MutexLock lock(&mu_);
    while (true) {
      auto ready = [this, w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        // busy_[w] here: the slot runs inline work on another thread (TryRunInline).
        return (!leased_[w] && !busy_[w] && !items_.empty()) || (shutting_down_ && items_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (items_.empty()) return;  // shutting down with nothing left to run
      auto first = items_.begin();
      Work work = std::move(first->second);
      items_.erase(first);
      busy_[w] = true;
      mu_.Unlock();
      running_work_ = true;
      work(worker, /*cancelled=*/false);
      running_work_ = false;
      work = nullptr;  // destroy what it captured before reporting idle
      mu_.Lock();
      busy_[w] = false;
    }
  }

  int FindFreeWorkerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t w = 0; w < busy_.size(); ++w) {
      if (!busy_[w] && !leased_[w]) return static_cast<int>(w);
    }
    return -1;
  }

  static int64_t CountLocked(const std::vector<bool>& flags) {
    int64_t n = 0;
    for (bool flag : flags) n += flag ? 1 : 0;
    return n;
  }

  // Constant after construction.
  Clock* const clock_;
  const int num_workers_;
  const std::function<void(int worker)> on_inline_;
  const bool allow_inline_;
  std::vector<std::thread> threads_;  // joined by the destructor only

  mutable absl::Mutex mu_;
  std::map<ItemKey, Work> items_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);    // [worker]: running an item
  std::vector<bool> leased_ ABSL_GUARDED_BY(mu_);  // [worker]: held by a TrainingLease
  bool shutting_down_ ABSL_GUARDED_BY(mu_) = false;
  // This thread is running work, inline or as a worker (of any scheduler).
  static thread_local bool running_work_;
};

thread_local bool DeviceScheduler::Impl::running_work_ = false;

absl::StatusOr<std::unique_ptr<DeviceScheduler>> DeviceScheduler::Create(const Options& options) {
  if (options.num_workers < 1 || options.num_workers > kMaxWorkers) {
    return absl::InvalidArgumentError(
        absl::StrCat("num_workers must be in [1, ", kMaxWorkers, "], got ", options.num_workers));
  }
  return std::unique_ptr<DeviceScheduler>(new DeviceScheduler(std::make_unique<Impl>(options)));
}

DeviceScheduler::DeviceScheduler(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

DeviceScheduler::~DeviceScheduler() = default;

void DeviceScheduler::Submit(uint32_t priority, absl::Time deadline, Work work) {
  impl_->Submit(priority, deadline, std::move(work));
}

absl::StatusOr<DeviceScheduler::TrainingLease> DeviceScheduler::AcquireTrainingLease(
    absl::Time deadline) {
  absl::StatusOr<int> worker = impl_->AcquireLease(deadline);
  if (!worker.ok()) return worker.status();
  return TrainingLease(this, *worker);
}

void DeviceScheduler::ReleaseLease(int worker) { impl_->ReleaseLease(worker); }

bool DeviceScheduler::TryStartInline(const HeldWork& work) { return impl_->TryStartInline(work); }

bool DeviceScheduler::TryRunInline(const Work& work) {
  return impl_->TryStartInline([&work](int worker, SlotHold hold) {
    work(worker, /*cancelled=*/false);
    hold.Release();
  });
}

DeviceScheduler::SlotHold::SlotHold(SlotHold&& other) noexcept
    : impl_(other.impl_), worker_(other.worker_) {
  other.impl_ = nullptr;
}

DeviceScheduler::SlotHold& DeviceScheduler::SlotHold::operator=(SlotHold&& other) noexcept {
  if (this != &other) {
    Release();
    impl_ = other.impl_;
    worker_ = other.worker_;
    other.impl_ = nullptr;
  }
  return *this;
}

void DeviceScheduler::SlotHold::Release() {
  if (impl_ == nullptr) return;
  Impl* impl = impl_;
  impl_ = nullptr;
  impl->ReleaseSlot(worker_);
}

void DeviceScheduler::Shutdown() { impl_->Shutdown(); }

int DeviceScheduler::num_workers() const { return impl_->num_workers(); }
int64_t DeviceScheduler::queued() const { return impl_->queued(); }
int64_t DeviceScheduler::busy_workers() const { return impl_->busy_workers(); }
int64_t DeviceScheduler::leased_workers() const { return impl_->leased_workers(); }

DeviceScheduler::TrainingLease::TrainingLease(TrainingLease&& other) noexcept
    : scheduler_(other.scheduler_), worker_(other.worker_) {
  other.scheduler_ = nullptr;
}

DeviceScheduler::TrainingLease::~TrainingLease() {
  if (scheduler_ != nullptr) scheduler_->ReleaseLease(worker_);
}

}  // namespace forecastd
