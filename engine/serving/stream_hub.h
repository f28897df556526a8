// Tick streams: the server keeps each stream's history so a new observation costs one step, not
// a whole window. A stream is named by (model, key), the key chosen by the client (an instrument
// id), and is attached to at most one connection at a time (a gRPC Stream call). The hub keeps,
// per stream, a ring buffer of its last T ticks (both modes; each the model's F features, the
// calendar columns of a model with calendar features computed from the tick's time), the series
// it belongs to (a model trained on several series), its place in the version's state
// slab (state mode), its sequence numbers and the requests still waiting for the one before them;
// it hands each stream's next step to the version's TickEngine, at most one at a time, so a key's
// ticks are computed and answered in order while the ticks of different keys share batches.
// A stream that follows the serving version moves to a new one at its next tick, replaying its
// ring buffer through the new version (state mode). Streams outlive their connection until their
// idle TTL (or are closed with it, per the model's StreamingConfig), so a client can resume them.
// Thread-safe: every method may be called from any thread. A connection's sink is called
// without the hub's lock, by one thread at a time and in the order the replies were made; it
// may call the hub (a sink that disconnects its own connection gets no further calls).
#ifndef FORECASTD_ENGINE_SERVING_STREAM_HUB_H_
#define FORECASTD_ENGINE_SERVING_STREAM_HUB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "engine/clock.h"
#include "engine/serving/model_registry.h"
#include "forecastd/v1/streams.pb.h"

namespace forecastd {

// A stream as the API reports it.
struct StreamInfo {
  std::string model;
  std::string key;
  int64_t version = 0;            // the version computing it now (0: none yet, after a switch)
  int64_t requested_version = 0;  // 0: follows the serving version
  v1::StreamingConfig::Mode mode = v1::StreamingConfig::STREAM_MODE_WINDOW;
  int64_t sequence = 0;        // ticks received
  int32_t ticks_buffered = 0;  // in its ring buffer
  int32_t lookback = 0;        // T
  std::string series;          // a model trained on several series: the stream's
  bool resumed = false;        // Open: a kept stream was continued
  bool closed = false;         // Close: the stream is gone
  bool connected = false;      // attached to a connection
  absl::Duration idle;         // since its last request
};

// One answer on a connection, for the stream `key` of the connection.
struct StreamReply {
  enum class Kind { kForecast, kStatus, kError };
  Kind kind = Kind::kError;
  std::string key;
  // kError: why (a tick of a key never opened, bad values, a version gone, ...).
  absl::Status status;
  // kStatus: the stream after an open, reset or close.
  StreamInfo info;
  // kForecast: the forecast after the last tick of one Tick call.
  int64_t sequence = 0;
  int64_t version = 0;
  std::vector<float> forecast;          // (P, targets[, Q]); empty while ticks_needed > 0
  std::vector<int64_t> forecast_shape;  // {P, targets} or {P, targets, Q}
  int32_t ticks_needed = 0;             // window mode, before T ticks have arrived
  absl::Duration queue_time, compute_time, total_time;
  int64_t batch_rows = 0;
  uint64_t tag = 0;  // the Tick call's tag
};

// What the hub reports, for metrics; called with the hub's lock held: cheap, thread-safe, never
// calling the hub. Every method has a no-op default.
// How an answered tick message went: `total` from its arrival to its answer; `computed` when a
// step or window forward produced its forecast (not for an error or a window still filling),
// with that forward's `queue` and `compute` time.
struct TickTiming {
  absl::Duration total = absl::ZeroDuration();
  absl::Duration queue = absl::ZeroDuration();
  absl::Duration compute = absl::ZeroDuration();
  bool computed = false;
};

class StreamObserver {
 public:
  virtual ~StreamObserver() = default;
  // A tick message was answered (OK or not) by `version` of `model` (0: before the stream had
  // a version, or "" and 0 for an unknown stream).
  virtual void OnTick(const std::string& /*model*/, int64_t /*version*/,
                      const absl::Status& /*status*/, const TickTiming& /*timing*/) {}
  // A stream ended for `reason`: "closed", "idle", "disconnected", "replaced", "shutdown".
  virtual void OnStreamEnded(const std::string& /*model*/, const char* /*reason*/) {}
};

class StreamHub {
 public:
  struct Options {
    ModelRegistry* registry = nullptr;  // not owned; must outlive the hub
    Clock* clock = nullptr;             // not owned; nullptr: the real clock
    bool allow_non_finite_inputs = false;
    StreamObserver* observer = nullptr;  // not owned; may be nullptr
    // Where the periodic snapshot goes (SaveSnapshot, clean = false) every
    // `snapshot_interval`; empty or a zero interval: none.
    std::string snapshot_path;
    absl::Duration snapshot_interval = absl::ZeroDuration();
    // Memory limits (0: none). The states and ring buffers of every stream together
    // (RESOURCE_EXHAUSTED for an open or import beyond it), and the ticks of one request.
    int64_t max_state_bytes = 0;
    int64_t max_request_bytes = 0;
  };

  static absl::StatusOr<std::unique_ptr<StreamHub>> Create(const Options& options);
  ~StreamHub();

  using ConnectionId = uint64_t;
  using Sink = std::function<void(StreamReply)>;
  // A new connection whose replies go to `sink` until Disconnect.
  ConnectionId Connect(Sink sink);
  // The connection ended: its streams are kept (detached, resumable until their idle TTL) or
  // closed, as each model's streaming.on_disconnect says; their replies are dropped from now on.
  void Disconnect(ConnectionId connection);

  // Each request below is answered on the connection's sink, in the key's order: an error (on
  // that key only) or, for Open, Reset and Close, a kStatus reply; for Ticks, one kForecast after
  // its last row. They never fail as calls.
  //
  // Opens `key` of `model` on `connection`, at `version` (0: following the serving version).
  // With `resume` the stream kept under that key carries on (NOT_FOUND when there is none);
  // without, a kept stream of that key is replaced by a fresh one. FAILED_PRECONDITION when
  // the key is open on another connection (or already on this one); RESOURCE_EXHAUSTED at the
  // model's streaming.max_streams. `series` names the stream's series for a model trained on
  // several (ModelConfig.series; INVALID_ARGUMENT when missing, NOT_FOUND when unknown) and
  // must be empty for any other model (INVALID_ARGUMENT); a resumed stream keeps its own.
  void Open(ConnectionId connection, const std::string& key, const std::string& model,
            int64_t version, bool resume, const std::string& series = "");
  // What a tick message of a model with future-known covariates or calendar features carries
  // beside its rows (see StreamTicks in forecaster.proto): the raw future-known covariates of
  // the P steps after its last row (P, covariates.future), and each row's time then the P
  // steps' (rows + P, Unix seconds). Empty for any other model.
  struct TickCovariates {
    absl::Span<const float> future;
    absl::Span<const int64_t> timestamps;
  };
  // `values` holds n >= 1 rows of the model's input columns (its feature_names), the key's next
  // n observations; `covariates` what the model needs beside them (CheckTickCovariates: an
  // INVALID_ARGUMENT on the key otherwise).
  void Ticks(ConnectionId connection, const std::string& key, absl::Span<const float> values,
             uint64_t tag, const TickCovariates& covariates = {});
  void Reset(ConnectionId connection, const std::string& key);
  void Close(ConnectionId connection, const std::string& key);

  // Closes streams idle longer than their model's TTL, and lets idle streams of a replaced
  // version go of it (they re-prime on their next tick). The hub calls it periodically itself;
  // tests call it after moving a fake clock.
  void Sweep();

  std::vector<StreamInfo> List(const std::string& model) const;  // "": every model

  // --- Keeping streams across restarts and replicas.
  // From now on every request is answered UNAVAILABLE on its key; those already taken go on.
  void StopAccepting();
  // Waits until no stream has a request waiting or computing; false when `timeout` passed first.
  bool AwaitIdle(absl::Duration timeout);
  // Every stream's record: ring buffer, sequence numbers and, in state mode, its state read from
  // the device. Each stream is held between two of its requests while it is read, so a record
  // is always consistent. DEADLINE_EXCEEDED when the streams do not come to rest in `timeout`.
  absl::StatusOr<v1::StreamSnapshot> Snapshot(bool clean, absl::Duration timeout);
  // The record of one stream (NOT_FOUND when there is none), as Snapshot reads it.
  absl::StatusOr<v1::StreamRecord> Export(const std::string& model, const std::string& key,
                                          absl::Duration timeout);
  // Re-creates a stream, detached, from its record (start-up restore, Admin import); it can be
  // resumed. When the record's version is the one the stream computes on now, its state comes
  // back bit for bit; otherwise the stream re-primes from its ring buffer at its next tick.
  // FAILED_PRECONDITION when the key is open on a connection, the model's lookback, features
  // or stream mode differ from the record's, or the record's series is not one of the model's
  // (or missing for a model trained on several); NOT_FOUND / UNAVAILABLE as GetLoadedModel.
  absl::Status Import(const v1::StreamRecord& record, absl::Duration timeout);
  // Snapshot, written atomically to `path`.
  absl::Status SaveSnapshot(const std::string& path, bool clean, absl::Duration timeout);
  // Imports every stream of the snapshot at `path`: how many, and the snapshot's header (with
  // its streams cleared). NOT_FOUND when there is no file.
  absl::StatusOr<v1::StreamSnapshot> LoadSnapshot(const std::string& path, int64_t* restored,
                                                  absl::Duration timeout);
  // Streams and their state bytes (slab rows in use plus ring buffers) per model.
  struct ModelUsage {
    int64_t streams = 0;
    int64_t state_bytes = 0;
    bool state_mode = false;
  };
  std::map<std::string, ModelUsage> Usage() const;

 private:
  struct Stream;
  struct Pending;
  struct Connection;
  using StreamMap = std::map<std::pair<std::string, std::string>, std::shared_ptr<Stream>>;

  explicit StreamHub(const Options& options);

  // Takes the stream's next requests while it has nothing in the engine; tasks to hand to the
  // engine go to `out` (enqueued after the lock is released, because an engine may complete a
  // task inline when its device is shutting down).
  struct Dispatch;
  void PumpLocked(const std::shared_ptr<Stream>& stream, std::vector<Dispatch>& out)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EnqueueAll(std::vector<Dispatch> dispatches) ABSL_LOCKS_EXCLUDED(mu_);
  // Takes the front request (a Ticks call) out with its forecast: `reply` with the version,
  // values (or ticks_needed) and timings set; the rest is filled in here.
  void AnswerFrontLocked(Stream& stream, StreamReply reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Takes the front request out with `status` (an error reply, unless it was a replay).
  void FailFrontLocked(Stream& stream, const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The version a stream's ticks run on, for metrics: the pinned one, else the one it asked for
  // (0: the serving version, not yet known).
  static int64_t VersionOf(const Stream& stream);
  void OnTaskDone(const std::shared_ptr<Stream>& stream, struct TickResult result)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Pins the version the stream computes on now, moving it (and re-priming its state) when
  // the version it had was replaced.
  absl::Status EnsurePinnedLocked(Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpinLocked(Stream& stream) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void SendLocked(const Stream& stream, StreamReply reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Hands queued replies to their sinks, outside the lock; every entry point that may have
  // queued one calls it before returning.
  void Flush() ABSL_LOCKS_EXCLUDED(mu_);
  void SendLocked(ConnectionId connection, StreamReply reply) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EndLocked(const std::shared_ptr<Stream>& stream, const char* reason)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  StreamInfo InfoLocked(const Stream& stream) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<Stream> FindLocked(ConnectionId connection, const std::string& key,
                                     StreamReply* error) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Submit and Open, then Flush; DoSubmit and DoOpen take the lock themselves and queue
  // their replies; TaskDone likewise for OnTaskDone.
  void Submit(ConnectionId connection, const std::string& key, Pending pending);
  void DoSubmit(ConnectionId connection, const std::string& key, Pending pending)
      ABSL_LOCKS_EXCLUDED(mu_);
  void DoOpen(ConnectionId connection, const std::string& key, const std::string& model,
              int64_t version, bool resume, const std::string& series) ABSL_LOCKS_EXCLUDED(mu_);
  // Puts the rows of the window-mode request at the front into the ring buffer (with their
  // calendar columns); INVALID_ARGUMENT, with nothing put, when their times do not follow the
  // ring buffer's last.
  absl::Status PutRowsLocked(Stream& stream, const Pending& pending)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The input record of the stream's window forecast after `pending`'s last row: the last T
  // rows of the ring buffer, then the future-known values of the P steps after it and the
  // series index (Forecaster::input_floats()).
  std::vector<float> WindowRecordLocked(const Stream& stream, const Pending& pending) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void TaskDone(const std::shared_ptr<Stream>& stream, struct TickResult result)
      ABSL_LOCKS_EXCLUDED(mu_);
  void SweeperLoop();
  // Holds `streams` between requests, reads their states and returns their records.
  absl::StatusOr<std::vector<v1::StreamRecord>> ReadRecords(
      std::vector<std::shared_ptr<Stream>> streams, absl::Duration timeout)
      ABSL_LOCKS_EXCLUDED(mu_);
  v1::StreamRecord RecordLocked(const Stream& stream) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  Clock* const clock_;

  mutable absl::Mutex mu_;
  StreamMap streams_ ABSL_GUARDED_BY(mu_);
  // The attached streams by (connection, key), and the streams of each model: what each request
  // looks up, so a tick costs O(log streams) however many are open.
  std::map<std::pair<ConnectionId, std::string>, std::shared_ptr<Stream>> attached_
      ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> per_model_ ABSL_GUARDED_BY(mu_);
  int64_t state_bytes_ ABSL_GUARDED_BY(mu_) = 0;  // Stream::bytes of every stream
  // RESOURCE_EXHAUSTED when `bytes` more would pass Options::max_state_bytes.
  absl::Status CheckStateBytesLocked(int64_t bytes, const std::string& what) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::map<ConnectionId, std::shared_ptr<Connection>> connections_ ABSL_GUARDED_BY(mu_);
  // Connections with replies queued and nobody delivering them (duplicates are harmless).
  std::vector<ConnectionId> to_flush_ ABSL_GUARDED_BY(mu_);
  ConnectionId next_connection_ ABSL_GUARDED_BY(mu_) = 1;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool accepting_ ABSL_GUARDED_BY(mu_) = true;
  // Serialises snapshots and exports (each holds streams while it reads them).
  absl::Mutex snapshot_mu_ ABSL_ACQUIRED_BEFORE(mu_);

  // Runs Sweep every second until the hub is destroyed.
  std::thread sweeper_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_STREAM_HUB_H_
