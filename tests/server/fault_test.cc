// Fault and overload tests of a real forecastd on loopback (label `slow`, not part of `make
// test`; `bench/fault.sh` runs them and records their figures): 10x overload for 30 s, clients
// that disconnect mid-stream, SIGKILL during training, corrupt model files, and SIGTERM under
// load. Every wait is bounded by a safety limit; no assertion depends on how fast the machine
// is, except that replies refused for a full queue come back well inside their deadline.
// With FORECASTD_FAULT_REPORT set, each test appends one JSON line of figures to that file.
#include <sys/types.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/health_client.h"
#include "engine/file_io.h"
#include "engine/models/model_files.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "server/grpc_status.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"

namespace forecastd::api_test {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckRequest;
using grpc::health::v1::HealthCheckResponse;
using testing::ForecastdDaemon;
using testing::TempDir;

// ---------------------------------------------------------------------------------------------
// Figures

// Current and peak resident memory of process `pid` (VmRSS, VmHWM), in bytes.
struct Memory {
  int64_t rss_bytes = 0;
  int64_t peak_rss_bytes = 0;
};

Memory ReadMemory(pid_t pid) {
  std::ifstream status(absl::StrCat("/proc/", pid, "/status"));
  Memory m;
  std::string line;
  while (std::getline(status, line)) {
    std::istringstream fields(line);
    std::string key;
    int64_t kib = 0;
    fields >> key >> kib;
    if (key == "VmRSS:") m.rss_bytes = kib * 1024;
    if (key == "VmHWM:") m.peak_rss_bytes = kib * 1024;
  }
  return m;
}

// Appends `json` as one line to $FORECASTD_FAULT_REPORT, when set.
void Report(const std::string& json) {
  const char* path = std::getenv("FORECASTD_FAULT_REPORT");
  if (path == nullptr || *path == '\0') return;
  std::ofstream out(path, std::ios::app);
  out << json << "\n";
}

// `text` as a JSON string literal.
std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      absl::StrAppend(&out, " ");
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Replies by code: how many, and their latencies.
class Replies {
 public:
  void Add(grpc::StatusCode code, absl::Duration latency, const std::string& message) {
    absl::MutexLock lock(&mu_);
    auto& entry = by_code_[code];
    entry.latencies_ms.push_back(absl::ToDoubleMilliseconds(latency));
    if (entry.example.empty()) entry.example = message;
  }
  int64_t Count(grpc::StatusCode code) const {
    absl::MutexLock lock(&mu_);
    auto it = by_code_.find(code);
    return it == by_code_.end() ? 0 : static_cast<int64_t>(it->second.latencies_ms.size());
  }
  int64_t Total() const {
    absl::MutexLock lock(&mu_);
    int64_t n = 0;
    for (const auto& [code, entry] : by_code_) n += static_cast<int64_t>(entry.latencies_ms.size());
    return n;
  }
  // The q-quantile latency of the replies with `code`, in ms (0 when there are none).
  double QuantileMs(grpc::StatusCode code, double q) const {
    absl::MutexLock lock(&mu_);
    auto it = by_code_.find(code);
    if (it == by_code_.end() || it->second.latencies_ms.empty()) return 0;
    std::vector<double> v = it->second.latencies_ms;
    const size_t k = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(k), v.end());
    return v[k];
  }
  // {"OK": n, ...} with p50/p99 per code, and one message per error code, for reports and
  // assertion messages.
  std::string Json() const {
    absl::MutexLock lock(&mu_);
    std::vector<std::string> parts;
    for (const auto& [code, entry] : by_code_) {
      std::vector<double> v = entry.latencies_ms;
      std::sort(v.begin(), v.end());
      const auto at = [&](double q) {
        return v[std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())))];
      };
      parts.push_back(absl::StrCat("\"", CodeName(code), "\": {\"count\": ", v.size(),
                                   ", \"p50_ms\": ", std::round(at(0.5) * 100) / 100,
                                   ", \"p99_ms\": ", std::round(at(0.99) * 100) / 100, "}"));
    }
    return absl::StrCat("{", absl::StrJoin(parts, ", "), "}");
  }
  std::string Examples() const {
    absl::MutexLock lock(&mu_);
    std::string out;
    for (const auto& [code, entry] : by_code_) {
      if (code != grpc::StatusCode::OK)
        absl::StrAppend(&out, CodeName(code), ": ", entry.example, "\n");
    }
    return out;
  }

  static std::string CodeName(grpc::StatusCode code) { return GrpcCodeName(code); }

 private:
  struct Entry {
    std::vector<double> latencies_ms;
    std::string example;
  };
  mutable absl::Mutex mu_;
  std::map<grpc::StatusCode, Entry> by_code_ ABSL_GUARDED_BY(mu_);
};

// ---------------------------------------------------------------------------------------------
// Load

// Predict requests sent at a fixed rate on their own channel, whatever the replies (open
// loop), through one completion queue; each reply is recorded with its latency. At most
// `max_in_flight` calls are outstanding: a sender that reaches it waits, and counts the time.
class OpenLoopLoad {
 public:
  OpenLoopLoad(const std::string& address, v1::PredictRequest request, double requests_per_s,
               absl::Duration timeout, int max_in_flight = 20000)
      : channel_(grpc::CreateChannel(address, grpc::InsecureChannelCredentials())),
        stub_(v1::Forecaster::NewStub(channel_)),
        request_(std::move(request)),
        interval_(absl::Seconds(1.0 / requests_per_s)),
        timeout_(timeout),
        max_in_flight_(max_in_flight) {
    receiver_ = std::thread([this] { Receive(); });
  }
  ~OpenLoopLoad() {
    Stop();
    cq_.Shutdown();
    receiver_.join();
  }

  // Sends until `duration` has passed or Stop(), on the calling thread.
  void Send(absl::Duration duration) {
    const absl::Time start = absl::Now(), end = start + duration;
    absl::Time next = start;
    while (!stop_.load() && absl::Now() < end) {
      const absl::Time now = absl::Now();
      if (now < next) {
        absl::SleepFor(std::min(next - now, absl::Milliseconds(1)));
        continue;
      }
      // Behind schedule (after a stall): send what is due, in a burst.
      while (next <= now && !stop_.load()) {
        if (in_flight_.load() >= max_in_flight_) {
          ++throttled_;
          break;
        }
        SendOne();
        next += interval_;
      }
      if (in_flight_.load() >= max_in_flight_) absl::SleepFor(absl::Milliseconds(1));
    }
  }
  void Stop() { stop_.store(true); }

  // True once every call sent has its reply (bounded by `bound`).
  bool AwaitReplies(absl::Duration bound) {
    const absl::Time end = absl::Now() + bound;
    while (in_flight_.load() > 0 && absl::Now() < end) absl::SleepFor(absl::Milliseconds(5));
    return in_flight_.load() == 0;
  }

  int64_t sent() const { return sent_.load(); }
  int64_t throttled() const { return throttled_.load(); }
  const Replies& replies() const { return replies_; }

 private:
  struct Call {
    grpc::ClientContext context;
    v1::PredictResponse response;
    grpc::Status status;
    absl::Time start;
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PredictResponse>> rpc;
  };

  void SendOne() {
    auto* call = new Call;
    call->start = absl::Now();
    call->context.set_deadline(absl::ToChronoTime(call->start + timeout_));
    ++in_flight_;
    ++sent_;
    call->rpc = stub_->AsyncPredict(&call->context, request_, &cq_);
    call->rpc->Finish(&call->response, &call->status, call);
  }

  void Receive() {
    void* tag = nullptr;
    bool ok = false;
    while (cq_.Next(&tag, &ok)) {
      std::unique_ptr<Call> call(static_cast<Call*>(tag));
      replies_.Add(call->status.error_code(), absl::Now() - call->start,
                   call->status.error_message());
      --in_flight_;
    }
  }

  const std::shared_ptr<grpc::Channel> channel_;
  const std::unique_ptr<v1::Forecaster::Stub> stub_;
  const v1::PredictRequest request_;
  const absl::Duration interval_, timeout_;
  const int max_in_flight_;

  grpc::CompletionQueue cq_;
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> in_flight_{0}, sent_{0}, throttled_{0};
  Replies replies_;
  std::thread receiver_;
};

// Predicts/s that `threads` closed-loop clients get through for `duration` (each waits for
// its reply before sending again): what the daemon serves at saturation. `answered`, when
// not nullptr, receives how many forecasts came back.
double ClosedLoopRate(ForecastdDaemon& daemon, const v1::PredictRequest& request, int threads,
                      absl::Duration duration, int64_t* answered = nullptr) {
  std::atomic<int64_t> done{0};
  std::vector<std::thread> clients;
  const absl::Time end = absl::Now() + duration;
  for (int i = 0; i < threads; ++i) {
    clients.emplace_back([&] {
      while (absl::Now() < end) {
        v1::PredictResponse response;
        if (daemon.forecaster().Predict(Context().get(), request, &response).ok()) ++done;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  if (answered != nullptr) *answered = done.load();
  return static_cast<double>(done.load()) / absl::ToDoubleSeconds(duration);
}

// Health checks every `period` on their own channel while running; each must say SERVING
// within `bound`.
class HealthProbe {
 public:
  HealthProbe(const std::string& address, absl::Duration period, absl::Duration bound)
      : stub_(grpc::health::v1::Health::NewStub(
            grpc::CreateChannel(address, grpc::InsecureChannelCredentials()))) {
    thread_ = std::thread([this, period, bound] {
      while (!stop_.load()) {
        grpc::ClientContext context;
        context.set_deadline(absl::ToChronoTime(absl::Now() + bound));
        HealthCheckResponse response;
        const absl::Time start = absl::Now();
        const grpc::Status status = stub_->Check(&context, HealthCheckRequest(), &response);
        const double ms = absl::ToDoubleMilliseconds(absl::Now() - start);
        {
          absl::MutexLock lock(&mu_);
          if (status.ok() && response.status() == HealthCheckResponse::SERVING) {
            ++serving_;
            max_ms_ = std::max(max_ms_, ms);
          } else {
            failures_.push_back(absl::StrCat(status.error_code(), " ", status.error_message(),
                                             " status ", response.status()));
          }
        }
        absl::SleepFor(period);
      }
    });
  }
  ~HealthProbe() { Stop(); }
  void Stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
  }
  int serving() const {
    absl::MutexLock lock(&mu_);
    return serving_;
  }
  std::vector<std::string> failures() const {
    absl::MutexLock lock(&mu_);
    return failures_;
  }
  double max_ms() const {
    absl::MutexLock lock(&mu_);
    return max_ms_;
  }

 private:
  std::unique_ptr<grpc::health::v1::Health::Stub> stub_;
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  int serving_ ABSL_GUARDED_BY(mu_) = 0;
  double max_ms_ ABSL_GUARDED_BY(mu_) = 0;
  std::vector<std::string> failures_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// Samples a process's resident memory every `period` while running.
class MemorySampler {
 public:
  MemorySampler(pid_t pid, absl::Duration period) {
    thread_ = std::thread([this, pid, period] {
      while (!stop_.load()) {
        const Memory m = ReadMemory(pid);
        {
          absl::MutexLock lock(&mu_);
          samples_.push_back(m.rss_bytes);
        }
        absl::SleepFor(period);
      }
    });
  }
  ~MemorySampler() { Stop(); }
  void Stop() {
    if (stop_.exchange(true)) return;
    thread_.join();
  }
  std::vector<int64_t> samples() const {
    absl::MutexLock lock(&mu_);
    return samples_;
  }

 private:
  std::atomic<bool> stop_{false};
  mutable absl::Mutex mu_;
  std::vector<int64_t> samples_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

int64_t MaxOf(const std::vector<int64_t>& v, size_t begin, size_t end) {
  int64_t m = 0;
  for (size_t i = begin; i < end && i < v.size(); ++i) m = std::max(m, v[i]);
  return m;
}

constexpr double kMiB = 1024.0 * 1024.0;

// "heavy" with a bounded queue: what overload tests drive.
ModelConfig BoundedHeavyConfig(uint32_t max_queue_size) {
  ModelConfig c = HeavyConfig();
  c.mutable_batching()->mutable_default_queue_policy()->set_max_queue_size(max_queue_size);
  return c;
}

v1::PredictRequest HeavyRequest(uint32_t seed) {
  return Request("heavy", {1, 64, kF}, Windows(1, 64, seed), Encoding::kRaw);
}

// ---------------------------------------------------------------------------------------------
// Tests

TEST_CASE(
    "10x overload for 30 s: health answers, the excess gets RESOURCE_EXHAUSTED at once, "
    "memory stays bounded",
    "[slow][fault]") {
  TempDir repository;
  constexpr uint32_t kQueue = 64;
  Publish(repository, *MakeModel(BoundedHeavyConfig(kQueue), 3), 1);
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.path());
  const v1::PredictRequest request = HeavyRequest(7);

  const double capacity = ClosedLoopRate(*daemon, request, 8, absl::Seconds(3));
  REQUIRE(capacity > 0);
  const double offered = 10 * capacity;
  const absl::Duration duration = absl::Seconds(30), timeout = absl::Seconds(10);
  const Memory before = ReadMemory(daemon->process().pid());

  HealthProbe health(daemon->grpc_address(), absl::Milliseconds(100), absl::Seconds(2));
  MemorySampler memory(daemon->process().pid(), absl::Milliseconds(250));
  OpenLoopLoad load(daemon->grpc_address(), request, offered, timeout);
  load.Send(duration);
  const bool all_replied = load.AwaitReplies(timeout + absl::Seconds(30));
  health.Stop();
  memory.Stop();
  const Memory after = ReadMemory(daemon->process().pid());
  const Replies& replies = load.replies();
  const std::vector<int64_t> rss = memory.samples();

  Report(absl::StrCat("{\"test\": \"overload\", \"duration_s\": ", absl::ToDoubleSeconds(duration),
                      ", \"capacity_per_s\": ", std::round(capacity),
                      ", \"offered_per_s\": ", std::round(offered), ", \"sent\": ", load.sent(),
                      ", \"answered\": ", replies.Total(), ", \"codes\": ", replies.Json(),
                      ", \"health_checks_ok\": ", health.serving(),
                      ", \"health_checks_failed\": ", health.failures().size(),
                      ", \"health_max_ms\": ", std::round(health.max_ms()),
                      ", \"rss_before_mib\": ", std::round(before.rss_bytes / kMiB),
                      ", \"peak_rss_mib\": ", std::round(after.peak_rss_bytes / kMiB),
                      ", \"rss_after_mib\": ", std::round(after.rss_bytes / kMiB), "}"));
  INFO(replies.Json() << "\n"
                      << replies.Examples() << "sent " << load.sent() << " capacity " << capacity
                      << "/s");

  // Nothing lost, and the daemon is still there.
  REQUIRE(all_replied);
  REQUIRE(replies.Total() == load.sent());
  REQUIRE(daemon->process().Running());
  // The offered load was really about 10x what the daemon serves.
  REQUIRE(load.sent() >= static_cast<int64_t>(0.8 * offered * absl::ToDoubleSeconds(duration)));
  // Only two answers: a forecast, or a refusal because the queue is full.
  REQUIRE(replies.Count(grpc::StatusCode::OK) +
              replies.Count(grpc::StatusCode::RESOURCE_EXHAUSTED) ==
          replies.Total());
  REQUIRE(replies.Count(grpc::StatusCode::OK) > 0);
  // At 10x, most of the load is excess.
  REQUIRE(replies.Count(grpc::StatusCode::RESOURCE_EXHAUSTED) > replies.Total() / 2);
  // Refusals come at once, not after waiting in a queue: well inside the 10 s deadline, and no
  // slower than the forecasts that did wait in the queue.
  REQUIRE(replies.QuantileMs(grpc::StatusCode::RESOURCE_EXHAUSTED, 0.99) < 2000);
  REQUIRE(replies.QuantileMs(grpc::StatusCode::RESOURCE_EXHAUSTED, 0.5) <=
          replies.QuantileMs(grpc::StatusCode::OK, 0.5));
  // Health answered SERVING throughout.
  INFO(absl::StrJoin(health.failures(), "\n"));
  REQUIRE(health.failures().empty());
  REQUIRE(health.serving() > 100);
  // Bounded memory: the second half of the run peaks no higher than the first (plus slack for
  // allocator noise), and far below anything that would threaten the host.
  REQUIRE(rss.size() > 20);
  const int64_t first_half = MaxOf(rss, 0, rss.size() / 2);
  const int64_t second_half = MaxOf(rss, rss.size() / 2, rss.size());
  CAPTURE(first_half / kMiB, second_half / kMiB, after.peak_rss_bytes / kMiB);
  REQUIRE(second_half <= first_half + first_half / 4 + static_cast<int64_t>(32 * kMiB));
  REQUIRE(after.peak_rss_bytes < static_cast<int64_t>(1024 * kMiB));

  // And it still serves normally afterwards.
  v1::PredictResponse response;
  REQUIRE(Predict(*daemon, request, &response).ok());
}

TEST_CASE("Clients that disconnect mid-stream or mid-call do no harm", "[slow][fault]") {
  TempDir repository, scratch;
  Publish(repository, *MakeModel(HeavyConfig(), 3), 1);
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--data-dir", scratch.path()});
  const Memory before = ReadMemory(daemon->process().pid());

  const ModelConfig config = TrainedConfig("trained");
  std::string id;
  const grpc::Status started = Train(*daemon, TrainRequest("trained", &config, Training(40)), &id);
  INFO(started.error_message());
  REQUIRE(started.ok());

  int streams_cut = 0;
  // Watchers that read one event and then vanish: cancelled by the client, or their whole
  // channel closed.
  for (int i = 0; i < 20; ++i) {
    auto channel = grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Forecaster::NewStub(channel);
    grpc::ClientContext context;
    v1::WatchTrainJobRequest watch;
    watch.set_job_id(id);
    auto reader = stub->WatchTrainJob(&context, watch);
    v1::TrainJobEvent event;
    if (reader->Read(&event)) ++streams_cut;
    context.TryCancel();
    reader->Finish();
  }
  // A watcher in another process killed outright: its socket closes under the stream.
  absl::StatusOr<testing::ChildProcess> killed = testing::ChildProcess::Start(
      {FORECASTCTL_BINARY, "--address", daemon->grpc_address(), "jobs", "watch", id});
  REQUIRE(killed.ok());
  const absl::Time watch_bound = absl::Now() + kRpcBound;
  while (killed->Output().find("epoch") == std::string::npos && killed->Running() &&
         absl::Now() < watch_bound) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  INFO(killed->Output());
  REQUIRE(killed->Running());
  REQUIRE(killed->Signal(SIGKILL));
  REQUIRE(killed->WaitForExit(kExitBound).ok());

  // Predict calls cancelled while queued or running, on a channel then dropped.
  Replies cancelled;
  {
    auto channel = grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials());
    auto stub = v1::Forecaster::NewStub(channel);
    grpc::CompletionQueue cq;
    struct Call {
      grpc::ClientContext context;
      v1::PredictResponse response;
      grpc::Status status;
      std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PredictResponse>> rpc;
    };
    std::vector<std::unique_ptr<Call>> calls;
    const v1::PredictRequest request = HeavyRequest(9);
    for (int i = 0; i < 200; ++i) {
      calls.push_back(std::make_unique<Call>());
      Call& c = *calls.back();
      c.rpc = stub->AsyncPredict(&c.context, request, &cq);
      c.rpc->Finish(&c.response, &c.status, &c);
    }
    absl::SleepFor(absl::Milliseconds(5));
    for (auto& c : calls) c->context.TryCancel();
    for (size_t i = 0; i < calls.size(); ++i) {
      void* tag = nullptr;
      bool ok = false;
      REQUIRE(cq.Next(&tag, &ok));
      const Call* c = static_cast<Call*>(tag);
      cancelled.Add(c->status.error_code(), absl::ZeroDuration(), c->status.error_message());
    }
    cq.Shutdown();
  }

  // The job runs to its end regardless, and a fresh watcher gets the whole story.
  v1::WatchTrainJobRequest watch;
  watch.set_job_id(id);
  auto context = Context();
  auto reader = daemon->forecaster().WatchTrainJob(context.get(), watch);
  v1::TrainJobEvent event, last;
  int events = 0;
  while (reader->Read(&event)) {
    last = event;
    ++events;
  }
  REQUIRE(reader->Finish().ok());
  REQUIRE(last.has_finished());
  CAPTURE(last.finished().DebugString());
  REQUIRE(last.finished().state() == v1::TRAIN_JOB_SUCCEEDED);

  // The daemon is healthy, serves, and its memory did not grow with the abandoned calls.
  REQUIRE(daemon->process().Running());
  REQUIRE(CheckHealth(daemon->grpc_address(), "", absl::Seconds(5)).ok());
  v1::PredictResponse response;
  REQUIRE(Predict(*daemon, HeavyRequest(9), &response).ok());
  const Memory after = ReadMemory(daemon->process().pid());
  // Cancelled calls end CANCELLED, or OK when they finished before the cancel arrived.
  REQUIRE(cancelled.Count(grpc::StatusCode::CANCELLED) + cancelled.Count(grpc::StatusCode::OK) ==
          cancelled.Total());
  REQUIRE(streams_cut == 20);
  Report(absl::StrCat("{\"test\": \"disconnect\", \"streams_cut\": ", streams_cut + 1,
                      ", \"predicts_cancelled\": ", cancelled.Json(), ", \"job_events_replayed\": ",
                      events, ", \"rss_before_mib\": ", std::round(before.rss_bytes / kMiB),
                      ", \"peak_rss_mib\": ", std::round(after.peak_rss_bytes / kMiB),
                      ", \"rss_after_mib\": ", std::round(after.rss_bytes / kMiB), "}"));
}

// Starts `request` as a job and opens its progress stream on `context`.
std::unique_ptr<grpc::ClientReader<v1::TrainJobEvent>> StartAndWatch(
    ForecastdDaemon& daemon, const v1::TrainRequest& request, grpc::ClientContext* context) {
  std::string id;
  const grpc::Status started = Train(daemon, request, &id);
  INFO(started.error_message());
  REQUIRE(started.ok());
  v1::WatchTrainJobRequest watch;
  watch.set_job_id(id);
  return daemon.forecaster().WatchTrainJob(context, watch);
}

// The model directories and version folders a repository holds, hidden entries included.
std::vector<std::string> Tree(const std::string& root) {
  std::vector<std::string> entries;
  for (const auto& e : fs::recursive_directory_iterator(root)) {
    entries.push_back(fs::relative(e.path(), root).string());
  }
  std::sort(entries.begin(), entries.end());
  return entries;
}

TEST_CASE(
    "SIGKILL during training: a restart resumes from the last checkpoint, the repository "
    "intact",
    "[slow][fault]") {
  TempDir repository, scratch;
  Publish(repository, *MakeModel(ToyConfig(), 1), 1);
  const std::string checkpoints = scratch.path() + "/checkpoints";
  const std::vector<std::string> flags = {"--data-dir", scratch.path(), "--checkpoint-dir",
                                          checkpoints};
  const std::vector<std::string> tree_before = Tree(repository.path());

  // Enough epochs of a heavy-ish model that the kill lands mid-job.
  ModelConfig config = TrainedConfig("trained");
  config.mutable_lstm()->set_hidden_size(64);
  config.mutable_lstm()->set_num_layers(2);
  const v1::TrainRequest request = TrainRequest("trained", &config, Training(30));

  int64_t killed_in_epoch = 0;
  {
    std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.path(), flags);
    auto context = Context();
    auto reader = StartAndWatch(*daemon, request, context.get());
    v1::TrainJobEvent event;
    // Past the second epoch's checkpoint: the kill lands in epoch 3 or later.
    while (reader->Read(&event)) {
      if (event.has_progress() && event.progress().epoch() >= 3) {
        killed_in_epoch = event.progress().epoch();
        break;
      }
    }
    REQUIRE(killed_in_epoch >= 3);
    REQUIRE(daemon->process().Signal(SIGKILL));
    REQUIRE(daemon->process().WaitForExit(kExitBound).ok());
    context->TryCancel();
    reader->Finish();
  }

  // Intact: the repository holds what it held before (no half-published version, no temp
  // files), and one checkpoint file is there (temp files of an interrupted write are hidden).
  REQUIRE(Tree(repository.path()) == tree_before);
  std::vector<std::string> checkpoint_files;
  for (const auto& e : fs::directory_iterator(checkpoints)) {
    const std::string name = e.path().filename().string();
    if (name.front() != '.') checkpoint_files.push_back(name);
  }
  REQUIRE(checkpoint_files.size() == 1);

  // The restart serves the old models, and the same request resumes after the last
  // completed epoch instead of starting over.
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.path(), flags);
  v1::PredictResponse response;
  REQUIRE(Predict(*daemon, ToyRequest(1, 3), &response).ok());
  auto context = Context();
  auto reader = StartAndWatch(*daemon, request, context.get());
  v1::TrainJobEvent event;
  int64_t first_epoch = 0;
  v1::TrainJobInfo finished;
  while (reader->Read(&event)) {
    if (event.has_progress() && first_epoch == 0) first_epoch = event.progress().epoch();
    if (event.has_finished()) finished = event.finished();
  }
  REQUIRE(reader->Finish().ok());
  CAPTURE(finished.DebugString(), first_epoch, killed_in_epoch);
  REQUIRE(finished.state() == v1::TRAIN_JOB_SUCCEEDED);
  REQUIRE(first_epoch >= killed_in_epoch - 1);
  REQUIRE(first_epoch > 1);
  REQUIRE(finished.epochs_run() == 30);
  REQUIRE(finished.published_version() == 1);
  Report(absl::StrCat("{\"test\": \"sigkill_training\", \"killed_in_epoch\": ", killed_in_epoch,
                      ", \"resumed_at_epoch\": ", first_epoch,
                      ", \"published_version\": ", finished.published_version(), "}"));
}

TEST_CASE("A corrupt model file fails that model with a clear error while the others serve",
          "[slow][fault]") {
  TempDir repository;
  const std::shared_ptr<Forecaster> toy = MakeModel(ToyConfig(), 1);
  Publish(repository, *toy, 1);
  // Garbage where the weights should be, and a truncated copy of good weights.
  ModelConfig garbage = ToyConfig(), truncated = ToyConfig();
  garbage.set_name("garbage");
  truncated.set_name("truncated");
  Publish(repository, *MakeModel(garbage, 2), 1);
  Publish(repository, *MakeModel(truncated, 3), 1);
  const std::string garbage_file = repository.path() + "/garbage/1/model.safetensors";
  const std::string truncated_file = repository.path() + "/truncated/1/model.safetensors";
  {
    std::mt19937 rng(5);
    std::string bytes(4096, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    REQUIRE(WriteFileAtomically(garbage_file, bytes).ok());
    const std::string whole = ReadFileBytes(truncated_file, "weights").value();
    REQUIRE(WriteFileAtomically(truncated_file, whole.substr(0, whole.size() / 2)).ok());
  }

  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(repository.path());
  std::map<std::string, std::string> errors;
  for (const std::string name : {"garbage", "truncated"}) {
    const v1::ModelStatus status = GetModel(*daemon, name);
    CAPTURE(status.DebugString());
    REQUIRE(status.state() == v1::MODEL_FAILED);
    REQUIRE(absl::StrContains(status.last_error(), "model.safetensors"));
    errors[name] = status.last_error();
    v1::PredictResponse response;
    const grpc::Status predict = Predict(*daemon, ToyRequest(1, 2), &response);
    REQUIRE(predict.ok());  // toy
    v1::PredictRequest request = ToyRequest(1, 2);
    request.set_model(name);
    RequireError(Predict(*daemon, request, &response), grpc::StatusCode::UNAVAILABLE,
                 "model.safetensors");
  }
  v1::PredictResponse response;
  REQUIRE(Predict(*daemon, ToyRequest(2, 4), &response).ok());
  RequireClose(Floats(response.forecasts()), Expected(*toy, Windows(2, kT, 4)));
  Report(absl::StrCat(
      "{\"test\": \"corrupt_model\", \"garbage_error\": ", JsonString(errors["garbage"]),
      ", \"truncated_error\": ", JsonString(errors["truncated"]), "}"));
}

TEST_CASE("SIGTERM under load: every accepted request is answered", "[slow][fault]") {
  TempDir repository;
  Publish(repository, *MakeModel(HeavyConfig(), 3), 1);
  std::unique_ptr<ForecastdDaemon> daemon =
      StartDaemon(repository.path(), {"--drain-timeout", "60"});
  const v1::PredictRequest request = HeavyRequest(11);
  int64_t answered_before_load = 0;
  const double capacity =
      ClosedLoopRate(*daemon, request, 8, absl::Seconds(2), &answered_before_load);
  REQUIRE(capacity > 0);

  // Twice what it serves, so that a queue is waiting when the signal comes.
  OpenLoopLoad load(daemon->grpc_address(), request, 2 * capacity, absl::Seconds(60));
  std::thread sender([&] { load.Send(absl::Seconds(120)); });
  absl::SleepFor(absl::Seconds(3));
  const int64_t sent_before_signal = load.sent();
  REQUIRE(daemon->process().Signal(SIGTERM));
  const absl::StatusOr<int> exit_code = daemon->process().WaitForExit(kExitBound);
  load.Stop();
  sender.join();
  REQUIRE(load.AwaitReplies(absl::Seconds(90)));
  const Replies& replies = load.replies();
  const std::string log = daemon->process().Output();
  INFO(replies.Json() << "\n" << replies.Examples());

  REQUIRE(exit_code.ok());
  REQUIRE(*exit_code == 0);
  REQUIRE(log.find("drain timed out") == std::string::npos);
  REQUIRE(replies.Total() == load.sent());
  // The daemon's own count of the calls it took into a queue, and of those it answered.
  int64_t accepted = -1, answered = -1;
  {
    const std::string key = "Predict: ";
    const size_t at = log.find(key);
    REQUIRE(at != std::string::npos);
    std::istringstream line(log.substr(at + key.size()));
    std::string calls, word;
    line >> accepted >> calls >> word >> answered;
    INFO(log.substr(at, 80));
    REQUIRE(word == "accepted,");
  }
  CAPTURE(accepted, answered);
  // Every accepted call was answered, with a forecast: the client holds exactly that many.
  REQUIRE(accepted == answered);
  REQUIRE(answered_before_load + replies.Count(grpc::StatusCode::OK) == accepted);
  // The rest were refused without being accepted: the daemon stopping (UNAVAILABLE), a full
  // queue (RESOURCE_EXHAUSTED), no longer listening (UNAVAILABLE), or arriving while gRPC
  // itself shut down, before any handler (CANCELLED); none of them was ever queued, as the
  // counts above show.
  REQUIRE(replies.Count(grpc::StatusCode::OK) + replies.Count(grpc::StatusCode::UNAVAILABLE) +
              replies.Count(grpc::StatusCode::RESOURCE_EXHAUSTED) +
              replies.Count(grpc::StatusCode::CANCELLED) ==
          replies.Total());
  REQUIRE(replies.Count(grpc::StatusCode::OK) > 0);
  Report(absl::StrCat(
      "{\"test\": \"sigterm_under_load\", \"offered_per_s\": ", std::round(2 * capacity),
      ", \"sent_before_sigterm\": ", sent_before_signal, ", \"sent\": ", load.sent(),
      ", \"answered\": ", replies.Total(), ", \"codes\": ", replies.Json(), ", \"accepted\": ",
      accepted, ", \"answered_by_daemon\": ", answered, ", \"exit_code\": ", *exit_code, "}"));
}

}  // namespace
}  // namespace forecastd::api_test
