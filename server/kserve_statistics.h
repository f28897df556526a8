// Cumulative ModelInfer statistics per model version, as Triton's ModelStatistics reports
// them: KServeService records each finished ModelInfer and reports them per version.
// execution_count and batch_stats count batches, which the service does not see: each
// successful request adds rows / batch_rows of an execution, so the requests of one batch add
// up to one (requests of other services that shared a batch are not seen, so a batch they
// shared counts as part of one). Thread-safe.
#ifndef FORECASTD_SERVER_KSERVE_STATISTICS_H_
#define FORECASTD_SERVER_KSERVE_STATISTICS_H_

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "inference/grpc_service.pb.h"

namespace forecastd {

class KServeStatistics {
 public:
  void RecordSuccess(const std::string& model, int64_t version, int64_t rows, int64_t batch_rows,
                     absl::Duration total, absl::Duration queue, absl::Duration compute);
  void RecordFailure(const std::string& model, int64_t version, absl::Duration total);

  // The versions of `model` that have statistics.
  std::set<int64_t> Versions(const std::string& model) const;

  // The statistics of `version` of `model`; zeros when it has none.
  inference::ModelStatistics Report(const std::string& model, int64_t version) const;

 private:
  struct Duration {
    uint64_t count = 0;
    uint64_t ns = 0;
  };
  struct PerBatchSize {
    double executions = 0;
    double compute_ns = 0;
  };
  struct PerVersion {
    int64_t last_inference_ms = 0;
    uint64_t inference_count = 0;
    double executions = 0;
    Duration success, fail, queue, compute_infer;
    std::map<int64_t, PerBatchSize> batches;  // by batch rows
  };

  static void Add(Duration& d, absl::Duration value);
  static void Set(inference::StatisticDuration& out, const Duration& d);

  mutable absl::Mutex mu_;
  std::map<std::pair<std::string, int64_t>, PerVersion> stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace forecastd

#endif  // FORECASTD_SERVER_KSERVE_STATISTICS_H_
