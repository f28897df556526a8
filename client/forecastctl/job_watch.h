// Following a training job to its end, as `forecastctl train` and `forecastctl jobs watch`
// do: live progress (a redrawn bar on a terminal, plain lines otherwise, or one JSON object
// per event), then the job's final state. Ctrl-C stops watching and asks on the terminal
// whether to cancel the job or detach from it.
// Main thread only; it starts and joins one helper thread per watch.
#ifndef FORECASTD_CLIENT_FORECASTCTL_JOB_WATCH_H_
#define FORECASTD_CLIENT_FORECASTCTL_JOB_WATCH_H_

#include <string>

#include "client/forecastctl/command.h"
#include "forecastd/v1/forecaster.pb.h"

namespace forecastd::ctl {

// Watches job `job_id` until it ends; returns the exit code: 0 when it SUCCEEDED (or when
// the operator detached or had it cancelled), 1 when it FAILED or was cancelled by someone
// else, or when the watch itself failed.
int WatchJob(Context& context, const std::string& job_id);

// The final report of a job: one line on success, its error (to stderr) on failure.
// Returns the exit code WatchJob uses for that state.
int ReportFinished(const v1::TrainJobInfo& info, bool json);

// One line describing a job, for `jobs show` and the end of a watch.
std::string DescribeJob(const v1::TrainJobInfo& info);

// "SUCCEEDED" for TRAIN_JOB_SUCCEEDED, and so on.
std::string JobStateName(v1::TrainJobState state);

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_JOB_WATCH_H_
