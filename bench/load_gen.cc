// load_gen: a closed-loop gRPC load generator for forecastd.v1.Forecaster/Predict. For each
// `--concurrency` level, `C` clients each keep exactly one Predict in flight: the next request
// leaves as soon as the previous answer arrives. After `--warmup-s` untimed seconds it records
// every answer that arrives during the next `--duration-s` seconds and prints one JSON line:
//   {"target":..., "concurrency":..., "requests":..., "errors":..., "requests_per_s":...,
//    "p50_us":..., "p90_us":..., "p99_us":..., "mean_us":..., "max_us":...,
//    "mean_batch_rows":..., "mean_server_queue_us":..., "mean_server_compute_us":...,
//    "mean_server_total_us":... (Timing's queue_us, compute_us and total_us: arrival in the
//    handler to completion, before the reply is serialised),
//    "request_bytes":..., "response_bytes":..., "client_cpu_cores":...}
// Latency is the client's: from starting the call to its completion callback (steady clock);
// percentiles are nearest-rank. The mean_server_* figures average the Timing the server puts
// in each response (zero from bench/echo_server). bench/load.py runs it; see bench/README.md.
//
// Clients are slots on gRPC's callback API, not threads: a completion callback (on one of
// gRPC's own threads) records the answer and starts the slot's next call, so 64 clients cost
// 64 pending calls, not 64 threads, and the generator's CPU use stays small next to the
// server's on a 2-core machine (client_cpu_cores reports it). Those threads sleep in the kernel
// between answers, so an answer that comes later also waits longer for its thread to wake.
// With `--poll` the slots' calls go on one completion queue that a thread of the generator
// polls without ever sleeping (as a client that cannot afford a wake-up does): the latency is
// then the same whether an answer comes at once or later; that thread takes a whole core.
//
// The request is one (1, T, F) window sent as `raw` float32: the first T rows of
// `--input-csv` (header line skipped, first F columns), or synthetic finite values.
// Exit codes: 0 success (even with failed calls: they are counted in "errors"), 1 no answer
// before `--ready-timeout-s` or a bad input file, 2 bad arguments.
#include <grpc/support/time.h>
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <mutex>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "forecastd/v1/forecaster.grpc.pb.h"

namespace forecastd {
namespace {

using SteadyClock = std::chrono::steady_clock;

struct Flags {
  std::string target;
  std::string label;
  std::string model = "demo_lstm";
  int64_t lookback = 40;
  int64_t features = 4;
  std::string input_csv;
  std::vector<int> concurrency = {1, 4, 16, 64};
  double warmup_s = 0.5;
  double duration_s = 2.0;
  int channels = 1;
  double call_timeout_s = 30.0;
  double ready_timeout_s = 30.0;
  bool poll = false;
};

// (T, F) floats, row-major: the first T data rows of a CSV with a header line.
absl::StatusOr<std::vector<float>> ReadCsvWindow(const std::string& path, int64_t T, int64_t F) {
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::vector<float> window;
  window.reserve(T * F);
  std::string line;
  std::getline(in, line);  // header
  while (static_cast<int64_t>(window.size()) < T * F && std::getline(in, line)) {
    if (line.empty()) continue;
    const std::vector<std::string> cells = absl::StrSplit(line, ',');
    if (static_cast<int64_t>(cells.size()) < F) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": a row has ", cells.size(), " columns; need ", F));
    }
    for (int64_t f = 0; f < F; ++f) {
      float v = 0;
      if (!absl::SimpleAtof(cells[f], &v) || !std::isfinite(v)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ": not a finite number: '", cells[f], "' in line '", line, "'"));
      }
      window.push_back(v);
    }
  }
  if (static_cast<int64_t>(window.size()) < T * F) {
    return absl::InvalidArgumentError(absl::StrCat(path, " holds fewer than ", T, " rows"));
  }
  return window;
}

// A daily-looking series per feature, O(1) to O(100) like the demo data.
std::vector<float> SyntheticWindow(int64_t T, int64_t F) {
  std::vector<float> window(T * F);
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      window[t * F + f] = static_cast<float>(50.0 * (f + 1) + 10.0 * std::sin(0.26 * t + f));
    }
  }
  return window;
}

double CpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& tv) { return tv.tv_sec + 1e-6 * tv.tv_usec; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// One answer recorded in the measured window.
struct Sample {
  float latency_us;
  int32_t batch_rows;
  float queue_us;
  float compute_us;
  float total_us;  // the server's, arrival to completion
};

// One concurrency level: `concurrency` slots, each with one call in flight at a time.
// Thread-safe in the sense that matters here: a slot's fields are only touched by the thread
// that runs its current callback (calls of one slot never overlap); the shared state is the
// atomics and what `mu_` guards.
class ClosedLoop {
 public:
  // poll: the calls go on one completion queue that Run's polling thread spins on.
  ClosedLoop(const std::vector<std::unique_ptr<v1::Forecaster::Stub>>& stubs,
             const v1::PredictRequest& request, int concurrency, double call_timeout_s, bool poll)
      : request_(request), call_timeout_(std::chrono::duration<double>(call_timeout_s)) {
    if (poll) cq_ = std::make_unique<grpc::CompletionQueue>();
    slots_.resize(concurrency);
    for (int i = 0; i < concurrency; ++i) slots_[i].stub = stubs[i % stubs.size()].get();
  }

  // Runs warm-up then the measured window; returns once every call has completed.
  std::string Run(const Flags& flags, const std::string& label) {
    const auto start = SteadyClock::now();
    measure_begin_ = start + std::chrono::duration_cast<SteadyClock::duration>(
                                 std::chrono::duration<double>(flags.warmup_s));
    measure_end_ = measure_begin_ + std::chrono::duration_cast<SteadyClock::duration>(
                                        std::chrono::duration<double>(flags.duration_s));
    outstanding_ = static_cast<int64_t>(slots_.size());
    for (Slot& slot : slots_) Issue(slot);
    std::thread poller;
    if (cq_ != nullptr) poller = std::thread([this] { Poll(); });
    std::this_thread::sleep_until(measure_begin_);
    const double cpu_begin = CpuSeconds();
    std::this_thread::sleep_until(measure_end_);
    const double cpu_end = CpuSeconds();
    stopping_.store(true);
    {
      std::unique_lock<std::mutex> lock(mu_);
      all_done_.wait(lock, [this] { return outstanding_ == 0; });
    }
    if (poller.joinable()) poller.join();
    return Report(label, static_cast<int>(slots_.size()), flags.duration_s,
                  (cpu_end - cpu_begin) / flags.duration_s);
  }

 private:
  struct Slot {
    v1::Forecaster::Stub* stub = nullptr;
    std::unique_ptr<grpc::ClientContext> context;
    v1::PredictResponse response;
    SteadyClock::time_point sent;
    std::vector<Sample> samples;
    int64_t errors = 0;
    std::string first_error;
    size_t response_bytes = 0;
    // --poll: the call's reader and its status.
    std::unique_ptr<grpc::ClientAsyncResponseReader<v1::PredictResponse>> reader;
    grpc::Status status;
  };

  // --poll: takes completions without a deadline (never blocking) until every slot's last call
  // has completed, then shuts the queue down and drains it.
  void Poll() {
    int64_t live = static_cast<int64_t>(slots_.size());
    while (live > 0) {
      void* tag = nullptr;
      bool ok = false;
      if (cq_->AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) !=
          grpc::CompletionQueue::GOT_EVENT) {
        continue;
      }
      Slot& slot = *static_cast<Slot*>(tag);
      if (!OnDone(slot, slot.status)) --live;
    }
    cq_->Shutdown();
    void* tag = nullptr;
    bool ok = false;
    while (cq_->Next(&tag, &ok)) {
    }
  }

  void Issue(Slot& slot) {
    slot.context = std::make_unique<grpc::ClientContext>();
    slot.response.Clear();
    slot.sent = SteadyClock::now();
    // gRPC deadlines are on the system clock.
    slot.context->set_deadline(
        std::chrono::system_clock::now() +
        std::chrono::duration_cast<std::chrono::system_clock::duration>(call_timeout_));
    if (cq_ != nullptr) {
      slot.reader = slot.stub->PrepareAsyncPredict(slot.context.get(), request_, cq_.get());
      slot.reader->StartCall();
      slot.reader->Finish(&slot.response, &slot.status, &slot);
      return;
    }
    slot.stub->async()->Predict(slot.context.get(), &request_, &slot.response,
                                [this, &slot](grpc::Status status) { OnDone(slot, status); });
  }

  // Records the answer and starts the slot's next call; false once stopping (no next call).
  bool OnDone(Slot& slot, const grpc::Status& status) {
    const auto now = SteadyClock::now();
    if (now >= measure_begin_ && now < measure_end_) {
      if (status.ok()) {
        const v1::Timing& timing = slot.response.timing();
        slot.samples.push_back(
            {std::chrono::duration<float, std::micro>(now - slot.sent).count(),
             static_cast<int32_t>(timing.batch_size()), static_cast<float>(timing.queue_us()),
             static_cast<float>(timing.compute_us()), static_cast<float>(timing.total_us())});
        if (slot.response_bytes == 0) slot.response_bytes = slot.response.ByteSizeLong();
      } else {
        ++slot.errors;
        if (slot.first_error.empty()) {
          slot.first_error = absl::StrCat(status.error_code(), ": ", status.error_message());
        }
      }
    }
    if (stopping_.load()) {
      // Notified under the lock, so Run cannot return (and destroy this) before we are done.
      std::lock_guard<std::mutex> lock(mu_);
      if (--outstanding_ == 0) all_done_.notify_all();
      return false;
    }
    Issue(slot);
    return true;
  }

  std::string Report(const std::string& label, int concurrency, double duration_s,
                     double client_cpu_cores) const {
    std::vector<float> latencies;
    int64_t errors = 0, batch_rows = 0, batched = 0;
    double queue_us = 0, compute_us = 0, total_us = 0;
    size_t response_bytes = 0;
    std::string first_error;
    for (const Slot& slot : slots_) {
      for (const Sample& s : slot.samples) {
        latencies.push_back(s.latency_us);
        queue_us += s.queue_us;
        compute_us += s.compute_us;
        total_us += s.total_us;
        if (s.batch_rows > 0) {
          batch_rows += s.batch_rows;
          ++batched;
        }
      }
      errors += slot.errors;
      if (first_error.empty()) first_error = slot.first_error;
      response_bytes = std::max(response_bytes, slot.response_bytes);
    }
    std::sort(latencies.begin(), latencies.end());
    const size_t n = latencies.size();
    const auto rank = [&](double q) -> double {
      if (n == 0) return 0.0;
      const size_t i = static_cast<size_t>(std::max(0.0, std::ceil(q * n) - 1));
      return latencies[std::min(i, n - 1)];
    };
    const double mean = n == 0 ? 0.0 : std::accumulate(latencies.begin(), latencies.end(), 0.0) / n;
    const double per = n == 0 ? 0.0 : 1.0 / n;
    std::string json = absl::StrFormat(
        "{\"target\":\"%s\",\"concurrency\":%d,\"requests\":%d,\"errors\":%d,"
        "\"duration_s\":%.3f,\"requests_per_s\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,"
        "\"p99_us\":%.1f,\"mean_us\":%.1f,\"max_us\":%.1f,\"mean_batch_rows\":%.2f,"
        "\"mean_server_queue_us\":%.1f,\"mean_server_compute_us\":%.1f,"
        "\"mean_server_total_us\":%.1f,\"request_bytes\":%d,"
        "\"response_bytes\":%d,\"client_cpu_cores\":%.3f",
        label, concurrency, n, errors, duration_s, n / duration_s, rank(0.50), rank(0.90),
        rank(0.99), mean, n == 0 ? 0.0 : latencies.back(),
        batched == 0 ? 0.0 : static_cast<double>(batch_rows) / batched, queue_us * per,
        compute_us * per, total_us * per, request_.ByteSizeLong(), response_bytes,
        client_cpu_cores);
    if (!first_error.empty()) {
      std::string escaped;
      for (char c : first_error) {
        if (c == '"' || c == '\\') escaped.push_back('\\');
        escaped.push_back(std::isprint(static_cast<unsigned char>(c)) ? c : ' ');
      }
      absl::StrAppend(&json, ",\"first_error\":\"", escaped, "\"");
    }
    return json + "}";
  }

  const v1::PredictRequest& request_;
  const std::chrono::duration<double> call_timeout_;
  std::unique_ptr<grpc::CompletionQueue> cq_;  // --poll
  // Constant once Run has started the first call.
  SteadyClock::time_point measure_begin_, measure_end_;
  std::vector<Slot> slots_;
  std::atomic<bool> stopping_{false};
  // std::mutex, not absl::Mutex: the last callback unlocks it just before Run may destroy it,
  // which POSIX mutexes allow.
  std::mutex mu_;
  std::condition_variable all_done_;
  int64_t outstanding_ = 0;  // guarded by mu_: slots whose last call has not completed
};

// Sends single requests until one succeeds: the server may still be loading the model.
absl::Status WaitReady(v1::Forecaster::Stub& stub, const v1::PredictRequest& request,
                       double timeout_s) {
  const auto give_up = std::chrono::system_clock::now() +
                       std::chrono::duration_cast<std::chrono::system_clock::duration>(
                           std::chrono::duration<double>(timeout_s));
  grpc::Status last;
  while (std::chrono::system_clock::now() < give_up) {
    grpc::ClientContext context;
    context.set_deadline(give_up);
    v1::PredictResponse response;
    last = stub.Predict(&context, request, &response);
    if (last.ok()) return absl::OkStatus();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::UnavailableError(absl::StrCat("no successful Predict within ", timeout_s,
                                             " s; last error ", last.error_code(), ": ",
                                             last.error_message()));
}

absl::Status Run(const Flags& flags) {
  const int64_t T = flags.lookback, F = flags.features;
  std::vector<float> window;
  if (flags.input_csv.empty()) {
    window = SyntheticWindow(T, F);
  } else {
    absl::StatusOr<std::vector<float>> read = ReadCsvWindow(flags.input_csv, T, F);
    if (!read.ok()) return read.status();
    window = *std::move(read);
  }
  v1::PredictRequest request;
  request.set_model(flags.model);
  v1::Tensor* inputs = request.mutable_inputs();
  for (int64_t d : {int64_t{1}, T, F}) inputs->add_shape(d);
  std::string raw(window.size() * sizeof(float), '\0');
  std::memcpy(raw.data(), window.data(), raw.size());  // x86: already little-endian
  inputs->set_raw(std::move(raw));

  std::vector<std::unique_ptr<v1::Forecaster::Stub>> stubs;
  for (int i = 0; i < flags.channels; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments give each channel its own connection instead of a shared subchannel.
    args.SetInt("forecastd.load_gen.channel", i);
    stubs.push_back(v1::Forecaster::NewStub(
        grpc::CreateCustomChannel(flags.target, grpc::InsecureChannelCredentials(), args)));
  }
  for (auto& stub : stubs) {
    if (absl::Status s = WaitReady(*stub, request, flags.ready_timeout_s); !s.ok()) {
      return absl::UnavailableError(absl::StrCat(flags.target, ": ", s.message()));
    }
  }
  const std::string label = flags.label.empty() ? flags.target : flags.label;
  for (int concurrency : flags.concurrency) {
    ClosedLoop loop(stubs, request, concurrency, flags.call_timeout_s, flags.poll);
    std::printf("%s\n", loop.Run(flags, label).c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  forecastd::Flags flags;
  CLI::App app{"Closed-loop Predict load against one gRPC address; one JSON line per level."};
  app.add_option("--target", flags.target, "host:port of a Forecaster service")->required();
  app.add_option("--label", flags.label, "name printed as \"target\" (default: --target)");
  app.add_option("--model", flags.model, "PredictRequest.model")->capture_default_str();
  app.add_option("--lookback", flags.lookback, "T")->check(CLI::PositiveNumber);
  app.add_option("--features", flags.features, "F")->check(CLI::PositiveNumber);
  app.add_option("--input-csv", flags.input_csv,
                 "CSV with a header line; the first T rows, first F columns, are the window "
                 "(default: synthetic values)");
  app.add_option("--concurrency", flags.concurrency, "levels, in order (e.g. 1,4,16,64)")
      ->delimiter(',')
      ->check(CLI::Range(1, 4096));
  app.add_option("--warmup-s", flags.warmup_s, "untimed seconds per level")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--duration-s", flags.duration_s, "measured seconds per level")
      ->check(CLI::PositiveNumber);
  app.add_option("--channels", flags.channels, "gRPC channels (connections); clients spread")
      ->check(CLI::Range(1, 1024));
  app.add_option("--call-timeout-s", flags.call_timeout_s, "deadline of each call")
      ->check(CLI::PositiveNumber);
  app.add_option("--ready-timeout-s", flags.ready_timeout_s,
                 "how long to retry the first call while the server starts")
      ->check(CLI::PositiveNumber);
  app.add_flag("--poll", flags.poll,
               "one thread polls the calls' completion queue without sleeping, instead of "
               "gRPC's callback threads (takes a core)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  const absl::Status status = forecastd::Run(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "load_gen: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
