#include "server/train_workers.h"

#include <chrono>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"
#if FORECASTD_WITH_CUDA
#include "backends/cuda/nccl_communicator.h"
#endif

namespace forecastd {
namespace {

// One worker daemon as the coordinator sees it.
struct Worker {
  std::string address;
  int ranks = 1;
  std::unique_ptr<v1::Admin::Stub> admin;
  std::unique_ptr<v1::Forecaster::Stub> forecaster;
  std::string job_id;  // once joined
};

struct Workers {
  TrainWorkerClient client;
  std::vector<Worker> list;

  std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout) const {
    auto context = std::make_unique<grpc::ClientContext>();
    context->set_deadline(std::chrono::system_clock::now() + absl::ToChronoMilliseconds(timeout));
    if (!client.bearer_token.empty()) {
      context->AddMetadata("authorization", absl::StrCat("Bearer ", client.bearer_token));
    }
    return context;
  }

  // Cancels the jobs of the workers that joined (best effort: a worker that is gone has no job
  // to stop).
  void CancelAll() const {
    for (const Worker& w : list) {
      if (w.job_id.empty()) continue;
      v1::CancelTrainJobRequest request;
      request.set_job_id(w.job_id);
      v1::TrainJobInfo info;
      const grpc::Status status =
          w.forecaster->CancelTrainJob(Context(absl::Seconds(5)).get(), request, &info);
      if (!status.ok()) {
        spdlog::warn("could not cancel job {} on worker {}: {}", w.job_id, w.address,
                     status.error_message());
      }
    }
  }

  // The workers whose jobs cannot be read now.
  std::string Unreachable() const {
    std::vector<std::string> lost;
    for (const Worker& w : list) {
      v1::GetTrainJobRequest request;
      request.set_job_id(w.job_id);
      v1::TrainJobInfo info;
      const grpc::Status status =
          w.forecaster->GetTrainJob(Context(absl::Seconds(2)).get(), request, &info);
      if (!status.ok()) {
        lost.push_back(absl::StrCat(w.address, " (", status.error_message(), ")"));
      } else if (info.state() == v1::TRAIN_JOB_FAILED) {
        lost.push_back(absl::StrCat(w.address, " (its job failed: ", info.error(), ")"));
      }
    }
    return absl::StrJoin(lost, ", ");
  }
};

absl::Status WorkerError(const Worker& w, const grpc::Status& status, absl::string_view doing) {
  const auto code = static_cast<absl::StatusCode>(status.error_code());
  return absl::Status(
      code == absl::StatusCode::kDeadlineExceeded ? absl::StatusCode::kUnavailable : code,
      absl::StrCat("training worker ", w.address, " ", doing, ": ", status.error_message()));
}

}  // namespace

absl::StatusOr<JoinedWorkers> JoinWorkers(const TrainingDevices& devices,
                                          const TrainWorkerClient& client, const std::string& model,
                                          const ModelConfig& config,
                                          const v1::TrainingConfig& training) {
  auto workers = std::make_shared<Workers>();
  workers->client = client;
  const std::shared_ptr<grpc::ChannelCredentials> credentials =
      client.credentials != nullptr ? client.credentials : grpc::InsecureChannelCredentials();
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
    grpc::ChannelArguments args;
    args.SetMaxSendMessageSize(-1);
    auto channel = grpc::CreateCustomChannel(spec.address(), credentials, args);
    Worker w;
    w.address = spec.address();
    w.ranks = spec.devices_size() > 0 ? spec.devices_size() : 1;
    w.admin = v1::Admin::NewStub(channel);
    w.forecaster = v1::Forecaster::NewStub(channel);
    workers->list.push_back(std::move(w));
  }
  // Every worker answers, and lets this daemon in with the `train` role, before any is given
  // ranks.
  for (const Worker& w : workers->list) {
    v1::ListTrainJobsRequest probe;
    probe.set_model(model);
    v1::ListTrainJobsResponse jobs;
    const grpc::Status reached =
        w.forecaster->ListTrainJobs(workers->Context(client.timeout).get(), probe, &jobs);
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
#else
  (void)config;
  return absl::FailedPreconditionError(
      "this forecastd was built without CUDA; jobs across daemons train on GPUs");
#endif
#if FORECASTD_WITH_CUDA
  int next_rank = local_ranks;
  for (Worker& w : workers->list) {
    v1::JoinTrainJobRequest request;
    request.set_coordinator(client.self);
    request.set_model(model);
    *request.mutable_config() = config;
    v1::TrainingConfig theirs = local;
    theirs.clear_devices();
    for (const v1::TrainingWorker& spec : training.workers()) {
      if (spec.address() == w.address) {
        for (const std::string& d : spec.devices()) theirs.add_devices(d);
      }
    }
    *request.mutable_training() = theirs;
    request.set_group_id(group.unique_id);
    request.set_world_size(world);
    request.set_first_rank(next_rank);
    v1::JoinTrainJobResponse response;
    const grpc::Status joined =
        w.admin->JoinTrainJob(workers->Context(client.timeout).get(), request, &response);
    if (!joined.ok()) {
      workers->CancelAll();
      return WorkerError(w, joined, "refused its ranks");
    }
    w.job_id = response.job_id();
    spdlog::info("training '{}': worker {} runs ranks {}..{} of {} as its job {}", model, w.address,
                 next_rank, next_rank + w.ranks - 1, world, w.job_id);
    next_rank += w.ranks;
  }
  JoinedWorkers result;
  result.placement = std::move(placement);
  result.end = [workers] { workers->CancelAll(); };
  result.unreachable = [workers] { return workers->Unreachable(); };
  return result;
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
