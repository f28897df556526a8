// stream_bench: bench/stream.sh's tools for tick streams, one subcommand each, each printing
// one JSON line per measurement:
//
//   model  --config FILE --out DIR [--seed S]
//       writes DIR/<name>/config.json (the workload's ModelConfig with streaming.mode
//       STREAM_MODE_STATE, on_disconnect DROP, max_streams 20000, and batching of up to 64 rows
//       with no queue delay) and DIR/<name>/1/model.safetensors with seeded random weights:
//       every weight U(-1/sqrt(fan_in), +) (PyTorch's RNN and Linear initialisation), normaliser
//       means 50 * (f + 1) and stds U(3.5, 14), the scale of the inputs below.
//   step   --model DIR [--iters N] [--warmup W]
//       times Forecaster::Step at B=1 (one stream's tick) and Forward at B=1 (one window) on the
//       CPU backend (oneDNN) in-process: the compute alone, no server.
//   ticks  --target HOST:PORT --model NAME --features F --streams S [--calls G] [--channels C]
//          [--client callback|blocking] [--ticks N | --duration-s D] [--warmup-s W] [--label L]
//       S tick streams (keys) multiplexed over G Forecaster.Stream calls spread over C channels
//       (default 1; each its own connection), one tick in flight per key: each key's next tick
//       (one row of F floats, `raw`) is queued as soon as its forecast arrives. With --client
//       callback (the default) the calls run on gRPC's callback API: a read always outstanding,
//       writes from an outbox with the buffer hint while more wait behind (as forecastd's
//       replies); with --client blocking, one thread per call writes a tick and reads answers in
//       turn (the least client latency for one key). Counts the answers arriving in the
//       measured window: N of them (--ticks), or all of D seconds. Works against forecastd and
//       bench/echo_server alike. Besides the means of the server's Timing it reports the median
//       of its compute_us ("p50_server_compute_us").
//
// Latency is the client's: from queuing a tick for writing to reading its answer (steady
// clock); percentiles are nearest-rank. Exit codes: 0 success, 1 a failure, 2 bad arguments.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "backends/cpu/dnnl_backend.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

using SteadyClock = std::chrono::steady_clock;

// Nearest-rank percentile of sorted values; 0 for none.
double Rank(const std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0;
  const size_t i = static_cast<size_t>(std::max(0.0, std::ceil(q * sorted.size()) - 1));
  return sorted[std::min(i, sorted.size() - 1)];
}

// Inputs everywhere here (and load_gen's synthetic windows) sit around 50 * (f + 1) for
// feature f; the model's normaliser is fitted to that, so standardised inputs are O(1) as in a
// trained model. (Raw values of hundreds through a normaliser of mean 0 saturate every gate;
// measured on 2 cores, that made the server's B=1 forward ~7x slower: 6.8 ms against 1.0 ms.)
constexpr float kFeatureStd = 7.0f;
float FeatureMean(int64_t f) { return 50.0f * static_cast<float>(f + 1); }

// `rows` rows of F features drawn around their means, row-major.
std::vector<float> RandomRows(int64_t rows, int64_t F, uint32_t seed) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, kFeatureStd);
  std::vector<float> x(static_cast<size_t>(rows * F));
  for (int64_t i = 0; i < rows * F; ++i) x[i] = FeatureMean(i % F) + dist(gen);
  return x;
}

// --- model

struct ModelFlags {
  std::string config;
  std::string out;
  uint32_t seed = 1;
};

absl::Status WriteModel(const ModelFlags& flags) {
  ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(flags.config));
  v1::StreamingConfig* streaming = config.mutable_streaming();
  streaming->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  // Each level's streams go with their connection, and a level's 10,000 may meet the last
  // level's before those are gone.
  streaming->set_on_disconnect(v1::StreamingConfig::DISCONNECT_DROP);
  streaming->set_max_streams(20000);
  // bench/load.sh's "forecastd-on" batching, for the windowed Predict beside the streams.
  config.mutable_batching()->set_max_batch_size(64);
  config.mutable_batching()->set_max_queue_delay_us(0);
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, Forecaster::Create(config));
  ParameterArena& arena = model->parameters();
  std::mt19937 gen(flags.seed);
  // Biases (1-D) take the fan-in of the matrix declared before them: its rows' length.
  int64_t fan_in = 1;
  for (const ParameterSpec& spec : arena.specs()) {
    float* p = arena.data() + spec.offset;
    if (spec.name == "normalizer.mean") {
      for (int64_t f = 0; f < spec.numel; ++f) p[f] = FeatureMean(f);
    } else if (spec.name == "normalizer.std") {
      std::uniform_real_distribution<float> std(0.5f * kFeatureStd, 2.0f * kFeatureStd);
      for (int64_t i = 0; i < spec.numel; ++i) p[i] = std(gen);
    } else {
      if (spec.shape.size() >= 2) fan_in = spec.shape.back();
      const float a = 1.0f / std::sqrt(static_cast<float>(fan_in));
      std::uniform_real_distribution<float> weight(-a, a);
      for (int64_t i = 0; i < spec.numel; ++i) p[i] = weight(gen);
    }
  }
  const std::string dir = absl::StrCat(flags.out, "/", config.name());
  RETURN_IF_ERROR(PublishVersion(*model, dir, 1));
  std::printf(
      "{\"model\":\"%s\",\"dir\":\"%s\",\"lookback\":%d,\"features\":%d,\"horizon\":%d,"
      "\"targets\":%d}\n",
      config.name().c_str(), dir.c_str(), model->lookback(), model->num_features(),
      model->horizon(), model->num_targets());
  return absl::OkStatus();
}

// --- step

struct StepFlags {
  std::string model;
  int64_t iters = 2000;
  int64_t warmup = 200;
  int64_t batch = 1;  // streams per Step, each in its own slot
};

std::string Summary(std::vector<double> us) {
  std::sort(us.begin(), us.end());
  const double mean = std::accumulate(us.begin(), us.end(), 0.0) / us.size();
  return absl::StrFormat("\"p50_us\":%.1f,\"p90_us\":%.1f,\"p99_us\":%.1f,\"mean_us\":%.1f",
                         Rank(us, 0.5), Rank(us, 0.9), Rank(us, 0.99), mean);
}

absl::Status TimeStep(const StepFlags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, LoadForecaster(flags.model, 1));
  ASSIGN_OR_RETURN(std::unique_ptr<DnnlBackend> backend, DnnlBackend::Create({}));
  const int64_t T = model->lookback(), F = model->num_features();
  const int64_t B = flags.batch;
  // B streams' ticks for T steps: step i reads rows [(i % T) * B, + B).
  const std::vector<float> ticks = RandomRows(T * B, F, 7);
  std::vector<float> out(static_cast<size_t>(B * model->num_outputs()));
  std::vector<float> slab(static_cast<size_t>(B * model->StateFloats()), 0.0f);
  std::vector<int32_t> slots(static_cast<size_t>(B));
  std::iota(slots.begin(), slots.end(), 0);
  Workspace workspace;
  const auto step = [&](int64_t i) {
    return model->Step(*backend, out.data(), ticks.data() + (i % T) * B * F, slab.data(),
                       slots.data(), B, workspace, ForwardPlacement{});
  };
  for (int64_t i = 0; i < flags.warmup; ++i) RETURN_IF_ERROR(step(i));
  std::vector<double> step_us;
  for (int64_t i = 0; i < flags.iters; ++i) {
    const auto start = SteadyClock::now();
    RETURN_IF_ERROR(step(i));
    step_us.push_back(
        std::chrono::duration<double, std::micro>(SteadyClock::now() - start).count());
  }
  // One window at B=1: what each tick would cost without a state.
  const int64_t forward_iters = std::max<int64_t>(50, flags.iters / 10);
  std::vector<double> forward_us;
  for (int64_t i = 0; i < forward_iters + flags.warmup / 10; ++i) {
    const auto start = SteadyClock::now();
    RETURN_IF_ERROR(model->Forward(*backend, out.data(), ticks.data(), 1, workspace));
    if (i >= flags.warmup / 10) {
      forward_us.push_back(
          std::chrono::duration<double, std::micro>(SteadyClock::now() - start).count());
    }
  }
  const std::string backend_name(backend->name());
  std::printf("%s\n", absl::StrFormat(R"({"what":"step","backend":"%s","batch":%d,"iters":%d,%s})",
                                      backend_name, B, flags.iters, Summary(std::move(step_us)))
                          .c_str());
  std::printf("%s\n",
              absl::StrFormat(R"({"what":"forward","backend":"%s","batch":1,"iters":%d,%s})",
                              backend_name, forward_iters, Summary(std::move(forward_us)))
                  .c_str());
  return absl::OkStatus();
}

// --- ticks

struct TickFlags {
  std::string target;
  std::string label;
  std::string model;
  int64_t features = 10;
  int64_t streams = 1;
  int calls = 4;
  int channels = 1;
  std::string client = "callback";
  int64_t ticks = 0;
  double duration_s = 3.0;
  double warmup_s = 1.0;
  double ready_timeout_s = 60.0;
};

// What every call's reader shares. Atomics only.
struct Window {
  std::atomic<int64_t> begin_ns{0};        // measuring from (steady clock, ns)
  std::atomic<int64_t> end_ns{INT64_MAX};  // until
  std::atomic<int64_t> measured{0};        // answers counted so far
  std::atomic<int64_t> wanted{0};          // --ticks: stop after this many (0: by time)
  std::atomic<bool> stopping{false};       // send no more ticks
  std::atomic<int64_t> stopped_ns{0};      // when the --ticks count was reached
  std::atomic<int> opened{0};              // calls done opening their keys (or failed before)
};

int64_t NowNs() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now().time_since_epoch())
      .count();
}

// What one call measured: the answers read inside the window, with the server's timings.
struct TickTally {
  std::vector<double> latencies_us;
  std::vector<double> compute_us;  // each answer's Timing.compute_us
  double total_us = 0;
  int64_t batch_rows = 0, errors = 0;
  std::string first_error, failure;

  void Record(double latency_us, const v1::Timing& t) {
    latencies_us.push_back(latency_us);
    compute_us.push_back(static_cast<double>(t.compute_us()));
    total_us += static_cast<double>(t.total_us());
    batch_rows += t.batch_size();
  }
  void CountError(const std::string& message) {
    ++errors;
    if (first_error.empty()) first_error = message;
  }
};

// One Forecaster.Stream call's client. Start returns at once; Wait blocks until the call is
// over; tally() may be read after Wait.
class TickClient {
 public:
  virtual ~TickClient() = default;
  virtual void Start() = 0;
  virtual void Wait() = 0;
  const TickTally& tally() const { return tally_; }

 protected:
  TickTally tally_;
};

// One Forecaster.Stream call carrying `keys` keys, on gRPC's callback API. A read is always
// outstanding; requests go out from an outbox one write at a time, with the buffer hint while
// more are queued behind the one being written (the last one queued goes without it and flushes
// them), as forecastd writes its answers. Start opens the keys; once all have answered, each
// usable key gets a tick, and each forecast read sends that key's next tick until the window
// stops; the call then half-closes and ends when the server finishes.
// Thread-safety: gRPC runs the reactions. OnReadDone alone (one at a time, each after the
// StartRead before it) touches the keys' state and the measurements; the outbox is shared with
// OnWriteDone under mu_. The accessors may be called once Wait has returned.
class TickCall final : public grpc::ClientBidiReactor<v1::StreamRequest, v1::StreamResponse>,
                       public TickClient {
 public:
  TickCall(v1::Forecaster::Stub* stub, const TickFlags& flags, const std::string& prefix,
           int64_t keys, const std::vector<std::string>& rows, Window* window)
      : stub_(stub), rows_(rows), window_(window), prefix_(prefix), model_(flags.model) {
    keys_.reserve(static_cast<size_t>(keys));
    for (int64_t k = 0; k < keys; ++k) keys_.push_back(absl::StrCat(prefix, k));
    sent_ns_.resize(static_cast<size_t>(keys));
    next_row_.resize(static_cast<size_t>(keys));
    usable_.assign(static_cast<size_t>(keys), false);
  }

  // Queues an open for every key and starts the call. Returns at once.
  void Start() override {
    stub_->async()->Stream(&context_, this);
    for (const std::string& key : keys_) {
      v1::StreamRequest request;
      request.set_key(key);
      request.mutable_open()->set_model(model_);
      Queue(std::move(request));
    }
    if (keys_.empty()) CloseWrites();
    StartRead(&response_);
    StartCall();
  }

  // Blocks until the call is over (OnDone).
  void Wait() override {
    absl::MutexLock lock(&done_mu_);
    done_mu_.Await(absl::Condition(&done_));
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      // The server finished (or the call failed): expected only once every tick is answered.
      if (!opened_) {
        read_failure_ = "open read failed";
      } else if (in_flight_ > 0) {
        read_failure_ = "tick read failed";
      }
      return;
    }
    const int64_t now = NowNs();
    const int64_t k = Index(response_.key());
    if (!opened_) {
      if (k >= 0 && response_.has_error()) {
        CountError(response_.error().message());
      } else if (k >= 0) {
        usable_[k] = true;
      }
      if (++opens_answered_ == static_cast<int64_t>(keys_.size())) {
        MarkOpened();
        for (int64_t i = 0; i < static_cast<int64_t>(keys_.size()); ++i) {
          if (usable_[i]) SendTick(i);
        }
        if (in_flight_ == 0) CloseWrites();
      }
    } else if (k >= 0) {
      --in_flight_;
      if (now >= window_->begin_ns.load() && now < window_->end_ns.load() &&
          !window_->stopping.load()) {
        if (response_.has_error()) {
          CountError(response_.error().message());
        } else {
          tally_.Record(static_cast<double>(now - sent_ns_[k]) / 1e3,
                        response_.forecast().timing());
          const int64_t wanted = window_->wanted.load();
          if (wanted > 0 && window_->measured.fetch_add(1) + 1 >= wanted) {
            window_->stopped_ns.store(now);
            window_->stopping.store(true);
          }
        }
      }
      if (!window_->stopping.load()) {
        SendTick(k);
      } else if (in_flight_ == 0) {
        CloseWrites();
      }
    }
    StartRead(&response_);
  }

  void OnWriteDone(bool ok) override {
    const v1::StreamRequest* next = nullptr;
    grpc::WriteOptions options;
    bool writes_done = false;
    {
      absl::MutexLock lock(&mu_);
      outbox_.pop_front();
      writing_ = false;
      if (!ok) {
        // The call is broken: the read fails next, and OnDone gives the status.
        if (write_failure_.empty()) write_failure_ = "write failed";
        outbox_.clear();
        return;
      }
      if (!outbox_.empty()) {
        next = &outbox_.front();
        options = StartFrontLocked();
      } else if (close_writes_ && !writes_done_started_) {
        writes_done = writes_done_started_ = true;
      }
    }
    if (next != nullptr) StartWrite(next, options);
    if (writes_done) StartWritesDone();
  }

  void OnDone(const grpc::Status& status) override {
    std::string what = read_failure_;
    {
      absl::MutexLock lock(&mu_);
      if (what.empty()) what = write_failure_;
    }
    if (!status.ok() && what.empty()) what = "call failed";
    if (!what.empty()) {
      tally_.failure = absl::StrCat(what, ": ", status.error_code(), ": ", status.error_message());
    }
    MarkOpened();
    absl::MutexLock lock(&done_mu_);
    done_ = true;
  }

 private:
  int64_t Index(const std::string& key) const {
    int64_t k = -1;
    if (key.size() <= prefix_.size() ||
        !absl::SimpleAtoi(absl::string_view(key).substr(prefix_.size()), &k) || k < 0 ||
        k >= static_cast<int64_t>(keys_.size())) {
      return -1;
    }
    return k;
  }

  void CountError(const std::string& message) { tally_.CountError(message); }

  // Counts this call in window_->opened, once.
  void MarkOpened() {
    if (opened_) return;
    opened_ = true;
    window_->opened.fetch_add(1);
  }

  // Queues key k's next tick; its latency runs from here.
  void SendTick(int64_t k) {
    v1::StreamRequest request;
    request.set_key(keys_[k]);
    request.mutable_ticks()->set_raw(rows_[(k + next_row_[k]++) % rows_.size()]);
    sent_ns_[k] = NowNs();
    ++in_flight_;
    Queue(std::move(request));
  }

  // Marks outbox_.front() as being written; the buffer hint while more wait behind it.
  grpc::WriteOptions StartFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    writing_ = true;
    grpc::WriteOptions options;
    if (outbox_.size() > 1) options.set_buffer_hint();
    return options;
  }

  void Queue(v1::StreamRequest request) {
    const v1::StreamRequest* start = nullptr;
    grpc::WriteOptions options;
    {
      absl::MutexLock lock(&mu_);
      if (!write_failure_.empty()) return;
      outbox_.push_back(std::move(request));
      if (writing_) return;
      start = &outbox_.front();
      options = StartFrontLocked();
    }
    StartWrite(start, options);
  }

  // Half-closes once the outbox is written.
  void CloseWrites() {
    {
      absl::MutexLock lock(&mu_);
      close_writes_ = true;
      if (writing_ || writes_done_started_ || !write_failure_.empty()) return;
      writes_done_started_ = true;
    }
    StartWritesDone();
  }

  // Constant after construction.
  v1::Forecaster::Stub* const stub_;
  const std::vector<std::string>& rows_;
  Window* const window_;
  const std::string prefix_, model_;
  std::vector<std::string> keys_;  // prefix_ + index
  grpc::ClientContext context_;

  // Touched by Start (before StartCall) and then by OnReadDone only; OnDone reads them last.
  v1::StreamResponse response_;  // the read in progress
  bool opened_ = false;          // every open answered (or the call over); counted in window_
  int64_t opens_answered_ = 0;
  int64_t in_flight_ = 0;  // ticks queued and not yet answered
  std::vector<int64_t> sent_ns_;
  std::vector<int64_t> next_row_;
  std::vector<bool> usable_;
  std::string read_failure_;

  absl::Mutex mu_;
  std::deque<v1::StreamRequest> outbox_ ABSL_GUARDED_BY(mu_);  // front() is being written
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  bool close_writes_ ABSL_GUARDED_BY(mu_) = false;  // half-close once the outbox is empty
  bool writes_done_started_ ABSL_GUARDED_BY(mu_) = false;
  std::string write_failure_ ABSL_GUARDED_BY(mu_);

  absl::Mutex done_mu_;
  bool done_ ABSL_GUARDED_BY(done_mu_) = false;
};

// The same on gRPC's blocking API: one thread per call (Start starts it) writes a tick and
// reads answers in turn. With one key it adds the least of its own to a tick's latency, so the
// single-stream points use it; with many keys its one write at a time limits the rate.
class BlockingTickCall final : public TickClient {
 public:
  BlockingTickCall(v1::Forecaster::Stub* stub, const TickFlags& flags, std::string prefix,
                   int64_t keys, const std::vector<std::string>& rows, Window* window)
      : stub_(stub), flags_(flags), prefix_(std::move(prefix)), rows_(rows), window_(window) {
    sent_ns_.resize(static_cast<size_t>(keys));
    next_row_.resize(static_cast<size_t>(keys));
    usable_.assign(static_cast<size_t>(keys), false);
  }

  void Start() override {
    thread_ = std::thread([this] { Run(); });
  }
  void Wait() override {
    if (thread_.joinable()) thread_.join();
  }

 private:
  void Run() {
    grpc::ClientContext context;
    auto stream = stub_->Stream(&context);
    const int64_t keys = static_cast<int64_t>(sent_ns_.size());
    v1::StreamRequest request;
    v1::StreamResponse response;
    for (int64_t k = 0; k < keys; ++k) {
      request.Clear();
      request.set_key(Key(k));
      request.mutable_open()->set_model(flags_.model);
      if (!stream->Write(request)) return Fail(*stream, "open write failed");
    }
    int64_t in_flight = 0;
    for (int64_t k = 0; k < keys; ++k) {
      if (!stream->Read(&response)) return Fail(*stream, "open read failed");
      const int64_t i = Index(response.key());
      if (i < 0) continue;
      if (response.has_error()) {
        tally_.CountError(response.error().message());
        continue;
      }
      usable_[i] = true;
    }
    window_->opened.fetch_add(1);
    opened_ = true;
    for (int64_t k = 0; k < keys; ++k) {
      if (!usable_[k]) continue;
      if (!Send(*stream, k)) return Fail(*stream, "tick write failed");
      ++in_flight;
    }
    while (in_flight > 0) {
      if (!stream->Read(&response)) return Fail(*stream, "tick read failed");
      const int64_t now = NowNs();
      const int64_t k = Index(response.key());
      if (k < 0) continue;
      --in_flight;
      if (now >= window_->begin_ns.load() && now < window_->end_ns.load() &&
          !window_->stopping.load()) {
        if (response.has_error()) {
          tally_.CountError(response.error().message());
        } else {
          tally_.Record(static_cast<double>(now - sent_ns_[k]) / 1e3, response.forecast().timing());
          const int64_t wanted = window_->wanted.load();
          if (wanted > 0 && window_->measured.fetch_add(1) + 1 >= wanted) {
            window_->stopped_ns.store(now);
            window_->stopping.store(true);
          }
        }
      }
      if (window_->stopping.load()) continue;
      if (!Send(*stream, k)) return Fail(*stream, "tick write failed");
      ++in_flight;
    }
    stream->WritesDone();
    const grpc::Status status = stream->Finish();
    if (!status.ok() && tally_.failure.empty()) tally_.failure = status.error_message();
  }

  std::string Key(int64_t k) const { return absl::StrCat(prefix_, k); }
  int64_t Index(const std::string& key) const {
    int64_t k = -1;
    if (key.size() <= prefix_.size() ||
        !absl::SimpleAtoi(absl::string_view(key).substr(prefix_.size()), &k) || k < 0 ||
        k >= static_cast<int64_t>(sent_ns_.size())) {
      return -1;
    }
    return k;
  }
  bool Send(grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>& stream, int64_t k) {
    request_.Clear();
    request_.set_key(Key(k));
    request_.mutable_ticks()->set_raw(rows_[(k + next_row_[k]++) % rows_.size()]);
    sent_ns_[k] = NowNs();
    return stream.Write(request_);
  }
  void Fail(grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>& stream,
            const std::string& what) {
    const grpc::Status status = stream.Finish();
    tally_.failure = absl::StrCat(what, ": ", status.error_code(), ": ", status.error_message());
    if (!opened_) window_->opened.fetch_add(1);
    opened_ = true;
  }

  v1::Forecaster::Stub* const stub_;
  const TickFlags& flags_;
  const std::string prefix_;
  const std::vector<std::string>& rows_;
  Window* const window_;
  v1::StreamRequest request_;
  std::vector<int64_t> sent_ns_;
  std::vector<int64_t> next_row_;
  std::vector<bool> usable_;
  bool opened_ = false;  // counted in window_->opened
  std::thread thread_;
};

absl::Status RunTicks(const TickFlags& flags) {
  // A pool of random rows as raw float32 (x86: already little-endian).
  const int64_t F = flags.features;
  const std::vector<float> pool = RandomRows(1024, F, 11);
  std::vector<std::string> rows(1024);
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].assign(reinterpret_cast<const char*>(pool.data() + r * F), F * sizeof(float));
  }
  const int calls = static_cast<int>(std::min<int64_t>(flags.calls, flags.streams));
  const int channels = std::min(flags.channels, calls);
  std::vector<std::unique_ptr<v1::Forecaster::Stub>> stubs;
  const auto ready_by = std::chrono::system_clock::now() +
                        std::chrono::duration_cast<std::chrono::system_clock::duration>(
                            std::chrono::duration<double>(flags.ready_timeout_s));
  for (int i = 0; i < channels; ++i) {
    grpc::ChannelArguments args;
    // Distinct arguments give each channel its own connection instead of a shared subchannel.
    args.SetInt("forecastd.stream_bench.channel", i);
    auto channel =
        grpc::CreateCustomChannel(flags.target, grpc::InsecureChannelCredentials(), args);
    if (!channel->WaitForConnected(ready_by)) {
      return absl::UnavailableError(absl::StrCat("cannot connect to ", flags.target));
    }
    stubs.push_back(v1::Forecaster::NewStub(channel));
  }
  Window window;
  window.begin_ns.store(INT64_MAX);
  window.wanted.store(flags.ticks);
  std::vector<std::unique_ptr<TickClient>> tick_calls;
  const std::string label = flags.label.empty() ? flags.target : flags.label;
  for (int c = 0; c < calls; ++c) {
    const int64_t keys = flags.streams / calls + (c < flags.streams % calls ? 1 : 0);
    const std::string prefix = absl::StrCat("bench-", flags.streams, "-", c, "-");
    if (flags.client == "blocking") {
      tick_calls.push_back(std::make_unique<BlockingTickCall>(stubs[c % channels].get(), flags,
                                                              prefix, keys, rows, &window));
    } else {
      tick_calls.push_back(std::make_unique<TickCall>(stubs[c % channels].get(), flags, prefix,
                                                      keys, rows, &window));
    }
  }
  for (auto& call : tick_calls) call->Start();
  const auto to_ns = [](double s) { return static_cast<int64_t>(s * 1e9); };
  // Opening 10,000 keys takes a while; the warm-up starts once every key is open.
  while (window.opened.load() < calls) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  const int64_t begin = NowNs() + to_ns(flags.warmup_s);
  window.begin_ns.store(begin);
  if (flags.ticks > 0) {
    while (!window.stopping.load() && NowNs() < begin + to_ns(600)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    window.stopping.store(true);
  } else {
    window.end_ns.store(begin + to_ns(flags.duration_s));
    std::this_thread::sleep_for(std::chrono::duration<double>(flags.warmup_s + flags.duration_s));
    window.stopping.store(true);
  }
  const int64_t end = flags.ticks > 0 ? window.stopped_ns.load() : begin + to_ns(flags.duration_s);
  for (auto& call : tick_calls) call->Wait();

  std::vector<double> us, computes;
  double total = 0;
  int64_t batch_rows = 0, errors = 0;
  std::string first_error;
  for (const auto& call : tick_calls) {
    const TickTally& t = call->tally();
    if (!t.failure.empty()) return absl::UnavailableError(absl::StrCat(label, ": ", t.failure));
    us.insert(us.end(), t.latencies_us.begin(), t.latencies_us.end());
    computes.insert(computes.end(), t.compute_us.begin(), t.compute_us.end());
    total += t.total_us;
    batch_rows += t.batch_rows;
    errors += t.errors;
    if (first_error.empty()) first_error = t.first_error;
  }
  const double compute = std::accumulate(computes.begin(), computes.end(), 0.0);
  std::sort(us.begin(), us.end());
  std::sort(computes.begin(), computes.end());
  const double n = static_cast<double>(us.size());
  const double seconds = std::max(1e-9, static_cast<double>(end - begin) / 1e9);
  std::string json = absl::StrFormat(
      "{\"what\":\"ticks\",\"label\":\"%s\",\"streams\":%d,\"calls\":%d,\"channels\":%d,"
      "\"ticks\":%d,"
      "\"errors\":%d,\"seconds\":%.3f,\"ticks_per_s\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,"
      "\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,\"mean_server_compute_us\":%.1f,"
      "\"mean_server_total_us\":%.1f,\"mean_batch_rows\":%.2f,\"p50_server_compute_us\":%.1f,"
      "\"client\":\"%s\"",
      label, flags.streams, calls, channels, us.size(), errors, seconds, n / seconds, Rank(us, 0.5),
      Rank(us, 0.9), Rank(us, 0.99), us.empty() ? 0.0 : us.back(),
      us.empty() ? 0.0 : std::accumulate(us.begin(), us.end(), 0.0) / n,
      us.empty() ? 0.0 : compute / n, us.empty() ? 0.0 : total / n,
      us.empty() ? 0.0 : static_cast<double>(batch_rows) / n, Rank(computes, 0.5), flags.client);
  if (!first_error.empty()) {
    std::string escaped;
    for (const char c : first_error) {
      if (c == '"' || c == '\\') escaped.push_back('\\');
      escaped.push_back(c >= 0x20 ? c : ' ');
    }
    absl::StrAppend(&json, ",\"first_error\":\"", escaped, "\"");
  }
  std::printf("%s}\n", json.c_str());
  std::fflush(stdout);
  return absl::OkStatus();
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  CLI::App app{"Tick-stream benchmark tools for bench/stream.sh; one JSON line per measurement."};
  app.require_subcommand(1);

  forecastd::ModelFlags model_flags;
  CLI::App* model = app.add_subcommand("model", "write the workload with random weights");
  model->add_option("--config", model_flags.config, "ModelConfig JSON (bench/configs)")->required();
  model->add_option("--out", model_flags.out, "model repository to write into")->required();
  model->add_option("--seed", model_flags.seed, "weights' seed");

  forecastd::StepFlags step_flags;
  CLI::App* step = app.add_subcommand(
      "step", "time Step (of --batch streams) and Forward at B=1 in-process (CPU)");
  step->add_option("--model", step_flags.model, "model directory (holds config.json)")->required();
  step->add_option("--iters", step_flags.iters, "timed steps")->check(CLI::PositiveNumber);
  step->add_option("--warmup", step_flags.warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber);
  step->add_option("--batch", step_flags.batch, "streams per Step (Forward stays at B=1)")
      ->check(CLI::Range(1, 65536));

  forecastd::TickFlags tick_flags;
  CLI::App* ticks = app.add_subcommand("ticks", "closed-loop ticks on S streams");
  ticks->add_option("--target", tick_flags.target, "host:port of a Forecaster")->required();
  ticks->add_option("--label", tick_flags.label, "name printed as \"label\"");
  ticks->add_option("--model", tick_flags.model, "StreamOpen.model")->required();
  ticks->add_option("--features", tick_flags.features, "F")->check(CLI::PositiveNumber);
  ticks->add_option("--streams", tick_flags.streams, "keys, one tick in flight each")
      ->check(CLI::Range(1, 1000000));
  ticks->add_option("--calls", tick_flags.calls, "Forecaster.Stream calls carrying them")
      ->check(CLI::Range(1, 1024));
  ticks
      ->add_option("--channels", tick_flags.channels,
                   "gRPC channels (connections); the calls spread over them")
      ->check(CLI::Range(1, 1024));
  ticks
      ->add_option("--client", tick_flags.client,
                   "callback (reads always outstanding, writes coalesced) or blocking (a "
                   "thread per call, write then read)")
      ->check(CLI::IsMember({"callback", "blocking"}));
  ticks->add_option("--ticks", tick_flags.ticks, "measure this many answers (0: --duration-s)")
      ->check(CLI::NonNegativeNumber);
  ticks->add_option("--duration-s", tick_flags.duration_s, "measured seconds")
      ->check(CLI::PositiveNumber);
  ticks->add_option("--warmup-s", tick_flags.warmup_s, "untimed seconds first")
      ->check(CLI::NonNegativeNumber);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  absl::Status status;
  if (*model) {
    status = forecastd::WriteModel(model_flags);
  } else if (*step) {
    status = forecastd::TimeStep(step_flags);
  } else {
    status = forecastd::RunTicks(tick_flags);
  }
  if (!status.ok()) {
    std::fprintf(stderr, "stream_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
