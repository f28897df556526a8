#include "tests/testing/kserve_env.h"

#include <chrono>
#include <cstring>
#include <filesystem>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/models/model_files.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "tests/testing/catch.h"
#include "tests/testing/test_models.h"

namespace forecastd::kserve_test {

namespace fs = std::filesystem;

ModelConfig GruConfig() {
  ModelConfig c = testing::SmallGruConfig("gru", T, P);
  v1::BatchingConfig* b = c.mutable_batching();
  b->set_max_batch_size(kMaxBatch);
  b->add_preferred_batch_size(2);
  b->set_priority_levels(2);
  b->set_default_priority_level(2);
  b->mutable_default_queue_policy()->set_max_queue_size(64);
  v1::QueuePolicy& high = (*b->mutable_priority_queue_policy())[1];
  high.set_timeout_action(v1::QueuePolicy::DELAY);
  high.set_default_timeout_us(5000000);
  high.set_allow_timeout_override(true);
  c.mutable_instances()->set_count(2);
  c.mutable_instances()->add_devices("cpu");
  return c;
}

ModelConfig QuantileConfig() {
  ModelConfig c;
  c.set_name("quant");
  c.set_lookback(T);
  c.set_horizon(P);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.add_target_names("volume");
  for (float q : {0.1f, 0.5f, 0.9f}) c.add_quantiles(q);
  v1::TransformerConfig* t = c.mutable_transformer();
  t->set_d_model(4);
  t->set_num_heads(2);
  t->set_num_layers(1);
  t->set_dim_feedforward(8);
  return c;
}

std::string Bytes(const std::vector<float>& values) {
  std::string bytes(values.size() * sizeof(float), '\0');
  // An empty vector's data() may be null, which memcpy may not be given even for 0 bytes.
  if (!values.empty()) std::memcpy(bytes.data(), values.data(), bytes.size());
  return bytes;
}

std::vector<float> Floats(const std::string& bytes) {
  std::vector<float> values(bytes.size() / sizeof(float));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(float));
  return values;
}

inference::ModelInferRequest RawRequest(const std::string& model, const std::vector<float>& input,
                                        int64_t rows) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* tensor = request.add_inputs();
  tensor->set_name("INPUT");
  tensor->set_datatype("FP32");
  for (int64_t dim : {rows, T, F}) tensor->add_shape(dim);
  request.add_raw_input_contents(Bytes(input));
  return request;
}

std::vector<std::string> ServedExtensions() {
  std::vector<std::string> extensions = {"model_repository",
                                         "model_repository(unload_dependents)",
                                         "model_configuration",
                                         "schedule_policy",
                                         "statistics",
                                         "binary_tensor_data",
                                         "logging",
                                         "system_shared_memory"};
#if FORECASTD_WITH_CUDA
  extensions.push_back("cuda_shared_memory");
#endif
  return extensions;
}

Env::Env(KServeService::Options options, std::vector<std::string> load) {
  root = dir.path() + "/models";
  fs::create_directories(root);
  gru_v1 = testing::RandomModel(GruConfig(), 1);
  gru_v2 = testing::RandomModel(GruConfig(), 2);
  quant = testing::RandomModel(QuantileConfig(), 3);
  REQUIRE(PublishVersion(*gru_v1, root + "/gru", 1).ok());
  REQUIRE(PublishVersion(*gru_v2, root + "/gru", 2).ok());
  REQUIRE(PublishVersion(*quant, root + "/quant", 1).ok());

  ModelRegistry::Options registry_options;
  registry_options.repository_path = root;
  registry_options.models_to_load = std::move(load);
  registry = testing::StartCpuRegistry(registry_options, backend, scheduler);

  options.registry = registry.get();
  if (!options.ready) options.ready = [this] { return ready.load(); };
  service = KServeService::Create(std::move(options)).value();
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(service.get());
  server = builder.BuildAndStart();
  REQUIRE(server != nullptr);
  REQUIRE(port > 0);
  address = absl::StrCat("127.0.0.1:", port);
  channel = grpc::CreateChannel(address, grpc::InsecureChannelCredentials());
  stub = inference::GRPCInferenceService::NewStub(channel);
}

Env::~Env() {
  registry->Shutdown(absl::Seconds(30));
  // As Server::Shutdown: gRPC's shutdown without a deadline waits for open streams.
  service->CloseStreams();
  server->Shutdown();
}

grpc::Status Env::Infer(const inference::ModelInferRequest& request,
                        inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return stub->ModelInfer(&context, request, response);
}
grpc::Status Env::Infer(const inference::ModelInferRequest& request) {
  inference::ModelInferResponse response;
  return Infer(request, &response);
}

bool Env::ModelReady(const std::string& name, const std::string& version) {
  grpc::ClientContext context;
  inference::ModelReadyRequest request;
  request.set_name(name);
  request.set_version(version);
  inference::ModelReadyResponse response;
  REQUIRE(stub->ModelReady(&context, request, &response).ok());
  return response.ready();
}

inference::RepositoryIndexResponse Env::Index(bool ready_only) {
  grpc::ClientContext context;
  inference::RepositoryIndexRequest request;
  request.set_ready(ready_only);
  inference::RepositoryIndexResponse response;
  REQUIRE(stub->RepositoryIndex(&context, request, &response).ok());
  return response;
}

grpc::Status Env::Load(const std::string& name) {
  grpc::ClientContext context;
  inference::RepositoryModelLoadRequest request;
  request.set_model_name(name);
  inference::RepositoryModelLoadResponse response;
  return stub->RepositoryModelLoad(&context, request, &response);
}

grpc::Status Env::Unload(const std::string& name) {
  grpc::ClientContext context;
  inference::RepositoryModelUnloadRequest request;
  request.set_model_name(name);
  inference::RepositoryModelUnloadResponse response;
  return stub->RepositoryModelUnload(&context, request, &response);
}

grpc::Status Env::Statistics(const std::string& name, const std::string& version,
                             inference::ModelStatisticsResponse* response) {
  grpc::ClientContext context;
  inference::ModelStatisticsRequest request;
  request.set_name(name);
  request.set_version(version);
  return stub->ModelStatistics(&context, request, response);
}

void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& part) {
  INFO("code " << status.error_code() << ": " << status.error_message());
  REQUIRE(status.error_code() == code);
  REQUIRE(absl::StrContains(status.error_message(), part));
}

}  // namespace forecastd::kserve_test
