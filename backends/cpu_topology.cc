#include "backends/cpu_topology.h"

#include <pthread.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <thread>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace forecastd {
namespace {

// The first line of `path`, trimmed; nullopt when it cannot be read.
std::optional<std::string> ReadLine(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return std::string(absl::StripAsciiWhitespace(line));
}

std::optional<int> ReadInt(const std::filesystem::path& path) {
  const std::optional<std::string> line = ReadLine(path);
  int value = 0;
  if (!line || !absl::SimpleAtoi(*line, &value)) return std::nullopt;
  return value;
}

// A sysfs CPU list such as "0-3,8,10-11"; nullopt when malformed.
std::optional<std::vector<int>> ParseCpuList(absl::string_view text) {
  std::vector<int> cpus;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipWhitespace())) {
    const std::vector<absl::string_view> range = absl::StrSplit(part, '-');
    int first = 0, last = 0;
    if (range.size() > 2 || !absl::SimpleAtoi(range[0], &first) ||
        !absl::SimpleAtoi(range.back(), &last) || first < 0 || last < first) {
      return std::nullopt;
    }
    for (int c = first; c <= last; ++c) cpus.push_back(c);
  }
  return cpus;
}

// A cache size as sysfs writes it ("2048K", "32M", "512"), in bytes; 0 when malformed.
int64_t ParseCacheSize(absl::string_view text) {
  int64_t scale = 1;
  if (!text.empty()) {
    switch (absl::ascii_toupper(static_cast<unsigned char>(text.back()))) {
      case 'K':
        scale = int64_t{1} << 10;
        break;
      case 'M':
        scale = int64_t{1} << 20;
        break;
      case 'G':
        scale = int64_t{1} << 30;
        break;
      default:
        break;
    }
    if (scale != 1) text.remove_suffix(1);
  }
  int64_t value = 0;
  if (!absl::SimpleAtoi(text, &value) || value < 0) return 0;
  return value * scale;
}

// The size of `cpu`'s cache at `level` (a unified or data cache), 0 when none is described.
int64_t CacheBytes(const std::filesystem::path& cpu_dir, int level) {
  for (int index = 0; index < 16; ++index) {
    const std::filesystem::path dir = cpu_dir / "cache" / absl::StrCat("index", index);
    const std::optional<int> at = ReadInt(dir / "level");
    if (!at) {
      if (!std::filesystem::exists(dir)) break;
      continue;
    }
    const std::optional<std::string> type = ReadLine(dir / "type");
    if (*at != level || !type || *type == "Instruction") continue;
    if (const std::optional<std::string> size = ReadLine(dir / "size")) {
      return ParseCacheSize(*size);
    }
  }
  return 0;
}

std::string Bytes(int64_t bytes) {
  if (bytes >= (int64_t{1} << 20) && bytes % (int64_t{1} << 20) == 0) {
    return absl::StrCat(bytes >> 20, " MiB");
  }
  return absl::StrCat(bytes >> 10, " KiB");
}

const char* Plural(int n, const char* one, const char* many) { return n == 1 ? one : many; }

}  // namespace

std::vector<int> CpuTopology::CpusOfNode(int node) const {
  std::vector<int> ids;
  for (const Cpu& cpu : cpus) {
    if (cpu.node == node) ids.push_back(cpu.id);
  }
  return ids;
}

std::string CpuTopology::Describe() const {
  const int n = static_cast<int>(cpus.size());
  std::string text =
      absl::StrCat(n, Plural(n, " CPU on ", " CPUs on "), cores, Plural(cores, " core", " cores"));
  absl::StrAppend(&text, ", ", sockets, Plural(sockets, " socket, ", " sockets, "), nodes.size(),
                  nodes.size() == 1 ? " NUMA node" : " NUMA nodes");
  if (l2_bytes > 0) absl::StrAppend(&text, ", L2 ", Bytes(l2_bytes), " a core");
  if (l3_bytes > 0) absl::StrAppend(&text, ", L3 ", Bytes(l3_bytes));
  return text;
}

CpuTopology ReadCpuTopology(const std::string& system_root, const std::vector<int>& allowed) {
  const std::filesystem::path root(system_root);
  CpuTopology topology;
  std::set<int> ids(allowed.begin(), allowed.end());

  // NUMA nodes: each nodeN directory lists its CPUs.
  std::map<int, int> node_of;
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator(root / "node", ec)) {
    const std::string name = entry.path().filename().string();
    int node = 0;
    if (name.rfind("node", 0) != 0 || !absl::SimpleAtoi(name.substr(4), &node)) continue;
    const std::optional<std::string> list = ReadLine(entry.path() / "cpulist");
    if (!list) continue;
    if (const std::optional<std::vector<int>> cpus = ParseCpuList(*list)) {
      for (int cpu : *cpus) node_of[cpu] = node;
    }
  }

  std::map<std::pair<int, int>, int> core_index;  // (package, core_id) -> index
  std::set<int> packages, nodes;
  for (int id : ids) {
    const std::filesystem::path cpu_dir = root / "cpu" / absl::StrCat("cpu", id);
    CpuTopology::Cpu cpu;
    cpu.id = id;
    cpu.package = ReadInt(cpu_dir / "topology" / "physical_package_id").value_or(0);
    // Without a core_id every CPU is a core of its own: a negative id no real core has.
    const int core_id = ReadInt(cpu_dir / "topology" / "core_id").value_or(-1 - id);
    const auto [it, added] = core_index.emplace(std::make_pair(cpu.package, core_id),
                                                static_cast<int>(core_index.size()));
    cpu.core = it->second;
    const auto node = node_of.find(id);
    cpu.node = node != node_of.end() ? node->second : 0;
    packages.insert(cpu.package);
    nodes.insert(cpu.node);
    topology.cpus.push_back(cpu);
  }
  topology.cores = static_cast<int>(core_index.size());
  topology.sockets = static_cast<int>(packages.size());
  topology.nodes.assign(nodes.begin(), nodes.end());
  if (!ids.empty()) {
    const std::filesystem::path first = root / "cpu" / absl::StrCat("cpu", *ids.begin());
    topology.l2_bytes = CacheBytes(first, 2);
    topology.l3_bytes = CacheBytes(first, 3);
  }
  return topology;
}

std::vector<int> AllowedCpus() {
  std::vector<int> cpus;
  cpu_set_t mask;
  CPU_ZERO(&mask);
  if (sched_getaffinity(0, sizeof(mask), &mask) == 0) {
    for (int c = 0; c < CPU_SETSIZE; ++c) {
      if (CPU_ISSET(c, &mask)) cpus.push_back(c);
    }
  }
  if (cpus.empty()) {
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int c = 0; c < n; ++c) cpus.push_back(c);
  }
  return cpus;
}

CpuTopology ThisProcessCpuTopology() {
  return ReadCpuTopology("/sys/devices/system", AllowedCpus());
}

absl::StatusOr<CpuPinning> ParseCpuPinning(absl::string_view text) {
  if (text == "auto") return CpuPinning::kAuto;
  if (text == "none") return CpuPinning::kNone;
  if (text == "node") return CpuPinning::kNode;
  if (text == "core") return CpuPinning::kCore;
  return absl::InvalidArgumentError(
      absl::StrCat("bad CPU pinning '", text, "': expected auto, none, node or core"));
}

std::string CpuWorkerPlan::Describe() const {
  std::string text =
      absl::StrCat(workers, Plural(workers, " worker x ", " workers x "), threads_per_worker,
                   Plural(threads_per_worker, " thread", " threads"));
  switch (pinning) {
    case CpuPinning::kNode:
      absl::StrAppend(&text, ", pinned per NUMA node");
      break;
    case CpuPinning::kCore:
      absl::StrAppend(&text, ", pinned per core");
      break;
    default:
      absl::StrAppend(&text, ", not pinned");
      break;
  }
  return text;
}

absl::StatusOr<CpuWorkerPlan> PlanCpuWorkers(const CpuTopology& topology, int workers,
                                             CpuPinning pinning) {
  if (workers < 0) {
    return absl::InvalidArgumentError(absl::StrCat("CPU workers must be >= 0, not ", workers));
  }
  if (topology.cpus.empty()) return absl::InvalidArgumentError("the CPU topology has no CPUs");
  const int cores = std::max(1, topology.cores);
  CpuWorkerPlan plan;
  plan.workers = workers > 0 ? workers : cores;
  plan.threads_per_worker = std::max(1, cores / plan.workers);
  plan.pinning = pinning;
  if (pinning == CpuPinning::kAuto) {
    plan.pinning = topology.nodes.size() > 1 ? CpuPinning::kNode : CpuPinning::kNone;
  }
  if (plan.pinning == CpuPinning::kNone) return plan;

  // The cores in (node, core) order, each with its node and its hardware threads.
  std::vector<std::vector<int>> by_core(static_cast<size_t>(cores));
  std::vector<std::pair<int, int>> order;  // (node, core)
  for (const CpuTopology::Cpu& cpu : topology.cpus) {
    if (by_core[static_cast<size_t>(cpu.core)].empty()) order.emplace_back(cpu.node, cpu.core);
    by_core[static_cast<size_t>(cpu.core)].push_back(cpu.id);
  }
  std::sort(order.begin(), order.end());
  plan.worker_cpus.resize(static_cast<size_t>(plan.workers));
  for (int w = 0; w < plan.workers; ++w) {
    std::vector<int>& mine = plan.worker_cpus[static_cast<size_t>(w)];
    if (plan.pinning == CpuPinning::kNode) {
      // Workers dealt out to the nodes in proportion to their cores: worker w goes to the
      // node of core floor(w * cores / workers) in that order.
      const size_t at = static_cast<size_t>(int64_t{w} * cores / plan.workers);
      mine = topology.CpusOfNode(order[std::min(at, order.size() - 1)].first);
      continue;
    }
    // kCore: threads_per_worker cores of its own, all their hardware threads; with more
    // workers than cores they wrap around.
    for (int t = 0; t < plan.threads_per_worker; ++t) {
      const int core = order[static_cast<size_t>((w * plan.threads_per_worker + t) % cores)].second;
      const std::vector<int>& ids = by_core[static_cast<size_t>(core)];
      mine.insert(mine.end(), ids.begin(), ids.end());
    }
    std::sort(mine.begin(), mine.end());
  }
  return plan;
}

absl::Status PinCallingThread(const std::vector<int>& cpus) {
  if (cpus.empty()) return absl::OkStatus();
  cpu_set_t mask;
  CPU_ZERO(&mask);
  for (int cpu : cpus) {
    if (cpu >= 0 && cpu < CPU_SETSIZE) CPU_SET(cpu, &mask);
  }
  const int error = pthread_setaffinity_np(pthread_self(), sizeof(mask), &mask);
  if (error != 0) {
    return absl::InternalError(absl::StrCat("cannot pin a thread to CPUs ",
                                            absl::StrJoin(cpus, ","), ": ", std::strerror(error)));
  }
  return absl::OkStatus();
}

}  // namespace forecastd
