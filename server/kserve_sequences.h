// Triton's sequence requests on forecastd's tick streams. A KServe ModelInfer (or a request on a
// ModelStreamInfer) that carries a `sequence_id` parameter (integer or string) for a model
// configured for tick streams is one tick-stream request: its INPUT [1, n, F] holds the n next
// observations of the sequence, and its FORECAST [1, P, targets(, Q)] is the forecast after the
// last of them. A model with future-known covariates also takes FUTURE [1, P, Fk], their values
// for the P steps after the last observation; one with calendar features TIMESTAMPS
// [1, n + P]; one trained on several series SERIES [1, 1] on the request that starts a sequence.
// `sequence_start` opens the sequence afresh (a kept one of that id is replaced), `sequence_end`
// closes it after this request; a request of a sequence that is not open resumes it when the server
// keeps it (after a restart or an import), else fails. In window mode, before T ticks have arrived,
// FORECAST is NaN and the response parameter `ticks_needed` says how many are still missing. All
// sequences share one StreamHub connection; the hub answers each key's requests in order, and each
// answer goes to the request waiting for it. Thread-safe: Infer may be called from any thread; the
// hub calls the sink from any thread, one call at a time.
#ifndef FORECASTD_SERVER_KSERVE_SEQUENCES_H_
#define FORECASTD_SERVER_KSERVE_SEQUENCES_H_

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/synchronization/mutex.h"
#include "engine/serving/model_registry.h"
#include "engine/serving/stream_hub.h"
#include "inference/grpc_service.pb.h"
#include "server/kserve_statistics.h"

namespace forecastd {

class KServeSequences {
 public:
  // `hub` and `registry` are not owned and must outlive this object; each answered request is
  // counted in `statistics` (Triton's ModelStatistics) like a ModelInfer.
  KServeSequences(StreamHub* hub, ModelRegistry* registry,
                  std::shared_ptr<KServeStatistics> statistics);
  ~KServeSequences();

  // Answers a sequence request: `done` is called once, on any thread, with OK once `response`
  // holds the answer, or with the request's error. `request` and `response` must stay valid
  // until then.
  void Infer(const inference::ModelInferRequest& request, inference::ModelInferResponse* response,
             std::function<void(const absl::Status&)> done);

 private:
  // What the hub's next reply on a key is for.
  struct Waiter {
    enum class Kind { kOpen, kTicks, kIgnore };
    Kind kind = Kind::kIgnore;
    std::shared_ptr<struct SequenceCall> call;
  };
  void OnReply(StreamReply reply);
  // Fills the request's response from the reply to its ticks, and calls its `done`.
  void Answer(struct SequenceCall& call, StreamReply reply);

  StreamHub* const hub_;
  ModelRegistry* const registry_;
  const std::shared_ptr<KServeStatistics> statistics_;
  StreamHub::ConnectionId connection_ = 0;

  absl::Mutex mu_;
  // Per hub key ("<model>/<sequence id>"), the replies still expected, in order.
  std::map<std::string, std::deque<Waiter>> waiting_ ABSL_GUARDED_BY(mu_);
  // The keys this connection has open (or is opening) on the hub.
  std::set<std::string> open_keys_ ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_SEQUENCES_H_
