#include "server/kserve_statistics.h"

#include <algorithm>
#include <cmath>

#include "server/kserve_request.h"

namespace forecastd {

using kserve::VersionString;

namespace {

uint64_t Nanos(absl::Duration d) {
  return static_cast<uint64_t>(std::max<int64_t>(0, absl::ToInt64Nanoseconds(d)));
}

}  // namespace

void KServeStatistics::RecordSuccess(const std::string& model, int64_t version, int64_t rows,
                                     int64_t batch_rows, absl::Duration total, absl::Duration queue,
                                     absl::Duration compute) {
  absl::MutexLock lock(&mu_);
  PerVersion& stats = stats_[{model, version}];
  stats.last_inference_ms = absl::ToUnixMillis(absl::Now());
  stats.inference_count += static_cast<uint64_t>(rows);
  Add(stats.success, total);
  Add(stats.queue, queue);
  Add(stats.compute_infer, compute);
  if (batch_rows > 0) {
    const double share = static_cast<double>(rows) / static_cast<double>(batch_rows);
    stats.executions += share;
    PerBatchSize& batch = stats.batches[batch_rows];
    batch.executions += share;
    batch.compute_ns += share * static_cast<double>(Nanos(compute));
  }
}

void KServeStatistics::RecordFailure(const std::string& model, int64_t version,
                                     absl::Duration total) {
  absl::MutexLock lock(&mu_);
  PerVersion& stats = stats_[{model, version}];
  stats.last_inference_ms = absl::ToUnixMillis(absl::Now());
  Add(stats.fail, total);
}

std::set<int64_t> KServeStatistics::Versions(const std::string& model) const {
  absl::MutexLock lock(&mu_);
  std::set<int64_t> versions;
  for (auto it = stats_.lower_bound({model, 0}); it != stats_.end() && it->first.first == model;
       ++it) {
    versions.insert(it->first.second);
  }
  return versions;
}

inference::ModelStatistics KServeStatistics::Report(const std::string& model,
                                                    int64_t version) const {
  inference::ModelStatistics out;
  out.set_name(model);
  out.set_version(VersionString(version));
  absl::MutexLock lock(&mu_);
  const auto it = stats_.find({model, version});
  const PerVersion stats = it == stats_.end() ? PerVersion() : it->second;
  out.set_last_inference(static_cast<uint64_t>(std::max<int64_t>(0, stats.last_inference_ms)));
  out.set_inference_count(stats.inference_count);
  out.set_execution_count(static_cast<uint64_t>(std::llround(stats.executions)));
  inference::InferStatistics* infer = out.mutable_inference_stats();
  Set(*infer->mutable_success(), stats.success);
  Set(*infer->mutable_fail(), stats.fail);
  Set(*infer->mutable_queue(), stats.queue);
  Set(*infer->mutable_compute_infer(), stats.compute_infer);
  // Staging inputs and outputs is part of the forward pass here; the counts match
  // compute_infer so that clients averaging ns / count see 0, not a division by zero.
  infer->mutable_compute_input()->set_count(stats.compute_infer.count);
  infer->mutable_compute_output()->set_count(stats.compute_infer.count);
  for (const auto& [batch_rows, batch] : stats.batches) {
    const auto executions = static_cast<uint64_t>(std::llround(batch.executions));
    if (executions == 0) continue;
    inference::InferBatchStatistics* b = out.add_batch_stats();
    b->set_batch_size(static_cast<uint64_t>(batch_rows));
    b->mutable_compute_infer()->set_count(executions);
    b->mutable_compute_infer()->set_ns(static_cast<uint64_t>(std::llround(batch.compute_ns)));
    b->mutable_compute_input()->set_count(executions);
    b->mutable_compute_output()->set_count(executions);
  }
  return out;
}

void KServeStatistics::Add(Duration& d, absl::Duration value) {
  ++d.count;
  d.ns += Nanos(value);
}

void KServeStatistics::Set(inference::StatisticDuration& out, const Duration& d) {
  out.set_count(d.count);
  out.set_ns(d.ns);
}

}  // namespace forecastd
