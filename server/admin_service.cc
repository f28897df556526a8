#include "server/admin_service.h"

#include "server/grpc_status.h"

namespace forecastd {

namespace {
// How long an export or import waits for a stream to come to rest or its state to be written.
constexpr absl::Duration kStreamTimeout = absl::Seconds(30);
}  // namespace
namespace {

v1::ModelState ToProto(ModelState state) {
  switch (state) {
    case ModelState::kUnavailable:
    case ModelState::kUnloaded:
      return v1::MODEL_UNLOADED;
    case ModelState::kLoading:
      return v1::MODEL_LOADING;
    case ModelState::kReady:
      return v1::MODEL_READY;
    case ModelState::kUnloading:
      return v1::MODEL_UNLOADING;
    case ModelState::kFailed:
      return v1::MODEL_FAILED;
  }
  return v1::MODEL_STATE_UNSPECIFIED;
}

}  // namespace

v1::ModelStatus ToModelStatusProto(const ModelStatus& status) {
  v1::ModelStatus out;
  out.set_name(status.name);
  out.set_state(ToProto(status.state));
  out.set_serving_version(status.serving_version);
  for (int64_t v : status.versions_on_disk) out.add_versions(v);
  for (const LoadedVersionStatus& loaded : status.loaded) {
    v1::LoadedVersion* l = out.add_loaded();
    l->set_version(loaded.version);
    l->set_serving(loaded.serving);
    l->set_in_flight(loaded.in_flight_tasks);
    l->set_queued(loaded.queued_tasks);
    l->set_device(loaded.device);
    l->set_compute(loaded.compute);
  }
  if (!status.last_error.ok()) out.set_last_error(status.last_error.ToString());
  if (status.config.has_value()) *out.mutable_config() = *status.config;
  if (!status.loaded.empty()) out.set_device(status.loaded.front().device);
  for (const auto& [version, lineage] : status.lineage) (*out.mutable_lineage())[version] = lineage;
  return out;
}

v1::StreamInfo ToStreamInfoProto(const StreamInfo& info) {
  v1::StreamInfo out;
  out.set_model(info.model);
  out.set_key(info.key);
  out.set_version(info.version);
  out.set_requested_version(info.requested_version);
  out.set_mode(info.mode);
  out.set_sequence(info.sequence);
  out.set_ticks_buffered(info.ticks_buffered);
  out.set_lookback(info.lookback);
  out.set_series(info.series);
  out.set_connected(info.connected);
  out.set_idle_ms(absl::ToInt64Milliseconds(info.idle));
  return out;
}

void AdminService::AddStreamUsage(const std::map<std::string, StreamHub::ModelUsage>& usage,
                                  v1::ModelStatus* status) {
  if (status->has_config()) status->set_stream_mode(StreamMode(status->config()));
  const auto it = usage.find(status->name());
  if (it == usage.end()) return;
  status->set_streams(it->second.streams);
  status->set_stream_state_bytes(it->second.state_bytes);
}

grpc::Status AdminService::ListModels(grpc::ServerContext* context,
                                      const v1::ListModelsRequest* /*request*/,
                                      v1::ListModelsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  const std::map<std::string, StreamHub::ModelUsage> usage =
      options_.streams != nullptr ? options_.streams->Usage()
                                  : std::map<std::string, StreamHub::ModelUsage>{};
  for (const ModelStatus& status : options_.registry->ListModels()) {
    v1::ModelStatus* out = response->add_models();
    *out = ToModelStatusProto(status);
    AddStreamUsage(usage, out);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::Reply(const std::string& model, const absl::Status& done,
                                 v1::ModelStatus* response) {
  if (!done.ok()) return ToGrpcStatus(done);
  absl::StatusOr<ModelStatus> status = options_.registry->GetModel(model);
  if (!status.ok()) return ToGrpcStatus(status.status());
  *response = ToModelStatusProto(*status);
  if (options_.streams != nullptr) AddStreamUsage(options_.streams->Usage(), response);
  return grpc::Status::OK;
}

grpc::Status AdminService::GetModel(grpc::ServerContext* context,
                                    const v1::GetModelRequest* request, v1::ModelStatus* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return Reply(request->name(), absl::OkStatus(), response);
}

grpc::Status AdminService::LoadModel(grpc::ServerContext* context,
                                     const v1::LoadModelRequest* request,
                                     v1::ModelStatus* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (!accepting()) return ToGrpcStatus(absl::UnavailableError("forecastd is shutting down"));
  return Reply(request->name(), options_.registry->Load(request->name()), response);
}

grpc::Status AdminService::UnloadModel(grpc::ServerContext* context,
                                       const v1::UnloadModelRequest* request,
                                       v1::ModelStatus* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  return Reply(request->name(), options_.registry->Unload(request->name()), response);
}

grpc::Status AdminService::SetServingVersion(grpc::ServerContext* context,
                                             const v1::SetServingVersionRequest* request,
                                             v1::ModelStatus* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (!accepting()) return ToGrpcStatus(absl::UnavailableError("forecastd is shutting down"));
  if (request->version() < 0) {
    return ToGrpcStatus(absl::InvalidArgumentError("version must be >= 0 (0: the config's rule)"));
  }
  return Reply(request->name(),
               options_.registry->SetServingVersion(request->name(), request->version()), response);
}

grpc::Status AdminService::DeleteModelVersion(grpc::ServerContext* context,
                                              const v1::DeleteModelVersionRequest* request,
                                              v1::DeleteModelVersionResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (!accepting()) return ToGrpcStatus(absl::UnavailableError("forecastd is shutting down"));
  const std::string& model = request->name();
  if (options_.jobs != nullptr) {
    if (absl::Status busy = options_.jobs->CheckNoJobFrom(model, request->version()); !busy.ok()) {
      return ToGrpcStatus(busy);
    }
  }
  if (absl::Status deleted = options_.registry->DeleteVersion(model, request->version());
      !deleted.ok()) {
    return ToGrpcStatus(deleted);
  }
  if (options_.jobs != nullptr) {
    for (std::string& path : options_.jobs->RemoveCheckpointsFrom(model, request->version())) {
      response->add_removed_checkpoints(std::move(path));
    }
  }
  return Reply(model, absl::OkStatus(), response->mutable_model());
}

grpc::Status AdminService::GetServerStatus(grpc::ServerContext* context,
                                           const v1::GetServerStatusRequest* /*request*/,
                                           v1::ServerStatus* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (options_.server_status) *response = options_.server_status();
  return grpc::Status::OK;
}

grpc::Status AdminService::JoinTrainJob(grpc::ServerContext* context,
                                        const v1::JoinTrainJobRequest* request,
                                        v1::JoinTrainJobResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (!options_.join_train_job) {
    return ToGrpcStatus(absl::UnimplementedError("this server runs no ranks of other jobs"));
  }
  absl::StatusOr<v1::JoinTrainJobResponse> joined = options_.join_train_job(*request);
  if (!joined.ok()) return ToGrpcStatus(joined.status());
  *response = *std::move(joined);
  return grpc::Status::OK;
}

grpc::Status AdminService::ListStreams(grpc::ServerContext* context,
                                       const v1::ListStreamsRequest* request,
                                       v1::ListStreamsResponse* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  // A misspelt model is NOT_FOUND rather than an empty list.
  if (!request->model().empty()) {
    if (absl::StatusOr<ModelStatus> model = options_.registry->GetModel(request->model());
        !model.ok()) {
      return ToGrpcStatus(model.status());
    }
  }
  if (options_.streams == nullptr) return grpc::Status::OK;
  for (const StreamInfo& info : options_.streams->List(request->model())) {
    *response->add_streams() = ToStreamInfoProto(info);
  }
  return grpc::Status::OK;
}

grpc::Status AdminService::ExportStream(grpc::ServerContext* context,
                                        const v1::ExportStreamRequest* request,
                                        v1::StreamRecord* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (options_.streams == nullptr) {
    return ToGrpcStatus(absl::UnavailableError("this server keeps no tick streams"));
  }
  absl::StatusOr<v1::StreamRecord> record =
      options_.streams->Export(request->model(), request->key(), kStreamTimeout);
  if (!record.ok()) return ToGrpcStatus(record.status());
  *response = *std::move(record);
  return grpc::Status::OK;
}

grpc::Status AdminService::ImportStream(grpc::ServerContext* context,
                                        const v1::StreamRecord* request, v1::StreamInfo* response) {
  if (absl::Status allowed = Authorize(*context); !allowed.ok()) return ToGrpcStatus(allowed);
  if (options_.streams == nullptr) {
    return ToGrpcStatus(absl::UnavailableError("this server keeps no tick streams"));
  }
  if (absl::Status imported = options_.streams->Import(*request, kStreamTimeout); !imported.ok()) {
    return ToGrpcStatus(imported);
  }
  for (const StreamInfo& info : options_.streams->List(request->model())) {
    if (info.key == request->key()) *response = ToStreamInfoProto(info);
  }
  return grpc::Status::OK;
}

}  // namespace forecastd
