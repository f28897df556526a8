// StreamHub over a registry of small models on the CPU: state-mode streams forecast what the model
// computes over every tick since the stream began (N = 1, T, 5T), window-mode streams what Predict
// computes on the last T ticks; a key's replies come in its order while keys share batches; reset,
// close, disconnect and resume; a promotion moves a stream to the new version by replaying its
// ring buffer; idle streams expire; bad requests are refused on their key only.
#include "engine/serving/stream_hub.h"

#include <chrono>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "backends/reference_backend.h"
#include "engine/file_io.h"
#include "engine/models/model_files.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

namespace fs = std::filesystem;

constexpr int kT = 4;  // lookback
constexpr int kF = 2;  // features (RandomModel's)

ModelConfig LstmConfig(const std::string& name, v1::StreamingConfig::Mode mode) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(kT);
  c.set_horizon(2);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.mutable_lstm()->set_hidden_size(4);
  c.mutable_lstm()->set_num_layers(2);
  c.mutable_batching()->set_max_batch_size(8);
  c.mutable_streaming()->set_mode(mode);
  return c;
}

// The same weights as `model` in a model of lookback n.
std::unique_ptr<Forecaster> WithLookback(const Forecaster& model, int n) {
  ModelConfig config = model.config();
  config.set_lookback(n);
  auto copy = Forecaster::Create(config).value();
  std::copy_n(model.parameters().data(), model.parameters().size(), copy->parameters().data());
  return copy;
}

bool Near(const std::vector<float>& a, const std::vector<float>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!(std::fabs(a[i] - b[i]) <= 1e-5f + 1e-5f * std::fabs(b[i]))) return false;
  }
  return true;
}

bool WaitUntil(const std::function<bool()>& cond) {
  for (int i = 0; i < 60000; ++i) {
    if (cond()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

// What a connection received, in order.
class Inbox {
 public:
  StreamHub::Sink sink() {
    return [this](StreamReply reply) {
      absl::MutexLock l(&mu_);
      replies_.push_back(std::move(reply));
    };
  }
  // Waits until `n` replies have come and returns them all.
  std::vector<StreamReply> Wait(size_t n) {
    REQUIRE(WaitUntil([&] {
      absl::MutexLock l(&mu_);
      return replies_.size() >= n;
    }));
    absl::MutexLock l(&mu_);
    return replies_;
  }
  // The next reply after the `seen` ones.
  StreamReply Next(size_t& seen) {
    const std::vector<StreamReply> replies = Wait(seen + 1);
    return replies[seen++];
  }

 private:
  absl::Mutex mu_;
  std::vector<StreamReply> replies_ ABSL_GUARDED_BY(mu_);
};

struct Env {
  Env() : root(dir.path() + "/models") {
    fs::create_directories(root);
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = 2;
    scheduler = DeviceScheduler::Create(scheduler_options).value();
  }
  ~Env() {
    hub.reset();
    registry.reset();
  }

  std::unique_ptr<Forecaster> Publish(const ModelConfig& config, int64_t version, uint32_t seed) {
    auto model = testing::RandomModel(config, seed);
    const absl::Status status = PublishVersion(*model, root + "/" + config.name(), version);
    INFO(status.ToString());
    REQUIRE(status.ok());
    return model;
  }

  StreamHub& Start(int64_t max_state_bytes = 0, int64_t max_request_bytes = 0) {
    ModelRegistry::Options options;
    options.repository_path = root;
    options.backend = &backend;
    options.scheduler = scheduler.get();
    options.clock = &clock;
    registry = ModelRegistry::Create(options).value();
    REQUIRE(registry->Start().ok());
    StreamHub::Options hub_options;
    hub_options.registry = registry.get();
    hub_options.clock = &clock;
    hub_options.max_state_bytes = max_state_bytes;
    hub_options.max_request_bytes = max_request_bytes;
    hub = StreamHub::Create(hub_options).value();
    return *hub;
  }

  testing::TempDir dir;
  const std::string root;
  ReferenceBackend backend;
  FakeClock clock;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<StreamHub> hub;
};

std::vector<float> Row(const std::vector<float>& series, int n) {
  return std::vector<float>(series.begin() + n * kF, series.begin() + (n + 1) * kF);
}

TEST_CASE("A state-mode stream forecasts what the model computes over every tick so far",
          "[unit][stream]") {
  Env env;
  const auto model = env.Publish(LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE), 1, 3);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "AAPL", "m", 0, false);
  StreamReply opened = inbox.Next(seen);
  REQUIRE(opened.kind == StreamReply::Kind::kStatus);
  REQUIRE(opened.info.mode == v1::StreamingConfig::STREAM_MODE_STATE);
  REQUIRE(opened.info.version == 1);
  REQUIRE(opened.info.lookback == kT);

  const int N = 5 * kT;
  const std::vector<float> series = testing::RandomWindows(1, N, 21);
  for (int n = 1; n <= N; ++n) {
    hub.Ticks(c, "AAPL", Row(series, n - 1), 0);
    const StreamReply reply = inbox.Next(seen);
    INFO(reply.status.ToString());
    REQUIRE(reply.kind == StreamReply::Kind::kForecast);
    REQUIRE(reply.sequence == n);
    REQUIRE(reply.ticks_needed == 0);
    REQUIRE(reply.forecast_shape == std::vector<int64_t>{2, 1});
    if (n == 1 || n == kT || n == N) {
      CAPTURE(n);
      const std::vector<float> window(series.begin(), series.begin() + n * kF);
      REQUIRE(Near(reply.forecast, testing::ReferenceForward(*WithLookback(*model, n), window, 1)));
    }
  }
  // Several rows in one message: one forecast, after the last of them.
  const std::vector<float> more = testing::RandomWindows(1, 3, 22);
  hub.Ticks(c, "AAPL", more, 0);
  const StreamReply after = inbox.Next(seen);
  REQUIRE(after.sequence == N + 3);
  std::vector<float> all = series;
  all.insert(all.end(), more.begin(), more.end());
  REQUIRE(Near(after.forecast, testing::ReferenceForward(*WithLookback(*model, N + 3), all, 1)));

  // A reset forgets the state: the next tick forecasts as a fresh stream's first.
  hub.Reset(c, "AAPL");
  const StreamReply reset = inbox.Next(seen);
  REQUIRE(reset.kind == StreamReply::Kind::kStatus);
  REQUIRE(reset.info.ticks_buffered == 0);
  REQUIRE(reset.info.sequence == N + 3);
  hub.Ticks(c, "AAPL", Row(series, 0), 0);
  REQUIRE(Near(inbox.Next(seen).forecast,
               testing::ReferenceForward(*WithLookback(*model, 1), Row(series, 0), 1)));
}

TEST_CASE(
    "A window-mode stream answers Predict on its last T ticks, after saying how many it needs",
    "[unit][stream]") {
  Env env;
  const auto model = env.Publish(LstmConfig("w", v1::StreamingConfig::STREAM_MODE_WINDOW), 1, 4);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "k", "w", 0, false);
  REQUIRE(inbox.Next(seen).info.mode == v1::StreamingConfig::STREAM_MODE_WINDOW);
  const std::vector<float> series = testing::RandomWindows(1, 3 * kT, 5);
  for (int n = 1; n <= 3 * kT; ++n) {
    hub.Ticks(c, "k", Row(series, n - 1), 0);
    const StreamReply reply = inbox.Next(seen);
    INFO(reply.status.ToString());
    REQUIRE(reply.kind == StreamReply::Kind::kForecast);
    REQUIRE(reply.sequence == n);
    if (n < kT) {
      REQUIRE(reply.ticks_needed == kT - n);
      REQUIRE(reply.forecast.empty());
      continue;
    }
    const std::vector<float> window(series.begin() + (n - kT) * kF, series.begin() + n * kF);
    REQUIRE(Near(reply.forecast, testing::ReferenceForward(*model, window, 1)));
  }
}

TEST_CASE("Each key is answered in order while many keys share batches", "[unit][stream]") {
  Env env;
  const auto model = env.Publish(LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE), 1, 6);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  constexpr int kKeys = 20, kTicks = 6;
  for (int k = 0; k < kKeys; ++k) hub.Open(c, absl::StrCat("key", k), "m", 0, false);
  const std::vector<float> series = testing::RandomWindows(kKeys, kTicks, 8);
  // Every key's ticks go out at once, interleaved, without waiting for answers.
  for (int n = 0; n < kTicks; ++n) {
    for (int k = 0; k < kKeys; ++k)
      hub.Ticks(c, absl::StrCat("key", k), Row(series, k * kTicks + n), 0);
  }
  const std::vector<StreamReply> replies = inbox.Wait(kKeys + kKeys * kTicks);
  std::map<std::string, int64_t> last;
  int64_t largest_batch = 0;
  for (const StreamReply& reply : replies) {
    if (reply.kind == StreamReply::Kind::kStatus) continue;
    INFO(reply.status.ToString());
    REQUIRE(reply.kind == StreamReply::Kind::kForecast);
    REQUIRE(reply.sequence == last[reply.key] + 1);
    last[reply.key] = reply.sequence;
    largest_batch = std::max(largest_batch, reply.batch_rows);
    if (reply.sequence == kTicks) {
      const int k = std::stoi(reply.key.substr(3));
      const std::vector<float> window(series.begin() + k * kTicks * kF,
                                      series.begin() + (k + 1) * kTicks * kF);
      REQUIRE(Near(reply.forecast,
                   testing::ReferenceForward(*WithLookback(*model, kTicks), window, 1)));
    }
  }
  REQUIRE(last.size() == kKeys);
  REQUIRE(largest_batch >= 1);
}

TEST_CASE("Bad requests are refused on their key and disturb nothing else", "[unit][stream]") {
  Env env;
  ModelConfig config = LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE);
  config.mutable_streaming()->set_max_streams(2);
  env.Publish(config, 1, 3);
  StreamHub& hub = env.Start();
  Inbox inbox, other;
  const auto c = hub.Connect(inbox.sink());
  const auto d = hub.Connect(other.sink());
  size_t seen = 0, other_seen = 0;
  const auto error = [&](absl::StatusCode code, const std::string& text) {
    const StreamReply reply = inbox.Next(seen);
    INFO(reply.status.ToString());
    REQUIRE(reply.kind == StreamReply::Kind::kError);
    REQUIRE(reply.status.code() == code);
    REQUIRE(std::string(reply.status.message()).find(text) != std::string::npos);
  };
  hub.Ticks(c, "never", {1.0f, 2.0f}, 0);
  error(absl::StatusCode::kNotFound, "not open");
  hub.Open(c, "a", "nope", 0, false);
  error(absl::StatusCode::kNotFound, "nope");
  hub.Open(c, "a", "m", 0, false);
  REQUIRE(inbox.Next(seen).kind == StreamReply::Kind::kStatus);
  hub.Ticks(c, "a", {1.0f, 2.0f, 3.0f}, 0);
  error(absl::StatusCode::kInvalidArgument, "rows of 2 features");
  hub.Ticks(c, "a", {1.0f, std::nanf("")}, 0);
  error(absl::StatusCode::kInvalidArgument, "not finite");
  hub.Open(d, "a", "m", 0, false);
  REQUIRE(other.Next(other_seen).status.code() == absl::StatusCode::kFailedPrecondition);
  hub.Open(c, "b", "m", 0, false);
  REQUIRE(inbox.Next(seen).kind == StreamReply::Kind::kStatus);
  hub.Open(d, "c", "m", 0, false);
  const StreamReply full = other.Next(other_seen);
  REQUIRE(full.status.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(std::string(full.status.message()).find("max_streams") != std::string::npos);
  hub.Open(c, "p", "m", 7, false);
  error(absl::StatusCode::kNotFound, "");
  // The good stream is undisturbed: its first tick is a first tick.
  const std::vector<float> tick = testing::RandomWindows(1, 1, 1);
  hub.Ticks(c, "a", tick, 0);
  const StreamReply ok = inbox.Next(seen);
  REQUIRE(ok.kind == StreamReply::Kind::kForecast);
  REQUIRE(ok.sequence == 1);
  hub.Close(c, "a");
  const StreamReply closed = inbox.Next(seen);
  REQUIRE(closed.info.closed);
  hub.Ticks(c, "a", tick, 0);
  error(absl::StatusCode::kNotFound, "not open");
}

TEST_CASE("A kept stream resumes on a new connection where it left off, a dropped one is gone",
          "[unit][stream]") {
  Env env;
  const auto model = env.Publish(LstmConfig("keep", v1::StreamingConfig::STREAM_MODE_STATE), 1, 3);
  ModelConfig drop = LstmConfig("drop", v1::StreamingConfig::STREAM_MODE_STATE);
  drop.mutable_streaming()->set_on_disconnect(v1::StreamingConfig::DISCONNECT_DROP);
  env.Publish(drop, 1, 4);
  StreamHub& hub = env.Start();
  const std::vector<float> series = testing::RandomWindows(1, 6, 9);
  {
    Inbox inbox;
    const auto c = hub.Connect(inbox.sink());
    size_t seen = 0;
    hub.Open(c, "x", "keep", 0, false);
    hub.Open(c, "y", "drop", 0, false);
    inbox.Next(seen);
    inbox.Next(seen);
    hub.Ticks(c, "x", std::vector<float>(series.begin(), series.begin() + 3 * kF), 0);
    REQUIRE(inbox.Next(seen).sequence == 3);
    hub.Disconnect(c);
  }
  REQUIRE(hub.List("keep").size() == 1);
  REQUIRE_FALSE(hub.List("keep")[0].connected);
  REQUIRE(hub.List("drop").empty());
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "x", "keep", 0, true);
  const StreamReply resumed = inbox.Next(seen);
  REQUIRE(resumed.info.resumed);
  REQUIRE(resumed.info.sequence == 3);
  hub.Ticks(c, "x", std::vector<float>(series.begin() + 3 * kF, series.end()), 0);
  const StreamReply reply = inbox.Next(seen);
  REQUIRE(reply.sequence == 6);
  REQUIRE(Near(reply.forecast, testing::ReferenceForward(*WithLookback(*model, 6), series, 1)));
  hub.Open(c, "y", "drop", 0, true);
  REQUIRE(inbox.Next(seen).status.code() == absl::StatusCode::kNotFound);
}

TEST_CASE("A promotion moves a stream to the new version by replaying its ring buffer",
          "[unit][stream]") {
  Env env;
  const ModelConfig config = LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE);
  env.Publish(config, 1, 3);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "follow", "m", 0, false);
  hub.Open(c, "pinned", "m", 1, false);
  inbox.Next(seen);
  inbox.Next(seen);
  const int N = 2 * kT;
  const std::vector<float> series = testing::RandomWindows(1, N + 1, 12);
  const std::vector<float> head(series.begin(), series.begin() + N * kF);
  hub.Ticks(c, "follow", head, 0);
  hub.Ticks(c, "pinned", head, 0);
  inbox.Next(seen);
  inbox.Next(seen);

  const auto v2 = env.Publish(config, 2, 30);
  REQUIRE(env.registry->SetServingVersion("m", 2).ok());
  hub.Ticks(c, "follow", Row(series, N), 0);
  const StreamReply moved = inbox.Next(seen);
  INFO(moved.status.ToString());
  REQUIRE(moved.kind == StreamReply::Kind::kForecast);
  REQUIRE(moved.version == 2);
  REQUIRE(moved.sequence == N + 1);
  // Version 2 has seen the ring buffer (the last T ticks), then the new one.
  const std::vector<float> seen_by_v2(series.begin() + (N - kT) * kF, series.end());
  REQUIRE(
      Near(moved.forecast, testing::ReferenceForward(*WithLookback(*v2, kT + 1), seen_by_v2, 1)));
  // A stream pinned to the replaced version is told so on its key.
  hub.Ticks(c, "pinned", Row(series, N), 0);
  const StreamReply gone = inbox.Next(seen);
  REQUIRE(gone.kind == StreamReply::Kind::kError);
  REQUIRE(gone.status.code() == absl::StatusCode::kFailedPrecondition);
  REQUIRE(std::string(gone.status.message()).find("pinned") != std::string::npos);
}

TEST_CASE("Stream state counts against the memory limits", "[unit][stream]") {
  Env env;
  env.Publish(LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE), 1, 3);
  // One stream: a ring of T * F floats and a state of L * 2 * H floats.
  const int64_t per_stream = 4 * (kT * kF + 2 * 2 * 4);
  StreamHub& hub = env.Start(/*max_state_bytes=*/2 * per_stream, /*max_request_bytes=*/64);
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "a", "m", 0, false);
  hub.Open(c, "b", "m", 0, false);
  REQUIRE(inbox.Next(seen).kind == StreamReply::Kind::kStatus);
  REQUIRE(inbox.Next(seen).kind == StreamReply::Kind::kStatus);
  REQUIRE(hub.Usage()["m"].state_bytes == 2 * per_stream);
  hub.Open(c, "c", "m", 0, false);
  const StreamReply full = inbox.Next(seen);
  REQUIRE(full.status.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(std::string(full.status.message()).find("--max-stream-memory-bytes") !=
          std::string::npos);
  // 16 rows of 2 floats are 128 bytes, over the 64 a request may hold.
  hub.Ticks(c, "a", testing::RandomWindows(1, 16, 1), 0);
  const StreamReply big = inbox.Next(seen);
  REQUIRE(big.status.code() == absl::StatusCode::kResourceExhausted);
  REQUIRE(std::string(big.status.message()).find("--max-request-memory-bytes") !=
          std::string::npos);
  // Closing one makes room again.
  hub.Close(c, "b");
  REQUIRE(inbox.Next(seen).info.closed);
  hub.Open(c, "c", "m", 0, false);
  REQUIRE(inbox.Next(seen).kind == StreamReply::Kind::kStatus);
}

TEST_CASE("Streams idle past their TTL are closed", "[unit][stream]") {
  Env env;
  ModelConfig config = LstmConfig("m", v1::StreamingConfig::STREAM_MODE_WINDOW);
  config.mutable_streaming()->set_idle_ttl_seconds(60);
  env.Publish(config, 1, 3);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  hub.Open(c, "a", "m", 0, false);
  hub.Open(c, "b", "m", 0, false);
  inbox.Next(seen);
  inbox.Next(seen);
  env.clock.Advance(absl::Seconds(45));
  hub.Ticks(c, "b", {10.0f, 100.0f}, 0);
  REQUIRE(inbox.Next(seen).ticks_needed == kT - 1);
  env.clock.Advance(absl::Seconds(30));
  hub.Sweep();
  const std::vector<StreamInfo> left = hub.List("m");
  REQUIRE(left.size() == 1);
  REQUIRE(left[0].key == "b");
  REQUIRE(hub.Usage()["m"].streams == 1);
}

TEST_CASE("An exported stream imported again (another replica's way) carries on bit for bit",
          "[unit][stream]") {
  Env env;
  env.Publish(LstmConfig("m", v1::StreamingConfig::STREAM_MODE_STATE), 1, 3);
  StreamHub& hub = env.Start();
  Inbox inbox;
  const auto c = hub.Connect(inbox.sink());
  size_t seen = 0;
  const std::vector<float> series = testing::RandomWindows(1, 3 * kT, 44);
  const std::vector<float> head(series.begin(), series.begin() + 2 * kT * kF);
  const std::vector<float> tail(series.begin() + 2 * kT * kF, series.end());
  for (const char* key : {"a", "b"}) {
    hub.Open(c, key, "m", 0, false);
    inbox.Next(seen);
    hub.Ticks(c, key, head, 0);
    inbox.Next(seen);
  }
  // "a" goes on here; "b" is exported, closed and imported (as onto another replica).
  absl::StatusOr<v1::StreamRecord> record = hub.Export("m", "b", absl::Seconds(60));
  INFO(record.status().ToString());
  REQUIRE(record.ok());
  REQUIRE(record->sequence() == 2 * kT);
  REQUIRE(record->ring_size() == kT * kF);
  REQUIRE(record->state_size() == 2 * 2 * 4);  // L * (h, c) * H
  hub.Close(c, "b");
  REQUIRE(inbox.Next(seen).info.closed);
  REQUIRE(hub.Export("m", "b", absl::Seconds(1)).status().code() == absl::StatusCode::kNotFound);
  const absl::Status imported = hub.Import(*record, absl::Seconds(60));
  INFO(imported.ToString());
  REQUIRE(imported.ok());
  hub.Open(c, "b", "m", 0, /*resume=*/true);
  REQUIRE(inbox.Next(seen).info.sequence == 2 * kT);
  hub.Ticks(c, "a", tail, 0);
  const StreamReply a = inbox.Next(seen);
  hub.Ticks(c, "b", tail, 0);
  const StreamReply b = inbox.Next(seen);
  REQUIRE(a.sequence == 3 * kT);
  REQUIRE(b.sequence == 3 * kT);
  REQUIRE(a.forecast == b.forecast);
  // An import onto a key open on a connection is refused.
  REQUIRE(hub.Import(*record, absl::Seconds(60)).code() == absl::StatusCode::kFailedPrecondition);
  // The whole hub's snapshot holds both streams.
  absl::StatusOr<v1::StreamSnapshot> snapshot = hub.Snapshot(/*clean=*/true, absl::Seconds(60));
  REQUIRE(snapshot.ok());
  REQUIRE(snapshot->streams_size() == 2);
  REQUIRE(snapshot->clean());
}

}  // namespace
}  // namespace forecastd
