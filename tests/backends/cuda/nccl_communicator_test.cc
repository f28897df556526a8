// Runs without a GPU: CreateNcclCommunicator refuses bad options before it touches a device, and
// NewNcclUniqueId makes ids of the length CreateNcclCommunicator expects (where NCCL finds a
// network interface to make them with; the GPU cases are in nccl_communicator_gpu_test.cc).
#include <nccl.h>

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "backends/cuda/nccl_communicator.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

NcclCommunicatorOptions ValidOptions() {
  NcclCommunicatorOptions options;
  options.device = 0;
  options.rank = 1;
  options.size = 2;
  options.unique_id = std::string(sizeof(ncclUniqueId), '\x01');
  options.timeout = absl::Seconds(2);
  return options;
}

void RequireInvalid(const NcclCommunicatorOptions& options) {
  const absl::StatusOr<std::unique_ptr<Communicator>> created = CreateNcclCommunicator(options);
  INFO(created.status().ToString());
  REQUIRE(created.status().code() == absl::StatusCode::kInvalidArgument);
}

// On a host without a GPU a check that came after the device was touched would answer
// UNAVAILABLE or INTERNAL instead, so these also show the order of the checks.
TEST_CASE("CreateNcclCommunicator refuses bad options before touching a GPU", "[unit][cuda]") {
  NcclCommunicatorOptions options = ValidOptions();
  SECTION("size 0") {
    options.size = 0;
    options.rank = 0;
    RequireInvalid(options);
  }
  SECTION("negative size") {
    options.size = -1;
    options.rank = 0;
    RequireInvalid(options);
  }
  SECTION("rank == size") {
    options.rank = 2;
    RequireInvalid(options);
  }
  SECTION("negative rank") {
    options.rank = -1;
    RequireInvalid(options);
  }
  SECTION("empty id") {
    options.unique_id.clear();
    RequireInvalid(options);
  }
  SECTION("id one byte short") {
    options.unique_id.pop_back();
    RequireInvalid(options);
  }
  SECTION("id one byte long") {
    options.unique_id.push_back('\x01');
    RequireInvalid(options);
  }
  SECTION("negative device") {
    options.device = -1;
    RequireInvalid(options);
  }
  SECTION("zero timeout") {
    options.timeout = absl::ZeroDuration();
    RequireInvalid(options);
  }
}

TEST_CASE("NewNcclUniqueId makes distinct ids of the length CreateNcclCommunicator takes",
          "[unit][cuda]") {
  const absl::StatusOr<std::string> first = NewNcclUniqueId();
  if (!first.ok()) {
    // ncclGetUniqueId needs a network interface for the bootstrap, not a GPU; a sandbox may
    // have none.
    WARN("SKIPPED: ncclGetUniqueId failed on this host: " << first.status().ToString());
    return;
  }
  REQUIRE(first->size() == sizeof(ncclUniqueId));
  const absl::StatusOr<std::string> second = NewNcclUniqueId();
  INFO(second.status().ToString());
  REQUIRE(second.ok());
  REQUIRE(second->size() == sizeof(ncclUniqueId));
  REQUIRE(*first != *second);
}

}  // namespace
}  // namespace forecastd
