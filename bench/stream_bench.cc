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
//   ticks  --target HOST:PORT --model NAME --features F --streams S [--calls G] [--ticks N |
//          --duration-s D] [--warmup-s W] [--label L]
//       S tick streams (keys) multiplexed over G Forecaster.Stream calls on one channel, one
//       tick in flight per key: each key's next tick (one row of F floats, `raw`) leaves as soon
//       as its forecast arrives. Counts the answers arriving in the measured window: N of them
//       (--ticks), or all of D seconds. Works against forecastd and bench/echo_server alike.
//
// Latency is the client's: from writing a tick to reading its answer (steady clock);
// percentiles are nearest-rank. Exit codes: 0 success, 1 a failure, 2 bad arguments.
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
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
  const std::vector<float> ticks = RandomRows(T, F, 7);
  std::vector<float> out(static_cast<size_t>(model->num_outputs()));
  std::vector<float> slab(static_cast<size_t>(model->StateFloats()), 0.0f);
  const int32_t slot = 0;
  Workspace workspace;
  const auto step = [&](int64_t i) {
    return model->Step(*backend, out.data(), ticks.data() + (i % T) * F, slab.data(), &slot, 1,
                       workspace, ForwardPlacement{});
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
  std::printf("%s\n", absl::StrFormat(R"({"what":"step","backend":"%s","batch":1,"iters":%d,%s})",
                                      backend_name, flags.iters, Summary(std::move(step_us)))
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

// One Forecaster.Stream call carrying `keys` keys; Run is its thread.
class TickCall {
 public:
  TickCall(v1::Forecaster::Stub* stub, const TickFlags& flags, std::string prefix, int64_t keys,
           const std::vector<std::string>& rows, Window* window)
      : stub_(stub), flags_(flags), prefix_(std::move(prefix)), rows_(rows), window_(window) {
    sent_ns_.resize(static_cast<size_t>(keys));
    next_row_.resize(static_cast<size_t>(keys));
    usable_.assign(static_cast<size_t>(keys), false);
  }

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
        ++errors_;
        if (first_error_.empty()) first_error_ = response.error().message();
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
          ++errors_;
          if (first_error_.empty()) first_error_ = response.error().message();
        } else {
          latencies_us_.push_back(static_cast<double>(now - sent_ns_[k]) / 1e3);
          const v1::Timing& t = response.forecast().timing();
          compute_us_ += static_cast<double>(t.compute_us());
          total_us_ += static_cast<double>(t.total_us());
          batch_rows_ += t.batch_size();
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
    if (!status.ok() && failure_.empty()) failure_ = status.error_message();
  }

  const std::vector<double>& latencies_us() const { return latencies_us_; }
  double compute_us() const { return compute_us_; }
  double total_us() const { return total_us_; }
  int64_t batch_rows() const { return batch_rows_; }
  int64_t errors() const { return errors_; }
  const std::string& first_error() const { return first_error_; }
  const std::string& failure() const { return failure_; }

 private:
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
    failure_ = absl::StrCat(what, ": ", status.error_code(), ": ", status.error_message());
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
  std::vector<double> latencies_us_;
  double compute_us_ = 0, total_us_ = 0;
  int64_t batch_rows_ = 0, errors_ = 0;
  std::string first_error_, failure_;
};

absl::Status RunTicks(const TickFlags& flags) {
  // A pool of random rows as raw float32 (x86: already little-endian).
  const int64_t F = flags.features;
  const std::vector<float> pool = RandomRows(1024, F, 11);
  std::vector<std::string> rows(1024);
  for (size_t r = 0; r < rows.size(); ++r) {
    rows[r].assign(reinterpret_cast<const char*>(pool.data() + r * F), F * sizeof(float));
  }
  auto channel = grpc::CreateChannel(flags.target, grpc::InsecureChannelCredentials());
  if (!channel->WaitForConnected(std::chrono::system_clock::now() +
                                 std::chrono::duration_cast<std::chrono::system_clock::duration>(
                                     std::chrono::duration<double>(flags.ready_timeout_s)))) {
    return absl::UnavailableError(absl::StrCat("cannot connect to ", flags.target));
  }
  auto stub = v1::Forecaster::NewStub(channel);
  const int calls = static_cast<int>(std::min<int64_t>(flags.calls, flags.streams));
  Window window;
  window.begin_ns.store(INT64_MAX);
  window.wanted.store(flags.ticks);
  std::vector<std::unique_ptr<TickCall>> tick_calls;
  const std::string label = flags.label.empty() ? flags.target : flags.label;
  for (int c = 0; c < calls; ++c) {
    const int64_t keys = flags.streams / calls + (c < flags.streams % calls ? 1 : 0);
    tick_calls.push_back(std::make_unique<TickCall>(
        stub.get(), flags, absl::StrCat("bench-", flags.streams, "-", c, "-"), keys, rows,
        &window));
  }
  std::vector<std::thread> threads;
  for (auto& call : tick_calls) threads.emplace_back([&call] { call->Run(); });
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
  for (std::thread& t : threads) t.join();

  std::vector<double> us;
  double compute = 0, total = 0;
  int64_t batch_rows = 0, errors = 0;
  std::string first_error;
  for (const auto& call : tick_calls) {
    if (!call->failure().empty()) {
      return absl::UnavailableError(absl::StrCat(label, ": ", call->failure()));
    }
    us.insert(us.end(), call->latencies_us().begin(), call->latencies_us().end());
    compute += call->compute_us();
    total += call->total_us();
    batch_rows += call->batch_rows();
    errors += call->errors();
    if (first_error.empty()) first_error = call->first_error();
  }
  std::sort(us.begin(), us.end());
  const double n = static_cast<double>(us.size());
  const double seconds = std::max(1e-9, static_cast<double>(end - begin) / 1e9);
  std::string json = absl::StrFormat(
      "{\"what\":\"ticks\",\"label\":\"%s\",\"streams\":%d,\"calls\":%d,\"ticks\":%d,"
      "\"errors\":%d,\"seconds\":%.3f,\"ticks_per_s\":%.1f,\"p50_us\":%.1f,\"p90_us\":%.1f,"
      "\"p99_us\":%.1f,\"max_us\":%.1f,\"mean_us\":%.1f,\"mean_server_compute_us\":%.1f,"
      "\"mean_server_total_us\":%.1f,\"mean_batch_rows\":%.2f",
      label, flags.streams, calls, us.size(), errors, seconds, n / seconds, Rank(us, 0.5),
      Rank(us, 0.9), Rank(us, 0.99), us.empty() ? 0.0 : us.back(),
      us.empty() ? 0.0 : std::accumulate(us.begin(), us.end(), 0.0) / n,
      us.empty() ? 0.0 : compute / n, us.empty() ? 0.0 : total / n,
      us.empty() ? 0.0 : static_cast<double>(batch_rows) / n);
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
  CLI::App* step = app.add_subcommand("step", "time Step and Forward at B=1 in-process (CPU)");
  step->add_option("--model", step_flags.model, "model directory (holds config.json)")->required();
  step->add_option("--iters", step_flags.iters, "timed steps")->check(CLI::PositiveNumber);
  step->add_option("--warmup", step_flags.warmup, "untimed steps first")
      ->check(CLI::NonNegativeNumber);

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
