// One Forecaster.Stream call: a bidirectional gRPC stream carrying the requests of any number of
// tick streams (StreamRequest) and their answers (StreamResponse). The call is one connection of
// the StreamHub: it translates each request into a hub call and each hub reply into a response,
// writing them one at a time in the order the hub produced them. A write started while more
// responses wait behind it carries gRPC's buffer hint (the transport may hold it and send several
// in one flush); the last response in the outbox is written without it, which flushes it and all
// held before it, so no response waits for a reply that has not been made yet. It finishes with
// OK once the client has half-closed and every request has been answered, or when the client
// cancels; its streams are then kept or closed by the hub (StreamingConfig.on_disconnect).
// Thread-safety: gRPC calls the reactions; the hub calls the sink, one call at a time. Both only
// touch the members guarded by mu_, and the call deletes itself in OnDone, after leaving the hub.
#ifndef FORECASTD_SERVER_STREAM_CALL_H_
#define FORECASTD_SERVER_STREAM_CALL_H_

#include <cstdint>
#include <deque>
#include <functional>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/serving/stream_hub.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"

namespace forecastd {

// Validates, converts and hands one StreamRequest to the hub; a request that cannot be
// converted is answered with an error on its key instead. Exposed for tests and fuzzing.
// `values` is scratch for decoded rows; `tag` carries whether the ticks came as raw bytes.
absl::Status DecodeStreamTicks(const v1::StreamTicks& ticks, std::vector<float>* values, bool* raw);

// The response for a hub reply.
v1::StreamResponse ToStreamResponse(const StreamReply& reply);

class StreamCall final : public grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse> {
 public:
  // `hub` must outlive the call. `refuse`, when set, is an error every request is answered with
  // (the server is draining, or the caller may not stream) and the call then finishes.
  StreamCall(StreamHub* hub, absl::Status refuse);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // The hub's sink: one call at a time, in the order the replies were made.
  void Push(v1::StreamResponse response);
  // Starts the next write or finishes, as the state allows. Called without mu_ held.
  void Advance() ABSL_LOCKS_EXCLUDED(mu_);
  // Marks outbox_.front() as being written and returns the options to write it with: the buffer
  // hint while more responses are queued behind it.
  grpc::WriteOptions StartFrontLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Handle(const v1::StreamRequest& request);

  StreamHub* const hub_;
  const absl::Status refuse_;
  StreamHub::ConnectionId connection_ = 0;
  v1::StreamRequest request_;  // the read in progress
  std::vector<float> values_;  // decoded tick rows

  absl::Mutex mu_;
  std::deque<v1::StreamResponse> outbox_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;    // outbox_.front() is being written
  bool read_done_ ABSL_GUARDED_BY(mu_) = false;  // the client half-closed (or failed)
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int64_t unanswered_ ABSL_GUARDED_BY(mu_) = 0;  // requests read and not yet answered
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_STREAM_CALL_H_
