#include "engine/serving/stream_hub.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <deque>
#include <filesystem>
#include <future>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "engine/models/input_record.h"
#include "engine/serving/batching_config.h"
#include "engine/serving/tick_engine.h"
#include "engine/serving/tick_rows.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

// One request of a stream waiting for the one before it.
struct StreamHub::Pending {
  enum class Kind { kOpen, kTicks, kReplay, kReset, kClose };
  Kind kind = Kind::kTicks;
  // kTicks: rows * Fin raw values (the model's input columns); kReplay: one row, already in
  // the ring buffer.
  std::vector<float> values;
  // kTicks, a model with future-known covariates or calendar features: the raw future-known
  // covariates of the P steps after the last row (P, covariates.future), and each row's time
  // then the P steps' (rows + P).
  std::vector<float> future;
  std::vector<int64_t> timestamps;
  int64_t rows = 0;
  int64_t next_row = 0;  // kTicks: rows done (state mode: stepped)
  bool in_ring = false;  // window mode: its rows are in the ring buffer
  int retries = 0;       // re-sent after its version was replaced under it
  uint64_t tag = 0;
  absl::Time arrival;
};

// One connection's replies: queued under the hub's lock in the order they are made, handed to
// the sink outside it by one thread at a time (Flush), so a key's replies keep their order and
// a sink may call into gRPC, or back into the hub, freely.
struct StreamHub::Connection {
  explicit Connection(Sink s) : sink(std::move(s)) {}
  const Sink sink;
  std::deque<StreamReply> outbox;   // guarded by the hub's mu_
  bool delivering = false;          // guarded by the hub's mu_: a Flush is calling the sink
  std::thread::id deliverer;        // guarded by the hub's mu_: its thread
  std::atomic<bool> closed{false};  // Disconnect: no more sink calls
};

struct StreamHub::Stream {
  std::string model;
  std::string key;
  int64_t requested_version = 0;  // 0: follows the serving version
  // The version computing the stream; nullopt until the next tick pins one.
  std::optional<LoadedModel> pin;
  v1::StreamingConfig::Mode mode = v1::StreamingConfig::STREAM_MODE_WINDOW;
  StreamLimits limits;
  int32_t slot = -1;       // state mode: its row of the pinned version's slab
  bool zero_state = true;  // state mode: the next step starts from a zero state
  int T = 0, F = 0;        // lookback and features of the model when opened
  int Fin = 0;             // a tick's input columns (F less the calendar columns)
  int64_t R = 0;           // floats of one input record (Forecaster::input_floats())
  // What each tick message carries beside its rows, and the future-known and calendar
  // features the ring's rows were computed for (CovariateSignature), which a version the
  // stream moves to must share.
  TickCovariateSizes covariates;
  std::string covariate_signature;
  std::string series;                // a model trained on several series: the stream's
  int32_t series_index = -1;         // its index in the pinned version's ModelConfig.series
  std::optional<int64_t> last_time;  // calendar features: the time of the ring's last tick
  std::vector<int64_t> shape;        // of one forecast
  int64_t bytes = 0;                 // its ring buffer and (state mode) its state
  std::vector<float> ring;           // (T, F): the last T ticks stepped, ring[(n % T) * F] the n-th
  int64_t ring_count = 0;            // ticks ever put in the ring since the last reset
  int64_t sequence = 0;              // ticks received
  int64_t sequence_done = 0;         // ticks done: stepped (state mode) or buffered (window mode)
  ConnectionId connection = 0;       // 0: detached
  absl::Time last_active;
  std::deque<Pending> pending;
  bool busy = false;   // a task of it is in an engine
  bool held = false;   // a snapshot is reading it: nothing new is dispatched
  bool ended = false;  // closed or evicted: out of the map
  bool resumed = false;

  int32_t buffered() const { return static_cast<int32_t>(std::min<int64_t>(ring_count, T)); }
  // Takes the sizes of `model` (the version it is opened or imported on), with an empty ring.
  void TakeShape(const Forecaster& model);
  // The last min(T, ring_count) ticks, oldest first.
  std::vector<float> Window(int64_t n) const {
    std::vector<float> window(static_cast<size_t>(n * F));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t t = (ring_count - n + i) % T;
      std::copy_n(ring.begin() + t * F, F, window.begin() + i * F);
    }
    return window;
  }
};

namespace {

// The future-known and calendar features of a config, in order: a stream's ring rows and
// records mean the same to two versions whose signatures are equal.
std::string CovariateSignature(const ModelConfig& config) {
  std::string signature = absl::StrJoin(config.covariates().future(), ",");
  for (int i = 0; i < config.covariates().calendar_size(); ++i) {
    absl::StrAppend(&signature, "|", CalendarName(config.covariates().calendar(i)));
  }
  return signature;
}

}  // namespace

void StreamHub::Stream::TakeShape(const Forecaster& model) {
  const ModelConfig& config = model.config();
  T = model.lookback();
  F = model.num_features();
  Fin = NumInputColumns(config);
  R = model.input_floats();
  covariates.horizon = model.horizon();
  covariates.future_inputs = NumFutureInputColumns(config);
  covariates.timestamps = NeedsTimestamps(config);
  covariate_signature = CovariateSignature(config);
  shape = {model.horizon(), model.num_targets()};
  if (!config.quantiles().empty()) shape.push_back(model.num_quantiles());
  ring.assign(static_cast<size_t>(T) * F, 0.0f);
}

// A task for an engine, with the pin that keeps the engine alive.
struct StreamHub::Dispatch {
  std::shared_ptr<Stream> stream;
  LoadedModel pin;
  std::unique_ptr<TickTask> task;
};

absl::StatusOr<std::unique_ptr<StreamHub>> StreamHub::Create(const Options& options) {
  if (options.registry == nullptr) return absl::InvalidArgumentError("StreamHub needs a registry");
  return std::unique_ptr<StreamHub>(new StreamHub(options));
}

StreamHub::StreamHub(const Options& options)
    : options_(options), clock_(options.clock != nullptr ? options.clock : Clock::Real()) {
  sweeper_ = std::thread([this] { SweeperLoop(); });
}

StreamHub::~StreamHub() {
  {
    absl::MutexLock l(&mu_);
    stopping_ = true;
  }
  sweeper_.join();
  // Tasks in flight call back into the hub when they complete: end every stream (nothing more
  // is dispatched) and wait for them.
  absl::MutexLock l(&mu_);
  accepting_ = false;
  connections_.clear();
  std::vector<std::shared_ptr<Stream>> all;
  for (const auto& [id, stream] : streams_) all.push_back(stream);
  for (const auto& stream : all) EndLocked(stream, "shutdown");
  const auto idle = [&all]() {
    return std::none_of(all.begin(), all.end(), [](const auto& s) { return s->busy; });
  };
  mu_.Await(absl::Condition(&idle));
}

void StreamHub::SweeperLoop() {
  const bool snapshots =
      !options_.snapshot_path.empty() && options_.snapshot_interval > absl::ZeroDuration();
  absl::Time next_snapshot = absl::Now() + options_.snapshot_interval;
  // An idle server does not rewrite an empty snapshot every interval.
  bool last_had_streams = true;
  absl::MutexLock l(&mu_);
  while (!stopping_) {
    const auto stop = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return stopping_; };
    if (mu_.AwaitWithTimeout(absl::Condition(&stop), absl::Seconds(1))) break;
    const bool has_streams = !streams_.empty();
    const bool take = snapshots && accepting_ && absl::Now() >= next_snapshot &&
                      (has_streams || last_had_streams);
    if (take) last_had_streams = has_streams;
    mu_.Unlock();
    Sweep();
    if (take) {
      if (absl::Status saved =
              SaveSnapshot(options_.snapshot_path, /*clean=*/false, absl::Seconds(5));
          !saved.ok()) {
        spdlog::warn("tick streams: periodic snapshot failed: {}", saved.ToString());
      }
      next_snapshot = absl::Now() + options_.snapshot_interval;
    }
    mu_.Lock();
  }
}

StreamHub::ConnectionId StreamHub::Connect(Sink sink) {
  absl::MutexLock l(&mu_);
  const ConnectionId id = next_connection_++;
  connections_[id] = std::make_shared<Connection>(std::move(sink));
  return id;
}

void StreamHub::Disconnect(ConnectionId connection) {
  absl::MutexLock l(&mu_);
  if (const auto c = connections_.find(connection); c != connections_.end()) {
    std::shared_ptr<Connection> conn = c->second;
    connections_.erase(c);
    conn->closed.store(true);
    conn->outbox.clear();
    // No sink call may follow: wait for one in progress, unless it is this thread's own (a
    // sink that disconnects), which stops after that call.
    if (conn->delivering && conn->deliverer != std::this_thread::get_id()) {
      const auto done = [&conn]() { return !conn->delivering; };
      mu_.Await(absl::Condition(&done));
    }
  }
  std::vector<std::shared_ptr<Stream>> ended;
  auto it = attached_.lower_bound({connection, std::string()});
  while (it != attached_.end() && it->first.first == connection) {
    std::shared_ptr<Stream> stream = it->second;
    it = attached_.erase(it);
    stream->connection = 0;
    stream->last_active = clock_->Now();
    if (!stream->limits.keep_on_disconnect) ended.push_back(stream);
  }
  for (const auto& stream : ended) EndLocked(stream, "disconnected");
}

void StreamHub::SendLocked(ConnectionId connection, StreamReply reply) {
  const auto it = connections_.find(connection);
  if (it == connections_.end()) return;
  it->second->outbox.push_back(std::move(reply));
  if (!it->second->delivering) to_flush_.push_back(connection);
}

void StreamHub::Flush() {
  for (;;) {
    std::shared_ptr<Connection> conn;
    std::deque<StreamReply> batch;
    {
      absl::MutexLock l(&mu_);
      while (conn == nullptr && !to_flush_.empty()) {
        const ConnectionId id = to_flush_.back();
        to_flush_.pop_back();
        const auto it = connections_.find(id);
        if (it == connections_.end() || it->second->delivering || it->second->outbox.empty()) {
          continue;
        }
        conn = it->second;
        conn->delivering = true;
        conn->deliverer = std::this_thread::get_id();
      }
      if (conn == nullptr) return;
      batch.swap(conn->outbox);
    }
    for (;;) {
      for (StreamReply& reply : batch) {
        if (conn->closed.load()) break;
        conn->sink(std::move(reply));
      }
      batch.clear();
      absl::MutexLock l(&mu_);
      if (conn->outbox.empty() || conn->closed.load()) {
        conn->delivering = false;
        break;
      }
      batch.swap(conn->outbox);
    }
  }
}

void StreamHub::SendLocked(const Stream& stream, StreamReply reply) {
  reply.key = stream.key;
  SendLocked(stream.connection, std::move(reply));
}

StreamInfo StreamHub::InfoLocked(const Stream& stream) const {
  StreamInfo info;
  info.model = stream.model;
  info.key = stream.key;
  info.version = stream.pin.has_value() ? stream.pin->version : 0;
  info.requested_version = stream.requested_version;
  info.mode = stream.mode;
  info.sequence = stream.sequence;
  info.ticks_buffered = stream.buffered();
  info.lookback = stream.T;
  info.series = stream.series;
  info.resumed = stream.resumed;
  info.closed = stream.ended;
  info.connected = stream.connection != 0;
  info.idle = clock_->Now() - stream.last_active;
  return info;
}

int64_t StreamHub::VersionOf(const Stream& stream) {
  return stream.pin.has_value() ? stream.pin->version : stream.requested_version;
}

void StreamHub::UnpinLocked(Stream& stream) {
  if (stream.pin.has_value() && stream.slot >= 0) {
    ModelRegistry::Ticks(*stream.pin).ReleaseSlot(stream.slot);
  }
  stream.slot = -1;
  stream.pin.reset();
}

void StreamHub::EndLocked(const std::shared_ptr<Stream>& stream, const char* reason) {
  if (stream->ended) return;
  stream->ended = true;
  // A task in flight still writes its slot: the slot is released when it completes.
  if (!stream->busy) UnpinLocked(*stream);
  stream->pending.clear();
  streams_.erase({stream->model, stream->key});
  state_bytes_ -= stream->bytes;
  if (--per_model_[stream->model] == 0) per_model_.erase(stream->model);
  if (stream->connection != 0) attached_.erase({stream->connection, stream->key});
  if (options_.observer != nullptr) options_.observer->OnStreamEnded(stream->model, reason);
}

void StreamHub::Open(ConnectionId connection, const std::string& key, const std::string& model,
                     int64_t version, bool resume, const std::string& series) {
  DoOpen(connection, key, model, version, resume, series);
  Flush();
}

void StreamHub::DoOpen(ConnectionId connection, const std::string& key, const std::string& model,
                       int64_t version, bool resume, const std::string& series) {
  absl::MutexLock l(&mu_);
  StreamReply error;
  error.key = key;
  const auto fail = [&](absl::Status status) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    error.status = std::move(status);
    SendLocked(connection, std::move(error));
  };
  if (!accepting_) {
    return fail(absl::UnavailableError("forecastd is shutting down; resume the key later"));
  }
  if (key.empty()) return fail(absl::InvalidArgumentError("a stream needs a key"));
  if (const auto on_this = attached_.find({connection, key}); on_this != attached_.end()) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("key '", key, "' is already open on this connection (model '",
                     on_this->second->model, "'); close it first")));
  }
  const auto it = streams_.find({model, key});
  std::shared_ptr<Stream> existing = it != streams_.end() ? it->second : nullptr;
  if (existing != nullptr && existing->connection != 0) {
    return fail(absl::FailedPreconditionError(
        absl::StrCat("key '", key, "' of model '", model, "' is open on another connection")));
  }
  if (resume) {
    if (existing == nullptr) {
      return fail(absl::NotFoundError(absl::StrCat("no stream '", key, "' of model '", model,
                                                   "' is kept to resume; open it afresh")));
    }
    if (version != 0 && version != existing->requested_version) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("stream '", key, "' was opened for version ", existing->requested_version,
                       "; resume it with that version (or 0)")));
    }
    existing->connection = connection;
    attached_[{connection, key}] = existing;
    existing->resumed = true;
    existing->last_active = clock_->Now();
    StreamReply reply;
    reply.kind = StreamReply::Kind::kStatus;
    reply.info = InfoLocked(*existing);
    SendLocked(*existing, std::move(reply));
    return;
  }
  absl::StatusOr<LoadedModel> pin = options_.registry->GetLoadedModel(model, version);
  if (!pin.ok()) return fail(pin.status());
  const ModelConfig& config = pin->model->config();
  int32_t series_index = -1;
  if (NumSeries(config) > 0) {
    if (series.empty()) {
      return fail(absl::InvalidArgumentError(
          absl::StrCat("model '", model, "' was trained on ", NumSeries(config),
                       " series: name the series of stream '", key, "' (StreamOpen.series)")));
    }
    absl::StatusOr<int> index = SeriesIndex(config, series);
    if (!index.ok()) return fail(index.status());
    series_index = *index;
  } else if (!series.empty()) {
    return fail(absl::InvalidArgumentError(
        absl::StrCat("model '", model, "' was trained on one series; open stream '", key,
                     "' without a series (it names '", series, "')")));
  }
  const StreamLimits limits = StreamLimitsFor(config, pin->max_batch_size);
  int64_t open = per_model_[model];
  if (existing != nullptr) {
    EndLocked(existing, "replaced");
    --open;
  }
  if (open >= limits.max_streams) {
    return fail(absl::ResourceExhaustedError(absl::StrCat(
        "model '", model, "' has ", open, " open streams, its streaming.max_streams")));
  }
  const int64_t bytes =
      int64_t{sizeof(float)} *
      (int64_t{pin->model->lookback()} * pin->model->num_features() +
       (limits.mode == v1::StreamingConfig::STREAM_MODE_STATE ? pin->model->StateFloats() : 0));
  if (absl::Status fits = CheckStateBytesLocked(bytes, absl::StrCat("stream '", key, "'"));
      !fits.ok()) {
    return fail(fits);
  }
  auto stream = std::make_shared<Stream>();
  stream->bytes = bytes;
  stream->model = model;
  stream->key = key;
  stream->requested_version = version;
  stream->mode = limits.mode;
  stream->limits = limits;
  stream->TakeShape(*pin->model);
  stream->series = series;
  stream->series_index = series_index;
  stream->connection = connection;
  stream->last_active = clock_->Now();
  stream->pin = *std::move(pin);
  if (stream->mode == v1::StreamingConfig::STREAM_MODE_STATE) {
    absl::StatusOr<int32_t> slot = ModelRegistry::Ticks(*stream->pin).AllocateSlot();
    if (!slot.ok()) return fail(slot.status());
    stream->slot = *slot;
  }
  streams_[{model, key}] = stream;
  ++per_model_[model];
  state_bytes_ += stream->bytes;
  attached_[{connection, key}] = stream;
  StreamReply reply;
  reply.kind = StreamReply::Kind::kStatus;
  reply.info = InfoLocked(*stream);
  SendLocked(*stream, std::move(reply));
}

std::shared_ptr<StreamHub::Stream> StreamHub::FindLocked(ConnectionId connection,
                                                         const std::string& key,
                                                         StreamReply* error) {
  if (const auto it = attached_.find({connection, key}); it != attached_.end()) return it->second;
  error->key = key;
  error->status = absl::NotFoundError(
      absl::StrCat("key '", key, "' is not open on this connection; open it first"));
  return nullptr;
}

void StreamHub::Ticks(ConnectionId connection, const std::string& key,
                      absl::Span<const float> values, uint64_t tag,
                      const TickCovariates& covariates) {
  Pending pending;
  pending.kind = Pending::Kind::kTicks;
  pending.values.assign(values.begin(), values.end());
  pending.future.assign(covariates.future.begin(), covariates.future.end());
  pending.timestamps.assign(covariates.timestamps.begin(), covariates.timestamps.end());
  pending.tag = tag;
  Submit(connection, key, std::move(pending));
}

void StreamHub::Reset(ConnectionId connection, const std::string& key) {
  Pending pending;
  pending.kind = Pending::Kind::kReset;
  Submit(connection, key, std::move(pending));
}

void StreamHub::Close(ConnectionId connection, const std::string& key) {
  Pending pending;
  pending.kind = Pending::Kind::kClose;
  Submit(connection, key, std::move(pending));
}

void StreamHub::Submit(ConnectionId connection, const std::string& key, Pending pending) {
  DoSubmit(connection, key, std::move(pending));
  Flush();
}

void StreamHub::DoSubmit(ConnectionId connection, const std::string& key, Pending pending) {
  std::vector<Dispatch> dispatches;
  {
    absl::MutexLock l(&mu_);
    StreamReply error;
    error.tag = pending.tag;
    if (!accepting_) {
      error.key = key;
      error.status = absl::UnavailableError("forecastd is shutting down; resume the key later");
      SendLocked(connection, std::move(error));
      return;
    }
    std::shared_ptr<Stream> stream = FindLocked(connection, key, &error);
    if (stream == nullptr) {
      if (pending.kind == Pending::Kind::kTicks && options_.observer != nullptr) {
        options_.observer->OnTick("", 0, error.status, {});
      }
      SendLocked(connection, std::move(error));
      return;
    }
    pending.arrival = clock_->Now();
    stream->last_active = pending.arrival;
    const int64_t request_bytes =
        static_cast<int64_t>((pending.values.size() + pending.future.size()) * sizeof(float) +
                             pending.timestamps.size() * sizeof(int64_t));
    if (pending.kind == Pending::Kind::kTicks && options_.max_request_bytes > 0 &&
        request_bytes > options_.max_request_bytes) {
      error.status = absl::ResourceExhaustedError(absl::StrCat(
          "ticks of ", request_bytes, " bytes for key '", key, "'; one request may hold ",
          options_.max_request_bytes, " (--max-request-memory-bytes): send fewer rows at a time"));
      SendLocked(*stream, std::move(error));
      return;
    }
    if (pending.kind == Pending::Kind::kTicks) {
      absl::StatusOr<int64_t> rows =
          CheckTickRows(pending.values, stream->Fin, options_.allow_non_finite_inputs);
      if (rows.ok()) {
        if (absl::Status covariates =
                CheckTickCovariates(*rows, pending.future, pending.timestamps, stream->covariates,
                                    options_.allow_non_finite_inputs);
            !covariates.ok()) {
          rows = covariates;
        }
      }
      if (!rows.ok()) {
        error.status = absl::InvalidArgumentError(absl::StrCat(
            rows.status().message(), " (key '", key, "', model '", stream->model, "')"));
        if (options_.observer != nullptr) {
          options_.observer->OnTick(stream->model, VersionOf(*stream), error.status, {});
        }
        SendLocked(*stream, std::move(error));
        return;
      }
      pending.rows = *rows;
      stream->sequence += pending.rows;
    }
    stream->pending.push_back(std::move(pending));
    PumpLocked(stream, dispatches);
  }
  EnqueueAll(std::move(dispatches));
}

absl::Status StreamHub::EnsurePinnedLocked(Stream& stream) {
  if (stream.pin.has_value() && !ModelRegistry::Retired(*stream.pin)) return absl::OkStatus();
  if (stream.busy) return absl::InternalError("re-pinning a stream with a task in flight");
  UnpinLocked(stream);
  absl::StatusOr<LoadedModel> pin =
      options_.registry->GetLoadedModel(stream.model, stream.requested_version);
  if (!pin.ok()) {
    if (stream.requested_version != 0) {
      return absl::FailedPreconditionError(absl::StrCat(
          "version ", stream.requested_version, " of model '", stream.model, "', which stream '",
          stream.key, "' is pinned to, is no longer loaded: ", pin.status().message()));
    }
    return pin.status();
  }
  const Forecaster& model = *pin->model;
  if (model.lookback() != stream.T || model.num_features() != stream.F ||
      NumInputColumns(model.config()) != stream.Fin || model.input_floats() != stream.R ||
      CovariateSignature(model.config()) != stream.covariate_signature ||
      StreamMode(model.config()) != stream.mode) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", stream.model, "' now serves version ", pin->version,
                     " with another lookback, feature count, covariates or stream mode; reopen "
                     "stream '",
                     stream.key, "'"));
  }
  if (!stream.series.empty()) {
    absl::StatusOr<int> index = SeriesIndex(model.config(), stream.series);
    if (!index.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "model '", stream.model, "' now serves version ", pin->version, ": ",
          index.status().message(), "; reopen stream '", stream.key, "' with one of its series"));
    }
    stream.series_index = *index;
  }
  if (stream.mode == v1::StreamingConfig::STREAM_MODE_STATE) {
    ASSIGN_OR_RETURN(stream.slot, ModelRegistry::Ticks(*pin).AllocateSlot());
    // Re-prime the new version's state from the ring buffer, oldest tick first, ahead of
    // anything still waiting: the stream then continues as if the new version had seen them.
    const int64_t n = stream.buffered();
    const std::vector<float> window = stream.Window(n);
    for (int64_t i = n - 1; i >= 0; --i) {
      Pending replay;
      replay.kind = Pending::Kind::kReplay;
      replay.values.assign(window.begin() + i * stream.F, window.begin() + (i + 1) * stream.F);
      stream.pending.push_front(std::move(replay));
    }
    stream.zero_state = true;
  }
  stream.pin = *std::move(pin);
  return absl::OkStatus();
}

void StreamHub::PumpLocked(const std::shared_ptr<Stream>& stream, std::vector<Dispatch>& out) {
  Stream& s = *stream;
  const bool state = s.mode == v1::StreamingConfig::STREAM_MODE_STATE;
  while (!s.busy && !s.held && !s.ended && !s.pending.empty()) {
    if (s.pending.front().kind == Pending::Kind::kReset ||
        s.pending.front().kind == Pending::Kind::kClose) {
      const bool close = s.pending.front().kind == Pending::Kind::kClose;
      s.pending.pop_front();
      if (close) {
        EndLocked(stream, "closed");
      } else {
        s.ring_count = 0;
        s.last_time.reset();
        s.zero_state = true;
      }
      StreamReply reply;
      reply.kind = StreamReply::Kind::kStatus;
      reply.info = InfoLocked(s);
      SendLocked(s, std::move(reply));
      continue;
    }
    // A tick or a replayed one: the version first, which may put replays in front of it.
    if (s.pending.front().kind == Pending::Kind::kTicks) {
      if (absl::Status pinned = EnsurePinnedLocked(s); !pinned.ok()) {
        FailFrontLocked(s, pinned);
        continue;
      }
    }
    Pending& next = s.pending.front();
    if (next.kind == Pending::Kind::kReplay) {
      auto task = std::make_unique<TickTask>();
      task->kind = TickTask::Kind::kStep;
      task->slot = s.slot;
      task->zero_state = s.zero_state;
      task->input = next.values;
      s.zero_state = false;
      s.busy = true;
      out.push_back(Dispatch{stream, *s.pin, std::move(task)});
      return;
    }
    if (state) {
      // One step per row; the row joins the ring buffer when its step has succeeded.
      const float* row = next.values.data() + next.next_row * s.F;
      auto task = std::make_unique<TickTask>();
      task->kind = TickTask::Kind::kStep;
      task->slot = s.slot;
      task->zero_state = s.zero_state;
      task->input.assign(row, row + s.F);
      s.zero_state = false;
      s.busy = true;
      out.push_back(Dispatch{stream, *s.pin, std::move(task)});
      return;
    }
    // Window mode: every row joins the ring buffer at once; only the last one's window runs.
    if (!next.in_ring) {
      if (absl::Status put = PutRowsLocked(s, next); !put.ok()) {
        FailFrontLocked(s, absl::InvalidArgumentError(absl::StrCat(put.message(), " (key '", s.key,
                                                                   "', model '", s.model, "')")));
        continue;
      }
      s.sequence_done += next.rows;
      next.next_row = next.rows - 1;
      next.in_ring = true;
    }
    if (s.ring_count < s.T) {
      StreamReply needed;
      needed.version = s.pin->version;
      needed.ticks_needed = static_cast<int32_t>(s.T - s.ring_count);
      AnswerFrontLocked(s, std::move(needed));
      continue;
    }
    auto task = std::make_unique<TickTask>();
    task->kind = TickTask::Kind::kWindow;
    task->input = s.R == int64_t{s.T} * s.F ? s.Window(s.T) : WindowRecordLocked(s, next);
    s.busy = true;
    out.push_back(Dispatch{stream, *s.pin, std::move(task)});
    return;
  }
}

absl::Status StreamHub::PutRowsLocked(Stream& s, const Pending& pending) {
  const int64_t calendar = s.F - s.Fin;  // calendar columns per row
  if (calendar > 0 && s.last_time.has_value() && pending.timestamps.front() <= *s.last_time) {
    return absl::InvalidArgumentError(
        absl::StrCat("tick timestamps must increase: the first, ", pending.timestamps.front(),
                     ", does not follow the last tick's, ", *s.last_time));
  }
  const ModelConfig& config = s.pin->model->config();
  for (int64_t r = 0; r < pending.rows; ++r) {
    float* row = s.ring.data() + (s.ring_count % s.T) * s.F;
    std::copy_n(pending.values.begin() + r * s.Fin, s.Fin, row);
    if (calendar > 0) {
      CalendarValues(config, pending.timestamps[static_cast<size_t>(r)], row + s.Fin);
    }
    ++s.ring_count;
  }
  if (calendar > 0) s.last_time = pending.timestamps[static_cast<size_t>(pending.rows - 1)];
  return absl::OkStatus();
}

std::vector<float> StreamHub::WindowRecordLocked(const Stream& s, const Pending& pending) const {
  // The layout of BuildInputRecords (engine/models/input_record.h): the window's T rows of F,
  // then per forecast step covariates.future and the calendar columns of the step's time, then
  // the series index.
  const int64_t T = s.T, F = s.F, P = s.covariates.horizon, FkIn = s.covariates.future_inputs;
  const int64_t calendar = F - s.Fin, Fk = FkIn + calendar;
  std::vector<float> record = s.Window(T);
  record.resize(static_cast<size_t>(s.R), 0.0f);
  const ModelConfig& config = s.pin->model->config();
  for (int64_t p = 0; p < P && Fk > 0; ++p) {
    float* step = record.data() + T * F + p * Fk;
    std::copy_n(pending.future.begin() + p * FkIn, FkIn, step);
    if (calendar > 0) {
      CalendarValues(config, pending.timestamps[static_cast<size_t>(pending.rows + p)],
                     step + FkIn);
    }
  }
  if (s.series_index >= 0) record.back() = static_cast<float>(s.series_index);
  return record;
}

void StreamHub::AnswerFrontLocked(Stream& s, StreamReply reply) {
  const Pending& front = s.pending.front();
  reply.kind = StreamReply::Kind::kForecast;
  reply.sequence = s.sequence_done;
  reply.forecast_shape = s.shape;
  reply.tag = front.tag;
  reply.total_time = clock_->Now() - front.arrival;
  if (options_.observer != nullptr) {
    options_.observer->OnTick(s.model, reply.version, absl::OkStatus(),
                              {.total = reply.total_time,
                               .queue = reply.queue_time,
                               .compute = reply.compute_time,
                               .computed = reply.ticks_needed == 0});
  }
  s.pending.pop_front();
  SendLocked(s, std::move(reply));
}

void StreamHub::FailFrontLocked(Stream& s, const absl::Status& status) {
  Pending failed = std::move(s.pending.front());
  s.pending.pop_front();
  if (failed.kind == Pending::Kind::kReplay) {
    // The replay cannot finish: drop the others too; the key's next tick tries again.
    while (!s.pending.empty() && s.pending.front().kind == Pending::Kind::kReplay) {
      s.pending.pop_front();
    }
    UnpinLocked(s);
    return;
  }
  if (!failed.in_ring) s.sequence_done += failed.rows - failed.next_row;
  StreamReply reply;
  reply.status = status;
  reply.tag = failed.tag;
  reply.sequence = s.sequence_done;
  if (options_.observer != nullptr) {
    options_.observer->OnTick(s.model, VersionOf(s), status,
                              {.total = clock_->Now() - failed.arrival});
  }
  SendLocked(s, std::move(reply));
}

void StreamHub::EnqueueAll(std::vector<Dispatch> dispatches) {
  for (Dispatch& d : dispatches) {
    std::shared_ptr<Stream> stream = d.stream;
    d.task->done = [this, stream](TickResult result) { OnTaskDone(stream, std::move(result)); };
    if (absl::Status status = ModelRegistry::Ticks(d.pin).Enqueue(d.task); !status.ok()) {
      TickResult refused;
      refused.status = std::move(status);
      refused.version = d.pin.version;
      OnTaskDone(stream, std::move(refused));
    }
  }
}

void StreamHub::OnTaskDone(const std::shared_ptr<Stream>& stream, TickResult result) {
  // The batch's last computed task delivers every reply its batch queued: per connection, all
  // at once, rather than one delivery per reply. (Every kStep and kWindow task is the hub's, so
  // the last of a batch comes back here.)
  const bool more = result.more_in_batch;
  TaskDone(stream, std::move(result));
  if (!more) Flush();
}

void StreamHub::TaskDone(const std::shared_ptr<Stream>& stream, TickResult result) {
  std::vector<Dispatch> dispatches;
  {
    absl::MutexLock l(&mu_);
    Stream& s = *stream;
    s.busy = false;
    if (s.ended) {
      UnpinLocked(s);
      return;
    }
    if (s.pending.empty()) return;  // cannot happen: the task's request is at the front
    const bool state = s.mode == v1::StreamingConfig::STREAM_MODE_STATE;
    Pending& front = s.pending.front();
    if (!result.status.ok()) {
      // The state after a failed step is unknown: the slot goes, and the next step re-primes
      // a new one from the ring buffer (a version that was replaced meanwhile is left for the
      // serving one the same way). A stream that follows the serving version retries on it.
      const bool retired = s.pin.has_value() && ModelRegistry::Retired(*s.pin);
      if (state || retired) UnpinLocked(s);
      if (retired && s.requested_version == 0 && ++front.retries <= 3) {
        // Nothing is lost: the request is still at the front.
      } else {
        FailFrontLocked(s, result.status);
      }
    } else if (front.kind == Pending::Kind::kReplay) {
      s.pending.pop_front();
    } else {
      if (state) {
        std::copy_n(front.values.begin() + front.next_row * s.F, s.F,
                    s.ring.begin() + (s.ring_count % s.T) * s.F);
        ++s.ring_count;
        ++s.sequence_done;
        ++front.next_row;
      }
      if (!state || front.next_row == front.rows) {
        StreamReply reply;
        reply.version = result.version;
        reply.forecast = std::move(result.output);
        reply.queue_time = result.queue_time;
        reply.compute_time = result.compute_time;
        reply.batch_rows = result.batch_rows;
        AnswerFrontLocked(s, std::move(reply));
      }
    }
    PumpLocked(stream, dispatches);
  }
  EnqueueAll(std::move(dispatches));
}

void StreamHub::Sweep() {
  absl::MutexLock l(&mu_);
  const absl::Time now = clock_->Now();
  std::vector<std::shared_ptr<Stream>> idle;
  for (auto& [id, stream] : streams_) {
    Stream& s = *stream;
    if (s.busy || !s.pending.empty()) continue;
    if (s.limits.idle_ttl > absl::ZeroDuration() && now - s.last_active >= s.limits.idle_ttl) {
      idle.push_back(stream);
    } else if (s.pin.has_value() && s.requested_version == 0 && ModelRegistry::Retired(*s.pin)) {
      // Let go of a replaced version now rather than at the next tick, so it can be freed.
      UnpinLocked(s);
    }
  }
  for (const auto& stream : idle) EndLocked(stream, "idle");
}

std::vector<StreamInfo> StreamHub::List(const std::string& model) const {
  absl::MutexLock l(&mu_);
  std::vector<StreamInfo> infos;
  for (const auto& [id, stream] : streams_) {
    if (model.empty() || stream->model == model) infos.push_back(InfoLocked(*stream));
  }
  return infos;
}

std::map<std::string, StreamHub::ModelUsage> StreamHub::Usage() const {
  absl::MutexLock l(&mu_);
  std::map<std::string, ModelUsage> usage;
  for (const auto& [id, stream] : streams_) {
    ModelUsage& u = usage[stream->model];
    ++u.streams;
    u.state_mode = stream->mode == v1::StreamingConfig::STREAM_MODE_STATE;
    u.state_bytes += stream->bytes;
  }
  return usage;
}

// --- Snapshots, export and import

absl::Status StreamHub::CheckStateBytesLocked(int64_t bytes, const std::string& what) const {
  if (options_.max_state_bytes <= 0 || state_bytes_ + bytes <= options_.max_state_bytes) {
    return absl::OkStatus();
  }
  return absl::ResourceExhaustedError(
      absl::StrCat(what, " needs ", bytes, " bytes of state; tick streams hold ", state_bytes_,
                   " bytes already and the server allows ", options_.max_state_bytes,
                   " (--max-stream-memory-bytes)"));
}

void StreamHub::StopAccepting() {
  absl::MutexLock l(&mu_);
  accepting_ = false;
}

bool StreamHub::AwaitIdle(absl::Duration timeout) {
  absl::MutexLock l(&mu_);
  const auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    for (const auto& [id, stream] : streams_) {
      if (stream->busy || !stream->pending.empty()) return false;
    }
    return true;
  };
  return mu_.AwaitWithTimeout(absl::Condition(&idle), timeout);
}

v1::StreamRecord StreamHub::RecordLocked(const Stream& s) const {
  v1::StreamRecord record;
  record.set_model(s.model);
  record.set_key(s.key);
  record.set_requested_version(s.requested_version);
  record.set_mode(s.mode);
  record.set_lookback(s.T);
  record.set_features(s.F);
  record.set_sequence(s.sequence_done);
  const int64_t n = s.buffered();
  const std::vector<float> window = s.Window(n);
  record.mutable_ring()->Add(window.begin(), window.end());
  record.set_ring_count(s.ring_count);
  record.set_zero_state(s.zero_state);
  record.set_series(s.series);
  if (s.last_time.has_value()) record.set_last_timestamp(*s.last_time);
  return record;
}

absl::StatusOr<std::vector<v1::StreamRecord>> StreamHub::ReadRecords(
    std::vector<std::shared_ptr<Stream>> streams, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  struct Reads {
    absl::Mutex mu;
    int64_t outstanding ABSL_GUARDED_BY(mu) = 0;
    absl::Status status ABSL_GUARDED_BY(mu);
    std::map<const Stream*, std::vector<float>> states ABSL_GUARDED_BY(mu);
  };
  auto reads = std::make_shared<Reads>();
  std::vector<Dispatch> dispatches;
  const auto release = [&]() {
    std::vector<Dispatch> resumed;
    {
      absl::MutexLock l(&mu_);
      for (const auto& stream : streams) {
        stream->held = false;
        PumpLocked(stream, resumed);
      }
    }
    EnqueueAll(std::move(resumed));
    Flush();
  };
  bool rested = false;
  {
    absl::MutexLock l(&mu_);
    for (const auto& stream : streams) stream->held = true;
    // Between two requests: the task in flight, if any, finishes first.
    const auto resting = [&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
      for (const auto& stream : streams) {
        if (stream->busy) return false;
      }
      return true;
    };
    rested = mu_.AwaitWithDeadline(absl::Condition(&resting), deadline);
  }
  if (!rested) {
    release();
    return absl::DeadlineExceededError("tick streams did not come to rest for a snapshot");
  }
  {
    absl::MutexLock l(&mu_);
    for (const auto& stream : streams) {
      Stream& s = *stream;
      if (s.ended || s.mode != v1::StreamingConfig::STREAM_MODE_STATE || !s.pin.has_value() ||
          s.slot < 0 || s.zero_state || ModelRegistry::Retired(*s.pin)) {
        continue;
      }
      auto task = std::make_unique<TickTask>();
      task->kind = TickTask::Kind::kReadState;
      task->slot = s.slot;
      const Stream* key = stream.get();
      task->done = [reads, key](TickResult result) {
        absl::MutexLock rl(&reads->mu);
        if (result.status.ok()) {
          reads->states[key] = std::move(result.output);
        } else if (reads->status.ok()) {
          reads->status = result.status;
        }
        --reads->outstanding;
      };
      {
        absl::MutexLock rl(&reads->mu);
        ++reads->outstanding;
      }
      dispatches.push_back(Dispatch{stream, *s.pin, std::move(task)});
    }
  }
  for (Dispatch& d : dispatches) {
    if (absl::Status status = ModelRegistry::Ticks(d.pin).Enqueue(d.task); !status.ok()) {
      TickResult refused;
      refused.status = status;
      d.task->done(std::move(refused));
    }
  }
  {
    absl::MutexLock rl(&reads->mu);
    const auto done = [&reads]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(reads->mu) {
      return reads->outstanding == 0;
    };
    reads->mu.Await(absl::Condition(&done));
  }
  std::vector<v1::StreamRecord> records;
  absl::Status status;
  {
    absl::MutexLock l(&mu_);
    absl::MutexLock rl(&reads->mu);
    status = reads->status;
    for (const auto& stream : streams) {
      if (stream->ended) continue;
      v1::StreamRecord record = RecordLocked(*stream);
      const auto state = reads->states.find(stream.get());
      if (state != reads->states.end()) {
        record.set_version(stream->pin->version);
        record.mutable_state()->Add(state->second.begin(), state->second.end());
      } else if (stream->zero_state && stream->pin.has_value()) {
        record.set_version(stream->pin->version);
      }
      records.push_back(std::move(record));
    }
  }
  release();
  if (!status.ok()) return status;
  return records;
}

absl::StatusOr<v1::StreamSnapshot> StreamHub::Snapshot(bool clean, absl::Duration timeout) {
  absl::MutexLock one_at_a_time(&snapshot_mu_);
  std::vector<std::shared_ptr<Stream>> streams;
  {
    absl::MutexLock l(&mu_);
    for (const auto& [id, stream] : streams_) streams.push_back(stream);
  }
  ASSIGN_OR_RETURN(std::vector<v1::StreamRecord> records, ReadRecords(std::move(streams), timeout));
  v1::StreamSnapshot snapshot;
  snapshot.set_written_unix_ms(absl::ToUnixMillis(absl::Now()));
  snapshot.set_clean(clean);
  for (v1::StreamRecord& record : records) *snapshot.add_streams() = std::move(record);
  return snapshot;
}

absl::StatusOr<v1::StreamRecord> StreamHub::Export(const std::string& model, const std::string& key,
                                                   absl::Duration timeout) {
  absl::MutexLock one_at_a_time(&snapshot_mu_);
  std::shared_ptr<Stream> stream;
  {
    absl::MutexLock l(&mu_);
    const auto it = streams_.find({model, key});
    if (it == streams_.end()) {
      return absl::NotFoundError(absl::StrCat("model '", model, "' has no stream '", key, "'"));
    }
    stream = it->second;
  }
  ASSIGN_OR_RETURN(std::vector<v1::StreamRecord> records, ReadRecords({stream}, timeout));
  if (records.empty()) {
    return absl::NotFoundError(absl::StrCat("stream '", key, "' of model '", model, "' ended"));
  }
  return records.front();
}

absl::Status StreamHub::Import(const v1::StreamRecord& record, absl::Duration timeout) {
  const std::string context =
      absl::StrCat("stream '", record.key(), "' of model '", record.model(), "'");
  if (record.key().empty()) return absl::InvalidArgumentError("a stream record needs a key");
  ASSIGN_OR_RETURN(LoadedModel pin,
                   options_.registry->GetLoadedModel(record.model(), record.requested_version()));
  const Forecaster& model = *pin.model;
  const StreamLimits limits = StreamLimitsFor(model.config(), pin.max_batch_size);
  const int64_t T = model.lookback(), F = model.num_features();
  if (record.lookback() != T || record.features() != F || record.mode() != limits.mode) {
    return absl::FailedPreconditionError(absl::StrCat(
        context, " was kept for lookback ", record.lookback(), ", ", record.features(),
        " features and mode ", v1::StreamingConfig::Mode_Name(record.mode()), "; version ",
        pin.version, " has ", T, ", ", F, " and ", v1::StreamingConfig::Mode_Name(limits.mode)));
  }
  const int64_t n = record.ring_size() / F;
  if (record.ring_size() % F != 0 || n > T || n > record.ring_count() || record.sequence() < 0) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": malformed ring buffer"));
  }
  int32_t series_index = -1;
  if (NumSeries(model.config()) > 0) {
    if (record.series().empty()) {
      return absl::FailedPreconditionError(
          absl::StrCat(context, " was kept without a series; version ", pin.version,
                       " was trained on ", NumSeries(model.config()), " series"));
    }
    absl::StatusOr<int> index = SeriesIndex(model.config(), record.series());
    if (!index.ok()) {
      return absl::FailedPreconditionError(absl::StrCat(context, ": ", index.status().message()));
    }
    series_index = *index;
  } else if (!record.series().empty()) {
    return absl::FailedPreconditionError(absl::StrCat(context, " was kept for series '",
                                                      record.series(), "'; version ", pin.version,
                                                      " was trained on one series"));
  }
  const bool state = limits.mode == v1::StreamingConfig::STREAM_MODE_STATE;
  const bool same_version = record.version() == pin.version;
  if (state && same_version && !record.zero_state() && record.state_size() != model.StateFloats()) {
    return absl::InvalidArgumentError(absl::StrCat(context, ": a state of ", record.state_size(),
                                                   " values; the model keeps ",
                                                   model.StateFloats()));
  }
  auto stream = std::make_shared<Stream>();
  stream->model = record.model();
  stream->key = record.key();
  stream->requested_version = record.requested_version();
  stream->mode = limits.mode;
  stream->limits = limits;
  stream->TakeShape(model);
  stream->series = record.series();
  stream->series_index = series_index;
  if (record.has_last_timestamp()) stream->last_time = record.last_timestamp();
  stream->ring_count = record.ring_count();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = (record.ring_count() - n + i) % T;
    std::copy_n(record.ring().begin() + i * F, F, stream->ring.begin() + t * F);
  }
  stream->sequence = stream->sequence_done = record.sequence();
  stream->last_active = clock_->Now();
  std::unique_ptr<TickTask> write;
  if (state && (same_version || record.ring_count() == 0)) {
    // The state is this version's (or zero): it comes back as it was.
    ASSIGN_OR_RETURN(stream->slot, ModelRegistry::Ticks(pin).AllocateSlot());
    stream->zero_state = record.zero_state() || record.state().empty();
    if (!stream->zero_state) {
      write = std::make_unique<TickTask>();
      write->kind = TickTask::Kind::kWriteState;
      write->slot = stream->slot;
      write->input.assign(record.state().begin(), record.state().end());
    }
    stream->pin = pin;
  } else if (!state) {
    stream->pin = pin;
  }
  // Otherwise no pin: the next tick re-primes a new state from the ring buffer.
  if (write != nullptr) {
    auto written = std::make_shared<std::promise<absl::Status>>();
    std::future<absl::Status> result = written->get_future();
    write->done = [written](TickResult r) { written->set_value(r.status); };
    if (absl::Status status = ModelRegistry::Ticks(pin).Enqueue(write); !status.ok()) {
      ModelRegistry::Ticks(pin).ReleaseSlot(stream->slot);
      return WithContext(status, context);
    }
    if (result.wait_for(absl::ToChronoMilliseconds(timeout)) != std::future_status::ready) {
      // The write still runs; the slot stays taken by it.
      return absl::DeadlineExceededError(absl::StrCat(context, ": restoring its state timed out"));
    }
    if (absl::Status status = result.get(); !status.ok()) {
      ModelRegistry::Ticks(pin).ReleaseSlot(stream->slot);
      return WithContext(status, context);
    }
  }
  absl::MutexLock l(&mu_);
  const auto it = streams_.find({record.model(), record.key()});
  if (it != streams_.end()) {
    if (it->second->connection != 0) {
      UnpinLocked(*stream);
      return absl::FailedPreconditionError(
          absl::StrCat(context, " is open on a connection; close it before importing"));
    }
    EndLocked(it->second, "replaced");
  }
  const int64_t open = per_model_[record.model()];
  stream->bytes = int64_t{sizeof(float)} * (T * F + (state ? model.StateFloats() : 0));
  if (absl::Status fits = CheckStateBytesLocked(stream->bytes, context); !fits.ok()) {
    UnpinLocked(*stream);
    return fits;
  }
  if (open >= limits.max_streams) {
    UnpinLocked(*stream);
    return absl::ResourceExhaustedError(absl::StrCat("model '", record.model(), "' has ", open,
                                                     " open streams, its streaming.max_streams"));
  }
  streams_[{record.model(), record.key()}] = stream;
  ++per_model_[record.model()];
  state_bytes_ += stream->bytes;
  return absl::OkStatus();
}

absl::Status StreamHub::SaveSnapshot(const std::string& path, bool clean, absl::Duration timeout) {
  ASSIGN_OR_RETURN(v1::StreamSnapshot snapshot, Snapshot(clean, timeout));
  std::string bytes;
  if (!snapshot.SerializeToString(&bytes)) {
    return absl::InternalError("cannot serialise the stream snapshot");
  }
  const size_t slash = path.find_last_of('/');
  if (slash != std::string::npos) {
    std::error_code error;
    std::filesystem::create_directories(path.substr(0, slash), error);
  }
  return WriteFileAtomically(path, bytes);
}

absl::StatusOr<v1::StreamSnapshot> StreamHub::LoadSnapshot(const std::string& path,
                                                           int64_t* restored,
                                                           absl::Duration timeout) {
  *restored = 0;
  if (!std::filesystem::exists(path)) {
    return absl::NotFoundError(absl::StrCat("no stream snapshot at ", path));
  }
  ASSIGN_OR_RETURN(std::string bytes, ReadFileBytes(path, "stream snapshot"));
  v1::StreamSnapshot snapshot;
  if (!snapshot.ParseFromString(bytes)) {
    return absl::DataLossError(absl::StrCat("stream snapshot ", path, " is not readable"));
  }
  for (const v1::StreamRecord& record : snapshot.streams()) {
    if (absl::Status status = Import(record, timeout); !status.ok()) {
      spdlog::warn("tick streams: not restored: {}", status.ToString());
      continue;
    }
    ++*restored;
  }
  snapshot.clear_streams();
  return snapshot;
}

}  // namespace forecastd
