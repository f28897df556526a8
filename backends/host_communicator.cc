#include "backends/host_communicator.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"

namespace forecastd {
namespace {

// What the ranks of one group share.
class HostGroup {
 public:
  HostGroup(int size, absl::Duration timeout)
      : size_(size), timeout_(timeout), posted_(static_cast<size_t>(size)) {}

  int size() const { return size_; }

  // What a rank offers to the collective in progress.
  struct Post {
    float* data = nullptr;
    int64_t count = 0;
    float scale = 0.0f;
  };

  // Posts rank `rank`'s buffer and waits until every rank has posted; then the posts stay
  // readable until the next Barrier. UNAVAILABLE once aborted; DEADLINE_EXCEEDED (aborting)
  // after the timeout.
  absl::Status PostAndWait(int rank, const Post& post) {
    {
      absl::MutexLock lock(&mu_);
      posted_[static_cast<size_t>(rank)] = post;
    }
    return Barrier(rank);
  }
  Post posted(int rank) const {
    absl::MutexLock lock(&mu_);
    return posted_[static_cast<size_t>(rank)];
  }

  // Waits until every rank has arrived at the same barrier.
  absl::Status Barrier(int rank) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return Aborted();
    const int64_t generation = generation_;
    if (++arrived_ == size_) {
      arrived_ = 0;
      ++generation_;
      return absl::OkStatus();
    }
    const auto released = [this, generation]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
      return aborted_ || generation_ != generation;
    };
    if (!mu_.AwaitWithTimeout(absl::Condition(&released), timeout_)) {
      aborted_ = true;
      reason_ = absl::StrCat("rank ", rank, " waited ", absl::FormatDuration(timeout_),
                             " for the other ranks of its group");
      return absl::DeadlineExceededError(reason_);
    }
    if (generation_ != generation) return absl::OkStatus();
    return Aborted();
  }

  void SetTimeout(absl::Duration timeout) {
    absl::MutexLock lock(&mu_);
    timeout_ = timeout;
  }

  void Abort(int rank) {
    absl::MutexLock lock(&mu_);
    if (aborted_) return;
    aborted_ = true;
    reason_ = absl::StrCat("rank ", rank, " ended the group");
  }

 private:
  absl::Status Aborted() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return absl::UnavailableError(absl::StrCat("the ranks' group was aborted: ", reason_));
  }

  const int size_;
  mutable absl::Mutex mu_;
  absl::Duration timeout_ ABSL_GUARDED_BY(mu_);
  std::vector<Post> posted_ ABSL_GUARDED_BY(mu_);
  int arrived_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool aborted_ ABSL_GUARDED_BY(mu_) = false;
  std::string reason_ ABSL_GUARDED_BY(mu_);
};

class HostCommunicator final : public Communicator {
 public:
  HostCommunicator(std::shared_ptr<HostGroup> group, int rank)
      : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }

  absl::Status AllReduceScaledSum(float* data, int64_t count, float scale, void* stream) override {
    if (stream != nullptr) return HostOnly();
    if (count < 0) return absl::InvalidArgumentError("a negative count");
    if (absl::Status s = group_->PostAndWait(rank_, {data, count, scale}); !s.ok()) return s;
    absl::Status status = CheckCounts(count);
    if (status.ok()) {
      // The same arithmetic in the same order on every rank: bitwise the same sums.
      sum_.assign(static_cast<size_t>(count), 0.0f);
      for (int r = 0; r < size(); ++r) {
        const HostGroup::Post post = group_->posted(r);
        for (int64_t i = 0; i < count; ++i)
          sum_[static_cast<size_t>(i)] += post.scale * post.data[i];
      }
    }
    // Nobody writes its buffer before every rank has read them all.
    if (absl::Status s = group_->Barrier(rank_); !s.ok()) return s;
    if (!status.ok()) return status;
    std::copy(sum_.begin(), sum_.end(), data);
    return absl::OkStatus();
  }

  absl::Status Broadcast(float* data, int64_t count, int root, void* stream) override {
    if (stream != nullptr) return HostOnly();
    if (root < 0 || root >= size()) {
      return absl::InvalidArgumentError(absl::StrCat("broadcast from rank ", root, " of ", size()));
    }
    if (absl::Status s = group_->PostAndWait(rank_, {data, count, 1.0f}); !s.ok()) return s;
    absl::Status status = CheckCounts(count);
    if (status.ok() && rank_ != root) {
      const float* from = group_->posted(root).data;
      std::copy(from, from + count, data);
    }
    if (absl::Status s = group_->Barrier(rank_); !s.ok()) return s;
    return status;
  }

  absl::Status Wait(void* stream) override {
    return stream == nullptr ? absl::OkStatus() : HostOnly();
  }

  void Abort() override { group_->Abort(rank_); }
  // The group's waits share one timeout: the last rank to set it wins.
  void SetTimeout(absl::Duration timeout) override { group_->SetTimeout(timeout); }

 private:
  static absl::Status HostOnly() {
    return absl::InvalidArgumentError(
        "a host communicator works on host memory only (a stream was given)");
  }

  // INVALID_ARGUMENT on every rank when the ranks posted different counts.
  absl::Status CheckCounts(int64_t count) const {
    for (int r = 0; r < size(); ++r) {
      if (group_->posted(r).count != count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "rank ", r, " posted ", group_->posted(r).count, " floats, rank ", rank_, " ", count));
      }
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<HostGroup> group_;
  const int rank_;
  std::vector<float> sum_;
};

}  // namespace

absl::StatusOr<std::vector<std::unique_ptr<Communicator>>> MakeHostCommunicators(
    int size, absl::Duration timeout) {
  if (size < 1) return absl::InvalidArgumentError(absl::StrCat("a group of ", size, " ranks"));
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("the group's timeout must be positive");
  }
  auto group = std::make_shared<HostGroup>(size, timeout);
  std::vector<std::unique_ptr<Communicator>> ranks;
  for (int r = 0; r < size; ++r) ranks.push_back(std::make_unique<HostCommunicator>(group, r));
  return ranks;
}

}  // namespace forecastd
