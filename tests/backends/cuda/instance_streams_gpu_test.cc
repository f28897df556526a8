// Needs a GPU. InstanceStreams (backends/cuda/instance_streams.h): each stream leased once at a
// time and taken back, Lease() waiting for a returned stream, pinned staging that grows on
// demand and copies asynchronously, and bad options refused.
#include "backends/cuda/instance_streams.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <thread>
#include <utility>

#include "absl/status/statusor.h"
#include "backends/cuda/cuda_allocator.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

testing::GpuEnv& Env() { return testing::SharedGpuEnv(); }

void RequireCuda(cudaError_t error, const char* what) {
  INFO(what << ": " << cudaGetErrorString(error));
  REQUIRE(error == cudaSuccess);
}

TEST_CASE("InstanceStreams leases each stream once at a time and takes it back") {
  InstanceStreams::Options options;
  options.num_streams = 2;
  options.workspace_bytes = 1 << 20;
  options.staging_bytes = 4096;
  absl::StatusOr<std::unique_ptr<InstanceStreams>> created =
      InstanceStreams::Create(options, Env().allocator.get());
  INFO(created.status().ToString());
  REQUIRE(created.ok());
  InstanceStreams& streams = **created;
  REQUIRE(streams.streams() == 2);
  {
    StreamLease first = streams.Lease();
    std::optional<StreamLease> second = streams.TryLease();
    REQUIRE(second.has_value());
    REQUIRE(streams.leased() == 2);
    REQUIRE_FALSE(streams.TryLease().has_value());
    REQUIRE(first.stream() != second->stream());
    for (const StreamLease* lease : {&first, &*second}) {
      const CudaStreamContext& c = lease->context();
      REQUIRE(c.cublas != nullptr);
      REQUIRE(c.cublas_lt != nullptr);
      REQUIRE(c.cudnn != nullptr);
      REQUIRE(c.workspace != nullptr);
      REQUIRE(c.workspace_bytes == options.workspace_bytes);
    }
    // A moved lease is still one lease.
    StreamLease moved = std::move(first);
    REQUIRE(streams.leased() == 2);
  }
  REQUIRE(streams.leased() == 0);
  // Lease() blocks until another thread returns a stream.
  std::optional<StreamLease> a = streams.TryLease(), b = streams.TryLease();
  REQUIRE((a.has_value() && b.has_value()));
  std::thread releaser([&] { a.reset(); });
  StreamLease c = streams.Lease();
  releaser.join();
  REQUIRE(streams.leased() == 2);
}

TEST_CASE("InstanceStreams's pinned staging grows on demand and copies asynchronously") {
  InstanceStreams::Options options;
  options.num_streams = 1;
  options.staging_bytes = 1024;
  absl::StatusOr<std::unique_ptr<InstanceStreams>> created =
      InstanceStreams::Create(options, Env().allocator.get());
  REQUIRE(created.ok());
  StreamLease lease = (*created)->Lease();
  const int64_t n = 3 << 20;  // 12 MiB of floats: beyond the initial size
  absl::StatusOr<void*> in = lease.HostStaging(StreamLease::Staging::kInput, n * 4);
  absl::StatusOr<void*> out = lease.HostStaging(StreamLease::Staging::kOutput, n * 4);
  REQUIRE(in.ok());
  REQUIRE(out.ok());
  REQUIRE(*in != *out);
  float* host_in = static_cast<float*>(*in);
  float* host_out = static_cast<float*>(*out);
  for (int64_t i = 0; i < n; ++i) host_in[i] = static_cast<float>(i % 1000);
  absl::StatusOr<DeviceBuffer> device = Env().allocator->Allocate(n * 4);
  REQUIRE(device.ok());
  RequireCuda(
      cudaMemcpyAsync(device->data(), host_in, n * 4, cudaMemcpyHostToDevice, lease.stream()),
      "upload");
  RequireCuda(
      cudaMemcpyAsync(host_out, device->data(), n * 4, cudaMemcpyDeviceToHost, lease.stream()),
      "download");
  REQUIRE(lease.Synchronize().ok());
  REQUIRE(std::equal(host_in, host_in + n, host_out));
  // Asking for no more than it has returns the same buffer.
  REQUIRE(*lease.HostStaging(StreamLease::Staging::kInput, 16) == *in);
}

TEST_CASE("InstanceStreams::Create refuses bad options") {
  InstanceStreams::Options options;
  options.num_streams = 0;
  REQUIRE(InstanceStreams::Create(options, Env().allocator.get()).status().code() ==
          absl::StatusCode::kInvalidArgument);
  options.num_streams = 1;
  REQUIRE(InstanceStreams::Create(options, nullptr).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace forecastd
