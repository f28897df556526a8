#include "backends/device.h"

#include <sched.h>

#include <string>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

Device Gpu(int index) {
  Device d;
  d.kind = DeviceKind::kCuda;
  d.index = index;
  d.name = "test gpu";
  return d;
}

TEST_CASE("ParseDeviceList accepts the documented spellings", "[unit][device]") {
  REQUIRE(ParseDeviceList("cpu").value() == std::vector<DeviceSpec>{{DeviceKind::kCpu, 0}});
  REQUIRE(ParseDeviceList("cuda:0, cuda:3").value() ==
          std::vector<DeviceSpec>{{DeviceKind::kCuda, 0}, {DeviceKind::kCuda, 3}});
  REQUIRE(ParseDeviceList("cuda").value() ==
          std::vector<DeviceSpec>{{DeviceKind::kCuda, DeviceSpec::kEveryIndex}});
  const auto all = ParseDeviceList("all").value();
  REQUIRE(all.size() == 2);
  REQUIRE(all[1].only_if_present);
}

TEST_CASE("ParseDeviceList rejects malformed entries by name", "[unit][device]") {
  for (const char* bad : {"", "tpu", "cuda:", "cuda:-1", "cuda:x", "cpu,,cuda:0"}) {
    CAPTURE(bad);
    const auto r = ParseDeviceList(bad);
    REQUIRE(r.status().code() == absl::StatusCode::kInvalidArgument);
  }
  REQUIRE(std::string(ParseDeviceList("tpu").status().message()).find("'tpu'") !=
          std::string::npos);
}

TEST_CASE("Discover always finds the CPU first", "[unit][device]") {
  const DeviceRegistry registry = DeviceRegistry::Discover();
  REQUIRE(!registry.devices().empty());
  REQUIRE(registry.devices().front().kind == DeviceKind::kCpu);
  REQUIRE(registry.devices().front().Id() == "cpu");
}

TEST_CASE("Resolve picks present devices once and names what is missing", "[unit][device]") {
  const DeviceRegistry registry({Device{}, Gpu(0), Gpu(1)});
  REQUIRE(registry.cuda_device_count() == 2);

  auto picked = registry.Resolve(ParseDeviceList("cuda:1,cpu,cuda:1").value()).value();
  REQUIRE(picked.size() == 2);
  REQUIRE(picked[0].Id() == "cpu");
  REQUIRE(picked[1].Id() == "cuda:1");
  REQUIRE(registry.Resolve(ParseDeviceList("all").value()).value().size() == 3);

  const auto missing = registry.Resolve(ParseDeviceList("cuda:2").value());
  REQUIRE(missing.status().code() == absl::StatusCode::kNotFound);
  REQUIRE(std::string(missing.status().message()) ==
          "device cuda:2 is not present; this host has cpu, cuda:0, cuda:1");
}

TEST_CASE("On a host without GPUs 'all' means the CPU and 'cuda' is an error", "[unit][device]") {
  const DeviceRegistry cpu_only({Device{}});
  REQUIRE(cpu_only.Resolve(ParseDeviceList("all").value()).value().size() == 1);
  REQUIRE(cpu_only.Resolve(ParseDeviceList("cuda").value()).status().code() ==
          absl::StatusCode::kNotFound);
}

TEST_CASE("UsableCpuCores counts the cores of the affinity mask", "[unit][device]") {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  CHECK(UsableCpuCores() == CPU_COUNT(&saved));
  // Narrowed to one core of the mask (as `taskset -c N` does), the count follows.
  int first = 0;
  while (!CPU_ISSET(first, &saved)) ++first;
  cpu_set_t one;
  CPU_ZERO(&one);
  CPU_SET(first, &one);
  REQUIRE(sched_setaffinity(0, sizeof(one), &one) == 0);
  const int narrowed = UsableCpuCores();
  REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
  CHECK(narrowed == 1);
}

}  // namespace
}  // namespace forecastd
