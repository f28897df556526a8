// Starts the real forecastd binary with TLS, mutual TLS and bearer tokens and checks what a
// client sees: TLS clients are served and plaintext ones refused; under mutual TLS a client
// without a certificate, or with one from another CA, cannot connect; bad certificate or token
// files stop the start with the file named; every method of Forecaster, Admin and KServe needs
// its role (UNAUTHENTICATED without a valid token, PERMISSION_DENIED with the wrong role) while
// health and reflection stay open; SIGHUP reloads the tokens and a bad file keeps the old
// ones; no token ever shows in the log or on /metrics; forecastctl reaches such a daemon.
// The certificates are made with the openssl command line when the test runs.
#include <signal.h>
#include <stdlib.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "client/health_client.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/client_unary_call.h"
#include "grpcpp/impl/codegen/sync_stream.h"
#include "httplib.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/access_policy.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"
#include "tests/testing/shm_object.h"
#include "tests/testing/test_certificates.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::MakeTestCertificates;
using ::forecastd::testing::SumSamples;
using ::forecastd::testing::TempDir;
using ::forecastd::testing::TestCertificates;
using HealthResponse = grpc::health::v1::HealthCheckResponse;

constexpr char kPredictToken[] = "predict-2c1d8a0f5e7b4c39";
constexpr char kTrainToken[] = "train-9f3e6b2a7d1c4e80aa";
constexpr char kAdminToken[] = "admin-5b8e1f4a2c7d9e36bb";
constexpr char kTrainAdminToken[] = "release-3e9a7c1b5d2f8a40cc";
constexpr char kWrongToken[] = "wrong-0a1b2c3d4e5f6a7b8c";

// Safety bound only: a reload shows within milliseconds.
constexpr absl::Duration kReloadBound = absl::Seconds(30);

TestCertificates Certificates(const TempDir& dir) {
  absl::StatusOr<TestCertificates> certs = MakeTestCertificates(dir.path());
  INFO(certs.status().ToString());
  REQUIRE(certs.ok());
  return *certs;
}

// Replaces `path` with `text`, mode 0600, in one rename (as an operator's editor or a
// Kubernetes Secret update does), so the daemon never reads half a file.
void WriteTokenFile(const std::string& path, const std::string& text) {
  const std::string temp = path + ".tmp";
  {
    std::ofstream out(temp, std::ios::trunc);
    out << text;
    REQUIRE(out.good());
  }
  REQUIRE(chmod(temp.c_str(), 0600) == 0);
  REQUIRE(std::rename(temp.c_str(), path.c_str()) == 0);
}

std::string StandardTokens() {
  return absl::StrCat("# roles token name\n", "predict ", kPredictToken, " dashboards\n", "train ",
                      kTrainToken, " trainer\n", "admin ", kAdminToken, " operator\n",
                      "train,admin ", kTrainAdminToken, " release\n");
}

std::unique_ptr<ForecastdDaemon> StartSecured(
    const std::string& repository, std::vector<std::string> flags,
    std::shared_ptr<grpc::ChannelCredentials> credentials = nullptr) {
  flags.insert(flags.begin(), {"--cpu-workers", "2"});
  absl::StatusOr<std::unique_ptr<ForecastdDaemon>> daemon =
      ForecastdDaemon::Start({.binary = FORECASTD_BINARY,
                              .repository = repository,
                              .extra_flags = flags,
                              .credentials = std::move(credentials)});
  INFO(daemon.status().ToString());
  REQUIRE(daemon.ok());
  return *std::move(daemon);
}

std::unique_ptr<grpc::ClientContext> TokenContext(const std::string& token) {
  std::unique_ptr<grpc::ClientContext> context = Context();
  if (!token.empty()) context->AddMetadata("authorization", absl::StrCat("Bearer ", token));
  return context;
}

// Calls `full_method` with an empty request message (every field at its default), as any
// client could, and returns the status.
grpc::Status CallWithEmptyRequest(grpc::Channel& channel, const std::string& full_method,
                                  bool server_streaming, const std::string& token) {
  std::unique_ptr<grpc::ClientContext> context = TokenContext(token);
  grpc::Slice empty("");
  const grpc::ByteBuffer request(&empty, 1);
  if (!server_streaming) {
    grpc::ByteBuffer response;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer, grpc::ByteBuffer>(
        &channel,
        grpc::internal::RpcMethod(full_method.c_str(), grpc::internal::RpcMethod::NORMAL_RPC),
        context.get(), request, &response);
  }
  std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
      grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
          &channel,
          grpc::internal::RpcMethod(full_method.c_str(),
                                    grpc::internal::RpcMethod::SERVER_STREAMING),
          context.get(), request));
  grpc::ByteBuffer message;
  while (reader->Read(&message)) {
  }
  return reader->Finish();
}

std::string ToString(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return "";
  std::string out;
  for (const grpc::Slice& s : slices)
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The services server reflection lists, asked without a token.
grpc::Status ListServicesByReflection(grpc::Channel& channel, std::string* listing) {
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + kRpcBound));
  std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
      grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
          &channel,
          grpc::internal::RpcMethod(
              "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
              grpc::internal::RpcMethod::BIDI_STREAMING),
          &context));
  // ServerReflectionRequest{list_services: ""}: field 7, length-delimited, empty.
  const std::string list_services("\x3a\x00", 2);
  grpc::Slice slice(list_services);
  REQUIRE(stream->Write(grpc::ByteBuffer(&slice, 1)));
  stream->WritesDone();
  grpc::ByteBuffer response;
  while (stream->Read(&response)) listing->append(ToString(response));
  return stream->Finish();
}

v1::ModelState GetModelState(ForecastdDaemon& daemon, const std::string& name,
                             const std::string& token) {
  v1::GetModelRequest request;
  request.set_name(name);
  v1::ModelStatus status;
  const grpc::Status rpc = daemon.admin().GetModel(TokenContext(token).get(), request, &status);
  INFO(rpc.error_message());
  REQUIRE(rpc.ok());
  return status.state();
}

bool Refused(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED;
}

// The output and /metrics hold none of the tokens.
void RequireNoTokenShown(ForecastdDaemon& daemon) {
  const std::string output = daemon.process().Output();
  const std::string metrics = Metrics(daemon);
  for (const char* token : {kPredictToken, kTrainToken, kAdminToken, kWrongToken}) {
    CAPTURE(token);
    REQUIRE(output.find(token) == std::string::npos);
    REQUIRE(metrics.find(token) == std::string::npos);
  }
}

// --- TLS

TEST_CASE("TLS: TLS clients are served, plaintext clients are refused", "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartSecured(
      repository.dir.path(), {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key},
      certs.Client());
  REQUIRE(daemon->process().Output().find("gRPC security: TLS") != std::string::npos);

  const v1::PredictRequest request = ToyRequest(2, 201);
  v1::PredictResponse response;
  const grpc::Status status = Predict(*daemon, request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()),
               Expected(*repository.toy_v2, Floats(request.inputs())));

  const absl::StatusOr<HealthResponse::ServingStatus> plaintext =
      CheckHealth(daemon->grpc_address(), "", absl::Seconds(10));
  CAPTURE(plaintext.status().ToString());
  REQUIRE(plaintext.status().code() == absl::StatusCode::kUnavailable);

  // The server's certificate names 127.0.0.1 and localhost; a client that trusts other roots
  // cannot verify it.
  grpc::SslCredentialsOptions other_roots;
  other_roots.pem_root_certs = testing::ReadTextFile(secrets.path() + "/rogue-ca.crt");
  const absl::StatusOr<HealthResponse::ServingStatus> unverified =
      CheckHealth(daemon->grpc_address(), "", absl::Seconds(10), grpc::SslCredentials(other_roots));
  REQUIRE(unverified.status().code() == absl::StatusCode::kUnavailable);
}

TEST_CASE("mTLS: only clients with a certificate from the client CA connect",
          "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartSecured(repository.dir.path(),
                   {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
                    "--tls-client-ca", certs.ca_cert},
                   certs.Client(certs.client_cert, certs.client_key));
  REQUIRE(daemon->process().Output().find("mutual TLS") != std::string::npos);

  v1::PredictResponse response;
  const grpc::Status status = Predict(*daemon, ToyRequest(1, 202), &response);
  INFO(status.error_message());
  REQUIRE(status.ok());

  struct Client {
    const char* what;
    std::shared_ptr<grpc::ChannelCredentials> credentials;
  };
  const Client refused[] = {
      {"TLS without a client certificate", certs.Client()},
      {"a certificate from an untrusted CA",
       certs.Client(certs.rogue_client_cert, certs.rogue_client_key)},
      {"plaintext", grpc::InsecureChannelCredentials()},
  };
  for (const Client& client : refused) {
    CAPTURE(client.what);
    const absl::StatusOr<HealthResponse::ServingStatus> health =
        CheckHealth(daemon->grpc_address(), "", absl::Seconds(10), client.credentials);
    CAPTURE(health.status().ToString());
    REQUIRE(health.status().code() == absl::StatusCode::kUnavailable);
    auto channel = grpc::CreateChannel(daemon->grpc_address(), client.credentials);
    const grpc::Status predict = v1::Forecaster::NewStub(channel)->Predict(
        Context(absl::Seconds(10)).get(), ToyRequest(1, 203), &response);
    REQUIRE(predict.error_code() == grpc::StatusCode::UNAVAILABLE);
  }

  // The container's health probe speaks mutual TLS when given the files, and fails without.
  const std::vector<std::string> probe = {FORECASTD_HEALTH_BINARY, "--address",
                                          daemon->grpc_address(), "--timeout-ms", "10000"};
  std::vector<std::string> with_certs = probe;
  with_certs.insert(with_certs.end(), {"--tls-ca", certs.ca_cert, "--tls-cert", certs.client_cert,
                                       "--tls-key", certs.client_key});
  absl::StatusOr<testing::RunResult> run = testing::Run(with_certs);
  REQUIRE(run.ok());
  INFO(run->output);
  REQUIRE(run->exit_code == 0);
  REQUIRE(run->output.find("SERVING") != std::string::npos);
  std::vector<std::string> without_cert = probe;
  without_cert.insert(without_cert.end(), {"--tls-ca", certs.ca_cert});
  run = testing::Run(without_cert);
  REQUIRE(run.ok());
  REQUIRE(run->exit_code == 1);
}

TEST_CASE("Bad certificate and token files stop the start and name the file",
          "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  TempDir repository;
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens, StandardTokens());
  const std::string readable = secrets.path() + "/readable-tokens";
  WriteTokenFile(readable, StandardTokens());
  REQUIRE(chmod(readable.c_str(), 0644) == 0);
  const std::string malformed = secrets.path() + "/malformed-tokens";
  WriteTokenFile(malformed, absl::StrCat("predict ", kPredictToken, "\nroot ", kAdminToken, "\n"));
  const std::string missing = secrets.path() + "/missing.pem";

  struct Case {
    std::vector<std::string> flags;
    int exit_code;
    std::vector<std::string> phrases;
  };
  const std::vector<Case> cases = {
      {{"--tls-cert", missing, "--tls-key", certs.server_key}, 1, {"--tls-cert", missing}},
      {{"--tls-cert", certs.server_cert, "--tls-key", missing}, 1, {"--tls-key", missing}},
      {{"--tls-cert", certs.server_cert, "--tls-key", certs.client_key},
       1,
       {"the key does not belong to the certificate", certs.client_key}},
      {{"--tls-cert", certs.server_key, "--tls-key", certs.server_key},
       1,
       {"no PEM certificate could be read"}},
      {{"--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--tls-client-ca", missing},
       1,
       {"--tls-client-ca", missing}},
      {{"--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--tls-client-ca",
        certs.server_key},
       1,
       {"--tls-client-ca", "no PEM certificate"}},
      {{"--tls-key", certs.server_key}, 2, {"--tls-cert and --tls-key go together"}},
      {{"--tls-client-ca", certs.ca_cert}, 2, {"--tls-client-ca needs --tls-cert"}},
      {{"--token-file", missing}, 1, {"token file", missing}},
      {{"--token-file", readable}, 1, {"mode 0644", "chmod 600"}},
      {{"--token-file", malformed}, 1, {"line 2: unknown role"}},
  };
  for (const Case& c : cases) {
    std::vector<std::string> argv = {FORECASTD_BINARY,
                                     "--grpc-address",
                                     absl::StrCat("127.0.0.1:", testing::PickFreePort()),
                                     "--metrics-address",
                                     absl::StrCat("127.0.0.1:", testing::PickFreePort()),
                                     "--http-address",
                                     "",
                                     "--model-repository",
                                     repository.path()};
    argv.insert(argv.end(), c.flags.begin(), c.flags.end());
    const absl::StatusOr<testing::RunResult> run = testing::Run(argv, kExitBound);
    REQUIRE(run.ok());
    CAPTURE(c.flags, run->output);
    REQUIRE(run->exit_code == c.exit_code);
    for (const std::string& phrase : c.phrases)
      REQUIRE(run->output.find(phrase) != std::string::npos);
    for (const char* token : {kPredictToken, kAdminToken}) {
      REQUIRE(run->output.find(token) == std::string::npos);
    }
  }
}

// --- Tokens

TEST_CASE("Tokens: every method needs its role, health and reflection stay open",
          "[integration][security]") {
  TempDir secrets;
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens, StandardTokens());
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartSecured(repository.dir.path(), {"--token-file", tokens, "--log-level", "debug"});
  grpc::Channel& channel = *daemon->channel();

  // A token of each role, and one whose roles do not include it.
  const auto token_for = [](Role role) {
    return role == Role::kPredict ? kPredictToken
           : role == Role::kTrain ? kTrainToken
                                  : kAdminToken;
  };
  const auto token_without = [](Role role) {
    return role == Role::kPredict ? kTrainToken
           : role == Role::kTrain ? kAdminToken
                                  : kPredictToken;
  };
  const google::protobuf::ServiceDescriptor* services[] = {
      v1::PredictRequest::descriptor()->file()->FindServiceByName("Forecaster"),
      v1::ListModelsRequest::descriptor()->file()->FindServiceByName("Admin"),
      inference::ModelInferRequest::descriptor()->file()->FindServiceByName("GRPCInferenceService"),
  };
  int guarded = 0;
  for (const google::protobuf::ServiceDescriptor* service : services) {
    REQUIRE(service != nullptr);
    for (int i = 0; i < service->method_count(); ++i) {
      const google::protobuf::MethodDescriptor& m = *service->method(i);
      const std::string method = absl::StrCat("/", service->full_name(), "/", m.name());
      const bool streaming = m.server_streaming();
      CAPTURE(method);
      const MethodAccess access = AccessFor(method);
      REQUIRE(access.kind != MethodAccess::Kind::kUnknown);
      if (access.kind == MethodAccess::Kind::kOpen) {
        REQUIRE(CallWithEmptyRequest(channel, method, streaming, "").ok());
        continue;
      }
      ++guarded;
      grpc::Status status = CallWithEmptyRequest(channel, method, streaming, "");
      CAPTURE(status.error_message());
      REQUIRE(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      REQUIRE(status.error_message().find("needs a bearer token") != std::string::npos);
      status = CallWithEmptyRequest(channel, method, streaming, kWrongToken);
      REQUIRE(status.error_code() == grpc::StatusCode::UNAUTHENTICATED);
      REQUIRE(status.error_message() == "the bearer token is not valid");
      status = CallWithEmptyRequest(channel, method, streaming, token_without(access.role));
      REQUIRE(status.error_code() == grpc::StatusCode::PERMISSION_DENIED);
      REQUIRE(status.error_message().find(
                  absl::StrCat("needs the role '", RoleName(access.role))) != std::string::npos);
      // With the right role the call gets past authentication (an empty request is then
      // refused for what it is, or served).
      status = CallWithEmptyRequest(channel, method, streaming, token_for(access.role));
      REQUIRE_FALSE(Refused(status.error_code()));
    }
  }
  REQUIRE(guarded == 37);

  // The right roles do the real work.
  const v1::PredictRequest request = ToyRequest(2, 204);
  v1::PredictResponse response;
  grpc::Status status =
      daemon->forecaster().Predict(TokenContext(kPredictToken).get(), request, &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireClose(Floats(response.forecasts()),
               Expected(*repository.toy_v2, Floats(request.inputs())));
  RequireError(daemon->forecaster().Predict(TokenContext(kAdminToken).get(), request, &response),
               grpc::StatusCode::PERMISSION_DENIED,
               "/forecastd.v1.Forecaster/Predict needs the role 'predict'");

  const ModelConfig config = TrainedConfig("fresh");
  v1::TrainResponse train;
  status = daemon->forecaster().Train(TokenContext(kTrainToken).get(),
                                      TrainRequest("fresh", &config, Training(1)), &train);
  INFO(status.error_message());
  REQUIRE(status.ok());
  RequireError(daemon->forecaster().Train(TokenContext(kPredictToken).get(),
                                          TrainRequest("fresh2", &config, Training(1)), &train),
               grpc::StatusCode::PERMISSION_DENIED, "needs the role 'train'");
  // Promoting the result changes what serves: that is the admin role's.
  const ModelConfig promoted_config = TrainedConfig("fresh3");
  v1::TrainRequest promoting = TrainRequest("fresh3", &promoted_config, Training(1));
  promoting.set_promote(true);
  RequireError(daemon->forecaster().Train(TokenContext(kTrainToken).get(), promoting, &train),
               grpc::StatusCode::PERMISSION_DENIED, "Train with promote needs the role 'admin'");
  status = daemon->forecaster().Train(TokenContext(kTrainAdminToken).get(), promoting, &train);
  INFO(status.error_message());
  REQUIRE(status.ok());

  v1::UnloadModelRequest unload;
  unload.set_name("quant");
  v1::ModelStatus model;
  RequireError(daemon->admin().UnloadModel(TokenContext(kPredictToken).get(), unload, &model),
               grpc::StatusCode::PERMISSION_DENIED, "needs the role 'admin'");
  status = daemon->admin().UnloadModel(TokenContext(kAdminToken).get(), unload, &model);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(model.state() == v1::MODEL_UNLOADED);

  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  inference::ModelMetadataRequest metadata_request;
  metadata_request.set_name("toy");
  inference::ModelMetadataResponse metadata;
  REQUIRE(
      kserve->ModelMetadata(TokenContext(kPredictToken).get(), metadata_request, &metadata).ok());
  REQUIRE(metadata.name() == "toy");
  inference::RepositoryModelLoadRequest load;
  load.set_model_name("quant");
  inference::RepositoryModelLoadResponse loaded;
  RequireError(kserve->RepositoryModelLoad(TokenContext(kPredictToken).get(), load, &loaded),
               grpc::StatusCode::PERMISSION_DENIED, "needs the role 'admin'");

  // A malformed header is no token.
  auto basic = Context();
  basic->AddMetadata("authorization", absl::StrCat("Basic ", kPredictToken));
  RequireError(daemon->forecaster().Predict(basic.get(), request, &response),
               grpc::StatusCode::UNAUTHENTICATED, "not 'Bearer <token>'");

  // Health and reflection need nothing.
  const absl::StatusOr<HealthResponse::ServingStatus> health =
      CheckHealth(daemon->grpc_address(), "forecastd.v1.Forecaster", absl::Seconds(10));
  REQUIRE(health.ok());
  REQUIRE(*health == HealthResponse::SERVING);
  std::string listing;
  status = ListServicesByReflection(channel, &listing);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(listing.find("forecastd.v1.Forecaster") != std::string::npos);
  REQUIRE(listing.find("inference.GRPCInferenceService") != std::string::npos);

  // Refusals are counted by reason and logged by the token's name, never by the token.
  const std::string metrics = Metrics(*daemon);
  for (const char* reason :
       {"missing_token", "invalid_token", "permission_denied", "malformed_header"}) {
    CAPTURE(reason);
    REQUIRE(SumSamples(metrics, "forecastd_auth_failures_total", {{"reason", reason}}).sum >= 1);
  }
  REQUIRE(daemon->process().Output().find("auth: refused") != std::string::npos);
  RequireNoTokenShown(*daemon);
}

TEST_CASE("Tokens: shared-memory regions belong to the token that registered them",
          "[integration][security]") {
  constexpr char kOtherPredictToken[] = "analyst-7d2e9a4c1b6f3e58dd";
  TempDir secrets;
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens,
                 absl::StrCat(StandardTokens(), "predict ", kOtherPredictToken, " analysts\n"));
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartSecured(repository.dir.path(), {"--token-file", tokens});
  auto kserve = inference::GRPCInferenceService::NewStub(daemon->channel());
  testing::ShmObject object(4096);
  REQUIRE(object.ok());

  inference::SystemSharedMemoryRegisterRequest region;
  region.set_name("inputs");
  region.set_key(object.key());
  region.set_byte_size(1024);
  inference::SystemSharedMemoryRegisterResponse registered;
  RequireError(kserve->SystemSharedMemoryRegister(TokenContext("").get(), region, &registered),
               grpc::StatusCode::UNAUTHENTICATED, "bearer token");
  RequireError(
      kserve->SystemSharedMemoryRegister(TokenContext(kTrainToken).get(), region, &registered),
      grpc::StatusCode::PERMISSION_DENIED, "needs the role 'predict'");
  const grpc::Status status =
      kserve->SystemSharedMemoryRegister(TokenContext(kPredictToken).get(), region, &registered);
  INFO(status.error_message());
  REQUIRE(status.ok());

  // Another token with the same role neither sees nor unregisters it...
  inference::SystemSharedMemoryStatusResponse seen;
  REQUIRE(kserve->SystemSharedMemoryStatus(TokenContext(kOtherPredictToken).get(), {}, &seen).ok());
  REQUIRE(seen.regions_size() == 0);
  inference::SystemSharedMemoryUnregisterRequest unregister;
  unregister.set_name("inputs");
  inference::SystemSharedMemoryUnregisterResponse unregistered;
  RequireError(kserve->SystemSharedMemoryUnregister(TokenContext(kOtherPredictToken).get(),
                                                    unregister, &unregistered),
               grpc::StatusCode::NOT_FOUND, "shared-memory region 'inputs' is not registered");
  // ...and may register its own under the same name.
  REQUIRE(
      kserve
          ->SystemSharedMemoryRegister(TokenContext(kOtherPredictToken).get(), region, &registered)
          .ok());
  // The owner still has its region.
  seen.Clear();
  REQUIRE(kserve->SystemSharedMemoryStatus(TokenContext(kPredictToken).get(), {}, &seen).ok());
  REQUIRE(seen.regions_size() == 1);
  REQUIRE(seen.regions().at("inputs").key() == object.key());
  REQUIRE(kserve
              ->SystemSharedMemoryUnregister(TokenContext(kPredictToken).get(), unregister,
                                             &unregistered)
              .ok());
}

TEST_CASE("Tokens: SIGHUP adds and removes tokens, a bad file keeps the old ones",
          "[integration][security]") {
  TempDir secrets;
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens,
                 absl::StrCat("predict ", kPredictToken, " old\npredict ", kTrainToken, " kept\n"));
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartSecured(repository.dir.path(), {"--token-file", tokens, "--log-level", "debug"});
  const v1::PredictRequest request = ToyRequest(1, 205);
  const auto predict = [&](const char* token) {
    v1::PredictResponse response;
    return daemon->forecaster().Predict(TokenContext(token).get(), request, &response);
  };
  REQUIRE(predict(kPredictToken).ok());
  REQUIRE(predict(kTrainToken).ok());
  REQUIRE(predict(kAdminToken).error_code() == grpc::StatusCode::UNAUTHENTICATED);

  // Add kAdminToken, remove kPredictToken.
  WriteTokenFile(tokens,
                 absl::StrCat("predict ", kTrainToken, " kept\npredict ", kAdminToken, " new\n"));
  REQUIRE(daemon->process().Signal(SIGHUP));
  absl::Time give_up = absl::Now() + kReloadBound;
  while (!predict(kAdminToken).ok() && absl::Now() < give_up)
    absl::SleepFor(absl::Milliseconds(20));
  REQUIRE(predict(kAdminToken).ok());
  RequireError(predict(kPredictToken), grpc::StatusCode::UNAUTHENTICATED,
               "the bearer token is not valid");
  REQUIRE(predict(kTrainToken).ok());

  // A bad file is refused as a whole: the tokens in force stay, including the one it drops.
  WriteTokenFile(tokens,
                 absl::StrCat("predict ", kPredictToken, " back\nroot ", kWrongToken, "\n"));
  REQUIRE(daemon->process().Signal(SIGHUP));
  give_up = absl::Now() + kReloadBound;
  while (daemon->process().Output().find("token reload failed") == std::string::npos &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  const std::string output = daemon->process().Output();
  CAPTURE(output);
  REQUIRE(output.find("token reload failed, the 2 tokens read before stay in force") !=
          std::string::npos);
  REQUIRE(output.find("line 2: unknown role") != std::string::npos);
  REQUIRE(predict(kAdminToken).ok());
  REQUIRE(predict(kTrainToken).ok());
  REQUIRE(predict(kPredictToken).error_code() == grpc::StatusCode::UNAUTHENTICATED);
  REQUIRE(daemon->process().Running());
  RequireNoTokenShown(*daemon);
}

// --- forecastctl

TEST_CASE("KServe REST on the daemon serves HTTPS with the gRPC port's certificate and tokens",
          "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens, StandardTokens());
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon = StartSecured(
      repository.dir.path(),
      {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key, "--token-file", tokens},
      certs.Client());
  REQUIRE(daemon->http_port() > 0);
  httplib::SSLClient rest("127.0.0.1", daemon->http_port());
  rest.set_ca_cert_path(certs.ca_cert.c_str());
  rest.enable_server_certificate_verification(true);
  rest.set_read_timeout(30, 0);
  const auto bearer = [](const char* token) {
    return httplib::Headers{{"Authorization", absl::StrCat("Bearer ", token)}};
  };
  const auto status_of = [](const httplib::Result& result) {
    REQUIRE(result);
    INFO(result->body);
    return result->status;
  };

  // Health stays open, as over gRPC; the rest needs the gRPC method's role.
  REQUIRE(status_of(rest.Get("/v2/health/ready")) == 200);
  const httplib::Result anonymous = rest.Get("/v2/models/toy");
  REQUIRE(status_of(anonymous) == 401);
  REQUIRE(absl::StrContains(anonymous->body, "bearer token"));
  REQUIRE(status_of(rest.Get("/v2/models/toy", bearer(kTrainToken))) == 403);
  REQUIRE(status_of(rest.Get("/v2/models/toy", bearer(kPredictToken))) == 200);
  REQUIRE(status_of(rest.Post("/v2/repository/models/toy/unload", bearer(kPredictToken), "",
                              "application/json")) == 403);
  REQUIRE(status_of(rest.Post("/v2/repository/models/toy/unload", bearer(kAdminToken), "",
                              "application/json")) == 200);
  // The refusals are counted with gRPC's.
  const std::string metrics = Metrics(*daemon);
  REQUIRE(SumSamples(metrics, "forecastd_auth_failures_total", {{"reason", "missing_token"}}).sum ==
          1);
  REQUIRE(
      SumSamples(metrics, "forecastd_auth_failures_total", {{"reason", "permission_denied"}}).sum ==
      2);
  RequireNoTokenShown(*daemon);

  // Plain HTTP gets no answer from the HTTPS port.
  httplib::Client plain("127.0.0.1", daemon->http_port());
  REQUIRE_FALSE(plain.Get("/v2/health/ready"));
}

TEST_CASE("forecastctl reaches a daemon with mutual TLS and tokens", "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens, StandardTokens());
  const std::string predict_token = secrets.path() + "/predict-token";
  WriteTokenFile(predict_token, absl::StrCat(kPredictToken, "\n"));
  Repository repository;
  std::unique_ptr<ForecastdDaemon> daemon =
      StartSecured(repository.dir.path(),
                   {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
                    "--tls-client-ca", certs.ca_cert, "--token-file", tokens},
                   certs.Client(certs.client_cert, certs.client_key));

  const std::vector<std::string> tls = {"--tls-ca",        certs.ca_cert, "--tls-cert",
                                        certs.client_cert, "--tls-key",   certs.client_key};
  const auto forecastctl = [&](std::vector<std::string> args, bool with_tls = true) {
    std::vector<std::string> argv = {FORECASTCTL_BINARY, "--address", daemon->grpc_address(),
                                     "--timeout", "30"};
    if (with_tls) argv.insert(argv.end(), tls.begin(), tls.end());
    argv.insert(argv.end(), args.begin(), args.end());
    absl::StatusOr<testing::RunResult> run = testing::Run(argv, kExitBound);
    REQUIRE(run.ok());
    return *run;
  };

  testing::RunResult run = forecastctl({"--token-file", predict_token, "models", "list"});
  CAPTURE(run.output);
  REQUIRE(run.exit_code == 0);
  REQUIRE(run.output.find("toy") != std::string::npos);

  run = forecastctl({"models", "list"});
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.output.find("UNAUTHENTICATED") != std::string::npos);

  run = forecastctl({"--token-file", predict_token, "models", "unload", "toy"});
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.output.find("PERMISSION_DENIED") != std::string::npos);

  run = forecastctl({"--token-file", predict_token, "status"}, /*with_tls=*/false);
  REQUIRE(run.exit_code == 1);
  REQUIRE(run.output.find("UNAVAILABLE") != std::string::npos);

  // The token may come from the environment instead.
  REQUIRE(setenv("FORECASTD_TOKEN", kAdminToken, 1) == 0);
  run = forecastctl({"models", "unload", "quant"});
  unsetenv("FORECASTD_TOKEN");
  REQUIRE(run.exit_code == 0);
  REQUIRE(GetModelState(*daemon, "quant", kPredictToken) == v1::MODEL_UNLOADED);
}

TEST_CASE("Across daemons: the coordinator reaches its workers over mutual TLS with a train token",
          "[integration][security]") {
  TempDir secrets;
  const TestCertificates certs = Certificates(secrets);
  const std::string tokens = secrets.path() + "/tokens";
  WriteTokenFile(tokens, StandardTokens());
  Repository worker_repository;
  std::unique_ptr<ForecastdDaemon> worker =
      StartSecured(worker_repository.dir.path(),
                   {"--tls-cert", certs.server_cert, "--tls-key", certs.server_key,
                    "--tls-client-ca", certs.ca_cert, "--token-file", tokens},
                   certs.Client(certs.client_cert, certs.client_key));
  const std::string train_token = secrets.path() + "/train-token";
  const std::string predict_token = secrets.path() + "/predict-token";
  WriteTokenFile(train_token, absl::StrCat(kTrainToken, "\n"));
  WriteTokenFile(predict_token, absl::StrCat(kPredictToken, "\n"));

  struct Coordinator {
    const char* what;
    std::vector<std::string> flags;
    grpc::StatusCode code;
    const char* says;
  };
  const Coordinator coordinators[] = {
      // Let in (TLS, its certificate, a train token): the worker answered, and what stops the
      // job is that ranks across daemons train on GPUs, which this host has none of.
      {"a client certificate and a train token",
       {"--train-worker-ca", certs.ca_cert, "--train-worker-cert", certs.client_cert,
        "--train-worker-key", certs.client_key, "--train-worker-token-file", train_token},
       grpc::StatusCode::INVALID_ARGUMENT,
       "trains on GPUs"},
      {"no client certificate",
       {"--train-worker-ca", certs.ca_cert, "--train-worker-token-file", train_token},
       grpc::StatusCode::UNAVAILABLE,
       "cannot be reached"},
      {"a token without the train role",
       {"--train-worker-ca", certs.ca_cert, "--train-worker-cert", certs.client_cert,
        "--train-worker-key", certs.client_key, "--train-worker-token-file", predict_token},
       grpc::StatusCode::PERMISSION_DENIED,
       "needs the role 'train'"},
  };
  const ModelConfig config = TrainedConfig("spread");
  for (const Coordinator& c : coordinators) {
    CAPTURE(c.what);
    Repository repository;
    std::unique_ptr<ForecastdDaemon> coordinator = StartSecured(repository.dir.path(), c.flags);
    v1::TrainingConfig training = Training(1);
    training.add_workers()->set_address(worker->grpc_address());
    v1::TrainResponse train;
    const grpc::Status status = coordinator->forecaster().Train(
        Context().get(), TrainRequest("spread", &config, training), &train);
    CAPTURE(status.error_message());
    REQUIRE(status.error_code() == c.code);
    REQUIRE(absl::StrContains(status.error_message(), c.says));
    if (c.code != grpc::StatusCode::INVALID_ARGUMENT) {
      REQUIRE(absl::StrContains(status.error_message(),
                                absl::StrCat("training worker ", worker->grpc_address())));
    }
  }
}

}  // namespace
}  // namespace forecastd::api_test
