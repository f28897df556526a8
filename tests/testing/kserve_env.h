// What the KServe service tests (tests/server/kserve_service_test.cc, kserve_stream_test.cc)
// share: a repository in a temp dir with a GRU (versions 1 and 2) and a quantile transformer,
// a real ModelRegistry on the reference backend, KServeService in an in-process gRPC server on
// 127.0.0.1 and the generated stub, plus request builders. Uses Catch2 assertions, so only a
// test's own thread may call it. Thread-compatible.
#ifndef FORECASTD_TESTS_TESTING_KSERVE_ENV_H_
#define FORECASTD_TESTS_TESTING_KSERVE_ENV_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "backends/reference_backend.h"
#include "engine/serving/device_scheduler.h"
#include "engine/serving/model_registry.h"
#include "grpcpp/channel.h"
#include "grpcpp/server.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/kserve_service.h"
#include "tests/testing/process.h"

namespace forecastd::kserve_test {

inline constexpr int64_t T = 4;  // lookback
inline constexpr int64_t F = 2;  // features
inline constexpr int64_t P = 2;  // horizon
inline constexpr int64_t kMaxBatch = 4;

// "gru": point forecasts of one target, two priority levels; versions 1 and 2 on disk.
ModelConfig GruConfig();
// "quant": a transformer forecasting two targets at three quantiles; not loaded at start.
ModelConfig QuantileConfig();

// The protocol extensions ServerMetadata names, in its order ("cuda_shared_memory" only in a
// build with CUDA).
std::vector<std::string> ServedExtensions();

// Float32 values as little-endian bytes, and back.
std::string Bytes(const std::vector<float>& values);
std::vector<float> Floats(const std::string& bytes);

// The request tritonclient sends: one FP32 input as raw bytes.
inference::ModelInferRequest RawRequest(const std::string& model, const std::vector<float>& input,
                                        int64_t rows);

// The repository, engine, service and server of one test, torn down in the reverse order.
struct Env {
  explicit Env(KServeService::Options options = {}, std::vector<std::string> load = {"gru"});
  ~Env();

  grpc::Status Infer(const inference::ModelInferRequest& request,
                     inference::ModelInferResponse* response);
  grpc::Status Infer(const inference::ModelInferRequest& request);
  bool ModelReady(const std::string& name, const std::string& version = "");
  inference::RepositoryIndexResponse Index(bool ready_only = false);
  grpc::Status Load(const std::string& name);
  grpc::Status Unload(const std::string& name);
  grpc::Status Statistics(const std::string& name, const std::string& version,
                          inference::ModelStatisticsResponse* response);

  testing::TempDir dir;
  std::string root;
  std::unique_ptr<Forecaster> gru_v1, gru_v2, quant;
  std::atomic<bool> ready{true};
  ReferenceBackend backend;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::unique_ptr<ModelRegistry> registry;
  std::unique_ptr<KServeService> service;
  std::unique_ptr<grpc::Server> server;
  std::string address;  // "127.0.0.1:<port>"
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
};

// REQUIREs `status` to have `code` and a message containing `part`.
void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& part);

}  // namespace forecastd::kserve_test

#endif  // FORECASTD_TESTS_TESTING_KSERVE_ENV_H_
