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

// Watches job `job_id` until it ends; returns the exit code: 0 only when it SUCCEEDED; 1
// when it FAILED or was CANCELLED (by this watch's Ctrl-C or by anyone else), with its state
// and reason on stderr, or when the watch itself failed; 130 when Ctrl-C or SIGINT left the
// job running (detached), with how to watch it again.
int WatchJob(Context& context, const std::string& job_id);

// The final report of a job: one line on success, its state and reason (to stderr) when it
// FAILED or was CANCELLED.
// Returns the exit code WatchJob uses for that state.
int ReportFinished(const v1::TrainJobInfo& info, bool json);

// One line describing a job, for `jobs show` and the end of a watch.
std::string DescribeJob(const v1::TrainJobInfo& info);

// Whether a job in `state` has ended (SUCCEEDED, FAILED or CANCELLED).
bool IsFinal(v1::TrainJobState state);

// "SUCCEEDED" for TRAIN_JOB_SUCCEEDED, and so on.
std::string JobStateName(v1::TrainJobState state);

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_JOB_WATCH_H_
