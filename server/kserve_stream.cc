#include "server/kserve_stream.h"

#include <string>
#include <utility>
#include <vector>

#include "server/grpc_status.h"

namespace forecastd {

void KServeStreams::CloseAll(const absl::Status& status) {
  std::vector<std::shared_ptr<KServeInferStream>> open;
  absl::Status close_status;
  {
    absl::MutexLock lock(&mu_);
    if (!closed_.has_value()) closed_ = status;
    close_status = *closed_;
    for (const auto& [key, weak] : open_) {
      if (std::shared_ptr<KServeInferStream> stream = weak.lock())
        open.push_back(std::move(stream));
    }
  }
  // Outside mu_: a stream may finish on this thread, and its OnDone removes it from open_.
  for (const std::shared_ptr<KServeInferStream>& stream : open) stream->Close(close_status);
}

int KServeStreams::open_streams() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int>(open_.size());
}

std::optional<absl::Status> KServeStreams::Add(const std::shared_ptr<KServeInferStream>& stream) {
  absl::MutexLock lock(&mu_);
  open_[stream.get()] = stream;
  return closed_;
}

void KServeStreams::Remove(const KServeInferStream* stream) {
  absl::MutexLock lock(&mu_);
  open_.erase(stream);
}

KServeInferStream::KServeInferStream(std::shared_ptr<KServeStreams> streams,
                                     StreamDispatch dispatch)
    : streams_(std::move(streams)), dispatch_(std::move(dispatch)) {}

KServeInferStream* KServeInferStream::Start(std::shared_ptr<KServeStreams> streams,
                                            StreamDispatch dispatch) {
  std::shared_ptr<KServeInferStream> stream(new KServeInferStream(streams, std::move(dispatch)));
  inference::ModelInferRequest* first = nullptr;
  {
    absl::MutexLock lock(&stream->mu_);
    stream->self_ = stream;
    stream->reading_ = std::make_shared<StreamInferCall>();
    first = &stream->reading_->request;
  }
  // The read first: a Close that follows it (here or from CloseAll) may then finish at once.
  stream->StartRead(first);
  if (std::optional<absl::Status> closed = streams->Add(stream); closed.has_value()) {
    stream->Close(*closed);
  }
  return stream.get();
}

void KServeInferStream::Close(const absl::Status& status) {
  Step step;
  {
    absl::MutexLock lock(&mu_);
    if (close_status_.has_value() || finished_) return;
    close_status_ = status;
    step = NextStepLocked();
  }
  Run(step);
}

void KServeInferStream::OnReadDone(bool ok) {
  if (!ok) {
    Step step;
    {
      absl::MutexLock lock(&mu_);
      reads_done_ = true;
      step = NextStepLocked();
    }
    Run(step);
    return;
  }
  std::shared_ptr<StreamInferCall> call;
  inference::ModelInferRequest* next = nullptr;
  std::optional<absl::Status> refuse;
  {
    absl::MutexLock lock(&mu_);
    call = std::move(reading_);
    // Counted before the next read can end the stream.
    ++in_flight_;
    if (broken_) {
      refuse = absl::CancelledError("the stream was cancelled");
    } else if (close_status_.has_value()) {
      refuse = *close_status_;
    } else {
      reading_ = std::make_shared<StreamInferCall>();
      next = &reading_->request;
      starting_read_ = true;
    }
  }
  if (refuse.has_value()) {
    Answer(*call, *refuse);
    return;
  }
  // Dispatched before the next read, so requests are dispatched in the order they were sent
  // (which a sequence of requests needs). `call` holds the stream open (in_flight_) until its
  // reply has run.
  dispatch_(call, [this, call](const absl::Status& status) { Answer(*call, status); });
  StartRead(next);
  Step step;
  {
    absl::MutexLock lock(&mu_);
    starting_read_ = false;
    step = NextStepLocked();
  }
  Run(step);
}

void KServeInferStream::Answer(StreamInferCall& call, const absl::Status& status) {
  inference::ModelStreamInferResponse reply;
  if (status.ok()) {
    *reply.mutable_infer_response() = std::move(call.response);
  } else {
    // An empty error_message would read as success to Triton's clients.
    reply.set_error_message(status.message().empty() ? absl::StatusCodeToString(status.code())
                                                     : std::string(status.message()));
    inference::ModelInferResponse* response = reply.mutable_infer_response();
    response->set_id(call.request.id());
    response->set_model_name(call.request.model_name());
    response->set_model_version(call.request.model_version());
  }
  Step step;
  {
    absl::MutexLock lock(&mu_);
    --in_flight_;
    if (!broken_ && !finished_) writes_.push_back(std::move(reply));
    step = NextStepLocked();
  }
  Run(step);
}

void KServeInferStream::OnWriteDone(bool ok) {
  Step step;
  {
    absl::MutexLock lock(&mu_);
    writing_ = false;
    writes_.pop_front();
    if (!ok) {
      broken_ = true;
      writes_.clear();
    }
    step = NextStepLocked();
  }
  Run(step);
}

void KServeInferStream::OnCancel() {
  Step step;
  {
    absl::MutexLock lock(&mu_);
    broken_ = true;
    // The answer being written stays until its OnWriteDone.
    writes_.erase(writing_ ? writes_.begin() + 1 : writes_.begin(), writes_.end());
    step = NextStepLocked();
  }
  Run(step);
}

void KServeInferStream::OnDone() {
  streams_->Remove(this);
  std::shared_ptr<KServeInferStream> self;
  {
    absl::MutexLock lock(&mu_);
    self = std::move(self_);
  }
  // `self` frees the stream as this returns.
}

KServeInferStream::Step KServeInferStream::NextStepLocked() {
  Step step;
  if (finished_ || writing_) return step;
  if (!writes_.empty()) {
    writing_ = true;
    step.write = &writes_.front();
    // gRPC may hold a hinted answer until a write without the hint; the answer behind it is
    // written next, so the last one queued (never hinted) flushes them all.
    if (writes_.size() > 1) step.write_options.set_buffer_hint();
    return step;
  }
  const bool reading_over = reads_done_ || close_status_.has_value() || broken_;
  if (!reading_over || in_flight_ > 0 || starting_read_) return step;
  finished_ = true;
  if (broken_) {
    step.finish = ToGrpcStatus(absl::CancelledError("the stream was cancelled"));
  } else if (close_status_.has_value()) {
    step.finish = ToGrpcStatus(*close_status_);
  } else {
    step.finish = grpc::Status::OK;
  }
  return step;
}

void KServeInferStream::Run(const Step& step) {
  if (step.write != nullptr) StartWrite(step.write, step.write_options);
  if (step.finish.has_value()) Finish(*step.finish);
}

}  // namespace forecastd
