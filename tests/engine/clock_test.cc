#include "engine/clock.h"

#include <atomic>
#include <thread>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

TEST_CASE("FakeClock moves only when told, and never backwards", "[unit][clock]") {
  FakeClock clock;
  const absl::Time start = clock.Now();
  REQUIRE(clock.Now() == start);
  clock.Advance(absl::Microseconds(250));
  REQUIRE(clock.Now() - start == absl::Microseconds(250));
  clock.Advance(absl::Seconds(-5));
  REQUIRE(clock.Now() - start == absl::Microseconds(250));
  clock.SetTime(start);  // earlier than now: ignored
  REQUIRE(clock.Now() - start == absl::Microseconds(250));
  clock.SetTime(start + absl::Seconds(3));
  REQUIRE(clock.Now() - start == absl::Seconds(3));
}

TEST_CASE("FakeClock wakes a waiter exactly when its deadline passes", "[unit][clock]") {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  std::atomic<int> result{-1};
  const absl::Time deadline = clock.Now() + absl::Milliseconds(10);

  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result = clock.AwaitWithDeadline(&mu, absl::Condition(&ready), deadline) ? 1 : 0;
  });
  clock.BlockUntilWaiters(1);
  clock.Advance(absl::Milliseconds(9));
  // Still one waiter: 9 ms of fake time is short of the deadline.
  REQUIRE(clock.num_waiters() == 1);
  REQUIRE(result.load() == -1);
  clock.Advance(absl::Milliseconds(1));
  waiter.join();
  REQUIRE(result.load() == 0);  // timed out, condition false
  REQUIRE(clock.num_waiters() == 0);
}

TEST_CASE("FakeClock waiters return early when their condition becomes true", "[unit][clock]") {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  std::atomic<int> result{-1};
  std::thread waiter([&] {
    absl::MutexLock lock(&mu);
    result =
        clock.AwaitWithDeadline(&mu, absl::Condition(&ready), clock.Now() + absl::Hours(1)) ? 1 : 0;
  });
  clock.BlockUntilWaiters(1);
  {
    absl::MutexLock lock(&mu);
    ready = true;
  }
  waiter.join();
  REQUIRE(result.load() == 1);
}

TEST_CASE("FakeClock SleepUntil returns once time reaches the deadline", "[unit][clock]") {
  FakeClock clock;
  const absl::Time deadline = clock.Now() + absl::Seconds(30);
  std::atomic<bool> woke{false};
  std::thread sleeper([&] {
    clock.SleepUntil(deadline);
    woke = true;
  });
  clock.BlockUntilWaiters(1);
  REQUIRE(!woke.load());
  clock.SetTime(deadline);
  sleeper.join();
  REQUIRE(woke.load());
  REQUIRE(clock.Now() == deadline);
}

TEST_CASE("A deadline already in the past does not block", "[unit][clock]") {
  FakeClock clock;
  absl::Mutex mu;
  bool ready = false;
  absl::MutexLock lock(&mu);
  REQUIRE_FALSE(clock.AwaitWithDeadline(&mu, absl::Condition(&ready), clock.Now()));
  RealClock real;
  REQUIRE_FALSE(real.AwaitWithDeadline(&mu, absl::Condition(&ready), absl::InfinitePast()));
}

}  // namespace
}  // namespace forecastd
