// CUDA shared memory end to end on a GPU host: this test is the client process, a forecastd
// daemon serving on the CPU and cuda:0 is the server. The client allocates device memory,
// writes windows there, exports it with cudaIpcGetMemHandle and registers the handle through
// KServe's gRPC calls, as tritonclient's cuda_shared_memory helpers and perf_analyzer
// (--shared-memory cuda) do; then ModelInfer reads its inputs from and writes its forecasts to
// that memory, for a model on the GPU (device to device inside the daemon) and one on the CPU
// (through host memory), bit for bit against the same request with its tensors in the message;
// and once more through KServe REST's register / status / infer / unregister.
// Non-finite windows, ranges outside the region and allocations too small are refused naming
// what is wrong, and an unregistered region is gone.
#include <cuda_runtime_api.h>

#include <barrier>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "engine/models/model_files.h"
#include "grpcpp/grpcpp.h"
#include "httplib.h"
#include "inference/grpc_service.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using json = nlohmann::json;

constexpr int64_t kT = 8;  // lookback
constexpr int64_t kF = 2;  // features (SmallGruConfig's)
constexpr int64_t kP = 3;  // horizon, one target
constexpr int64_t kRows = 3;
constexpr int64_t kInBytes = kRows * kT * kF * 4;
constexpr int64_t kOutBytes = kRows * kP * 4;
constexpr int kClients = 8;  // concurrent requests of the batched part
constexpr int kRounds = 5;

// forecastd's binary: $FORECASTD_BINARY (a host that runs the tests from a bundle), else the
// build's.
std::string ForecastdBinary() {
  if (const char* path = std::getenv("FORECASTD_BINARY"); path != nullptr && *path != '\0') {
    return path;
  }
  return FORECASTD_BINARY;
}

// Device memory of this process, exported for another.
class ExportedDeviceMemory {
 public:
  explicit ExportedDeviceMemory(int64_t bytes) : bytes_(bytes) {
    REQUIRE(cudaSetDevice(0) == cudaSuccess);
    REQUIRE(cudaMalloc(&data_, static_cast<size_t>(bytes)) == cudaSuccess);
    REQUIRE(cudaMemset(data_, 0, static_cast<size_t>(bytes)) == cudaSuccess);
    cudaIpcMemHandle_t handle;
    REQUIRE(cudaIpcGetMemHandle(&handle, data_) == cudaSuccess);
    handle_.assign(reinterpret_cast<const char*>(&handle), sizeof(handle));
  }
  ~ExportedDeviceMemory() { cudaFree(data_); }
  ExportedDeviceMemory(const ExportedDeviceMemory&) = delete;
  ExportedDeviceMemory& operator=(const ExportedDeviceMemory&) = delete;

  const std::string& handle() const { return handle_; }
  int64_t bytes() const { return bytes_; }
  void Write(int64_t offset, const std::vector<float>& values) {
    REQUIRE(cudaMemcpy(static_cast<char*>(data_) + offset, values.data(),
                       values.size() * sizeof(float), cudaMemcpyHostToDevice) == cudaSuccess);
  }
  std::vector<float> Read(int64_t offset, int64_t floats) const {
    std::vector<float> out(static_cast<size_t>(floats));
    REQUIRE(cudaMemcpy(out.data(), static_cast<const char*>(data_) + offset,
                       out.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
    return out;
  }

 private:
  const int64_t bytes_;
  void* data_ = nullptr;
  std::string handle_;
};

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  parameters["shared_memory_offset"].set_int64_param(offset);
}

inference::ModelInferRequest Request(const std::string& model, int64_t rows) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t dim : {rows, kT, kF}) input->add_shape(dim);
  return request;
}

// The forecast of `windows` with the tensors in the messages.
std::vector<float> Ordinary(inference::GRPCInferenceService::Stub& stub, const std::string& model,
                            const std::vector<float>& windows) {
  inference::ModelInferRequest request = Request(model, kRows);
  request.add_raw_input_contents(
      std::string(reinterpret_cast<const char*>(windows.data()), windows.size() * sizeof(float)));
  inference::ModelInferResponse response;
  grpc::ClientContext context;
  const grpc::Status status = stub.ModelInfer(&context, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(response.raw_output_contents_size() == 1);
  const std::string& raw = response.raw_output_contents(0);
  REQUIRE(static_cast<int64_t>(raw.size()) == kOutBytes);
  std::vector<float> out(static_cast<size_t>(kRows * kP));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

grpc::Status Infer(inference::GRPCInferenceService::Stub& stub,
                   const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response) {
  grpc::ClientContext context;
  return stub.ModelInfer(&context, request, response);
}

// Registers `byte_size` bytes of `memory` on GPU 0 as region `name`.
grpc::Status RegisterRegion(inference::GRPCInferenceService::Stub& stub, const std::string& name,
                            const ExportedDeviceMemory& memory, int64_t byte_size) {
  grpc::ClientContext context;
  inference::CudaSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_raw_handle(memory.handle());
  request.set_device_id(0);
  request.set_byte_size(static_cast<uint64_t>(byte_size));
  inference::CudaSharedMemoryRegisterResponse response;
  return stub.CudaSharedMemoryRegister(&context, request, &response);
}

void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& part) {
  INFO("code " << status.error_code() << ": " << status.error_message());
  REQUIRE(status.error_code() == code);
  REQUIRE(absl::StrContains(status.error_message(), part));
}

TEST_CASE("ModelInfer reads windows from and writes forecasts to a client's CUDA shared memory",
          "[gpu][kserve][shared_memory]") {
  testing::TempDir dir;
  const std::string root = dir.path() + "/models";
  std::filesystem::create_directories(root);
  for (const std::string device : {"cuda:0", "cpu"}) {
    ModelConfig config = testing::SmallGruConfig(device == "cpu" ? "on_cpu" : "on_gpu", kT, kP);
    config.mutable_instances()->add_devices(device);
    const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 5);
    REQUIRE(PublishVersion(*model, root + "/" + config.name(), 1).ok());
  }
  {
    // On the GPU, a batch forms when kClients requests of kRows rows are queued (or after a
    // long delay): one batch holds several requests' rows from device memory.
    ModelConfig config = testing::SmallGruConfig("batched", kT, kP);
    config.mutable_instances()->add_devices("cuda:0");
    config.mutable_batching()->set_max_batch_size(kClients * kRows);
    config.mutable_batching()->add_preferred_batch_size(kClients * kRows);
    config.mutable_batching()->set_max_queue_delay_us(200'000);
    const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 6);
    REQUIRE(PublishVersion(*model, root + "/batched", 1).ok());
  }
  testing::ForecastdDaemon::Options options;
  options.binary = ForecastdBinary();
  options.repository = root;
  options.devices = "cpu,cuda:0";
  absl::StatusOr<std::unique_ptr<testing::ForecastdDaemon>> daemon =
      testing::ForecastdDaemon::Start(options);
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  const std::unique_ptr<inference::GRPCInferenceService::Stub> stub =
      inference::GRPCInferenceService::NewStub((*daemon)->channel());

  // [windows | forecasts | a second set of windows], 4 KiB apart.
  ExportedDeviceMemory memory(3 * 4096);
  const std::vector<float> windows = testing::RandomWindows(kRows, kT, 17);
  memory.Write(0, windows);
  {
    const grpc::Status status = RegisterRegion(*stub, "gpu_region", memory, memory.bytes());
    INFO(status.error_message());
    REQUIRE(status.ok());
  }
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryStatusResponse response;
    REQUIRE(stub->CudaSharedMemoryStatus(&context, {}, &response).ok());
    REQUIRE(response.regions_size() == 1);
    const auto& region = response.regions().at("gpu_region");
    REQUIRE(region.device_id() == 0);
    REQUIRE(static_cast<int64_t>(region.byte_size()) == memory.bytes());
  }

  for (const std::string model : {"on_gpu", "on_cpu"}) {
    INFO("model " << model);
    const std::vector<float> expected = Ordinary(*stub, model, windows);
    memory.Write(4096, std::vector<float>(static_cast<size_t>(kRows * kP), -1.0f));
    inference::ModelInferRequest request = Request(model, kRows);
    SetRegion(*request.mutable_inputs(0)->mutable_parameters(), "gpu_region", kInBytes, 0);
    auto* output = request.add_outputs();
    output->set_name("FORECAST");
    SetRegion(*output->mutable_parameters(), "gpu_region", kOutBytes, 4096);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(*stub, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    // As Triton answers: the output names its region, and the message carries no data.
    REQUIRE(response.outputs_size() == 1);
    REQUIRE(response.outputs(0).parameters().at("shared_memory_region").string_param() ==
            "gpu_region");
    REQUIRE(response.raw_output_contents_size() == 1);
    REQUIRE(response.raw_output_contents(0).empty());
    const std::vector<float> got = memory.Read(4096, kRows * kP);
    for (size_t i = 0; i < got.size(); ++i) {
      INFO("forecast " << i << ": " << got[i] << " vs " << expected[i]);
      REQUIRE(std::memcmp(&got[i], &expected[i], sizeof(float)) == 0);
    }

    // A window holding a NaN fails that request naming it; the next one is served.
    std::vector<float> bad = windows;
    bad[static_cast<size_t>(kT * kF + 3)] = std::numeric_limits<float>::quiet_NaN();  // window 1
    memory.Write(8192, bad);
    inference::ModelInferRequest nan_request = Request(model, kRows);
    SetRegion(*nan_request.mutable_inputs(0)->mutable_parameters(), "gpu_region", kInBytes, 8192);
    RequireError(Infer(*stub, nan_request, &response), grpc::StatusCode::INVALID_ARGUMENT,
                 "input window 1 (in device memory) holds a NaN or an infinity");
    REQUIRE(Ordinary(*stub, model, windows) == expected);
  }

  // Ranges outside the region are refused before anything is read.
  inference::ModelInferRequest outside = Request("on_gpu", kRows);
  SetRegion(*outside.mutable_inputs(0)->mutable_parameters(), "gpu_region", kInBytes,
            memory.bytes() - 8);
  inference::ModelInferResponse response;
  RequireError(Infer(*stub, outside, &response), grpc::StatusCode::INVALID_ARGUMENT,
               "do not lie inside the shared-memory region 'gpu_region'");
  // A region larger than the allocation it names is never registered.
  RequireError(RegisterRegion(*stub, "too_big", memory, memory.bytes() * 1024),
               grpc::StatusCode::INVALID_ARGUMENT, "beyond the");
  // The same over KServe REST (Triton's register body, base64 handle) on memory of its own.
  {
    ExportedDeviceMemory rest_memory(2 * 4096);
    rest_memory.Write(0, windows);
    httplib::Client rest("127.0.0.1", (*daemon)->http_port());
    rest.set_read_timeout(60, 0);
    const json body = {{"raw_handle", {{"b64", absl::Base64Escape(rest_memory.handle())}}},
                       {"device_id", 0},
                       {"byte_size", rest_memory.bytes()}};
    httplib::Result registered = rest.Post("/v2/cudasharedmemory/region/rest_region/register",
                                           body.dump(), "application/json");
    REQUIRE(registered);
    INFO(registered->body);
    REQUIRE(registered->status == 200);
    httplib::Result listed = rest.Get("/v2/cudasharedmemory/region/rest_region/status");
    REQUIRE(listed);
    REQUIRE(listed->status == 200);
    REQUIRE(json::parse(listed->body) ==
            json::array({{{"name", "rest_region"}, {"device_id", 0}, {"byte_size", 8192}}}));
    const json infer = {
        {"inputs",
         {{{"name", "INPUT"},
           {"datatype", "FP32"},
           {"shape", {kRows, kT, kF}},
           {"parameters",
            {{"shared_memory_region", "rest_region"}, {"shared_memory_byte_size", kInBytes}}}}}},
        {"outputs",
         {{{"name", "FORECAST"},
           {"parameters",
            {{"shared_memory_region", "rest_region"},
             {"shared_memory_byte_size", kOutBytes},
             {"shared_memory_offset", 4096}}}}}}};
    httplib::Result answered =
        rest.Post("/v2/models/on_gpu/infer", infer.dump(), "application/json");
    REQUIRE(answered);
    INFO(answered->body);
    REQUIRE(answered->status == 200);
    const std::vector<float> got = rest_memory.Read(4096, kRows * kP);
    REQUIRE(std::memcmp(got.data(), Ordinary(*stub, "on_gpu", windows).data(),
                        got.size() * sizeof(float)) == 0);
    httplib::Result unregistered =
        rest.Post("/v2/cudasharedmemory/region/rest_region/unregister", "", "application/json");
    REQUIRE(unregistered);
    REQUIRE(unregistered->status == 200);
  }

  // Batches of several requests in device memory: each client's windows and forecasts in a
  // slice of its own of one region, kClients requests in flight together in each round.
  {
    constexpr int64_t kSlice = 1024;  // bytes per client: windows, then forecasts at +512
    ExportedDeviceMemory shared(kClients * kSlice);
    std::vector<std::vector<float>> client_windows(kClients), client_expected(kClients);
    for (int c = 0; c < kClients; ++c) {
      client_windows[c] = testing::RandomWindows(kRows, kT, 100 + static_cast<uint32_t>(c));
      shared.Write(c * kSlice, client_windows[c]);
      client_expected[c] = Ordinary(*stub, "batched", client_windows[c]);
    }
    REQUIRE(RegisterRegion(*stub, "clients", shared, shared.bytes()).ok());
    std::barrier round_start(kClients);
    std::vector<std::string> errors(kClients);
    std::vector<std::thread> clients;
    for (int c = 0; c < kClients; ++c) {
      clients.emplace_back([&, c] {
        inference::ModelInferRequest request = Request("batched", kRows);
        SetRegion(*request.mutable_inputs(0)->mutable_parameters(), "clients", kInBytes,
                  c * kSlice);
        auto* output = request.add_outputs();
        output->set_name("FORECAST");
        SetRegion(*output->mutable_parameters(), "clients", kOutBytes, c * kSlice + 512);
        for (int r = 0; r < kRounds && errors[c].empty(); ++r) {
          round_start.arrive_and_wait();
          inference::ModelInferResponse response;
          const grpc::Status status = Infer(*stub, request, &response);
          if (!status.ok()) errors[c] = status.error_message();
        }
        // A client that failed leaves the rounds, so that the others' still start.
        if (!errors[c].empty()) round_start.arrive_and_drop();
      });
    }
    for (std::thread& client : clients) client.join();
    for (int c = 0; c < kClients; ++c) {
      INFO("client " << c << ": " << errors[c]);
      REQUIRE(errors[c].empty());
      const std::vector<float> got = shared.Read(c * kSlice + 512, kRows * kP);
      for (size_t i = 0; i < got.size(); ++i) {
        // Batches of other sizes than the ordinary request's may sum in another order.
        REQUIRE(std::abs(got[i] - client_expected[c][i]) <=
                1e-5f * std::abs(client_expected[c][i]) + 1e-6f);
      }
    }
    grpc::ClientContext context;
    inference::ModelStatisticsRequest request;
    request.set_name("batched");
    inference::ModelStatisticsResponse statistics;
    REQUIRE(stub->ModelStatistics(&context, request, &statistics).ok());
    REQUIRE(statistics.model_stats_size() == 1);
    const auto& stats = statistics.model_stats(0);
    INFO("inferences " << stats.inference_count() << ", executions " << stats.execution_count());
    // kClients ordinary requests (one batch each) and kRounds rounds of kClients requests.
    REQUIRE(stats.inference_count() == static_cast<uint64_t>((kRounds + 1) * kClients * kRows));
    REQUIRE(stats.execution_count() < static_cast<uint64_t>(kClients + kRounds * kClients));
  }

  // Unregistered, the region is gone for later requests.
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterRequest request;
    request.set_name("gpu_region");
    inference::CudaSharedMemoryUnregisterResponse unregistered;
    REQUIRE(stub->CudaSharedMemoryUnregister(&context, request, &unregistered).ok());
  }
  inference::ModelInferRequest after = Request("on_gpu", kRows);
  SetRegion(*after.mutable_inputs(0)->mutable_parameters(), "gpu_region", kInBytes, 0);
  RequireError(Infer(*stub, after, &response), grpc::StatusCode::NOT_FOUND,
               "shared-memory region 'gpu_region' is not registered");
}

}  // namespace
}  // namespace forecastd
