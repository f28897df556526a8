// Training jobs kept on disk, so that they outlive the daemon: one JSON file per job,
// <dir>/<id>.json, rewritten atomically (engine/file_io.h) whenever the job's state changes.
// TrainJobManager writes them and reads them back at start-up.
// Stateless functions; thread-safe as the files they touch are (one writer per job).
#ifndef FORECASTD_ENGINE_TRAIN_JOB_RECORDS_H_
#define FORECASTD_ENGINE_TRAIN_JOB_RECORDS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "engine/train/train_job_manager.h"

namespace forecastd {

// Writes `job`'s record as <dir>/<job.id>.json, replacing the previous one.
absl::Status WriteJobRecord(const std::string& dir, const JobSnapshot& job);

// The records of `dir` (none when it does not exist), oldest first. A file that cannot be read
// or parsed is skipped with a warning in the log (it never stops a daemon from starting).
std::vector<JobSnapshot> ReadJobRecords(const std::string& dir);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_TRAIN_JOB_RECORDS_H_
