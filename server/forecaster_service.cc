#include "server/forecaster_service.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "server/grpc_status.h"
#include "server/predict_call.h"
#include "server/predict_input.h"
#include "server/stream_call.h"

namespace forecastd {
namespace {

constexpr int kMaxBenchmarkPoints = 64;
constexpr int kMaxBenchmarkConcurrency = 1024;
constexpr uint32_t kMaxBenchmarkDurationMs = 60'000;

int64_t Micros(absl::Duration d) { return absl::ToInt64Microseconds(d); }

v1::TrainJobState ToState(JobState state) {
  switch (state) {
    case JobState::kRunning:
      return v1::TRAIN_JOB_RUNNING;
    case JobState::kSucceeded:
      return v1::TRAIN_JOB_SUCCEEDED;
    case JobState::kFailed:
      return v1::TRAIN_JOB_FAILED;
    case JobState::kCancelled:
      return v1::TRAIN_JOB_CANCELLED;
  }
  return v1::TRAIN_JOB_STATE_UNSPECIFIED;
}

int64_t UnixMillis(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }

double Percentile(std::vector<double>& sorted, double q) {
  if (sorted.empty()) return 0.0;
  const size_t i = static_cast<size_t>(std::ceil(q * static_cast<double>(sorted.size()))) - 1;
  return sorted[std::min(i, sorted.size() - 1)];
}

}  // namespace

v1::TrainProgressEvent ToProgressEvent(const TrainProgress& p) {
  v1::TrainProgressEvent e;
  e.set_kind(p.kind == TrainProgress::Kind::kEpoch ? v1::TrainProgressEvent::EPOCH
                                                   : v1::TrainProgressEvent::STEP);
  e.set_epoch(p.epoch);
  e.set_epochs(p.epochs);
  e.set_step(p.step);
  e.set_total_steps(p.total_steps);
  e.set_train_loss(p.train_loss);
  e.set_validation_loss(p.validation_loss);
  e.set_best_validation_loss(p.best_validation_loss);
  e.set_learning_rate(p.learning_rate);
  e.set_samples_per_second(p.samples_per_second);
  e.set_eta_seconds(p.eta_seconds);
  return e;
}

v1::TrainJobInfo ToTrainJobInfo(const JobSnapshot& job) {
  v1::TrainJobInfo info;
  info.set_job_id(job.id);
  info.set_model(job.model);
  info.set_state(ToState(job.state));
  if (job.latest.has_value()) *info.mutable_latest() = ToProgressEvent(*job.latest);
  info.set_error(job.error);
  info.set_published_version(job.result.version);
  info.set_promoted(job.promoted);
  info.set_best_epoch(job.result.best_epoch);
  info.set_best_validation_loss(job.result.best_validation_loss);
  info.set_epochs_run(job.result.epochs_run);
  info.set_stopped_early(job.result.stopped_early);
  info.set_created_unix_ms(UnixMillis(job.created));
  info.set_finished_unix_ms(UnixMillis(job.finished));
  return info;
}

ForecasterService::ForecasterService(Options options)
    : options_(std::move(options)),
      admission_({.registry = options_.registry,
                  .max_batch_rows = options_.max_batch_rows,
                  .max_request_memory_bytes = options_.max_request_memory_bytes,
                  .allow_non_finite_inputs = options_.allow_non_finite_inputs}) {}

grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse>* ForecasterService::Stream(
    grpc::CallbackServerContext* context) {
  absl::Status refuse = Authorize(*context);
  if (refuse.ok() && !accepting()) refuse = absl::UnavailableError("forecastd is shutting down");
  if (refuse.ok() && options_.streams == nullptr) {
    refuse = absl::UnavailableError("this server keeps no tick streams");
  }
  return new StreamCall(options_.streams, refuse);
}

grpc::ServerUnaryReactor* ForecasterService::Predict(grpc::CallbackServerContext* context,
                                                     const v1::PredictRequest* request,
                                                     v1::PredictResponse* response) {
  grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) {
    reactor->Finish(ToGrpcStatus(allowed));
    return reactor;
  }
  Clock* clock = options_.clock != nullptr ? options_.clock : Clock::Real();
  const absl::Time arrival = clock->Now();
  const std::string model_name = request->model();
  // Metrics label the level the request ran at: 0 becomes the model's default level once the
  // model is known, so one queue is one series.
  uint32_t priority = request->priority();
  // Metrics label the version the request resolved to (0 until it has), as KServe's do.
  int64_t version = 0;
  ServingMetrics* metrics = options_.metrics;
  const auto fail = [&](const absl::Status& status) {
    if (metrics != nullptr) {
      const grpc::StatusCode code = ToGrpcStatus(status).error_code();
      if (code == grpc::StatusCode::DEADLINE_EXCEEDED) metrics->ObserveDeadlineMiss(model_name);
      metrics->ObserveRequest(model_name, version, "Predict", priority, code,
                              clock->Now() - arrival, absl::ZeroDuration(), absl::ZeroDuration());
    }
    reactor->Finish(ToGrpcStatus(status));
    return reactor;
  };
  if (!accepting()) return fail(absl::UnavailableError("forecastd is shutting down"));
  absl::StatusOr<LoadedModel> pinned = admission_.Pin(model_name, request->version());
  if (!pinned.ok()) return fail(pinned.status());
  version = pinned->version;
  priority = PredictAdmission::LevelOf(*pinned, priority);
  const v1::Tensor& inputs = request->inputs();
  const bool raw = !inputs.raw().empty();
  PredictCall call;
  call.shape = inputs.shape();
  call.raw = inputs.raw();
  call.values = inputs.values();
  if (request->has_future()) {
    const v1::Tensor& future = request->future();
    call.extras.future =
        FloatTensorView{.shape = future.shape(),
                        .raw = future.raw(),
                        .values = absl::MakeConstSpan(future.values().data(),
                                                      static_cast<size_t>(future.values_size()))};
  }
  if (request->timestamps_size() > 0) {
    call.extras.timestamps.emplace(request->timestamps().begin(), request->timestamps().end());
  }
  if (request->series_size() > 0) {
    call.extras.series.emplace(request->series().begin(), request->series().end());
  }
  call.priority = request->priority();
  call.timeout_override = absl::Microseconds(static_cast<int64_t>(request->timeout_us()));
  call.deadline = EngineDeadline(*context, *clock);
  // The forecasts go straight into the reply: its raw bytes, or its values.
  const int64_t per_row = pinned->model->num_outputs();
  const auto reply_buffer = [response, raw, per_row](int64_t rows) -> char* {
    v1::Tensor* out = response->mutable_forecasts();
    const int64_t floats = rows * per_row;
    if (raw) {
      out->mutable_raw()->resize(static_cast<size_t>(floats) * sizeof(float));
      return out->mutable_raw()->data();
    }
    out->mutable_values()->Resize(static_cast<int>(floats), 0.0f);
    return reinterpret_cast<char*>(out->mutable_values()->mutable_data());
  };
  auto done = [reactor, response, metrics, clock, arrival, model_name, priority, counts = counts_,
               forecaster = pinned->model,
               rows = call.shape.empty() ? 0 : call.shape[0]](PredictResult result) {
    const absl::Time now = clock->Now();
    if (result.status.ok()) {
      response->set_model(model_name);
      response->set_version(result.version);
      v1::Tensor* out = response->mutable_forecasts();
      out->add_shape(rows);
      out->add_shape(forecaster->horizon());
      out->add_shape(forecaster->num_targets());
      if (!forecaster->config().quantiles().empty()) out->add_shape(forecaster->num_quantiles());
      for (const std::string& name : forecaster->config().target_names()) {
        response->add_target_names(name);
      }
      for (float q : forecaster->config().quantiles()) response->add_quantiles(q);
      v1::Timing* timing = response->mutable_timing();
      timing->set_queue_us(static_cast<uint64_t>(std::max<int64_t>(0, Micros(result.queue_time))));
      timing->set_compute_us(
          static_cast<uint64_t>(std::max<int64_t>(0, Micros(result.compute_time))));
      timing->set_total_us(static_cast<uint64_t>(std::max<int64_t>(0, Micros(now - arrival))));
      timing->set_batch_size(result.batch_rows);
    }
    const grpc::Status status = ToGrpcStatus(result.status);
    if (metrics != nullptr) {
      if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
        metrics->ObserveDeadlineMiss(model_name);
      }
      metrics->ObserveRequest(model_name, result.version, "Predict", priority, status.error_code(),
                              now - arrival, result.queue_time, result.compute_time);
    }
    counts->answered.fetch_add(1);
    reactor->Finish(status);
  };
  // Counted before Admit, since the callback may run before Admit returns; taken back when
  // the call was not admitted.
  counts_->accepted.fetch_add(1);
  const absl::Status admitted = admission_.Admit(*pinned, call, reply_buffer, std::move(done));
  if (!admitted.ok()) {
    counts_->accepted.fetch_sub(1);
    return fail(admitted);  // not admitted: its callback never runs
  }
  return reactor;
}

grpc::Status ForecasterService::Train(grpc::ServerContext* context, const v1::TrainRequest* request,
                                      v1::TrainResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (request->promote() && options_.authorize_promote) {
    if (absl::Status allowed = options_.authorize_promote(*context); !allowed.ok()) {
      return ToGrpcStatus(allowed);
    }
  }
  if (!accepting()) return ToGrpcStatus(absl::UnavailableError("forecastd is shutting down"));
  TrainJobManager::StartRequest start;
  start.model = request->model();
  if (request->has_config()) start.config = request->config();
  start.training = request->training();
  start.promote = request->promote();
  absl::StatusOr<std::string> id = options_.jobs->Start(std::move(start));
  if (!id.ok()) return ToGrpcStatus(id.status());
  response->set_job_id(*id);
  return grpc::Status::OK;
}

grpc::Status ForecasterService::WatchTrainJob(grpc::ServerContext* context,
                                              const v1::WatchTrainJobRequest* request,
                                              grpc::ServerWriter<v1::TrainJobEvent>* writer) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  absl::StatusOr<JobSnapshot> last = options_.jobs->Watch(
      request->job_id(),
      [writer](const TrainProgress& progress) {
        v1::TrainJobEvent event;
        *event.mutable_progress() = ToProgressEvent(progress);
        return writer->Write(event);
      },
      [context]() { return context->IsCancelled(); });
  if (!last.ok()) return ToGrpcStatus(last.status());
  v1::TrainJobEvent event;
  *event.mutable_finished() = ToTrainJobInfo(*last);
  writer->Write(event);
  return grpc::Status::OK;
}

grpc::Status ForecasterService::GetTrainJob(grpc::ServerContext* context,
                                            const v1::GetTrainJobRequest* request,
                                            v1::TrainJobInfo* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  absl::StatusOr<JobSnapshot> job = options_.jobs->Get(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = ToTrainJobInfo(*job);
  return grpc::Status::OK;
}

grpc::Status ForecasterService::ListTrainJobs(grpc::ServerContext* context,
                                              const v1::ListTrainJobsRequest* request,
                                              v1::ListTrainJobsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  for (const JobSnapshot& job : options_.jobs->List(request->model())) {
    *response->add_jobs() = ToTrainJobInfo(job);
  }
  return grpc::Status::OK;
}

grpc::Status ForecasterService::CancelTrainJob(grpc::ServerContext* context,
                                               const v1::CancelTrainJobRequest* request,
                                               v1::TrainJobInfo* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (absl::Status s = options_.jobs->Cancel(request->job_id()); !s.ok()) return ToGrpcStatus(s);
  absl::StatusOr<JobSnapshot> job = options_.jobs->Get(request->job_id());
  if (!job.ok()) return ToGrpcStatus(job.status());
  *response = ToTrainJobInfo(*job);
  return grpc::Status::OK;
}

grpc::Status ForecasterService::Benchmark(grpc::ServerContext* context,
                                          const v1::BenchmarkRequest* request,
                                          v1::BenchmarkResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (!accepting()) return ToGrpcStatus(absl::UnavailableError("forecastd is shutting down"));
  absl::StatusOr<LoadedModel> loaded =
      options_.registry->GetLoadedModel(request->model(), request->version());
  if (!loaded.ok()) return ToGrpcStatus(loaded.status());
  // Every point measures this version: a switch meanwhile ends the run, it does not follow.
  loaded->requested_version = loaded->version;
  const Forecaster& model = *loaded->model;
  std::vector<int64_t> batch_sizes(request->batch_sizes().begin(), request->batch_sizes().end());
  std::vector<int64_t> concurrency(request->concurrency().begin(), request->concurrency().end());
  if (batch_sizes.empty()) batch_sizes = {1};
  if (concurrency.empty()) concurrency = {1};
  for (int64_t b : batch_sizes) {
    if (b < 1 || b > loaded->max_batch_size) {
      return ToGrpcStatus(absl::InvalidArgumentError(absl::StrCat(
          "batch size ", b, " is outside [1, ", loaded->max_batch_size, "] for this model")));
    }
    if (options_.max_batch_rows > 0 && b > options_.max_batch_rows) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("batch size ", b, " is above this server's limit of ",
                       options_.max_batch_rows, " (--max-batch-rows)")));
    }
  }
  for (int64_t c : concurrency) {
    if (c < 1 || c > kMaxBenchmarkConcurrency) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("concurrency ", c, " is outside [1, ", kMaxBenchmarkConcurrency, "]")));
    }
  }
  if (batch_sizes.size() * concurrency.size() > kMaxBenchmarkPoints) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("at most ", kMaxBenchmarkPoints, " (batch size, concurrency) points")));
  }
  const uint32_t duration_ms = request->duration_ms() == 0 ? 1000 : request->duration_ms();
  if (duration_ms > kMaxBenchmarkDurationMs) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat("duration_ms is at most ", kMaxBenchmarkDurationMs)));
  }
  const uint32_t warmup = request->warmup_requests() == 0 ? 10 : request->warmup_requests();

  // Synthetic input records: each feature at its training mean (the first series' for a model
  // with series) plus a small deterministic wiggle on the window's rows.
  const int64_t T = model.lookback(), F = model.num_features();
  std::vector<float> row = model.NeutralWindows(1);
  const bool standardized = model.standardized();
  for (int64_t t = 0; t < T; ++t) {
    for (int64_t f = 0; f < F; ++f) {
      const float std = standardized ? model.parameters().at("normalizer.std")[f] : 1.0f;
      row[static_cast<size_t>(t * F + f)] +=
          0.5f * std * std::sin(0.37f * static_cast<float>(t) + static_cast<float>(f));
    }
  }

  response->set_model(request->model());
  response->set_version(loaded->version);
  response->set_device(loaded->device);
  for (int64_t b : batch_sizes) {
    for (int64_t c : concurrency) {
      if (context->IsCancelled()) return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      struct Sample {
        double latency_us, queue_us, compute_us, batch_rows;
      };
      absl::Mutex mu;
      std::vector<Sample> samples;
      absl::Status first_error;
      // One synchronous request: enqueue, wait for its callback.
      const auto one = [&](bool record) {
        auto task = std::make_unique<PredictTask>();
        task->rows = b;
        task->benchmark = true;
        task->input.reserve(static_cast<size_t>(b) * row.size());
        for (int64_t i = 0; i < b; ++i)
          task->input.insert(task->input.end(), row.begin(), row.end());
        absl::Notification finished;
        PredictResult result;
        task->done = [&](PredictResult r) {
          result = std::move(r);
          finished.Notify();
        };
        const absl::Time start = absl::Now();
        absl::Status status = options_.registry->Enqueue(*loaded, task);
        if (status.ok()) {
          finished.WaitForNotification();
          status = result.status;
        }
        const double latency_us = absl::ToDoubleMicroseconds(absl::Now() - start);
        absl::MutexLock lock(&mu);
        if (!status.ok()) {
          if (first_error.ok()) first_error = status;
          return false;
        }
        if (record) {
          samples.push_back({latency_us, absl::ToDoubleMicroseconds(result.queue_time),
                             absl::ToDoubleMicroseconds(result.compute_time),
                             static_cast<double>(result.batch_rows)});
        }
        return true;
      };
      for (uint32_t i = 0; i < warmup; ++i) {
        if (!one(false)) break;
      }
      const absl::Time end = absl::Now() + absl::Milliseconds(duration_ms);
      const absl::Time started = absl::Now();
      std::vector<std::thread> clients;
      for (int64_t i = 0; i < c; ++i) {
        clients.emplace_back([&]() {
          while (absl::Now() < end && !context->IsCancelled()) {
            if (!one(true)) return;
          }
        });
      }
      for (std::thread& t : clients) t.join();
      const double seconds = absl::ToDoubleSeconds(absl::Now() - started);
      if (!first_error.ok()) return ToGrpcStatus(first_error);
      std::vector<double> latencies;
      double queue = 0, compute = 0, rows = 0;
      for (const Sample& s : samples) {
        latencies.push_back(s.latency_us);
        queue += s.queue_us;
        compute += s.compute_us;
        rows += s.batch_rows;
      }
      std::sort(latencies.begin(), latencies.end());
      const double n = static_cast<double>(samples.size());
      v1::BenchmarkPoint* point = response->add_points();
      point->set_batch_size(static_cast<int32_t>(b));
      point->set_concurrency(static_cast<int32_t>(c));
      point->set_requests(static_cast<int64_t>(samples.size()));
      point->set_requests_per_second(seconds > 0 ? n / seconds : 0.0);
      point->set_windows_per_second(seconds > 0 ? n * static_cast<double>(b) / seconds : 0.0);
      point->set_p50_us(Percentile(latencies, 0.50));
      point->set_p90_us(Percentile(latencies, 0.90));
      point->set_p99_us(Percentile(latencies, 0.99));
      point->set_mean_queue_us(n > 0 ? queue / n : 0.0);
      point->set_mean_compute_us(n > 0 ? compute / n : 0.0);
      point->set_mean_batch_size(n > 0 ? rows / n : 0.0);
    }
  }
  return grpc::Status::OK;
}

}  // namespace forecastd
