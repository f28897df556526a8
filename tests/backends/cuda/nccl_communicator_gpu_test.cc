// Needs GPUs (two for most cases; each case says so and returns where there are fewer). The NCCL
// communicator (backends/cuda/nccl_communicator.h) with one rank per GPU, a thread each: the
// scaled-sum all-reduce against a host-computed sum and bitwise the same on every rank, broadcast,
// and a rank that never joins or stops taking part ending the others' waits within the timeout.
#include "backends/cuda/nccl_communicator.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/cuda/cuda_status.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

int GpuCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

// False, with a visible note, where this host has fewer than `needed` GPUs.
bool HasGpus(int needed) {
  const int count = GpuCount();
  if (count >= needed) return true;
  WARN("SKIPPED: needs " << needed << " GPUs, this host has " << count);
  return false;
}

std::vector<float> RandomFloats(int64_t count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> uniform(-1.0f, 1.0f);
  std::vector<float> values(static_cast<size_t>(count));
  for (float& v : values) v = uniform(rng);
  return values;
}

// One rank's stream and device buffer of `count` floats, on the calling thread's current GPU.
class RankBuffer {
 public:
  static absl::StatusOr<std::unique_ptr<RankBuffer>> Create(int64_t count) {
    auto buffer = std::unique_ptr<RankBuffer>(new RankBuffer(count));
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&buffer->stream_, cudaStreamNonBlocking));
    CUDA_RETURN_IF_ERROR(cudaMalloc(reinterpret_cast<void**>(&buffer->data_),
                                    static_cast<size_t>(count) * sizeof(float)));
    return buffer;
  }
  ~RankBuffer() {
    if (data_ != nullptr) cudaFree(data_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }

  float* data() const { return data_; }
  cudaStream_t stream() const { return stream_; }

  absl::Status Upload(const std::vector<float>& host) {
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(data_, host.data(), host.size() * sizeof(float),
                                         cudaMemcpyHostToDevice, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }
  absl::Status Download(std::vector<float>* host) {
    host->resize(static_cast<size_t>(count_));
    CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host->data(), data_, host->size() * sizeof(float),
                                         cudaMemcpyDeviceToHost, stream_));
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream_));
    return absl::OkStatus();
  }

 private:
  explicit RankBuffer(int64_t count) : count_(count) {}

  int64_t count_;
  float* data_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

// What one rank's thread ends with (Catch2 assertions stay on the test's own thread).
struct RankOutcome {
  absl::Status status;
  std::vector<float> result;
};

using RankBody = std::function<absl::Status(int rank, Communicator& comm, RankBuffer& buffer,
                                            std::vector<float>* result)>;

// Runs `body` on ranks 0..size-1, one thread each with rank r on cuda:r, each with its own
// communicator (options.timeout = `timeout`) and a buffer of `count` floats. The communicator is
// destroyed on its rank's thread, as a training job's rank would.
std::vector<RankOutcome> RunRanks(int size, int64_t count, absl::Duration timeout,
                                  const RankBody& body) {
  std::vector<RankOutcome> outcomes(static_cast<size_t>(size));
  const absl::StatusOr<std::string> id = NewNcclUniqueId();
  if (!id.ok()) {
    for (RankOutcome& outcome : outcomes) outcome.status = id.status();
    return outcomes;
  }
  std::vector<std::thread> threads;
  for (int rank = 0; rank < size; ++rank) {
    threads.emplace_back([&, rank] {
      RankOutcome& outcome = outcomes[static_cast<size_t>(rank)];
      outcome.status = [&]() -> absl::Status {
        CUDA_RETURN_IF_ERROR(cudaSetDevice(rank));
        NcclCommunicatorOptions options;
        options.device = rank;
        options.rank = rank;
        options.size = size;
        options.unique_id = *id;
        options.timeout = timeout;
        ASSIGN_OR_RETURN(std::unique_ptr<Communicator> comm, CreateNcclCommunicator(options));
        ASSIGN_OR_RETURN(std::unique_ptr<RankBuffer> buffer, RankBuffer::Create(count));
        return body(rank, *comm, *buffer, &outcome.result);
      }();
    });
  }
  for (std::thread& thread : threads) thread.join();
  return outcomes;
}

void RequireAllOk(const std::vector<RankOutcome>& outcomes) {
  for (size_t rank = 0; rank < outcomes.size(); ++rank) {
    INFO("rank " << rank << ": " << outcomes[rank].status.ToString());
    REQUIRE(outcomes[rank].status.ok());
  }
}

// Fulfils a promise on every path out of a scope (a rank's body that fails early included), so
// a peer waiting on it never waits forever. Does nothing for nullptr.
class SignalOnExit {
 public:
  explicit SignalOnExit(std::promise<void>* done) : done_(done) {}
  SignalOnExit(const SignalOnExit&) = delete;
  SignalOnExit& operator=(const SignalOnExit&) = delete;
  ~SignalOnExit() {
    if (done_ != nullptr) done_->set_value();
  }

 private:
  std::promise<void>* done_;
};

bool BitwiseEqual(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST_CASE("AllReduceScaledSum sums each rank's scaled buffer, bitwise the same on every rank") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 1000003;  // odd, so no rank's share is a whole number of vectors
  const std::vector<float> inputs[2] = {RandomFloats(kCount, 1), RandomFloats(kCount, 2)};
  const float scales[2] = {0.25f, 0.75f};

  const std::vector<RankOutcome> outcomes =
      RunRanks(2, kCount, absl::Seconds(60),
               [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
                 if (comm.rank() != rank || comm.size() != 2) {
                   return absl::InternalError("rank() or size() differs from the options");
                 }
                 RETURN_IF_ERROR(buffer.Upload(inputs[rank]));
                 RETURN_IF_ERROR(
                     comm.AllReduceScaledSum(buffer.data(), kCount, scales[rank], buffer.stream()));
                 RETURN_IF_ERROR(comm.Wait(buffer.stream()));
                 return buffer.Download(result);
               });
  RequireAllOk(outcomes);

  // |x - ref| <= atol + rtol * |ref| against the sum in double.
  constexpr double kTolerance = 1e-6;
  int64_t mismatches = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < kCount; ++i) {
    const double ref = double{scales[0]} * inputs[0][i] + double{scales[1]} * inputs[1][i];
    const double error = std::fabs(outcomes[0].result[i] - ref);
    worst = std::max(worst, error);
    if (error > kTolerance + kTolerance * std::fabs(ref)) ++mismatches;
  }
  INFO("worst absolute error " << worst);
  REQUIRE(mismatches == 0);
  REQUIRE(BitwiseEqual(outcomes[0].result, outcomes[1].result));
}

TEST_CASE("AllReduceScaledSum with scale 1 is the plain sum") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 4097;
  const std::vector<float> inputs[2] = {RandomFloats(kCount, 3), RandomFloats(kCount, 4)};
  const std::vector<RankOutcome> outcomes = RunRanks(
      2, kCount, absl::Seconds(60),
      [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
        RETURN_IF_ERROR(buffer.Upload(inputs[rank]));
        RETURN_IF_ERROR(comm.AllReduceScaledSum(buffer.data(), kCount, 1.0f, buffer.stream()));
        RETURN_IF_ERROR(comm.Wait(buffer.stream()));
        return buffer.Download(result);
      });
  RequireAllOk(outcomes);
  for (int64_t i = 0; i < kCount; ++i) {
    // Two float addends: the float sum is the correctly rounded one, whichever rank adds first.
    REQUIRE(outcomes[0].result[i] == inputs[0][i] + inputs[1][i]);
  }
  REQUIRE(BitwiseEqual(outcomes[0].result, outcomes[1].result));
}

TEST_CASE("Broadcast copies the root's buffer to every rank") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 100003;
  constexpr int kRoot = 1;
  const std::vector<float> inputs[2] = {RandomFloats(kCount, 5), RandomFloats(kCount, 6)};
  const std::vector<RankOutcome> outcomes =
      RunRanks(2, kCount, absl::Seconds(60),
               [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
                 RETURN_IF_ERROR(buffer.Upload(inputs[rank]));
                 RETURN_IF_ERROR(comm.Broadcast(buffer.data(), kCount, kRoot, buffer.stream()));
                 RETURN_IF_ERROR(comm.Wait(buffer.stream()));
                 return buffer.Download(result);
               });
  RequireAllOk(outcomes);
  REQUIRE(BitwiseEqual(outcomes[0].result, inputs[kRoot]));
  REQUIRE(BitwiseEqual(outcomes[1].result, inputs[kRoot]));
}

TEST_CASE("Collectives refuse host memory and a bad root, and keep the group") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 1024;
  const std::vector<RankOutcome> outcomes = RunRanks(
      2, kCount, absl::Seconds(60),
      [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
        std::vector<float> host(kCount, 1.0f);
        if (comm.AllReduceScaledSum(host.data(), kCount, 0.5f, nullptr).code() !=
                absl::StatusCode::kInvalidArgument ||
            comm.Broadcast(host.data(), kCount, 0, nullptr).code() !=
                absl::StatusCode::kInvalidArgument ||
            comm.Broadcast(buffer.data(), kCount, 2, buffer.stream()).code() !=
                absl::StatusCode::kInvalidArgument ||
            comm.AllReduceScaledSum(buffer.data(), -1, 0.5f, buffer.stream()).code() !=
                absl::StatusCode::kInvalidArgument) {
          return absl::InternalError("a bad argument was not refused with INVALID_ARGUMENT");
        }
        // Nothing was issued, so the group still works.
        RETURN_IF_ERROR(buffer.Upload(host));
        RETURN_IF_ERROR(comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream()));
        RETURN_IF_ERROR(comm.Wait(buffer.stream()));
        RETURN_IF_ERROR(comm.Wait(nullptr));
        return buffer.Download(result);
      });
  RequireAllOk(outcomes);
  for (const RankOutcome& outcome : outcomes) {
    REQUIRE(outcome.result == std::vector<float>(kCount, 1.0f));
  }
}

TEST_CASE("A rank that never joins makes CreateNcclCommunicator return DEADLINE_EXCEEDED") {
  if (!HasGpus(1)) return;
  const absl::StatusOr<std::string> id = NewNcclUniqueId();
  INFO(id.status().ToString());
  REQUIRE(id.ok());
  NcclCommunicatorOptions options;
  options.device = 0;
  options.rank = 0;
  options.size = 2;  // rank 1 never comes
  options.unique_id = *id;
  options.timeout = absl::Seconds(2);
  const auto start = std::chrono::steady_clock::now();
  const absl::StatusOr<std::unique_ptr<Communicator>> created = CreateNcclCommunicator(options);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  INFO(created.status().ToString() << " after " << seconds << " s");
  REQUIRE(created.status().code() == absl::StatusCode::kDeadlineExceeded);
  // A hang check, not a speed one: the answer comes at the timeout, not at NCCL's own.
  REQUIRE(seconds < 20.0);
}

TEST_CASE("A rank that stops taking part ends the other's wait within the timeout") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 1 << 20;
  constexpr absl::Duration kTimeout = absl::Seconds(3);
  std::promise<void> rank0_done;
  std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  struct Rank0Report {
    absl::Status stalled;  // the collective rank 1 did not join
    double stalled_seconds = 0.0;
    absl::Status after_abort_all_reduce;
    absl::Status after_abort_wait;
  } report;

  const std::vector<RankOutcome> outcomes = RunRanks(
      2, kCount, kTimeout,
      [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
        const SignalOnExit signal(rank == 0 ? &rank0_done : nullptr);
        // One collective together, so that NCCL's connections are up before rank 1 stops.
        RETURN_IF_ERROR(buffer.Upload(RandomFloats(kCount, 7 + rank)));
        RETURN_IF_ERROR(comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream()));
        RETURN_IF_ERROR(comm.Wait(buffer.stream()));
        if (rank == 1) {
          // Stops taking part; once rank 0 has given up, the job ends the group here too.
          rank0_done_future.wait();
          comm.Abort();
          return absl::OkStatus();
        }
        const auto start = std::chrono::steady_clock::now();
        report.stalled = comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream());
        if (report.stalled.ok()) report.stalled = comm.Wait(buffer.stream());
        report.stalled_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        comm.Abort();
        comm.Abort();
        report.after_abort_all_reduce =
            comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream());
        report.after_abort_wait = comm.Wait(buffer.stream());
        return absl::OkStatus();
      });
  RequireAllOk(outcomes);
  INFO("rank 0: " << report.stalled.ToString() << " after " << report.stalled_seconds << " s");
  REQUIRE((report.stalled.code() == absl::StatusCode::kDeadlineExceeded ||
           report.stalled.code() == absl::StatusCode::kUnavailable));
  REQUIRE(report.stalled_seconds < absl::ToDoubleSeconds(kTimeout) + 5.0);
  INFO(report.after_abort_all_reduce.ToString() << "; " << report.after_abort_wait.ToString());
  REQUIRE(report.after_abort_all_reduce.code() == absl::StatusCode::kUnavailable);
  REQUIRE(report.after_abort_wait.code() == absl::StatusCode::kUnavailable);
}

// How the "Abort from another thread" case hands rank 0's communicator to the aborting thread.
struct AbortHandOff {
  absl::Mutex mu;
  Communicator* waiting ABSL_GUARDED_BY(mu) = nullptr;  // rank 0's, while it waits
  bool aborted ABSL_GUARDED_BY(mu) = false;
  bool give_up ABSL_GUARDED_BY(mu) = false;  // rank 0 never got as far as waiting

  bool ReadyToAbort() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu) {
    return waiting != nullptr || give_up;
  }
};

TEST_CASE("Abort from another thread ends a rank's wait with UNAVAILABLE") {
  if (!HasGpus(2)) return;
  constexpr int64_t kCount = 1 << 20;
  // Rank 0 publishes its communicator while it waits on a collective rank 1 never joins; another
  // thread aborts it. Whether the abort lands before the all-reduce or during the wait, rank 0
  // must answer UNAVAILABLE long before its 60 s timeout.
  AbortHandOff hand_off;
  std::thread aborter([&] {
    Communicator* comm = nullptr;
    {
      absl::MutexLock lock(&hand_off.mu);
      hand_off.mu.Await(absl::Condition(&hand_off, &AbortHandOff::ReadyToAbort));
      comm = hand_off.waiting;
    }
    if (comm == nullptr) return;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    comm->Abort();
    absl::MutexLock lock(&hand_off.mu);
    hand_off.aborted = true;
  });

  std::promise<void> rank0_done;
  std::shared_future<void> rank0_done_future = rank0_done.get_future().share();
  absl::Status stalled;
  double stalled_seconds = 0.0;
  const std::vector<RankOutcome> outcomes = RunRanks(
      2, kCount, absl::Seconds(60),
      [&](int rank, Communicator& comm, RankBuffer& buffer, std::vector<float>* result) {
        const SignalOnExit signal(rank == 0 ? &rank0_done : nullptr);
        RETURN_IF_ERROR(buffer.Upload(RandomFloats(kCount, 9 + rank)));
        RETURN_IF_ERROR(comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream()));
        RETURN_IF_ERROR(comm.Wait(buffer.stream()));
        if (rank == 1) {
          rank0_done_future.wait();
          comm.Abort();
          return absl::OkStatus();
        }
        const auto start = std::chrono::steady_clock::now();
        {
          absl::MutexLock lock(&hand_off.mu);
          hand_off.waiting = &comm;
        }
        stalled = comm.AllReduceScaledSum(buffer.data(), kCount, 0.5f, buffer.stream());
        if (stalled.ok()) stalled = comm.Wait(buffer.stream());
        stalled_seconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        {
          // The aborter is done with this communicator before it is destroyed.
          absl::MutexLock lock(&hand_off.mu);
          hand_off.mu.Await(absl::Condition(&hand_off.aborted));
          hand_off.waiting = nullptr;
        }
        return absl::OkStatus();
      });
  {
    absl::MutexLock lock(&hand_off.mu);
    hand_off.give_up = true;
  }
  aborter.join();
  RequireAllOk(outcomes);
  INFO("rank 0: " << stalled.ToString() << " after " << stalled_seconds << " s");
  REQUIRE(stalled.code() == absl::StatusCode::kUnavailable);
  REQUIRE(stalled_seconds < 30.0);  // far below the 60 s timeout
}

}  // namespace
}  // namespace forecastd
