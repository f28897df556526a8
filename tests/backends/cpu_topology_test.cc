#include "backends/cpu_topology.h"

#include <sched.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

void Write(const std::filesystem::path& path, const std::string& text) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream(path) << text << "\n";
}

// A sysfs tree of `sockets` sockets, each one NUMA node of `cores` cores with `threads`
// hardware threads, numbered as Linux numbers them: the first thread of every core first,
// then the second threads (so with 2 sockets x 2 cores x 2 threads, CPUs 0 and 4 share a core).
// L2 of 2 MiB a core, L3 of 105 MiB.
void FakeSysfs(const std::filesystem::path& root, int sockets, int cores, int threads) {
  const int per_thread = sockets * cores;
  for (int s = 0; s < sockets; ++s) {
    std::string list;
    for (int t = 0; t < threads; ++t) {
      absl::StrAppend(&list, list.empty() ? "" : ",", t * per_thread + s * cores, "-",
                      t * per_thread + s * cores + cores - 1);
    }
    Write(root / "node" / absl::StrCat("node", s) / "cpulist", list);
  }
  Write(root / "node" / "possible", "0");  // not a node directory: skipped
  for (int t = 0; t < threads; ++t) {
    for (int s = 0; s < sockets; ++s) {
      for (int c = 0; c < cores; ++c) {
        const int id = t * per_thread + s * cores + c;
        const std::filesystem::path cpu = root / "cpu" / absl::StrCat("cpu", id);
        Write(cpu / "topology" / "physical_package_id", absl::StrCat(s));
        Write(cpu / "topology" / "core_id", absl::StrCat(c));
        const char* caches[][3] = {{"1", "Data", "48K"},
                                   {"1", "Instruction", "32K"},
                                   {"2", "Unified", "2048K"},
                                   {"3", "Unified", "107520K"}};
        for (int i = 0; i < 4; ++i) {
          const std::filesystem::path index = cpu / "cache" / absl::StrCat("index", i);
          Write(index / "level", caches[i][0]);
          Write(index / "type", caches[i][1]);
          Write(index / "size", caches[i][2]);
        }
      }
    }
  }
}

std::vector<int> Range(int first, int last) {
  std::vector<int> ids;
  for (int i = first; i <= last; ++i) ids.push_back(i);
  return ids;
}

// FakeSysfs in `dir`, read with every CPU allowed.
CpuTopology FakeTopology(const testing::TempDir& dir, int sockets, int cores, int threads) {
  FakeSysfs(dir.path(), sockets, cores, threads);
  return ReadCpuTopology(dir.path(), Range(0, sockets * cores * threads - 1));
}

TEST_CASE("ReadCpuTopology counts cores, sockets, NUMA nodes and caches from sysfs",
          "[unit][cpu_topology]") {
  const testing::TempDir dir;
  FakeSysfs(dir.path(), /*sockets=*/2, /*cores=*/2, /*threads=*/2);
  const CpuTopology all = ReadCpuTopology(dir.path(), Range(0, 7));
  CHECK(all.cpus.size() == 8);
  CHECK(all.cores == 4);
  CHECK(all.sockets == 2);
  CHECK(all.nodes == std::vector<int>{0, 1});
  CHECK(all.l2_bytes == 2 << 20);
  CHECK(all.l3_bytes == int64_t{107520} << 10);
  CHECK(all.CpusOfNode(1) == std::vector<int>{2, 3, 6, 7});
  // CPUs 0 and 4 are the two threads of socket 0's first core.
  CHECK(all.cpus[0].core == all.cpus[4].core);
  CHECK(all.cpus[0].core != all.cpus[1].core);
  CHECK(all.Describe() ==
        "8 CPUs on 4 cores, 2 sockets, 2 NUMA nodes, L2 2 MiB a core, L3 105 MiB");

  // An affinity mask of one thread per core of socket 0 (taskset -c 0,1).
  const CpuTopology narrowed = ReadCpuTopology(dir.path(), {0, 1});
  CHECK(narrowed.cores == 2);
  CHECK(narrowed.sockets == 1);
  CHECK(narrowed.nodes == std::vector<int>{0});
  CHECK(narrowed.Describe() ==
        "2 CPUs on 2 cores, 1 socket, 1 NUMA node, L2 2 MiB a core, L3 105 MiB");
}

TEST_CASE("ReadCpuTopology without sysfs makes every CPU a core of one node",
          "[unit][cpu_topology]") {
  const testing::TempDir dir;
  const CpuTopology topology = ReadCpuTopology(dir.path(), {0, 1, 2});
  CHECK(topology.cores == 3);
  CHECK(topology.sockets == 1);
  CHECK(topology.nodes == std::vector<int>{0});
  CHECK(topology.l2_bytes == 0);
  CHECK(topology.Describe() == "3 CPUs on 3 cores, 1 socket, 1 NUMA node");
}

TEST_CASE("PlanCpuWorkers runs a worker of one thread on each physical core",
          "[unit][cpu_topology]") {
  const testing::TempDir dir;
  const CpuTopology topology = FakeTopology(dir, 1, 4, 2);
  const CpuWorkerPlan plan = PlanCpuWorkers(topology, 0, CpuPinning::kAuto).value();
  CHECK(plan.workers == 4);
  CHECK(plan.threads_per_worker == 1);
  // One NUMA node: auto pins nothing.
  CHECK(plan.pinning == CpuPinning::kNone);
  CHECK(plan.worker_cpus.empty());
  CHECK(plan.Describe() == "4 workers x 1 thread, not pinned");

  // Fewer workers share the cores out as OpenMP threads.
  const CpuWorkerPlan two = PlanCpuWorkers(topology, 2, CpuPinning::kAuto).value();
  CHECK(two.workers == 2);
  CHECK(two.threads_per_worker == 2);
  // More workers than cores still run one thread each.
  CHECK(PlanCpuWorkers(topology, 8, CpuPinning::kNone).value().threads_per_worker == 1);
  CHECK(PlanCpuWorkers(topology, -1, CpuPinning::kNone).status().code() ==
        absl::StatusCode::kInvalidArgument);
}

TEST_CASE("PlanCpuWorkers pins workers to NUMA nodes in proportion to their cores",
          "[unit][cpu_topology]") {
  const testing::TempDir dir;
  const CpuTopology topology = FakeTopology(dir, 2, 2, 2);
  const CpuWorkerPlan plan = PlanCpuWorkers(topology, 0, CpuPinning::kAuto).value();
  REQUIRE(plan.pinning == CpuPinning::kNode);
  REQUIRE(plan.workers == 4);
  const std::vector<int> node0{0, 1, 4, 5}, node1{2, 3, 6, 7};
  CHECK(plan.worker_cpus == std::vector<std::vector<int>>{node0, node0, node1, node1});
  CHECK(plan.Describe() == "4 workers x 1 thread, pinned per NUMA node");
  // An odd count: the first node takes the extra worker.
  const CpuWorkerPlan three = PlanCpuWorkers(topology, 3, CpuPinning::kNode).value();
  CHECK(three.worker_cpus == std::vector<std::vector<int>>{node0, node0, node1});
}

TEST_CASE("PlanCpuWorkers with core pinning gives each worker its own cores' threads",
          "[unit][cpu_topology]") {
  const testing::TempDir dir;
  const CpuTopology topology = FakeTopology(dir, 2, 2, 2);
  const CpuWorkerPlan plan = PlanCpuWorkers(topology, 0, CpuPinning::kCore).value();
  CHECK(plan.worker_cpus == std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}});
  const CpuWorkerPlan two = PlanCpuWorkers(topology, 2, CpuPinning::kCore).value();
  CHECK(two.threads_per_worker == 2);
  CHECK(two.worker_cpus == std::vector<std::vector<int>>{{0, 1, 4, 5}, {2, 3, 6, 7}});
}

TEST_CASE("ParseCpuPinning accepts the documented names and names them on error",
          "[unit][cpu_topology]") {
  CHECK(ParseCpuPinning("auto").value() == CpuPinning::kAuto);
  CHECK(ParseCpuPinning("none").value() == CpuPinning::kNone);
  CHECK(ParseCpuPinning("node").value() == CpuPinning::kNode);
  CHECK(ParseCpuPinning("core").value() == CpuPinning::kCore);
  const absl::Status bad = ParseCpuPinning("socket").status();
  CHECK(bad.code() == absl::StatusCode::kInvalidArgument);
  CHECK(std::string(bad.message()) ==
        "bad CPU pinning 'socket': expected auto, none, node or core");
}

TEST_CASE("This process's topology covers its affinity mask and a pinned thread stays there",
          "[unit][cpu_topology]") {
  cpu_set_t saved;
  CPU_ZERO(&saved);
  REQUIRE(sched_getaffinity(0, sizeof(saved), &saved) == 0);
  const CpuTopology topology = ThisProcessCpuTopology();
  CHECK(static_cast<int>(topology.cpus.size()) == CPU_COUNT(&saved));
  CHECK(topology.cores >= 1);
  CHECK(topology.cores <= static_cast<int>(topology.cpus.size()));
  CHECK(!topology.nodes.empty());

  const int first = topology.cpus.front().id;
  REQUIRE(PinCallingThread({first}).ok());
  cpu_set_t now;
  CPU_ZERO(&now);
  REQUIRE(sched_getaffinity(0, sizeof(now), &now) == 0);
  REQUIRE(sched_setaffinity(0, sizeof(saved), &saved) == 0);
  CHECK(CPU_COUNT(&now) == 1);
  CHECK(CPU_ISSET(first, &now));
}

}  // namespace
}  // namespace forecastd
