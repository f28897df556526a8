// ModelStreamInfer. First the stream reactor (server/kserve_stream.h) alone, behind a scripted
// dispatch that holds each request until the test answers it: answers go out in the order they
// are given, each with its request's id, errors as error_message, a burst of them in full; the
// stream ends with OK on the client's half-close, ends once what is in flight is answered when
// the client cancels, and ends with Close's status when the server drains. Then KServeService's
// stream over a real registry (tests/testing/kserve_env.h): several requests in flight on one
// stream answer exactly what ModelInfer answers, a bad request gets its error while the stream
// goes on, and a request with a sequence_id is refused on its own.
#include "server/kserve_stream.h"

#include <chrono>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server_builder.h"
#include "inference/grpc_service.grpc.pb.h"
#include "server/kserve_service.h"
#include "tests/testing/catch.h"
#include "tests/testing/kserve_env.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using ClientStream =
    grpc::ClientReaderWriter<inference::ModelInferRequest, inference::ModelStreamInferResponse>;

// A safety bound: every wait below ends far sooner on a healthy run.
constexpr absl::Duration kBound = absl::Seconds(60);

std::unique_ptr<grpc::ClientContext> StreamContext() {
  auto context = std::make_unique<grpc::ClientContext>();
  context->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  return context;
}

inference::ModelInferRequest WithId(inference::ModelInferRequest request, const std::string& id) {
  request.set_id(id);
  return request;
}

// --- The reactor alone

// A service whose ModelStreamInfer is a KServeInferStream with a dispatch that keeps every
// request until the test answers it.
class ScriptedStreamService final
    : public inference::GRPCInferenceService::WithCallbackMethod_ModelStreamInfer<
          inference::GRPCInferenceService::Service> {
 public:
  struct Held {
    std::shared_ptr<StreamInferCall> call;
    InferReply reply;
  };

  grpc::ServerBidiReactor<inference::ModelInferRequest, inference::ModelStreamInferResponse>*
  ModelStreamInfer(grpc::CallbackServerContext* /*context*/) override {
    return KServeInferStream::Start(
        streams_, [this](std::shared_ptr<StreamInferCall> call, InferReply reply) {
          absl::MutexLock lock(&mu_);
          held_.push_back({std::move(call), std::move(reply)});
        });
  }

  // The requests dispatched so far, taken once there are `n` of them; empty after kBound.
  std::vector<Held> Take(size_t n) {
    absl::MutexLock lock(&mu_);
    const auto enough = [this, n]() ABSL_SHARED_LOCKS_REQUIRED(mu_) { return held_.size() >= n; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&enough), kBound)) return {};
    return std::exchange(held_, {});
  }

  // Whether every stream has ended (OnDone) within kBound.
  bool AllStreamsDone() {
    const absl::Time give_up = absl::Now() + kBound;
    while (streams_->open_streams() > 0) {
      if (absl::Now() > give_up) return false;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return true;
  }

  KServeStreams& streams() { return *streams_; }

 private:
  const std::shared_ptr<KServeStreams> streams_ = std::make_shared<KServeStreams>();
  absl::Mutex mu_;
  std::vector<Held> held_ ABSL_GUARDED_BY(mu_);
};

// Answers a held request with its id echoed and `value` as its one raw output.
void AnswerWith(ScriptedStreamService::Held& held, const std::string& value) {
  held.call->response.set_id(held.call->request.id());
  held.call->response.add_raw_output_contents(value);
  held.reply(absl::OkStatus());
}

// Writes n requests with ids "0" .. "n-1".
void WriteNumbered(ClientStream& stream, int n) {
  for (int i = 0; i < n; ++i) {
    inference::ModelInferRequest request;
    request.set_id(absl::StrCat(i));
    REQUIRE(stream.Write(request));
  }
}

struct ScriptedEnv {
  ScriptedEnv() {
    int port = 0;
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.RegisterService(&service);
    server = builder.BuildAndStart();
    REQUIRE(server != nullptr);
    stub = inference::GRPCInferenceService::NewStub(
        grpc::CreateChannel(absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  }
  ~ScriptedEnv() {
    service.streams().CloseAll(absl::UnavailableError("test over"));
    server->Shutdown();
  }

  ScriptedStreamService service;
  std::unique_ptr<grpc::Server> server;
  std::unique_ptr<inference::GRPCInferenceService::Stub> stub;
};

TEST_CASE("A stream writes answers in the order they are given, each with its request's id",
          "[integration][kserve][stream]") {
  ScriptedEnv env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  constexpr int kRequests = 6;
  for (int i = 0; i < kRequests; ++i) {
    inference::ModelInferRequest request;
    request.set_id(absl::StrCat("r", i));
    request.set_model_name("m");
    REQUIRE(stream->Write(request));
  }
  std::vector<ScriptedStreamService::Held> held = env.service.Take(kRequests);
  REQUIRE(held.size() == kRequests);
  for (int i = 0; i < kRequests; ++i) REQUIRE(held[i].call->request.id() == absl::StrCat("r", i));

  // Answered last to first, one of them with an error; the next answer is given only once the
  // one before has arrived, so the order on the wire is the order given.
  for (int i = kRequests - 1; i >= 0; --i) {
    if (i == 2) {
      held[i].reply(absl::InvalidArgumentError("request r2 is bad"));
    } else {
      AnswerWith(held[i], absl::StrCat("v", i));
    }
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    REQUIRE(reply.infer_response().id() == absl::StrCat("r", i));
    if (i == 2) {
      REQUIRE(reply.error_message() == "request r2 is bad");
      REQUIRE(reply.infer_response().model_name() == "m");
    } else {
      REQUIRE(reply.error_message().empty());
      REQUIRE(reply.infer_response().raw_output_contents(0) == absl::StrCat("v", i));
    }
  }
  REQUIRE(stream->WritesDone());
  inference::ModelStreamInferResponse extra;
  REQUIRE_FALSE(stream->Read(&extra));
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(env.service.AllStreamsDone());
}

TEST_CASE("Answers given at once from many threads are each written once",
          "[integration][kserve][stream]") {
  ScriptedEnv env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  constexpr int kRequests = 64;
  WriteNumbered(*stream, kRequests);
  // Half-closed before any answer: the stream still waits for all of them.
  REQUIRE(stream->WritesDone());
  std::vector<ScriptedStreamService::Held> held = env.service.Take(kRequests);
  REQUIRE(held.size() == kRequests);
  // Dispatched in the order sent.
  for (int i = 0; i < kRequests; ++i) REQUIRE(held[i].call->request.id() == absl::StrCat(i));
  std::vector<std::thread> answerers;
  for (int t = 0; t < 4; ++t) {
    answerers.emplace_back([&held, t] {
      for (int i = t; i < kRequests; i += 4) AnswerWith(held[i], absl::StrCat("v", i));
    });
  }
  std::map<std::string, std::string> answers;  // id -> value
  inference::ModelStreamInferResponse reply;
  while (stream->Read(&reply)) {
    answers[reply.infer_response().id()] = reply.infer_response().raw_output_contents(0);
  }
  for (std::thread& t : answerers) t.join();
  REQUIRE(answers.size() == kRequests);
  for (int i = 0; i < kRequests; ++i) REQUIRE(answers[absl::StrCat(i)] == absl::StrCat("v", i));
  REQUIRE(stream->Finish().ok());
  REQUIRE(env.service.AllStreamsDone());
}

TEST_CASE("A burst of answers queued behind a write all arrive, in the order given",
          "[integration][kserve][stream]") {
  // Answers queued behind the one being written go out with gRPC's buffer hint, the last one
  // without it. All are read before the half-close, so one held back would stall the test
  // rather than be flushed by the stream's end.
  ScriptedEnv env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  constexpr int kRequests = 256;
  WriteNumbered(*stream, kRequests);
  std::vector<ScriptedStreamService::Held> held = env.service.Take(kRequests);
  REQUIRE(held.size() == kRequests);
  for (int i = 0; i < kRequests; ++i) AnswerWith(held[i], absl::StrCat("v", i));
  for (int i = 0; i < kRequests; ++i) {
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    REQUIRE(reply.infer_response().id() == absl::StrCat(i));
    REQUIRE(reply.infer_response().raw_output_contents(0) == absl::StrCat("v", i));
  }
  // And a lone answer after the burst.
  inference::ModelInferRequest last;
  last.set_id("last");
  REQUIRE(stream->Write(last));
  held = env.service.Take(1);
  REQUIRE(held.size() == 1);
  AnswerWith(held[0], "alone");
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  REQUIRE(reply.infer_response().id() == "last");
  REQUIRE(stream->WritesDone());
  REQUIRE_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(env.service.AllStreamsDone());
}

TEST_CASE("A cancelled stream ends once its requests in flight are answered",
          "[integration][kserve][stream]") {
  ScriptedEnv env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  inference::ModelInferRequest request;
  request.set_id("held");
  REQUIRE(stream->Write(request));
  std::vector<ScriptedStreamService::Held> held = env.service.Take(1);
  REQUIRE(held.size() == 1);
  context->TryCancel();
  REQUIRE(stream->Finish().error_code() == grpc::StatusCode::CANCELLED);
  // The request in flight points into the stream's call: the stream stays until it is answered.
  REQUIRE(env.service.streams().open_streams() == 1);
  AnswerWith(held[0], "late");
  REQUIRE(env.service.AllStreamsDone());
}

TEST_CASE("Closing the streams ends each with Close's status after its answers",
          "[integration][kserve][stream]") {
  ScriptedEnv env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  inference::ModelInferRequest request;
  request.set_id("in-flight");
  REQUIRE(stream->Write(request));
  std::vector<ScriptedStreamService::Held> held = env.service.Take(1);
  REQUIRE(held.size() == 1);
  env.service.streams().CloseAll(absl::UnavailableError("draining"));
  AnswerWith(held[0], "answered");
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  REQUIRE(reply.infer_response().id() == "in-flight");
  REQUIRE_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  REQUIRE(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  REQUIRE(status.error_message() == "draining");

  // A stream opened after the close ends at once, with the same status.
  auto later_context = StreamContext();
  std::unique_ptr<ClientStream> later = env.stub->ModelStreamInfer(later_context.get());
  REQUIRE_FALSE(later->Read(&reply));
  REQUIRE(later->Finish().error_code() == grpc::StatusCode::UNAVAILABLE);
  REQUIRE(env.service.AllStreamsDone());
}

// --- KServeService's ModelStreamInfer

using kserve_test::Env;
using kserve_test::F;
using kserve_test::Floats;
using kserve_test::RawRequest;
using kserve_test::T;

TEST_CASE("KServe ModelStreamInfer answers several requests on one stream as ModelInfer does",
          "[integration][kserve][stream]") {
  Env env;
  // Different ids, batch sizes, priorities and an explicit version, all in flight at once.
  std::vector<inference::ModelInferRequest> requests;
  for (int i = 0; i < 5; ++i) {
    const int64_t rows = 1 + i % 3;
    inference::ModelInferRequest request = WithId(
        RawRequest("gru", testing::RandomWindows(rows, T, 100 + i), rows), absl::StrCat("s", i));
    if (i % 2 == 1) (*request.mutable_parameters())["priority"].set_uint64_param(1);
    if (i == 4) request.set_model_version("2");
    requests.push_back(std::move(request));
  }
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  for (const inference::ModelInferRequest& request : requests) REQUIRE(stream->Write(request));
  REQUIRE(stream->WritesDone());
  std::map<std::string, inference::ModelInferResponse> answers;
  inference::ModelStreamInferResponse reply;
  while (stream->Read(&reply)) {
    INFO(reply.error_message());
    REQUIRE(reply.error_message().empty());
    REQUIRE(answers.count(reply.infer_response().id()) == 0);
    answers[reply.infer_response().id()] = reply.infer_response();
  }
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(answers.size() == requests.size());

  for (const inference::ModelInferRequest& request : requests) {
    CAPTURE(request.id());
    inference::ModelInferResponse unary;
    REQUIRE(env.Infer(request, &unary).ok());
    const inference::ModelInferResponse& streamed = answers.at(request.id());
    REQUIRE(streamed.model_name() == unary.model_name());
    REQUIRE(streamed.model_version() == unary.model_version());
    REQUIRE(streamed.outputs_size() == 1);
    REQUIRE(streamed.outputs(0).SerializeAsString() == unary.outputs(0).SerializeAsString());
    REQUIRE(streamed.raw_output_contents_size() == 1);
    REQUIRE(streamed.raw_output_contents(0) == unary.raw_output_contents(0));
    const int64_t rows = request.inputs(0).shape(0);
    REQUIRE(Floats(streamed.raw_output_contents(0)) ==
            testing::ReferenceForward(*env.gru_v2, Floats(request.raw_input_contents(0)), rows));
  }

  // Each streamed request counts in the statistics as a ModelInfer call does.
  inference::ModelStatisticsResponse statistics;
  REQUIRE(env.Statistics("gru", "2", &statistics).ok());
  REQUIRE(statistics.model_stats(0).inference_stats().success().count() == 2 * requests.size());
}

TEST_CASE("KServe ModelStreamInfer answers a bad request with its error and goes on",
          "[integration][kserve][stream]") {
  Env env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  const auto exchange = [&](const inference::ModelInferRequest& request) {
    REQUIRE(stream->Write(request));
    inference::ModelStreamInferResponse reply;
    REQUIRE(stream->Read(&reply));
    REQUIRE(reply.infer_response().id() == request.id());
    return reply;
  };
  const std::vector<float> good_input = testing::RandomWindows(2, T, 201);
  const inference::ModelInferRequest good = WithId(RawRequest("gru", good_input, 2), "good");

  // Wrong lookback: the message ModelInfer gives.
  inference::ModelInferRequest bad =
      WithId(RawRequest("gru", testing::RandomWindows(1, T, 202), 1), "bad");
  bad.mutable_inputs(0)->set_shape(1, T + 1);
  const grpc::Status unary = env.Infer(bad);
  REQUIRE(unary.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  inference::ModelStreamInferResponse reply = exchange(bad);
  REQUIRE(reply.error_message() == unary.error_message());
  REQUIRE(reply.infer_response().outputs_size() == 0);

  reply = exchange(good);
  REQUIRE(reply.error_message().empty());
  REQUIRE(Floats(reply.infer_response().raw_output_contents(0)) ==
          testing::ReferenceForward(*env.gru_v2, good_input, 2));

  // An unknown model, and a sequence request: refused on their own.
  inference::ModelInferRequest unknown = WithId(good, "unknown");
  unknown.set_model_name("nope");
  REQUIRE(absl::StrContains(exchange(unknown).error_message(), "nope"));
  inference::ModelInferRequest sequence = WithId(good, "sequence");
  (*sequence.mutable_parameters())["sequence_id"].set_uint64_param(7);
  (*sequence.mutable_parameters())["sequence_start"].set_bool_param(true);
  const std::string refused = exchange(sequence).error_message();
  INFO(refused);
  REQUIRE(absl::StrContains(refused, "model 'gru' is not a sequence model"));
  REQUIRE(absl::StrContains(refused, "sequence batching is not configured"));

  // Not ready (draining): refused per request, the stream open.
  env.ready = false;
  REQUIRE(absl::StrContains(exchange(WithId(good, "draining")).error_message(), "not ready"));
  env.ready = true;
  REQUIRE(exchange(WithId(good, "again")).error_message().empty());

  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());
}

TEST_CASE("KServe CloseStreams ends an open ModelStreamInfer with UNAVAILABLE",
          "[integration][kserve][stream]") {
  Env env;
  auto context = StreamContext();
  std::unique_ptr<ClientStream> stream = env.stub->ModelStreamInfer(context.get());
  REQUIRE(stream->Write(WithId(RawRequest("gru", testing::RandomWindows(1, T, 301), 1), "one")));
  inference::ModelStreamInferResponse reply;
  REQUIRE(stream->Read(&reply));
  REQUIRE(reply.error_message().empty());
  REQUIRE(env.service->open_streams() == 1);
  env.service->CloseStreams();
  REQUIRE_FALSE(stream->Read(&reply));
  const grpc::Status status = stream->Finish();
  REQUIRE(status.error_code() == grpc::StatusCode::UNAVAILABLE);
  REQUIRE(absl::StrContains(status.error_message(), "shutting down"));
}

}  // namespace
}  // namespace forecastd
