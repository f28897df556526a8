// Needs a GPU. The caching device allocator: its size classes, reuse without new cudaMalloc
// calls after warm-up, statistics, repeated load/unload cycles returning to the baseline, its
// limit, and out-of-memory answered with RESOURCE_EXHAUSTED (the allocator working on after).
#include "backends/cuda/cuda_allocator.h"

#include <cuda_runtime_api.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

constexpr int64_t kKiB = 1024, kMiB = 1024 * 1024;

std::unique_ptr<CudaAllocator> MakeAllocator(const CudaAllocator::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<CudaAllocator>> allocator = CudaAllocator::Create(options);
  INFO(allocator.status().ToString());
  REQUIRE(allocator.ok());
  return std::move(*allocator);
}

DeviceBuffer RequireAllocate(CudaAllocator& allocator, int64_t bytes) {
  absl::StatusOr<DeviceBuffer> buffer = allocator.Allocate(bytes);
  INFO(bytes << " bytes: " << buffer.status().ToString());
  REQUIRE(buffer.ok());
  REQUIRE(buffer->size_bytes() == bytes);
  return std::move(*buffer);
}

// Writes a pattern into the buffer and reads it back: the memory is real device memory.
void RequireUsable(const DeviceBuffer& buffer) {
  const int64_t n = buffer.size_bytes();
  REQUIRE(cudaMemset(buffer.data(), 0x5a, static_cast<size_t>(n)) == cudaSuccess);
  std::vector<unsigned char> host(static_cast<size_t>(n));
  REQUIRE(cudaMemcpy(host.data(), buffer.data(), host.size(), cudaMemcpyDeviceToHost) ==
          cudaSuccess);
  for (const unsigned char b : host) REQUIRE(b == 0x5a);
}

TEST_CASE("CudaAllocator rounds requests to its size classes") {
  REQUIRE(CudaAllocator::BlockBytes(1) == 512);
  REQUIRE(CudaAllocator::BlockBytes(512) == 512);
  REQUIRE(CudaAllocator::BlockBytes(513) == 1024);
  REQUIRE(CudaAllocator::BlockBytes(1000 * kKiB) == 1000 * kKiB);
  REQUIRE(CudaAllocator::BlockBytes(kMiB - 1) == kMiB);
  REQUIRE(CudaAllocator::BlockBytes(kMiB) == 2 * kMiB);
  REQUIRE(CudaAllocator::BlockBytes(2 * kMiB) == 2 * kMiB);
  REQUIRE(CudaAllocator::BlockBytes(2 * kMiB + 1) == 4 * kMiB);
  REQUIRE(CudaAllocator::BlockBytes(100 * kMiB + 3) == 102 * kMiB);

  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  const DeviceBuffer small = RequireAllocate(*allocator, 1000);
  REQUIRE(small.block_bytes() == 1024);
  REQUIRE(reinterpret_cast<uintptr_t>(small.data()) % 256 == 0);
  const DeviceBuffer large = RequireAllocate(*allocator, 3 * kMiB);
  REQUIRE(large.block_bytes() == 4 * kMiB);
  RequireUsable(small);
  RequireUsable(large);
  REQUIRE(allocator->stats().bytes_in_use == 1024 + 4 * kMiB);
}

TEST_CASE("CudaAllocator refuses negative sizes and gives empty buffers for zero") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  REQUIRE(allocator->Allocate(-1).status().code() == absl::StatusCode::kInvalidArgument);
  absl::StatusOr<DeviceBuffer> empty = allocator->Allocate(0);
  REQUIRE(empty.ok());
  REQUIRE(empty->empty());
  REQUIRE(empty->data() == nullptr);
  REQUIRE(allocator->stats().cuda_malloc_calls == 0);
  REQUIRE(CudaAllocator::Create({.device = -1}).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(CudaAllocator::Create({.device = 0, .limit_bytes = -1}).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CudaAllocator reuses freed blocks without calling cudaMalloc again") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  void* first = nullptr;
  for (int i = 0; i < 100; ++i) {
    // Sizes of one class (769..1024 B) share blocks; so do 3..4 MiB.
    DeviceBuffer small = RequireAllocate(*allocator, 769 + (i * 7) % 256);
    DeviceBuffer large = RequireAllocate(*allocator, 3 * kMiB + i);
    if (i == 0) first = small.data();
    REQUIRE(small.data() == first);
  }
  const CudaAllocator::Stats stats = allocator->stats();
  REQUIRE(stats.cuda_malloc_calls == 2);
  REQUIRE(stats.allocations == 200);
  REQUIRE(stats.cache_hits == 198);
  REQUIRE(stats.bytes_in_use == 0);
  REQUIRE(stats.buffers_in_use == 0);
  REQUIRE(stats.bytes_cached == 1024 + 4 * kMiB);
  REQUIRE(stats.peak_bytes_in_use == 1024 + 4 * kMiB);
}

TEST_CASE("CudaAllocator's statistics follow allocations, frees and ReleaseCached") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  {
    DeviceBuffer a = RequireAllocate(*allocator, 100);
    DeviceBuffer b = RequireAllocate(*allocator, 5 * kMiB);
    CudaAllocator::Stats stats = allocator->stats();
    REQUIRE(stats.bytes_in_use == 512 + 6 * kMiB);
    REQUIRE(stats.buffers_in_use == 2);
    REQUIRE(stats.bytes_cached == 0);
    a.Reset();
    REQUIRE(a.empty());
    stats = allocator->stats();
    REQUIRE(stats.bytes_in_use == 6 * kMiB);
    REQUIRE(stats.bytes_cached == 512);
    // Moving a buffer moves ownership; the moved-from one frees nothing.
    DeviceBuffer c = std::move(b);
    REQUIRE(b.empty());
    REQUIRE(allocator->stats().bytes_in_use == 6 * kMiB);
  }
  CudaAllocator::Stats stats = allocator->stats();
  REQUIRE(stats.bytes_in_use == 0);
  REQUIRE(stats.bytes_cached == 512 + 6 * kMiB);
  REQUIRE(stats.peak_bytes_in_use == 512 + 6 * kMiB);
  REQUIRE(allocator->ReleaseCached().ok());
  stats = allocator->stats();
  REQUIRE(stats.bytes_cached == 0);
  REQUIRE(stats.cuda_free_calls == 2);
  REQUIRE(stats.cuda_malloc_calls == 2);
}

TEST_CASE("100 load/unload cycles leave the allocator at its baseline") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  // Something that stays loaded throughout, as another model would.
  const DeviceBuffer resident = RequireAllocate(*allocator, 7 * kMiB);
  const int64_t baseline = allocator->stats().bytes_in_use;
  int64_t mallocs_after_warmup = 0;
  for (int cycle = 0; cycle < 100; ++cycle) {
    // Load: a parameter arena, gradients and moments mirroring it, a stream workspace, and
    // activations of a few batch sizes.
    std::deque<DeviceBuffer> model;
    const int64_t arena = 3 * kMiB + 123 * kKiB;
    for (int i = 0; i < 4; ++i) model.push_back(RequireAllocate(*allocator, arena));
    model.push_back(RequireAllocate(*allocator, 32 * kMiB));
    for (const int64_t batch : {1, 8, 64, 256}) {
      model.push_back(RequireAllocate(*allocator, batch * 48 * 64 * 4));
    }
    REQUIRE(allocator->stats().bytes_in_use > baseline);
    // Unload.
    model.clear();
    REQUIRE(allocator->stats().bytes_in_use == baseline);
    if (cycle == 0) mallocs_after_warmup = allocator->stats().cuda_malloc_calls;
  }
  REQUIRE(allocator->stats().cuda_malloc_calls == mallocs_after_warmup);
  REQUIRE(allocator->stats().buffers_in_use == 1);
}

TEST_CASE("CudaAllocator turns out-of-memory into RESOURCE_EXHAUSTED and keeps working") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  cudaDeviceProp prop{};
  REQUIRE(cudaGetDeviceProperties(&prop, 0) == cudaSuccess);
  const int64_t too_much = 2 * static_cast<int64_t>(prop.totalGlobalMem);
  // Some cached blocks first: the allocator must release them and retry once before failing.
  RequireAllocate(*allocator, 8 * kMiB);
  REQUIRE(allocator->stats().bytes_cached == 8 * kMiB);

  const absl::StatusOr<DeviceBuffer> failed = allocator->Allocate(too_much);
  REQUIRE(failed.status().code() == absl::StatusCode::kResourceExhausted);
  const std::string message(failed.status().message());
  CAPTURE(message);
  REQUIRE(message.find("out of GPU memory on cuda:0") != std::string::npos);
  REQUIRE(message.find(std::to_string(too_much)) != std::string::npos);
  CudaAllocator::Stats stats = allocator->stats();
  REQUIRE(stats.oom_retries == 1);
  REQUIRE(stats.bytes_cached == 0);
  REQUIRE(stats.bytes_in_use == 0);
  // The failure left no error behind for the next CUDA call to trip over.
  REQUIRE(cudaGetLastError() == cudaSuccess);

  const DeviceBuffer after = RequireAllocate(*allocator, 16 * kMiB);
  RequireUsable(after);
  REQUIRE(allocator->stats().bytes_in_use == 16 * kMiB);
}

TEST_CASE("CudaAllocator holds no more than its limit") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator({.device = 0, .limit_bytes = 8 * kMiB});
  DeviceBuffer a = RequireAllocate(*allocator, 5 * kMiB);  // a 6 MiB block
  REQUIRE(allocator->Allocate(3 * kMiB).status().code() == absl::StatusCode::kResourceExhausted);
  DeviceBuffer b = RequireAllocate(*allocator, 1 * kMiB);  // a 2 MiB block: exactly at the limit
  b.Reset();
  // 2 MiB cached + 6 MiB in use: a 4 MiB request releases the cache but still does not fit.
  REQUIRE(allocator->Allocate(4 * kMiB - 1).status().code() ==
          absl::StatusCode::kResourceExhausted);
  REQUIRE(allocator->stats().bytes_cached == 0);
  a.Reset();
  const DeviceBuffer c = RequireAllocate(*allocator, 7 * kMiB);  // fits once `a` is back
  RequireUsable(c);
}

TEST_CASE("CudaAllocator serves concurrent threads") {
  std::unique_ptr<CudaAllocator> allocator = MakeAllocator();
  constexpr int kThreads = 8, kIterations = 200;
  std::vector<absl::Status> statuses(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<DeviceBuffer> held;
      for (int i = 0; i < kIterations && statuses[t].ok(); ++i) {
        absl::StatusOr<DeviceBuffer> buffer = allocator->Allocate(512 * (1 + (i + t) % 7));
        if (!buffer.ok()) {
          statuses[t] = buffer.status();
          break;
        }
        held.push_back(std::move(*buffer));
        if (held.size() > 5) held.erase(held.begin());
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  for (const absl::Status& status : statuses) REQUIRE(status.ok());
  const CudaAllocator::Stats stats = allocator->stats();
  REQUIRE(stats.bytes_in_use == 0);
  REQUIRE(stats.buffers_in_use == 0);
  REQUIRE(stats.allocations == kThreads * kIterations);
  // A thread holds 6 consecutive sizes of a 7-cycle, so at most one block of each class: no
  // class ever needs more than kThreads blocks.
  REQUIRE(stats.cuda_malloc_calls <= kThreads * 7);
}

}  // namespace
}  // namespace forecastd
