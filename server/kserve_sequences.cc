#include "server/kserve_sequences.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/types/span.h"
#include "engine/models/input_record.h"
#include "kernels/base/status.h"
#include "server/kserve_request.h"
#include "server/predict_call.h"

namespace forecastd {

// One sequence request on its way: where its answer goes, and what the open before its ticks
// said (an open that failed explains a refused tick better than the tick's own error).
struct SequenceCall {
  const inference::ModelInferRequest* request = nullptr;
  inference::ModelInferResponse* response = nullptr;
  std::function<void(const absl::Status&)> done;
  absl::Status open;
  int64_t version = 0;  // the version the request was checked against
};

namespace {

struct SequenceParameters {
  std::string id;
  bool start = false;
  bool end = false;
};

absl::StatusOr<SequenceParameters> ReadSequenceParameters(
    const inference::ModelInferRequest& request) {
  SequenceParameters out;
  const auto& parameters = request.parameters();
  const auto id = parameters.find("sequence_id");
  if (id != parameters.end()) {
    const inference::InferParameter& p = id->second;
    if (p.has_int64_param()) {
      out.id = absl::StrCat(p.int64_param());
    } else if (p.has_uint64_param()) {
      out.id = absl::StrCat(p.uint64_param());
    } else if (p.has_string_param()) {
      out.id = p.string_param();
    } else {
      return absl::InvalidArgumentError("parameter 'sequence_id' must be an integer or a string");
    }
  }
  for (const auto& [name, flag] :
       {std::pair{"sequence_start", &out.start}, std::pair{"sequence_end", &out.end}}) {
    const auto it = parameters.find(name);
    if (it == parameters.end()) continue;
    if (!it->second.has_bool_param()) {
      return absl::InvalidArgumentError(absl::StrCat("parameter '", name, "' must be a bool"));
    }
    *flag = it->second.bool_param();
  }
  return out;
}

// A sequence request's tensors: INPUT [1, n, F], the n next observations; for a model with
// future-known covariates FUTURE [1, P, Fk], their values for the P steps after the last
// observation; with calendar features TIMESTAMPS [1, n + P]; with several series SERIES [1, 1],
// the sequence's series (read when the request opens the sequence).
struct SequenceTicks {
  std::vector<float> values;
  std::vector<float> future;
  std::vector<int64_t> timestamps;
  std::string series;
};

// Floats of a float32 tensor as ReadInput points at it, `n` of them (INVALID_ARGUMENT naming
// `name` for another count).
absl::StatusOr<std::vector<float>> TensorFloats(absl::string_view raw,
                                                absl::Span<const float> values, int64_t n,
                                                const std::string& name) {
  std::vector<float> out(static_cast<size_t>(n));
  if (!raw.empty()) {
    if (static_cast<int64_t>(raw.size()) != n * 4) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " holds ", raw.size(), " bytes; its shape needs ", n * 4));
    }
    std::memcpy(out.data(), raw.data(), raw.size());
  } else {
    if (static_cast<int64_t>(values.size()) != n) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " holds ", values.size(), " values; its shape needs ", n));
    }
    std::copy(values.begin(), values.end(), out.begin());
  }
  return out;
}

absl::StatusOr<SequenceTicks> ReadTicks(const inference::ModelInferRequest& request,
                                        const Forecaster& model, bool opens) {
  PredictCall call;
  RETURN_IF_ERROR(kserve::ReadInput(request, model, /*max_batch_rows=*/1, call));
  RETURN_IF_ERROR(kserve::CheckRequestedOutputs(request));
  const ModelConfig& config = model.config();
  const int64_t F = NumInputColumns(config), P = model.horizon();
  const int64_t FkIn = NumFutureInputColumns(config);
  if (call.shape.size() != 3 || call.shape[0] != 1 || call.shape[1] < 1 || call.shape[2] != F) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence request's input '", kKServeInputName,
                                                   "' is FP32 [1, n, ", F,
                                                   "]: the sequence's n next observations"));
  }
  SequenceTicks ticks;
  ASSIGN_OR_RETURN(ticks.values, TensorFloats(call.raw, call.values, call.shape[1] * F,
                                              absl::StrCat("input '", kKServeInputName, "'")));
  const RequestExtras& extras = call.extras;
  if (FkIn > 0) {
    if (!extras.future.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeFutureName, "' is missing: model '", config.name(),
          "' has future-known covariates; send FP32 [1, ", P, ", ", FkIn,
          "], their values for the ", P, " steps after the request's last observation"));
    }
    const FloatTensorView& future = *extras.future;
    if (future.shape.size() != 3 || future.shape[0] != 1 || future.shape[1] != P ||
        future.shape[2] != FkIn) {
      return absl::InvalidArgumentError(
          absl::StrCat("a sequence request's input '", kKServeFutureName, "' is FP32 [1, ", P, ", ",
                       FkIn, "], not [", absl::StrJoin(future.shape, ", "), "]"));
    }
    ASSIGN_OR_RETURN(ticks.future, TensorFloats(future.raw, future.values, P * FkIn,
                                                absl::StrCat("input '", kKServeFutureName, "'")));
  }
  if (NeedsTimestamps(config)) {
    if (!extras.timestamps.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", kKServeTimestampsName, "' is missing: model '", config.name(),
          "' has calendar features; send INT64 [1, n + ", P,
          "], the times of the request's n observations, then of the ", P, " steps after them"));
    }
    ticks.timestamps = *extras.timestamps;
  }
  if (extras.series.has_value()) {
    if (extras.series->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "a sequence request's input '", kKServeSeriesName, "' holds one name, the sequence's"));
    }
    RETURN_IF_ERROR(SeriesIndex(config, extras.series->front()).status());
    ticks.series = extras.series->front();
  } else if (NumSeries(config) > 0 && opens) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", kKServeSeriesName, "' is missing: model '", config.name(),
                     "' was trained on ", NumSeries(config),
                     " series; the request that starts a sequence names its series, BYTES "
                     "[1, 1]"));
  }
  return ticks;
}

}  // namespace

KServeSequences::KServeSequences(StreamHub* hub, ModelRegistry* registry,
                                 std::shared_ptr<KServeStatistics> statistics)
    : hub_(hub), registry_(registry), statistics_(std::move(statistics)) {
  connection_ = hub_->Connect([this](StreamReply reply) { OnReply(std::move(reply)); });
}

KServeSequences::~KServeSequences() { hub_->Disconnect(connection_); }

void KServeSequences::Infer(const inference::ModelInferRequest& request,
                            inference::ModelInferResponse* response,
                            std::function<void(const absl::Status&)> done) {
  absl::StatusOr<SequenceParameters> sequence = ReadSequenceParameters(request);
  if (!sequence.ok()) return done(sequence.status());
  absl::StatusOr<int64_t> version = kserve::ParseVersion(request.model_version());
  if (!version.ok()) return done(version.status());
  absl::StatusOr<LoadedModel> pinned = registry_->GetLoadedModel(request.model_name(), *version);
  if (!pinned.ok()) return done(pinned.status());
  if (!pinned->model->config().has_streaming()) return done(kserve::NotASequenceModel(request));
  absl::StatusOr<SequenceTicks> ticks = ReadTicks(request, *pinned->model, sequence->start);
  if (!ticks.ok()) return done(ticks.status());

  auto call = std::make_shared<SequenceCall>();
  call->request = &request;
  call->response = response;
  call->done = std::move(done);
  call->version = pinned->version;
  const std::string key = absl::StrCat(request.model_name(), "/", sequence->id);
  // Every hub call below answers exactly once on this key, in this order; the waiters are
  // queued first, so each answer finds its own.
  // Every hub call below answers exactly once on this key. Requests on a key open here are
  // answered in the key's order (reset, ticks, close queue behind its earlier ticks); an open
  // is answered at once, so it is only sent while nothing of the key is in flight here.
  bool open = false;
  {
    absl::MutexLock l(&mu_);
    open = open_keys_.count(key) > 0;
    std::deque<Waiter>& waiters = waiting_[key];
    if (!open || sequence->start) {
      waiters.push_back({open ? Waiter::Kind::kIgnore : Waiter::Kind::kOpen, call});
    }
    waiters.push_back({Waiter::Kind::kTicks, call});
    if (sequence->end) {
      waiters.push_back({Waiter::Kind::kIgnore, nullptr});
      open_keys_.erase(key);
    } else {
      open_keys_.insert(key);
    }
  }
  if (open && sequence->start) {
    hub_->Reset(connection_, key);
  } else if (!open) {
    // A new sequence replaces a kept one of that id; a continuing one resumes it.
    hub_->Open(connection_, key, request.model_name(), *version,
               /*resume=*/!sequence->start, ticks->series);
  }
  hub_->Ticks(connection_, key, ticks->values, /*tag=*/1,
              {.future = ticks->future, .timestamps = ticks->timestamps});
  if (sequence->end) hub_->Close(connection_, key);
}

void KServeSequences::OnReply(StreamReply reply) {
  Waiter waiter;
  {
    absl::MutexLock l(&mu_);
    const auto it = waiting_.find(reply.key);
    if (it == waiting_.end() || it->second.empty()) return;
    waiter = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) waiting_.erase(it);
  }
  SequenceCall* call = waiter.call.get();
  switch (waiter.kind) {
    case Waiter::Kind::kIgnore:
      return;
    case Waiter::Kind::kOpen:
      if (reply.kind == StreamReply::Kind::kError) call->open = reply.status;
      return;
    case Waiter::Kind::kTicks:
      // The hub calls its sink without a lock held, so the answer may reach gRPC from here.
      Answer(*call, std::move(reply));
      return;
  }
}

void KServeSequences::Answer(SequenceCall& c, StreamReply reply) {
  SequenceCall* call = &c;
  const inference::ModelInferRequest& request = *call->request;
  if (reply.kind == StreamReply::Kind::kError) {
    statistics_->RecordFailure(request.model_name(), call->version, reply.total_time);
    if (reply.status.code() == absl::StatusCode::kNotFound) {
      // Not open on the hub after all (never started, ended idle, or refused): forget it.
      absl::MutexLock l(&mu_);
      open_keys_.erase(reply.key);
    }
    if (!call->open.ok() && reply.status.code() == absl::StatusCode::kNotFound) {
      return call->done(absl::InvalidArgumentError(absl::StrCat(
          "sequence '", reply.key.substr(request.model_name().size() + 1), "' of model '",
          request.model_name(), "' is not open: ", call->open.message(),
          " (send sequence_start with its first request)")));
    }
    return call->done(reply.status);
  }
  inference::ModelInferResponse& response = *call->response;
  response.set_model_name(request.model_name());
  response.set_model_version(absl::StrCat(reply.version));
  response.set_id(request.id());
  auto* output = response.add_outputs();
  output->set_name(kKServeOutputName);
  output->set_datatype(kKServeFp32);
  output->add_shape(1);
  int64_t floats = 1;
  for (const int64_t dim : reply.forecast_shape) {
    output->add_shape(dim);
    floats *= dim;
  }
  std::vector<float> forecast = reply.forecast;
  if (reply.ticks_needed > 0) {
    forecast.assign(static_cast<size_t>(floats), std::numeric_limits<float>::quiet_NaN());
    (*response.mutable_parameters())["ticks_needed"].set_int64_param(reply.ticks_needed);
  }
  (*response.mutable_parameters())["sequence_ticks"].set_int64_param(reply.sequence);
  response.add_raw_output_contents()->assign(reinterpret_cast<const char*>(forecast.data()),
                                             forecast.size() * sizeof(float));
  statistics_->RecordSuccess(request.model_name(), reply.version, /*rows=*/1, reply.batch_rows,
                             reply.total_time, reply.queue_time, reply.compute_time);
  call->done(absl::OkStatus());
}

}  // namespace forecastd
