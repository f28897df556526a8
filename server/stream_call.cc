#include "server/stream_call.h"

#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "server/grpc_status.h"
#include "server/stream_input.h"

namespace forecastd {
namespace {

v1::StreamStatus ToStatusMessage(const StreamInfo& info) {
  v1::StreamStatus status;
  status.set_model(info.model);
  status.set_version(info.version);
  status.set_mode(info.mode);
  status.set_sequence(info.sequence);
  status.set_ticks_buffered(info.ticks_buffered);
  status.set_lookback(info.lookback);
  status.set_resumed(info.resumed);
  status.set_closed(info.closed);
  return status;
}

uint64_t Micros(absl::Duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Microseconds(d)));
}

}  // namespace

v1::StreamResponse ToStreamResponse(const StreamReply& reply) {
  v1::StreamResponse response;
  response.set_key(reply.key);
  switch (reply.kind) {
    case StreamReply::Kind::kError: {
      const grpc::Status status = ToGrpcStatus(reply.status);
      v1::StreamError* error = response.mutable_error();
      error->set_code(static_cast<int32_t>(status.error_code()));
      error->set_message(status.error_message());
      break;
    }
    case StreamReply::Kind::kStatus:
      *response.mutable_status() = ToStatusMessage(reply.info);
      break;
    case StreamReply::Kind::kForecast: {
      v1::StreamForecast* forecast = response.mutable_forecast();
      forecast->set_sequence(reply.sequence);
      forecast->set_version(reply.version);
      forecast->set_ticks_needed(reply.ticks_needed);
      if (!reply.forecast.empty()) {
        v1::Tensor* tensor = forecast->mutable_forecast();
        for (const int64_t d : reply.forecast_shape) tensor->add_shape(d);
        if (reply.tag & 1) {
          tensor->set_raw(reinterpret_cast<const char*>(reply.forecast.data()),
                          reply.forecast.size() * sizeof(float));
        } else {
          tensor->mutable_values()->Add(reply.forecast.begin(), reply.forecast.end());
        }
      }
      v1::Timing* timing = forecast->mutable_timing();
      timing->set_queue_us(Micros(reply.queue_time));
      timing->set_compute_us(Micros(reply.compute_time));
      timing->set_total_us(Micros(reply.total_time));
      timing->set_batch_size(reply.batch_rows);
      break;
    }
  }
  return response;
}

StreamCall::StreamCall(StreamHub* hub, absl::Status refuse) : hub_(hub), refuse_(refuse) {
  if (!refuse_.ok()) {
    {
      absl::MutexLock l(&mu_);
      finished_ = true;
    }
    Finish(ToGrpcStatus(refuse_));
    return;
  }
  connection_ = hub_->Connect([this](StreamReply reply) { Push(ToStreamResponse(reply)); });
  StartRead(&request_);
}

void StreamCall::Handle(const v1::StreamRequest& request) {
  {
    absl::MutexLock l(&mu_);
    ++unanswered_;
  }
  const std::string& key = request.key();
  switch (request.action_case()) {
    case v1::StreamRequest::kOpen:
      hub_->Open(connection_, key, request.open().model(), request.open().version(),
                 request.open().resume(), request.open().series());
      return;
    case v1::StreamRequest::kTicks: {
      bool raw = false;
      if (absl::Status decoded = DecodeStreamTicks(request.ticks(), &values_, &raw);
          !decoded.ok()) {
        StreamReply error;
        error.key = key;
        error.status = decoded;
        Push(ToStreamResponse(error));
        return;
      }
      const v1::StreamTicks& ticks = request.ticks();
      hub_->Ticks(connection_, key, values_, raw ? 1 : 0,
                  {.future = absl::MakeConstSpan(ticks.future().data(),
                                                 static_cast<size_t>(ticks.future_size())),
                   .timestamps = absl::MakeConstSpan(
                       ticks.timestamps().data(), static_cast<size_t>(ticks.timestamps_size()))});
      return;
    }
    case v1::StreamRequest::kReset:
      hub_->Reset(connection_, key);
      return;
    case v1::StreamRequest::kClose:
      hub_->Close(connection_, key);
      return;
    case v1::StreamRequest::ACTION_NOT_SET:
      break;
  }
  StreamReply error;
  error.key = key;
  error.status =
      absl::InvalidArgumentError("a StreamRequest needs one of open, ticks, reset or close");
  Push(ToStreamResponse(error));
}

void StreamCall::OnReadDone(bool ok) {
  if (!ok) {
    {
      absl::MutexLock l(&mu_);
      read_done_ = true;
    }
    Advance();
    return;
  }
  Handle(request_);
  StartRead(&request_);
}

grpc::WriteOptions StreamCall::StartFrontLocked() {
  writing_ = true;
  grpc::WriteOptions options;
  // The hint lets gRPC hold this response until a write without it; the response behind it is
  // written next, so the last one queued (never hinted) flushes them all.
  if (outbox_.size() > 1) options.set_buffer_hint();
  return options;
}

void StreamCall::Push(v1::StreamResponse response) {
  const v1::StreamResponse* start = nullptr;
  grpc::WriteOptions options;
  {
    absl::MutexLock l(&mu_);
    --unanswered_;
    if (finished_) return;
    outbox_.push_back(std::move(response));
    if (!writing_) {
      options = StartFrontLocked();
      start = &outbox_.front();
    }
  }
  if (start != nullptr) StartWrite(start, options);
}

void StreamCall::OnWriteDone(bool ok) {
  {
    absl::MutexLock l(&mu_);
    outbox_.pop_front();
    writing_ = false;
    if (!ok && !finished_) {
      // The client is gone; OnCancel or OnDone follows.
      finished_ = true;
      outbox_.clear();
    }
  }
  Advance();
}

void StreamCall::Advance() {
  const v1::StreamResponse* start = nullptr;
  grpc::WriteOptions options;
  bool finish = false;
  {
    absl::MutexLock l(&mu_);
    if (finished_ || writing_) return;
    if (!outbox_.empty()) {
      options = StartFrontLocked();
      start = &outbox_.front();
    } else if (read_done_ && unanswered_ == 0) {
      finished_ = true;
      finish = true;
    }
  }
  if (start != nullptr) StartWrite(start, options);
  if (finish) {
    // Detach the keys before the client sees the OK: a client that reconnects as soon as its
    // call has finished must find them kept, not still held by this call. (OnDone's Disconnect
    // then finds nothing left.)
    hub_->Disconnect(connection_);
    Finish(grpc::Status::OK);
  }
}

void StreamCall::OnCancel() {
  {
    absl::MutexLock l(&mu_);
    if (finished_) return;
    finished_ = true;
  }
  hub_->Disconnect(connection_);
  Finish(grpc::Status(grpc::StatusCode::CANCELLED, "the stream was cancelled"));
}

void StreamCall::OnDone() {
  if (connection_ != 0) hub_->Disconnect(connection_);
  delete this;
}

}  // namespace forecastd
