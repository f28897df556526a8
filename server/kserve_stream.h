// One KServe ModelStreamInfer call as a gRPC callback reactor (KServeInferStream), and the set
// of a service's open streams (KServeStreams) that a draining server closes. The reactor reads
// requests one after another, hands each to a dispatch function that answers it later on any
// thread, and writes the answers in the order they come, one Write at a time; it never waits on
// a request itself, so no gRPC thread blocks on device work. A write started while more answers
// wait behind it carries gRPC's buffer hint (the transport may hold it and send several in one
// flush); the last answer queued is written without it, which flushes it and all held before it,
// so no answer waits for one that has not been given yet. KServeService creates one per call.
// Thread-safe: gRPC's callback threads, the engine threads that answer requests and the
// draining thread call it concurrently.
#ifndef FORECASTD_SERVER_KSERVE_STREAM_H_
#define FORECASTD_SERVER_KSERVE_STREAM_H_

#include <deque>
#include <functional>
#include <memory>
#include <optional>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "grpcpp/support/server_callback.h"
#include "inference/grpc_service.pb.h"

namespace forecastd {

// One request read from a stream and the response it is answered with. Shared between the
// stream and whatever answers the request, since an admitted task points into both until it
// completes.
struct StreamInferCall {
  inference::ModelInferRequest request;
  inference::ModelInferResponse response;
};

// Answers one StreamInferCall: called exactly once, on any thread, with OK once the call's
// `response` holds the answer, or with the request's error (which becomes the reply's
// error_message; the stream stays open).
using InferReply = std::function<void(const absl::Status& status)>;

// What a stream does with each request it reads: starts answering `call` and returns without
// waiting for the answer, which goes to `reply`. Called on gRPC's thread, one request at a time
// and in the order the client sent them (the next read starts after it returns). The one place
// where requests are routed (KServeService::DispatchStreamRequest).
using StreamDispatch = std::function<void(std::shared_ptr<StreamInferCall> call, InferReply reply)>;

class KServeInferStream;

// The open streams of one service. Thread-safe.
class KServeStreams {
 public:
  // Closes every open stream (KServeInferStream::Close) with `status`, and every stream started
  // from now on as it starts. Returns without waiting for them to finish.
  void CloseAll(const absl::Status& status);

  // How many streams are open.
  int open_streams() const;

 private:
  friend class KServeInferStream;
  // Records `stream` as open; the status it is to close with if CloseAll has run.
  std::optional<absl::Status> Add(const std::shared_ptr<KServeInferStream>& stream);
  void Remove(const KServeInferStream* stream);

  mutable absl::Mutex mu_;
  // Weak: a stream lives until gRPC is done with it (OnDone), not while it is listed here.
  absl::flat_hash_map<const KServeInferStream*, std::weak_ptr<KServeInferStream>> open_
      ABSL_GUARDED_BY(mu_);
  std::optional<absl::Status> closed_ ABSL_GUARDED_BY(mu_);
};

// A stream's reads, answers and writes. It finishes the call
//   - with OK once the client has half-closed and every request read has been answered and
//     every answer written;
//   - with Close's status once every request read before Close has been answered and written
//     (requests that arrive after Close get that status as their error_message);
//   - with CANCELLED once the client has cancelled (or a write failed) and no request is in
//     flight: answers not yet written are dropped.
// A request in flight holds the stream open in every case, since its task points into the
// StreamInferCall the stream shares with it.
class KServeInferStream final
    : public grpc::ServerBidiReactor<inference::ModelInferRequest,
                                     inference::ModelStreamInferResponse> {
 public:
  // Starts reading; the pointer goes to gRPC, and the stream frees itself in OnDone. `dispatch`
  // is called for each request read, in order, on gRPC's thread.
  static KServeInferStream* Start(std::shared_ptr<KServeStreams> streams, StreamDispatch dispatch);

  // Reads no more requests and finishes the call with `status` once the requests in flight are
  // answered and written. Only the first Close counts. Non-blocking.
  void Close(const absl::Status& status);

  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override;
  void OnCancel() override;
  void OnDone() override;

 private:
  // What to do with gRPC once mu_ is released: a reaction may run on the calling thread (and
  // OnDone frees the stream), so no gRPC operation is started under mu_.
  struct Step {
    const inference::ModelStreamInferResponse* write = nullptr;
    // The buffer hint while more answers are queued behind `write`.
    grpc::WriteOptions write_options;
    std::optional<grpc::Status> finish;
  };

  KServeInferStream(std::shared_ptr<KServeStreams> streams, StreamDispatch dispatch);

  // The reply given to the dispatch for `call`.
  void Answer(StreamInferCall& call, const absl::Status& status);
  // The next write, or the finish once nothing is left to wait for.
  Step NextStepLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Run(const Step& step);

  // Constant after construction.
  const std::shared_ptr<KServeStreams> streams_;
  const StreamDispatch dispatch_;

  absl::Mutex mu_;
  // The call the pending read fills. gRPC runs one OnReadDone at a time, each after the
  // StartRead before it, but orders them in code a race detector cannot see; the lock makes
  // the hand-over from one read to the next explicit.
  std::shared_ptr<StreamInferCall> reading_ ABSL_GUARDED_BY(mu_);
  // Keeps the stream alive until OnDone (KServeStreams holds weak pointers to it).
  std::shared_ptr<KServeInferStream> self_ ABSL_GUARDED_BY(mu_);
  // The client has half-closed: OnReadDone(false).
  bool reads_done_ ABSL_GUARDED_BY(mu_) = false;
  // Between deciding to read the next request and StartRead's return: Finish waits, since gRPC
  // takes no read after it.
  bool starting_read_ ABSL_GUARDED_BY(mu_) = false;
  // Requests dispatched and not yet answered.
  int in_flight_ ABSL_GUARDED_BY(mu_) = 0;
  // Answers to write, the front one being written while `writing_`.
  std::deque<inference::ModelStreamInferResponse> writes_ ABSL_GUARDED_BY(mu_);
  bool writing_ ABSL_GUARDED_BY(mu_) = false;
  // Close's status.
  std::optional<absl::Status> close_status_ ABSL_GUARDED_BY(mu_);
  // The client cancelled or a write failed: nothing more can be written.
  bool broken_ ABSL_GUARDED_BY(mu_) = false;
  // Finish has been started.
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_STREAM_H_
