#include "engine/serving/device_scheduler.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <map>
#include <memory>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/cpu_helpers.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {
constexpr int kMaxWorkers = 1024;
// A lent worker and a team's borrower spin this many times before yielding the core.
constexpr int kSpinsBeforeYield = 1 << 14;
// How long a worker given back by a team stays awake for the next one.
constexpr std::chrono::microseconds kLinger{300};
}  // namespace

// Each worker thread runs WorkerLoop(): it runs its share of a team it is lent to, else takes
// the first item of items_ unless its slot is leased or lent. Invariants (under mu_): a worker
// is at most one of busy, leased and lent; a lease is granted, and helpers lent, only while
// items_ is empty; nothing enters items_ once shutting_down_ is set, and a worker exits only
// when shutting_down_ is set, items_ is empty and it is not lent.
class DeviceScheduler::Impl final : public cpu::CpuHelpers {
 public:
  explicit Impl(const Options& options)
      : clock_(options.clock != nullptr ? options.clock : Clock::Real()),
        num_workers_(options.num_workers),
        on_inline_(options.on_inline),
        allow_inline_(options.allow_inline),
        max_helpers_(options.max_helpers),
        busy_(static_cast<size_t>(options.num_workers), false),
        leased_(static_cast<size_t>(options.num_workers), false),
        lent_(static_cast<size_t>(options.num_workers), false),
        ports_(new Port[static_cast<size_t>(options.num_workers)]) {
    threads_.reserve(static_cast<size_t>(num_workers_));
    for (int w = 0; w < num_workers_; ++w) {
      threads_.emplace_back([this, w, start = options.on_worker_start] {
        if (start) start(w);
        WorkerLoop(w);
      });
    }
  }

  ~Impl() override {
    Shutdown();
    for (std::thread& thread : threads_) thread.join();
  }

  void Submit(uint32_t priority, absl::Time deadline, Work work) {
    {
      absl::MutexLock lock(&mu_);
      if (!shutting_down_) {
        items_.emplace(ItemKey(priority, deadline, next_seq_++), std::move(work));
        queued_.store(static_cast<int64_t>(items_.size()), std::memory_order_relaxed);
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
    cpu::CpuHelpers* const previous = cpu::SetThisThreadCpuHelpers(HelpersToInstall());
    work(worker, SlotHold(this, worker));
    cpu::SetThisThreadCpuHelpers(previous);
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
  int64_t lent_workers() const {
    absl::MutexLock lock(&mu_);
    return CountLocked(lent_);
  }
  int64_t lent_teams() const {
    absl::MutexLock lock(&mu_);
    return lent_teams_;
  }

  std::unique_ptr<cpu::CpuTeam> Borrow(int threads) override {
    // Under load (work queued), without taking mu_: every item's recurrent layers ask.
    if (queued_.load(std::memory_order_relaxed) > 0) return nullptr;
    std::vector<int> helpers;
    {
      absl::MutexLock lock(&mu_);
      if (shutting_down_ || !items_.empty()) return nullptr;
      const int64_t taken = CountLocked(busy_) + CountLocked(leased_) + CountLocked(lent_);
      const int64_t wanted = std::min<int64_t>(
          {int64_t{threads} - 1, int64_t{max_helpers_}, num_workers_ / 2 - taken});
      // Workers still awake from an earlier team first: they start at once.
      for (const bool awake : {true, false}) {
        for (size_t w = 0; w < busy_.size() && static_cast<int64_t>(helpers.size()) < wanted; ++w) {
          if (!busy_[w] && !leased_[w] && !lent_[w] &&
              ports_[w].lingering.load(std::memory_order_relaxed) == awake) {
            lent_[w] = true;
            ports_[w].lent.store(true, std::memory_order_release);
            helpers.push_back(static_cast<int>(w));
          }
        }
      }
      if (!helpers.empty()) ++lent_teams_;
    }
    if (helpers.empty()) return nullptr;
    return std::make_unique<Team>(this, std::move(helpers));
  }

 private:
  // Lower first: priority level, then deadline, then submission order.
  using ItemKey = std::tuple<uint32_t, absl::Time, uint64_t>;

  // A lent worker's share of a team's region: fn(member); `pending` counts the shares not yet
  // done.
  struct Share {
    absl::FunctionRef<void(int)>* fn;
    int member;
    std::atomic<int>* pending;
  };

  // What a lent worker watches without mu_: whether it is lent, the share posted to it, and
  // whether it is still awake after its last team (lingering), so that a team borrowed again
  // soon, as by the next layer of the same forecast, starts without waking anyone.
  struct alignas(64) Port {
    std::atomic<bool> lent{false};
    std::atomic<Share*> share{nullptr};
    std::atomic<bool> lingering{false};
  };

  // Workers lent to one borrower, given back when it is destroyed.
  class Team final : public cpu::CpuTeam {
   public:
    Team(Impl* impl, std::vector<int> helpers) : impl_(impl), helpers_(std::move(helpers)) {}
    ~Team() override { impl_->GiveBack(helpers_); }
    int size() const override { return static_cast<int>(helpers_.size()) + 1; }
    void Run(absl::FunctionRef<void(int member)> fn) override { impl_->RunTeam(helpers_, fn); }

   private:
    Impl* const impl_;
    const std::vector<int> helpers_;
  };

  void RunTeam(const std::vector<int>& helpers, absl::FunctionRef<void(int)> fn) {
    std::atomic<int> pending{static_cast<int>(helpers.size())};
    std::vector<Share> shares;
    shares.reserve(helpers.size());
    for (size_t i = 0; i < helpers.size(); ++i) {
      shares.push_back(Share{&fn, static_cast<int>(i) + 1, &pending});
      ports_[static_cast<size_t>(helpers[i])].share.store(&shares.back(),
                                                          std::memory_order_release);
    }
    fn(0);
    // The members end together (their work waits for each other), so this wait is short.
    for (int spins = 0; pending.load(std::memory_order_acquire) > 0; ++spins) SpinOrYield(spins);
  }

  void GiveBack(const std::vector<int>& helpers) {
    absl::MutexLock lock(&mu_);
    for (const int w : helpers) {
      lent_[static_cast<size_t>(w)] = false;
      ports_[static_cast<size_t>(w)].lent.store(false, std::memory_order_release);
    }
  }

  // While lent: runs the shares posted to the worker until it is given back, then stays awake
  // for kLinger in case it is lent again, unless work is queued meanwhile (the worker then goes
  // back to take it). Called without mu_.
  void Help(size_t w) {
    Port& port = ports_[w];
    while (true) {
      for (int spins = 0; port.lent.load(std::memory_order_acquire); ++spins) {
        if (port.share.load(std::memory_order_relaxed) != nullptr) {
          Share* const share = port.share.exchange(nullptr, std::memory_order_acq_rel);
          (*share->fn)(share->member);
          share->pending->fetch_sub(1, std::memory_order_release);
          spins = 0;
        } else {
          SpinOrYield(spins);
        }
      }
      port.lingering.store(true, std::memory_order_relaxed);
      const auto until = std::chrono::steady_clock::now() + kLinger;
      for (int spins = 0;
           !port.lent.load(std::memory_order_acquire) &&
           queued_.load(std::memory_order_relaxed) == 0 && std::chrono::steady_clock::now() < until;
           ++spins) {
        // Yielding once it has spun a while: a core others want is not held for all of kLinger.
        SpinOrYield(spins);
      }
      port.lingering.store(false, std::memory_order_relaxed);
      if (!port.lent.load(std::memory_order_acquire)) return;
    }
  }

  // The `spins`-th turn of a wait: a pause while it is short, then yielding the core.
  static void SpinOrYield(int spins) {
    if (spins >= kSpinsBeforeYield) {
      std::this_thread::yield();
      return;
    }
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  }

  // What a thread running an item installs (cpu::SetThisThreadCpuHelpers).
  cpu::CpuHelpers* HelpersToInstall() { return max_helpers_ > 0 ? this : nullptr; }

  void WorkerLoop(int worker) {
    const size_t w = static_cast<size_t>(worker);
    absl::MutexLock lock(&mu_);
    while (true) {
      auto ready = [this, w]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
        // busy_[w] here: the slot runs inline work on another thread (TryRunInline).
        return lent_[w] || (!leased_[w] && !busy_[w] && !items_.empty()) ||
               (shutting_down_ && items_.empty());
      };
      mu_.Await(absl::Condition(&ready));
      if (lent_[w]) {
        mu_.Unlock();
        Help(w);
        mu_.Lock();
        continue;
      }
      if (items_.empty()) return;  // shutting down with nothing left to run
      auto first = items_.begin();
      Work work = std::move(first->second);
      items_.erase(first);
      queued_.store(static_cast<int64_t>(items_.size()), std::memory_order_relaxed);
      busy_[w] = true;
      mu_.Unlock();
      running_work_ = true;
      cpu::CpuHelpers* const previous = cpu::SetThisThreadCpuHelpers(HelpersToInstall());
      work(worker, /*cancelled=*/false);
      cpu::SetThisThreadCpuHelpers(previous);
      running_work_ = false;
      work = nullptr;  // destroy what it captured before reporting idle
      mu_.Lock();
      busy_[w] = false;
    }
  }

  int FindFreeWorkerLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (size_t w = 0; w < busy_.size(); ++w) {
      if (!busy_[w] && !leased_[w] && !lent_[w]) return static_cast<int>(w);
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
  const int max_helpers_;
  std::vector<std::thread> threads_;  // joined by the destructor only

  mutable absl::Mutex mu_;
  std::map<ItemKey, Work> items_ ABSL_GUARDED_BY(mu_);
  uint64_t next_seq_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<bool> busy_ ABSL_GUARDED_BY(mu_);    // [worker]: running an item
  std::vector<bool> leased_ ABSL_GUARDED_BY(mu_);  // [worker]: held by a TrainingLease
  std::vector<bool> lent_ ABSL_GUARDED_BY(mu_);    // [worker]: a helper of a Team
  int64_t lent_teams_ ABSL_GUARDED_BY(mu_) = 0;
  const std::unique_ptr<Port[]> ports_;  // [worker]; lent_ mirrored in ports_[w].lent
  std::atomic<int64_t> queued_{0};       // items_.size(), for lingering workers
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
  if (options.max_helpers < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_helpers must be >= 0, got ", options.max_helpers));
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
int64_t DeviceScheduler::lent_workers() const { return impl_->lent_workers(); }
int64_t DeviceScheduler::lent_teams() const { return impl_->lent_teams(); }

DeviceScheduler::TrainingLease::TrainingLease(TrainingLease&& other) noexcept
    : scheduler_(other.scheduler_), worker_(other.worker_) {
  other.scheduler_ = nullptr;
}

DeviceScheduler::TrainingLease::~TrainingLease() {
  if (scheduler_ != nullptr) scheduler_->ReleaseLease(worker_);
}

}  // namespace forecastd
