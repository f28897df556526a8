// The access table (server/access_policy.h): every method of forecastd's services is in it
// with the role the issue gives it, health and reflection are open, and a method it does not
// know is refused.
#include "server/access_policy.h"

#include <set>
#include <string>

#include "absl/strings/str_cat.h"
#include "forecastd/v1/admin.pb.h"
#include "forecastd/v1/forecaster.pb.h"
#include "google/protobuf/descriptor.h"
#include "inference/grpc_service.pb.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using Kind = MethodAccess::Kind;

void RequireRole(const std::string& method, Role role) {
  CAPTURE(method);
  const MethodAccess access = AccessFor(method);
  REQUIRE(access.kind == Kind::kRole);
  REQUIRE(access.role == role);
}

TEST_CASE("Every method of forecastd's services is in the access table", "[unit][auth]") {
  const google::protobuf::ServiceDescriptor* services[] = {
      v1::PredictRequest::descriptor()->file()->FindServiceByName("Forecaster"),
      v1::ListModelsRequest::descriptor()->file()->FindServiceByName("Admin"),
      inference::ModelInferRequest::descriptor()->file()->FindServiceByName("GRPCInferenceService"),
  };
  std::set<std::string> seen;
  for (const google::protobuf::ServiceDescriptor* service : services) {
    REQUIRE(service != nullptr);
    for (int i = 0; i < service->method_count(); ++i) {
      const std::string method =
          absl::StrCat("/", service->full_name(), "/", service->method(i)->name());
      CAPTURE(method);
      REQUIRE(AccessFor(method).kind != Kind::kUnknown);
      seen.insert(method);
    }
  }
  // And the table names no method that does not exist.
  for (const MethodRule& rule : MethodRules()) {
    CAPTURE(rule.full_method);
    REQUIRE(seen.count(rule.full_method) == 1);
  }
  REQUIRE(seen.size() == MethodRules().size());
}

TEST_CASE("predict, train and admin cover what the issue gives them", "[unit][auth]") {
  for (const char* m :
       {"/forecastd.v1.Forecaster/Predict", "/forecastd.v1.Forecaster/Stream",
        "/forecastd.v1.Admin/ListModels", "/forecastd.v1.Admin/GetModel",
        "/forecastd.v1.Admin/GetServerStatus", "/forecastd.v1.Admin/ListStreams",
        "/inference.GRPCInferenceService/ModelInfer",
        "/inference.GRPCInferenceService/ModelStreamInfer",
        "/inference.GRPCInferenceService/ModelMetadata",
        "/inference.GRPCInferenceService/ServerMetadata",
        "/inference.GRPCInferenceService/ModelReady", "/inference.GRPCInferenceService/ModelConfig",
        "/inference.GRPCInferenceService/ModelStatistics",
        "/inference.GRPCInferenceService/RepositoryIndex"}) {
    RequireRole(m, Role::kPredict);
  }
  for (const char* m :
       {"/forecastd.v1.Forecaster/Train", "/forecastd.v1.Forecaster/WatchTrainJob",
        "/forecastd.v1.Forecaster/GetTrainJob", "/forecastd.v1.Forecaster/ListTrainJobs",
        "/forecastd.v1.Forecaster/CancelTrainJob"}) {
    RequireRole(m, Role::kTrain);
  }
  for (const char* m : {"/forecastd.v1.Admin/LoadModel", "/forecastd.v1.Admin/UnloadModel",
                        "/forecastd.v1.Admin/SetServingVersion",
                        "/inference.GRPCInferenceService/RepositoryModelLoad",
                        "/inference.GRPCInferenceService/RepositoryModelUnload",
                        "/forecastd.v1.Forecaster/Benchmark"}) {
    RequireRole(m, Role::kAdmin);
  }
}

TEST_CASE("Health, reflection and KServe liveness are open, unknown methods are refused",
          "[unit][auth]") {
  for (const char* m : {"/grpc.health.v1.Health/Check", "/grpc.health.v1.Health/Watch",
                        "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
                        "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo",
                        "/inference.GRPCInferenceService/ServerLive",
                        "/inference.GRPCInferenceService/ServerReady"}) {
    CAPTURE(m);
    REQUIRE(AccessFor(m).kind == Kind::kOpen);
  }
  for (const char* m : {"", "/", "/forecastd.v1.Forecaster/Predict2", "/forecastd.v1.Forecaster/",
                        "/forecastd.v2.Forecaster/Predict", "/grpc.health.v1.Healthy/Check",
                        "forecastd.v1.Forecaster/Predict", "/forecastd.v1.forecaster/predict"}) {
    CAPTURE(m);
    REQUIRE(AccessFor(m).kind == Kind::kUnknown);
  }
}

TEST_CASE("Role names round-trip and nothing else parses", "[unit][auth]") {
  for (Role role : {Role::kPredict, Role::kTrain, Role::kAdmin}) {
    REQUIRE(*ParseRole(RoleName(role)) == role);
  }
  for (const char* bad : {"", "Predict", "admin ", "root", "predict,train"}) {
    CAPTURE(bad);
    REQUIRE_FALSE(ParseRole(bad).ok());
  }
  RoleSet set;
  REQUIRE(set.empty());
  set.Add(Role::kTrain);
  REQUIRE(set.Has(Role::kTrain));
  REQUIRE_FALSE(set.Has(Role::kAdmin));
}

}  // namespace
}  // namespace forecastd
