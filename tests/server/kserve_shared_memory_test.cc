// System shared memory (server/shared_memory.h and KServeService's use of it): the registry on
// its own (mapping, bounds, references that outlive an unregister), then over gRPC through the
// generated stub as tritonclient calls it: register / status / unregister, inference with the
// input and the output in regions against the ordinary path's forecast bit for bit, every
// bounds and size error naming its region, and regions owned per caller identity; CUDA
// shared memory's calls and checks that need no GPU (the GPU path:
// cuda_shared_memory_gpu_test.cc).
// REST's endpoints are tested in kserve_http_test.cc.
#include "server/shared_memory.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "server/kserve_service.h"
#include "tests/testing/catch.h"
#include "tests/testing/kserve_env.h"
#include "tests/testing/shm_object.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using kserve_test::Env;
using kserve_test::F;
using kserve_test::Floats;
using kserve_test::P;
using kserve_test::RawRequest;
using kserve_test::RequireError;
using kserve_test::T;
using testing::ShmObject;

constexpr char kOwnerKey[] = "x-test-owner";

// The caller's identity from a test header, standing in for the token's name.
std::string OwnerFromHeader(const grpc::ServerContextBase& context) {
  const auto it = context.client_metadata().find(kOwnerKey);
  if (it == context.client_metadata().end()) return "";
  return std::string(it->second.data(), it->second.size());
}

KServeService::Options OwnedOptions() {
  KServeService::Options options;
  options.identify = OwnerFromHeader;
  return options;
}

grpc::Status Register(Env& env, const std::string& name, const std::string& key, uint64_t offset,
                      uint64_t byte_size, const std::string& owner = "") {
  grpc::ClientContext context;
  if (!owner.empty()) context.AddMetadata(kOwnerKey, owner);
  inference::SystemSharedMemoryRegisterRequest request;
  request.set_name(name);
  request.set_key(key);
  request.set_offset(offset);
  request.set_byte_size(byte_size);
  inference::SystemSharedMemoryRegisterResponse response;
  return env.stub->SystemSharedMemoryRegister(&context, request, &response);
}

grpc::Status Unregister(Env& env, const std::string& name, const std::string& owner = "") {
  grpc::ClientContext context;
  if (!owner.empty()) context.AddMetadata(kOwnerKey, owner);
  inference::SystemSharedMemoryUnregisterRequest request;
  request.set_name(name);
  inference::SystemSharedMemoryUnregisterResponse response;
  return env.stub->SystemSharedMemoryUnregister(&context, request, &response);
}

grpc::Status Status(Env& env, const std::string& name,
                    inference::SystemSharedMemoryStatusResponse* response,
                    const std::string& owner = "") {
  grpc::ClientContext context;
  if (!owner.empty()) context.AddMetadata(kOwnerKey, owner);
  inference::SystemSharedMemoryStatusRequest request;
  request.set_name(name);
  return env.stub->SystemSharedMemoryStatus(&context, request, response);
}

grpc::Status Infer(Env& env, const inference::ModelInferRequest& request,
                   inference::ModelInferResponse* response, const std::string& owner = "") {
  grpc::ClientContext context;
  if (!owner.empty()) context.AddMetadata(kOwnerKey, owner);
  return env.stub->ModelInfer(&context, request, response);
}

void SetRegion(google::protobuf::Map<std::string, inference::InferParameter>& parameters,
               const std::string& region, int64_t byte_size, int64_t offset = -1) {
  parameters["shared_memory_region"].set_string_param(region);
  parameters["shared_memory_byte_size"].set_int64_param(byte_size);
  if (offset >= 0) parameters["shared_memory_offset"].set_int64_param(offset);
}

// A request for `rows` windows of "gru" whose input is `byte_size` bytes at `offset` of
// `region`, with no data of its own.
inference::ModelInferRequest ShmRequest(int64_t rows, const std::string& region, int64_t byte_size,
                                        int64_t offset = -1) {
  inference::ModelInferRequest request;
  request.set_model_name("gru");
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t dim : {rows, T, F}) input->add_shape(dim);
  SetRegion(*input->mutable_parameters(), region, byte_size, offset);
  return request;
}

void AddShmOutput(inference::ModelInferRequest& request, const std::string& region,
                  int64_t byte_size, int64_t offset = -1) {
  auto* output = request.add_outputs();
  output->set_name("FORECAST");
  SetRegion(*output->mutable_parameters(), region, byte_size, offset);
}

TEST_CASE("SharedMemoryRegistry maps regions and keeps them mapped while referenced",
          "[unit][shared_memory]") {
  ShmObject object(8192);
  REQUIRE(object.ok());
  SharedMemoryRegistry registry;
  // A region that starts inside a page: the mapping starts at its page.
  REQUIRE(registry.Register("", "r", object.key(), 4100, 64).ok());
  REQUIRE(registry.size() == 1);
  object.Write(4100, {1.5f, -2.0f});
  absl::StatusOr<std::shared_ptr<const SharedMemoryRegion>> region = registry.Acquire("", "r");
  REQUIRE(region.ok());
  absl::StatusOr<char*> slice = (*region)->Slice("input 'X'", 0, 8);
  REQUIRE(slice.ok());
  float values[2];
  std::memcpy(values, *slice, sizeof(values));
  REQUIRE(values[0] == 1.5f);
  REQUIRE(values[1] == -2.0f);

  // Unregistered while referenced: gone from the registry, still mapped for the holder.
  REQUIRE(registry.Unregister("", "r").ok());
  REQUIRE(registry.size() == 0);
  REQUIRE(registry.Acquire("", "r").status().code() == absl::StatusCode::kNotFound);
  object.Write(4104, {7.0f});
  std::memcpy(values, *slice, sizeof(values));
  REQUIRE(values[1] == 7.0f);
  region->reset();

  // Bounds, sizes and names.
  const absl::Status beyond = registry.Register("", "big", object.key(), 8000, 1024);
  REQUIRE(beyond.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(beyond.message(), "shared-memory region 'big'"));
  REQUIRE(absl::StrContains(beyond.message(), "of 8192 bytes"));
  REQUIRE(registry.Register("", "zero", object.key(), 0, 0).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.Register("", "neg", object.key(), -1, 8).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.Register("", "", object.key(), 0, 8).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.Register("", "nokey", "/forecastd-test-no-such-key", 0, 8).code() ==
          absl::StatusCode::kNotFound);
  REQUIRE(registry.Register("", "a", object.key(), 0, 64).ok());
  REQUIRE(registry.Register("", "a", object.key(), 0, 64).code() ==
          absl::StatusCode::kAlreadyExists);
  // Another owner's names are its own.
  REQUIRE(registry.Register("other", "a", object.key(), 64, 64).ok());
  region = registry.Acquire("", "a");
  REQUIRE(region.ok());
  const absl::StatusOr<char*> outside = (*region)->Slice("input 'X'", 60, 8);
  REQUIRE(outside.status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(outside.status().message(),
                            "input 'X': 8 bytes at offset 60 do not lie inside the "
                            "shared-memory region 'a' of 64 bytes"));
  REQUIRE((*region)->Slice("input 'X'", 0, 0).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(registry.Status("", "").value().size() == 1);
  REQUIRE(registry.Status("other", "").value().size() == 1);
  REQUIRE(registry.Unregister("", "").ok());
  REQUIRE(registry.Status("", "").value().empty());
  REQUIRE(registry.Status("other", "a").ok());
}

TEST_CASE(
    "CUDA regions share the names of system regions and refuse bad handles before "
    "opening them",
    "[unit][shared_memory]") {
  ShmObject object(4096);
  REQUIRE(object.ok());
  SharedMemoryRegistry registry;
  const std::string handle(kCudaIpcHandleBytes, '\0');
  REQUIRE(registry.Register("", "a", object.key(), 0, 64).ok());
  // One namespace per owner, as Triton has it: the name is taken by the system region.
  absl::Status status = registry.RegisterCuda("", "a", handle, 0, 64);
  REQUIRE(status.code() == absl::StatusCode::kAlreadyExists);
  REQUIRE(absl::StrContains(status.message(), "shared-memory region 'a' is already registered"));
  status = registry.RegisterCuda("", "c", "short", 0, 64);
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(status.message(),
                            "shared-memory region 'c': a CUDA IPC handle has 64 bytes; got 5"));
  status = registry.RegisterCuda("", "c", handle, 0, 0);
  REQUIRE(status.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(absl::StrContains(status.message(), "byte_size must be positive"));
  REQUIRE(registry.RegisterCuda("", "", handle, 0, 64).code() ==
          absl::StatusCode::kInvalidArgument);
  // A handle of no allocation of this process's GPUs (or a build or host without them) is never
  // registered.
  status = registry.RegisterCuda("", "c", handle, 0, 64);
  INFO(status.ToString());
  REQUIRE_FALSE(status.ok());
  REQUIRE(absl::StrContains(status.message(), "shared-memory region 'c'"));
  REQUIRE(registry.CudaStatus("", "").value().empty());
  REQUIRE(registry.CudaStatus("", "c").status().code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.UnregisterCuda("", "c").code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.UnregisterCuda("", "").ok());
  // The system region is not a CUDA one, and unregistering every CUDA region leaves it.
  REQUIRE(registry.UnregisterCuda("", "a").code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.AcquireAny("", "a").value().system != nullptr);
  REQUIRE(registry.AcquireAny("", "c").status().code() == absl::StatusCode::kNotFound);
  REQUIRE(registry.size() == 1);
}

TEST_CASE("KServe CUDA shared-memory calls answer for the caller's regions",
          "[integration][kserve][shared_memory]") {
  Env env;
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryStatusResponse response;
    REQUIRE(env.stub->CudaSharedMemoryStatus(&context, {}, &response).ok());
    REQUIRE(response.regions().empty());
  }
  const auto register_region = [&env](const std::string& handle, int64_t device_id) {
    grpc::ClientContext context;
    inference::CudaSharedMemoryRegisterRequest request;
    request.set_name("gpu_in");
    request.set_raw_handle(handle);
    request.set_device_id(device_id);
    request.set_byte_size(64);
    inference::CudaSharedMemoryRegisterResponse response;
    return env.stub->CudaSharedMemoryRegister(&context, request, &response);
  };
  RequireError(register_region("short", 0), grpc::StatusCode::INVALID_ARGUMENT,
               "shared-memory region 'gpu_in': a CUDA IPC handle has 64 bytes; got 5");
  RequireError(register_region(std::string(kCudaIpcHandleBytes, '\0'), -1),
               grpc::StatusCode::NOT_FOUND, "there is no GPU -1");
  {
    grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterRequest request;
    request.set_name("gpu_in");
    inference::CudaSharedMemoryUnregisterResponse response;
    RequireError(env.stub->CudaSharedMemoryUnregister(&context, request, &response),
                 grpc::StatusCode::NOT_FOUND, "shared-memory region 'gpu_in' is not registered");
  }
  {
    // Unregistering every CUDA region is OK with none, as perf_analyzer asks at exit.
    grpc::ClientContext context;
    inference::CudaSharedMemoryUnregisterResponse response;
    REQUIRE(env.stub->CudaSharedMemoryUnregister(&context, {}, &response).ok());
  }
}

TEST_CASE("KServe ModelInfer reads inputs from and writes outputs to system shared memory",
          "[integration][kserve][shared_memory]") {
  Env env;
  const int64_t rows = 3;
  const std::vector<float> input = testing::RandomWindows(rows, T, 41);
  const int64_t in_bytes = rows * T * F * 4;
  const int64_t out_bytes = rows * P * 1 * 4;
  inference::ModelInferResponse ordinary;
  REQUIRE(env.Infer(RawRequest("gru", input, rows), &ordinary).ok());
  REQUIRE(ordinary.raw_output_contents_size() == 1);
  const std::vector<float> expected = Floats(ordinary.raw_output_contents(0));

  // One object holds both regions, as perf_analyzer lays them out.
  ShmObject object(4096);
  REQUIRE(object.ok());
  const int64_t in_offset = 16;  // into the input region
  object.Write(static_cast<size_t>(in_offset), input);
  REQUIRE(Register(env, "in", object.key(), 0, 1024).ok());
  REQUIRE(Register(env, "out", object.key(), 1024, 1024).ok());

  SECTION("input and output in shared memory") {
    inference::ModelInferRequest request = ShmRequest(rows, "in", in_bytes, in_offset);
    AddShmOutput(request, "out", 512, 8);
    inference::ModelInferResponse response;
    const grpc::Status status = Infer(env, request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    // One empty raw entry per output in shared memory, as Triton sends and tritonclient reads.
    REQUIRE(response.raw_output_contents_size() == 1);
    REQUIRE(response.raw_output_contents(0).empty());
    REQUIRE(response.outputs_size() == 1);
    const auto& parameters = response.outputs(0).parameters();
    REQUIRE(parameters.at("shared_memory_region").string_param() == "out");
    REQUIRE(parameters.at("shared_memory_byte_size").int64_param() == out_bytes);
    REQUIRE(parameters.at("shared_memory_offset").int64_param() == 8);
    REQUIRE(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                 response.outputs(0).shape().end()) ==
            std::vector<int64_t>{rows, P, 1});
    REQUIRE(object.Read(1024 + 8, static_cast<size_t>(rows * P)) == expected);
  }
  SECTION("input in shared memory, forecast in the reply") {
    inference::ModelInferResponse response;
    REQUIRE(Infer(env, ShmRequest(rows, "in", in_bytes, in_offset), &response).ok());
    REQUIRE(response.raw_output_contents_size() == 1);
    REQUIRE(Floats(response.raw_output_contents(0)) == expected);
  }
  SECTION("input in the request, forecast in shared memory") {
    inference::ModelInferRequest request = RawRequest("gru", input, rows);
    AddShmOutput(request, "out", out_bytes);
    inference::ModelInferResponse response;
    REQUIRE(Infer(env, request, &response).ok());
    REQUIRE(response.raw_output_contents(0).empty());
    REQUIRE_FALSE(response.outputs(0).parameters().contains("shared_memory_offset"));
    REQUIRE(object.Read(1024, static_cast<size_t>(rows * P)) == expected);
  }
}

TEST_CASE("KServe ModelStreamInfer takes tensors in system shared memory too",
          "[integration][kserve][shared_memory]") {
  Env env;
  const std::vector<float> input = testing::RandomWindows(2, T, 44);
  ShmObject object(1024);
  REQUIRE(object.ok());
  object.Write(0, input);
  REQUIRE(Register(env, "r", object.key(), 0, 1024).ok());
  grpc::ClientContext context;
  auto stream = env.stub->ModelStreamInfer(&context);
  inference::ModelInferRequest request = ShmRequest(2, "r", 2 * T * F * 4);
  AddShmOutput(request, "r", 2 * P * 4, 512);
  request.set_id("s1");
  REQUIRE(stream->Write(request));
  // A region this caller never registered: the stream answers the error and stays open.
  inference::ModelInferRequest unknown = ShmRequest(1, "nope", T * F * 4);
  unknown.set_id("s2");
  REQUIRE(stream->Write(unknown));
  REQUIRE(stream->WritesDone());
  std::vector<inference::ModelStreamInferResponse> replies(2);
  REQUIRE(stream->Read(&replies[0]));
  REQUIRE(stream->Read(&replies[1]));
  REQUIRE(stream->Finish().ok());
  int errors = 0;
  for (const auto& reply : replies) {
    if (reply.error_message().empty()) {
      INFO(reply.error_message());
      REQUIRE(reply.error_message().empty());
      REQUIRE(reply.infer_response()
                  .outputs(0)
                  .parameters()
                  .at("shared_memory_region")
                  .string_param() == "r");
    } else {
      REQUIRE(absl::StrContains(reply.error_message(),
                                "shared-memory region 'nope' is not registered"));
      ++errors;
    }
  }
  REQUIRE(errors == 1);
  REQUIRE(object.Read(512, 2 * P) == testing::ReferenceForward(*env.gru_v2, input, 2));
}

TEST_CASE("KServe shared-memory errors name the region", "[integration][kserve][shared_memory]") {
  Env env;
  ShmObject object(1024);
  REQUIRE(object.ok());
  const int64_t one = T * F * 4;
  object.Write(0, testing::RandomWindows(1, T, 42));
  const auto invalid = [&](const inference::ModelInferRequest& request, const std::string& part) {
    inference::ModelInferResponse response;
    RequireError(Infer(env, request, &response), grpc::StatusCode::INVALID_ARGUMENT, part);
  };

  SECTION("register") {
    RequireError(Register(env, "r", object.key(), 512, 1024), grpc::StatusCode::INVALID_ARGUMENT,
                 "shared-memory region 'r': 1024 bytes at offset 512 do not fit");
    RequireError(Register(env, "r", object.key(), 0, 0), grpc::StatusCode::INVALID_ARGUMENT,
                 "shared-memory region 'r': byte_size (0) must be positive");
    RequireError(Register(env, "r", "/forecastd-test-absent", 0, 8), grpc::StatusCode::NOT_FOUND,
                 "cannot open the shared-memory key '/forecastd-test-absent'");
    RequireError(Register(env, "r", object.key(), 0, std::numeric_limits<uint64_t>::max()),
                 grpc::StatusCode::INVALID_ARGUMENT, "below 2^63");
    REQUIRE(Register(env, "r", object.key(), 0, 256).ok());
    RequireError(Register(env, "r", object.key(), 0, 256), grpc::StatusCode::ALREADY_EXISTS,
                 "shared-memory region 'r' is already registered");
  }
  SECTION("inference") {
    REQUIRE(Register(env, "r", object.key(), 0, 256).ok());
    // Never read as an input without data: an unknown region is NOT_FOUND.
    inference::ModelInferResponse response;
    RequireError(Infer(env, ShmRequest(1, "nope", one), &response), grpc::StatusCode::NOT_FOUND,
                 "shared-memory region 'nope' is not registered");
    invalid(ShmRequest(1, "r", one, 250),
            "input 'INPUT': 32 bytes at offset 250 do not lie inside the shared-memory region "
            "'r' of 256 bytes");
    invalid(ShmRequest(1, "r", 512), "do not lie inside the shared-memory region 'r'");
    invalid(ShmRequest(1, "r", 0), "0 bytes at offset 0 do not lie inside");
    // The same checks as raw bytes: size = shape * 4.
    invalid(ShmRequest(1, "r", one - 4), "raw inputs hold 28 bytes");
    inference::ModelInferRequest no_size = ShmRequest(1, "r", one);
    no_size.mutable_inputs(0)->mutable_parameters()->erase("shared_memory_byte_size");
    invalid(no_size, "needs the parameter 'shared_memory_byte_size'");
    inference::ModelInferRequest both = ShmRequest(1, "r", one);
    both.add_raw_input_contents(std::string(static_cast<size_t>(one), '\0'));
    invalid(both, "names a shared-memory region and also carries data");
    // Non-finite values are refused, as in the request.
    object.Write(4, {std::numeric_limits<float>::quiet_NaN()});
    invalid(ShmRequest(1, "r", one), "input 'INPUT' (shared memory): ");
    object.Write(4, {0.5f});
    // An output region too small for the forecast, or outside its region.
    inference::ModelInferRequest small = ShmRequest(1, "r", one);
    AddShmOutput(small, "r", 4, 128);
    invalid(small,
            "output 'FORECAST' (shared-memory region 'r'): shared_memory_byte_size is 4 but the "
            "forecast of 1 windows takes 8 bytes per window");
    inference::ModelInferRequest outside = ShmRequest(1, "r", one);
    AddShmOutput(outside, "r", 8, 252);
    invalid(outside, "output 'FORECAST': 8 bytes at offset 252 do not lie inside");
    REQUIRE(Infer(env, ShmRequest(1, "r", one), &response).ok());
  }
}

TEST_CASE("KServe shared-memory status and unregister, one region or all",
          "[integration][kserve][shared_memory]") {
  Env env;
  ShmObject object(1024);
  REQUIRE(object.ok());
  REQUIRE(Register(env, "a", object.key(), 0, 256).ok());
  REQUIRE(Register(env, "b", object.key(), 256, 512).ok());
  inference::SystemSharedMemoryStatusResponse status;
  REQUIRE(Status(env, "", &status).ok());
  REQUIRE(status.regions_size() == 2);
  REQUIRE(status.regions().at("b").key() == object.key());
  REQUIRE(status.regions().at("b").offset() == 256);
  REQUIRE(status.regions().at("b").byte_size() == 512);
  status.Clear();
  REQUIRE(Status(env, "a", &status).ok());
  REQUIRE(status.regions_size() == 1);
  RequireError(Status(env, "c", &status), grpc::StatusCode::NOT_FOUND,
               "shared-memory region 'c' is not registered");

  REQUIRE(Unregister(env, "a").ok());
  RequireError(Unregister(env, "a"), grpc::StatusCode::NOT_FOUND,
               "shared-memory region 'a' is not registered");
  status.Clear();
  REQUIRE(Status(env, "", &status).ok());
  REQUIRE(status.regions_size() == 1);
  REQUIRE(Register(env, "a", object.key(), 0, 256).ok());  // the name is free again
  REQUIRE(Unregister(env, "").ok());
  status.Clear();
  REQUIRE(Status(env, "", &status).ok());
  REQUIRE(status.regions_size() == 0);
  REQUIRE(env.service->shared_memory().size() == 0);
}

TEST_CASE("KServe shared-memory regions belong to the caller that registered them",
          "[integration][kserve][shared_memory]") {
  Env env(OwnedOptions());
  ShmObject object(1024);
  REQUIRE(object.ok());
  const std::vector<float> input = testing::RandomWindows(1, T, 43);
  object.Write(0, input);
  REQUIRE(Register(env, "mine", object.key(), 0, 512, "alice").ok());
  // Bob cannot see, use or unregister it: to him it does not exist.
  inference::SystemSharedMemoryStatusResponse status;
  REQUIRE(Status(env, "", &status, "bob").ok());
  REQUIRE(status.regions_size() == 0);
  RequireError(Status(env, "mine", &status, "bob"), grpc::StatusCode::NOT_FOUND, "'mine'");
  inference::ModelInferResponse response;
  RequireError(Infer(env, ShmRequest(1, "mine", T * F * 4), &response, "bob"),
               grpc::StatusCode::NOT_FOUND, "shared-memory region 'mine' is not registered");
  RequireError(Unregister(env, "mine", "bob"), grpc::StatusCode::NOT_FOUND, "'mine'");
  REQUIRE(Unregister(env, "", "bob").ok());  // all of bob's: none
  // Bob may use the same name for a region of his own.
  REQUIRE(Register(env, "mine", object.key(), 512, 512, "bob").ok());

  REQUIRE(Infer(env, ShmRequest(1, "mine", T * F * 4), &response, "alice").ok());
  REQUIRE(Floats(response.raw_output_contents(0)) ==
          testing::ReferenceForward(*env.gru_v2, input, 1));
  status.Clear();
  REQUIRE(Status(env, "", &status, "alice").ok());
  REQUIRE(status.regions_size() == 1);
  REQUIRE(status.regions().at("mine").offset() == 0);
  REQUIRE(env.service->shared_memory().size() == 2);
}

}  // namespace
}  // namespace forecastd
