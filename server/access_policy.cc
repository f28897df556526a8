#include "server/access_policy.h"

#include <iterator>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"

namespace forecastd {
namespace {

constexpr MethodAccess kOpen{MethodAccess::Kind::kOpen, Role::kAdmin};
constexpr MethodAccess Needs(Role role) { return {MethodAccess::Kind::kRole, role}; }

// Benchmark needs admin: it can keep every worker busy for a minute with 1024 client threads.
constexpr MethodRule kRules[] = {
    {"/forecastd.v1.Forecaster/Predict", Needs(Role::kPredict)},
    {"/forecastd.v1.Forecaster/Stream", Needs(Role::kPredict)},
    {"/forecastd.v1.Forecaster/Train", Needs(Role::kTrain)},
    {"/forecastd.v1.Forecaster/WatchTrainJob", Needs(Role::kTrain)},
    {"/forecastd.v1.Forecaster/GetTrainJob", Needs(Role::kTrain)},
    {"/forecastd.v1.Forecaster/ListTrainJobs", Needs(Role::kTrain)},
    {"/forecastd.v1.Forecaster/CancelTrainJob", Needs(Role::kTrain)},
    {"/forecastd.v1.Forecaster/Benchmark", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/ListModels", Needs(Role::kPredict)},
    {"/forecastd.v1.Admin/JoinTrainJob", Needs(Role::kTrain)},
    {"/forecastd.v1.Admin/GetModel", Needs(Role::kPredict)},
    {"/forecastd.v1.Admin/GetServerStatus", Needs(Role::kPredict)},
    {"/forecastd.v1.Admin/ListStreams", Needs(Role::kPredict)},
    {"/forecastd.v1.Admin/ExportStream", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/ImportStream", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/LoadModel", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/UnloadModel", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/SetServingVersion", Needs(Role::kAdmin)},
    {"/forecastd.v1.Admin/DeleteModelVersion", Needs(Role::kAdmin)},
    // KServe's liveness and readiness say nothing a health probe does not.
    {"/inference.GRPCInferenceService/ServerLive", kOpen},
    {"/inference.GRPCInferenceService/ServerReady", kOpen},
    {"/inference.GRPCInferenceService/ModelReady", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ServerMetadata", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ModelMetadata", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ModelInfer", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ModelStreamInfer", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ModelConfig", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/ModelStatistics", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/RepositoryIndex", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/RepositoryModelLoad", Needs(Role::kAdmin)},
    {"/inference.GRPCInferenceService/RepositoryModelUnload", Needs(Role::kAdmin)},
    // Not served (UNIMPLEMENTED with a message); the roles of their would-be callers.
    {"/inference.GRPCInferenceService/SystemSharedMemoryStatus", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/SystemSharedMemoryRegister", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/SystemSharedMemoryUnregister", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/CudaSharedMemoryStatus", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/CudaSharedMemoryRegister", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/CudaSharedMemoryUnregister", Needs(Role::kPredict)},
    {"/inference.GRPCInferenceService/TraceSetting", Needs(Role::kAdmin)},
    {"/inference.GRPCInferenceService/LogSettings", Needs(Role::kAdmin)},
};

// Services open as a whole: probes and tools must reach them without a token.
constexpr const char* kOpenServicePrefixes[] = {
    "/grpc.health.v1.Health/",
    "/grpc.reflection.v1alpha.ServerReflection/",
    "/grpc.reflection.v1.ServerReflection/",
};

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kPredict:
      return "predict";
    case Role::kTrain:
      return "train";
    case Role::kAdmin:
      return "admin";
  }
  return "unknown";
}

absl::StatusOr<Role> ParseRole(absl::string_view name) {
  for (Role role : {Role::kPredict, Role::kTrain, Role::kAdmin}) {
    if (name == RoleName(role)) return role;
  }
  return absl::InvalidArgumentError("unknown role (expected predict, train or admin)");
}

MethodAccess AccessFor(absl::string_view full_method) {
  for (const char* prefix : kOpenServicePrefixes) {
    if (absl::StartsWith(full_method, prefix)) return kOpen;
  }
  for (const MethodRule& rule : kRules) {
    if (full_method == rule.full_method) return rule.access;
  }
  return MethodAccess{};
}

absl::Span<const MethodRule> MethodRules() { return absl::MakeConstSpan(kRules); }

}  // namespace forecastd
