#include "server/train_workers.h"

#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "client/forecastd_client.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"
#if FORECASTD_WITH_CUDA
#include "backends/cuda/nccl_communicator.h"
#endif

namespace forecastd {
namespace {

// One worker daemon as the coordinator sees it.
struct Worker {
  v1::TrainingWorker spec;                // its address and devices, as the request names them
  int ranks = 1;                          // one per device it lists; one without any
  std::unique_ptr<ForecastdClient> rpc;   // calls with the client's timeout
  std::unique_ptr<ForecastdClient> ends;  // cancelling and checking its job, briefly
  std::string job_id;                     // once joined
};

// The workers of one job, shared by the closures that end and check them.
struct Workers {
  std::vector<Worker> list;

  // Cancels the jobs of the workers that joined (best effort: a worker that is gone has no job
  // to stop).
  void CancelAll() const {
    for (const Worker& w : list) {
      if (w.job_id.empty()) continue;
      const absl::Status cancelled = w.ends->CancelTrainJob(w.job_id).status();
      if (!cancelled.ok()) {
        spdlog::warn("could not cancel job {} on worker {}: {}", w.job_id, w.spec.address(),
                     std::string(cancelled.message()));
      }
    }
  }

  // The workers whose jobs cannot be read now, or have failed.
  std::string Unreachable() const {
    std::vector<std::string> lost;
    for (const Worker& w : list) {
      const absl::StatusOr<v1::TrainJobInfo> info = w.ends->GetTrainJob(w.job_id);
      if (!info.ok()) {
        lost.push_back(absl::StrCat(w.spec.address(), " (", info.status().message(), ")"));
      } else if (info->state() == v1::TRAIN_JOB_FAILED) {
        lost.push_back(absl::StrCat(w.spec.address(), " (its job failed: ", info->error(), ")"));
      }
    }
    return absl::StrJoin(lost, ", ");
  }
};

absl::Status WorkerError(const Worker& w, const absl::Status& status, absl::string_view doing) {
  return absl::Status(
      absl::IsDeadlineExceeded(status) ? absl::StatusCode::kUnavailable : status.code(),
      absl::StrCat("training worker ", w.spec.address(), " ", doing, ": ", status.message()));
}

}  // namespace

absl::StatusOr<JoinedWorkers> JoinWorkers(const TrainingDevices& devices,
                                          const TrainWorkerClient& client, const std::string& model,
                                          const ModelConfig& config,
                                          const v1::TrainingConfig& training) {
  auto workers = std::make_shared<Workers>();
  for (const v1::TrainingWorker& spec : training.workers()) {
    if (spec.address().empty()) {
      return absl::InvalidArgumentError("training.workers: a worker without an address");
    }
    for (const std::string& d : spec.devices()) {
      if (d == "all" || d == "cpu") {
        return absl::InvalidArgumentError(absl::StrCat(
            "training.workers: name worker ", spec.address(), "'s GPUs (cuda:<i>), not ", d));
      }
    }
    ForecastdClient::Options options;
    options.address = spec.address();
    options.timeout = client.timeout;
    // The request carries the job's data when it is inline; the worker's own limit applies.
    options.max_message_bytes = std::numeric_limits<int>::max();
    options.credentials = client.credentials;
    options.bearer_token = client.bearer_token;
    Worker w;
    w.spec = spec;
    w.ranks = spec.devices_size() > 0 ? spec.devices_size() : 1;
    ASSIGN_OR_RETURN(w.rpc, ForecastdClient::Create(options));
    options.timeout = absl::Seconds(5);
    ASSIGN_OR_RETURN(w.ends, ForecastdClient::Create(options));
    workers->list.push_back(std::move(w));
  }
  // Every worker answers, and lets this daemon in with the `train` role, before any is given
  // ranks.
  for (const Worker& w : workers->list) {
    const absl::Status reached = w.rpc->ListTrainJobs(model).status();
    if (!reached.ok()) return WorkerError(w, reached, "cannot be reached");
  }
  v1::TrainingConfig local = training;
  local.clear_workers();
  ASSIGN_OR_RETURN(const int local_ranks, CountTrainingRanks(devices, local));
  int world = local_ranks;
  for (const Worker& w : workers->list) world += w.ranks;
  const int64_t batch = training.batch_size() > 0 ? training.batch_size() : 32;
  if (batch % world != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", batch, " does not split evenly over ", world,
                     " devices across the daemons; use a multiple of ", world));
  }
#if FORECASTD_WITH_CUDA
  RankGroup group;
  ASSIGN_OR_RETURN(group.unique_id, NewNcclUniqueId());
  group.world_size = world;
  group.first_rank = 0;
  ASSIGN_OR_RETURN(JobPlacement placement, PlaceTrainingJob(devices, local, &group));
  int next_rank = local_ranks;
  for (Worker& w : workers->list) {
    v1::JoinTrainJobRequest request;
    request.set_coordinator(client.self);
    request.set_model(model);
    *request.mutable_config() = config;
    v1::TrainingConfig& theirs = *request.mutable_training();
    theirs = local;
    *theirs.mutable_devices() = w.spec.devices();
    request.set_group_id(group.unique_id);
    request.set_world_size(world);
    request.set_first_rank(next_rank);
    const absl::StatusOr<v1::JoinTrainJobResponse> joined = w.rpc->JoinTrainJob(request);
    if (!joined.ok()) {
      workers->CancelAll();
      return WorkerError(w, joined.status(), "refused its ranks");
    }
    w.job_id = joined->job_id();
    spdlog::info("training '{}': worker {} runs ranks {}..{} of {} as its job {}", model,
                 w.spec.address(), next_rank, next_rank + w.ranks - 1, world, w.job_id);
    next_rank += w.ranks;
  }
  JoinedWorkers result;
  result.placement = std::move(placement);
  result.end = [workers] { workers->CancelAll(); };
  result.unreachable = [workers] { return workers->Unreachable(); };
  return result;
#else
  (void)config;
  return absl::FailedPreconditionError(
      "this forecastd was built without CUDA; jobs across daemons train on GPUs");
#endif
}

absl::StatusOr<v1::JoinTrainJobResponse> JoinAsWorker(const TrainingDevices& devices,
                                                      TrainJobManager& jobs,
                                                      const v1::JoinTrainJobRequest& request) {
  if (request.model().empty() || !request.has_config()) {
    return absl::InvalidArgumentError("JoinTrainJob needs the model and its config");
  }
  if (!request.training().workers().empty()) {
    return absl::InvalidArgumentError("a worker's job names no workers of its own");
  }
  if (request.group_id().empty() || request.world_size() < 2 || request.first_rank() < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("JoinTrainJob: ranks from ", request.first_rank(), " of a group of ",
                     request.world_size(), " (a worker's ranks come after the coordinator's)"));
  }
  ASSIGN_OR_RETURN(const int ranks, CountTrainingRanks(devices, request.training()));
  if (request.first_rank() + ranks > request.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("JoinTrainJob: ", ranks, " ranks from ",
                                                   request.first_rank(), " do not fit a group of ",
                                                   request.world_size()));
  }
  RankGroup group{request.group_id(), request.world_size(), request.first_rank()};
  ASSIGN_OR_RETURN(JobPlacement placement, PlaceTrainingJob(devices, request.training(), &group));
  TrainJobManager::StartRequest start;
  start.model = request.model();
  start.config = request.config();
  start.training = request.training();
  ASSIGN_OR_RETURN(const std::string id, jobs.StartWorker(std::move(start), std::move(placement)));
  spdlog::info("training job {}: ranks {}..{} of {} for {}", id, request.first_rank(),
               request.first_rank() + ranks - 1, request.world_size(), request.coordinator());
  v1::JoinTrainJobResponse response;
  response.set_job_id(id);
  response.set_ranks(ranks);
  return response;
}

}  // namespace forecastd
