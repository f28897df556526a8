// The host communicators: a scaled sum over the ranks that leaves every rank with the same bits,
// a broadcast, and a group that never hangs on a lost rank (timeout, abort).
#include "backends/host_communicator.h"

#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

std::vector<std::unique_ptr<Communicator>> Group(int size, absl::Duration timeout) {
  auto group = MakeHostCommunicators(size, timeout);
  REQUIRE(group.ok());
  return *std::move(group);
}

// Runs rank r's `body` on a thread of its own for every rank; their statuses in rank order.
template <typename Body>
std::vector<absl::Status> OnThreads(int ranks, Body body) {
  std::vector<absl::Status> statuses(static_cast<size_t>(ranks));
  std::vector<std::thread> threads;
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] { statuses[static_cast<size_t>(r)] = body(r); });
  }
  for (std::thread& t : threads) t.join();
  return statuses;
}

TEST_CASE("A scaled sum over three ranks is the weighted sum, bitwise the same on every rank",
          "[unit][communicator]") {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 1001;
  const std::vector<float> scales = {0.25f, 0.5f, 0.25f};
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<std::vector<float>> buffers(kRanks, std::vector<float>(kCount));
  for (auto& b : buffers) {
    for (float& v : b) v = dist(gen);
  }
  std::vector<double> expected(kCount, 0.0);
  for (int r = 0; r < kRanks; ++r) {
    for (int64_t i = 0; i < kCount; ++i) {
      expected[static_cast<size_t>(i)] += static_cast<double>(scales[static_cast<size_t>(r)]) *
                                          buffers[static_cast<size_t>(r)][static_cast<size_t>(i)];
    }
  }
  auto group = Group(kRanks, absl::Seconds(30));
  const std::vector<absl::Status> statuses = OnThreads(kRanks, [&](int r) {
    return group[static_cast<size_t>(r)]->AllReduceScaledSum(
        buffers[static_cast<size_t>(r)].data(), kCount, scales[static_cast<size_t>(r)], nullptr);
  });
  for (const absl::Status& s : statuses) REQUIRE(s.ok());
  for (int64_t i = 0; i < kCount; ++i) {
    const auto k = static_cast<size_t>(i);
    REQUIRE(std::abs(buffers[0][k] - expected[k]) <= 1e-6 * (1.0 + std::abs(expected[k])));
    REQUIRE(buffers[1][k] == buffers[0][k]);
    REQUIRE(buffers[2][k] == buffers[0][k]);
  }
  REQUIRE(group[1]->rank() == 1);
  REQUIRE(group[1]->size() == kRanks);
}

TEST_CASE("A broadcast gives every rank the root's values", "[unit][communicator]") {
  auto group = Group(2, absl::Seconds(30));
  std::vector<std::vector<float>> buffers = {{1.0f, 2.0f, 3.0f}, {7.0f, 8.0f, 9.0f}};
  const auto statuses = OnThreads(2, [&](int r) {
    return group[static_cast<size_t>(r)]->Broadcast(buffers[static_cast<size_t>(r)].data(), 3,
                                                    /*root=*/1, nullptr);
  });
  REQUIRE(statuses[0].ok());
  REQUIRE(statuses[1].ok());
  REQUIRE(buffers[0] == std::vector<float>{7.0f, 8.0f, 9.0f});
  REQUIRE(buffers[1] == std::vector<float>{7.0f, 8.0f, 9.0f});
}

TEST_CASE("A rank that never joins ends the others' collective at the timeout, not in a hang",
          "[unit][communicator]") {
  auto group = Group(2, absl::Milliseconds(200));
  std::vector<float> data(4, 1.0f);
  const absl::Time start = absl::Now();
  const absl::Status status = group[0]->AllReduceScaledSum(data.data(), 4, 1.0f, nullptr);
  REQUIRE(status.code() == absl::StatusCode::kDeadlineExceeded);
  REQUIRE(absl::Now() - start < absl::Seconds(10));
  // The group is over: the late rank is told so at once.
  REQUIRE(group[1]->AllReduceScaledSum(data.data(), 4, 1.0f, nullptr).code() ==
          absl::StatusCode::kUnavailable);
}

TEST_CASE("Abort from any thread ends a rank's wait with UNAVAILABLE", "[unit][communicator]") {
  auto group = Group(2, absl::Seconds(60));
  std::vector<float> data(4, 1.0f);
  absl::Status status;
  std::thread waiter([&] { status = group[0]->AllReduceScaledSum(data.data(), 4, 1.0f, nullptr); });
  absl::SleepFor(absl::Milliseconds(50));
  group[1]->Abort();
  group[1]->Abort();  // idempotent
  waiter.join();
  REQUIRE(status.code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("Ranks that post different counts all fail, none hangs", "[unit][communicator]") {
  auto group = Group(2, absl::Seconds(30));
  std::vector<float> a(4, 1.0f), b(5, 1.0f);
  const auto statuses = OnThreads(2, [&](int r) {
    return r == 0 ? group[0]->AllReduceScaledSum(a.data(), 4, 1.0f, nullptr)
                  : group[1]->AllReduceScaledSum(b.data(), 5, 1.0f, nullptr);
  });
  REQUIRE(statuses[0].code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(statuses[1].code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Bad groups and device streams are refused", "[unit][communicator]") {
  REQUIRE(MakeHostCommunicators(0).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(MakeHostCommunicators(2, absl::ZeroDuration()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  auto group = Group(1, absl::Seconds(1));
  float x = 1.0f;
  int not_a_stream = 0;
  REQUIRE(group[0]->AllReduceScaledSum(&x, 1, 1.0f, &not_a_stream).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(group[0]->AllReduceScaledSum(&x, 1, 0.5f, nullptr).ok());
  REQUIRE(x == 0.5f);
}

}  // namespace
}  // namespace forecastd
