// Training jobs whose ranks span daemons (TrainingConfig.workers), both ends. The coordinating
// daemon (JoinWorkers) counts each worker's ranks, makes the NCCL group's id, and hands every
// worker its ranks over forecastd's own gRPC (Admin.JoinTrainJob, with the bearer token and
// TLS files of TrainWorkerClient; the `train` role applies on the worker); its own ranks come
// first in the group. A worker (JoinAsWorker) places its ranks on its GPUs and runs them as a
// worker job (TrainJobOptions::worker) that publishes nothing. When the coordinator's job
// ends, its workers' jobs are cancelled; a worker that cannot be reached at submission fails the
// request with UNAVAILABLE, one lost during the job is named in the job's error.
// Thread-safe: the functions keep no state of their own.
#ifndef FORECASTD_SERVER_TRAIN_WORKERS_H_
#define FORECASTD_SERVER_TRAIN_WORKERS_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "engine/train/train_job_manager.h"
#include "forecastd/v1/admin.pb.h"
#include "grpcpp/security/credentials.h"
#include "server/training_placement.h"

namespace forecastd {

// How this daemon reaches its workers.
struct TrainWorkerClient {
  // Channel credentials (TLS, mutual TLS) for the workers' gRPC ports; nullptr: plaintext.
  std::shared_ptr<grpc::ChannelCredentials> credentials;
  // Sent as `authorization: Bearer <token>`; "": none (workers without tokens).
  std::string bearer_token;
  // Deadline of each call to a worker.
  absl::Duration timeout = absl::Seconds(20);
  // Who this daemon is, for the workers' logs (its gRPC address).
  std::string self;
};

// Coordinator: starts the ranks of `training.workers()` for a job of `model`. UNAVAILABLE
// naming the worker that cannot be reached (the workers already started are cancelled);
// INVALID_ARGUMENT for a worker without an address, or a job this daemon would run on the CPU.
absl::StatusOr<JoinedWorkers> JoinWorkers(const TrainingDevices& devices,
                                          const TrainWorkerClient& client, const std::string& model,
                                          const ModelConfig& config,
                                          const v1::TrainingConfig& training);

// Worker: runs the request's ranks here as a job of `jobs`.
absl::StatusOr<v1::JoinTrainJobResponse> JoinAsWorker(const TrainingDevices& devices,
                                                      TrainJobManager& jobs,
                                                      const v1::JoinTrainJobRequest& request);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_TRAIN_WORKERS_H_
