// Tick streams through the real forecastd binary: Forecaster.Stream carrying several keys of a
// state-mode and a window-mode model on one gRPC stream, forecasts checked against the engine's
// own forward pass over the same ticks, a burst of many keys' ticks answered in full and in
// order, errors on one key leaving the others alone, resuming a kept key on a new connection, a
// clean finish on half-close, the stream metrics, Admin.ListStreams, and keeping streams across
// a SIGTERM restart and a SIGKILL.
#include <signal.h>

#include <chrono>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/file_io.h"
#include "forecastd/v1/admin.grpc.pb.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "forecastd/v1/streams.pb.h"
#include "grpcpp/grpcpp.h"
#include "inference/grpc_service.grpc.pb.h"
#include "tests/testing/catch.h"
#include "tests/testing/forecastd_api_fixture.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"
#include "tests/testing/prometheus_text.h"

namespace forecastd::api_test {
namespace {

using ::forecastd::testing::ForecastdDaemon;
using ::forecastd::testing::TempDir;
using Stream = grpc::ClientReaderWriter<v1::StreamRequest, v1::StreamResponse>;

ModelConfig StreamConfig(const std::string& name, v1::StreamingConfig::Mode mode) {
  ModelConfig config = BaseConfig(name, kT, {"load"});
  config.mutable_lstm()->set_hidden_size(8);
  config.mutable_lstm()->set_num_layers(2);
  config.mutable_streaming()->set_mode(mode);
  return config;
}

// The same weights in a model of lookback n.
std::shared_ptr<Forecaster> WithLookback(const Forecaster& model, int n) {
  ModelConfig config = model.config();
  config.set_lookback(n);
  std::shared_ptr<Forecaster> copy = Forecaster::Create(config).value();
  std::copy_n(model.parameters().data(), model.parameters().size(), copy->parameters().data());
  return copy;
}

v1::StreamRequest Open(const std::string& key, const std::string& model, bool resume = false) {
  v1::StreamRequest request;
  request.set_key(key);
  request.mutable_open()->set_model(model);
  request.mutable_open()->set_resume(resume);
  return request;
}

v1::StreamRequest Ticks(const std::string& key, const std::vector<float>& rows, bool raw) {
  v1::StreamRequest request;
  request.set_key(key);
  if (raw) {
    request.mutable_ticks()->set_raw(reinterpret_cast<const char*>(rows.data()),
                                     rows.size() * sizeof(float));
  } else {
    request.mutable_ticks()->mutable_values()->Add(rows.begin(), rows.end());
  }
  return request;
}

v1::StreamResponse Read(Stream& stream) {
  v1::StreamResponse response;
  REQUIRE(stream.Read(&response));
  return response;
}

struct Fixture {
  Fixture() {
    state = MakeModel(StreamConfig("ticks", v1::StreamingConfig::STREAM_MODE_STATE), 5);
    window = MakeModel(StreamConfig("windows", v1::StreamingConfig::STREAM_MODE_WINDOW), 6);
    Publish(dir, *state, 1);
    Publish(dir, *window, 1);
    daemon = StartDaemon(dir.path());
    channel = grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials());
    stub = v1::Forecaster::NewStub(channel);
  }
  TempDir dir;
  std::shared_ptr<Forecaster> state, window;
  std::unique_ptr<ForecastdDaemon> daemon;
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<v1::Forecaster::Stub> stub;
};

TEST_CASE("Stream answers each key's ticks in order with the engine's forecasts",
          "[integration][api][stream]") {
  Fixture f;
  auto context = Context();
  std::unique_ptr<Stream> stream = f.stub->Stream(context.get());
  REQUIRE(stream->Write(Open("AAPL", "ticks")));
  REQUIRE(stream->Write(Open("MSFT", "windows")));
  for (int i = 0; i < 2; ++i) {
    const v1::StreamResponse opened = Read(*stream);
    INFO(opened.DebugString());
    REQUIRE(opened.has_status());
    REQUIRE(opened.status().lookback() == kT);
    REQUIRE(opened.status().mode() == (opened.key() == "AAPL"
                                           ? v1::StreamingConfig::STREAM_MODE_STATE
                                           : v1::StreamingConfig::STREAM_MODE_WINDOW));
  }
  const int N = 2 * kT + 1;
  const std::vector<float> series = Windows(1, N, 17);  // (N, F)
  std::map<std::string, int64_t> last;
  for (int n = 1; n <= N; ++n) {
    const std::vector<float> row(series.begin() + (n - 1) * kF, series.begin() + n * kF);
    REQUIRE(stream->Write(Ticks("AAPL", row, n % 2 == 0)));
    REQUIRE(stream->Write(Ticks("MSFT", row, false)));
    for (int i = 0; i < 2; ++i) {
      const v1::StreamResponse reply = Read(*stream);
      INFO(reply.DebugString());
      REQUIRE(reply.has_forecast());
      REQUIRE(reply.forecast().sequence() == ++last[reply.key()]);
      if (reply.key() == "AAPL") {
        const std::vector<float> ticks(series.begin(), series.begin() + n * kF);
        REQUIRE(Shape(reply.forecast().forecast()) == std::vector<int64_t>{kP, 1});
        REQUIRE(reply.forecast().forecast().raw().empty() == (n % 2 != 0));
        RequireClose(Floats(reply.forecast().forecast()),
                     Expected(*WithLookback(*f.state, n), ticks));
        REQUIRE(reply.forecast().timing().total_us() > 0);
      } else if (n < kT) {
        REQUIRE(reply.forecast().ticks_needed() == kT - n);
      } else {
        const std::vector<float> window(series.begin() + (n - kT) * kF, series.begin() + n * kF);
        RequireClose(Floats(reply.forecast().forecast()), Expected(*f.window, window));
      }
    }
  }
  // A bad tick is refused on its key; the key goes on.
  REQUIRE(stream->Write(Ticks("AAPL", {1.0f, 2.0f, 3.0f}, false)));
  const v1::StreamResponse refused = Read(*stream);
  REQUIRE(refused.key() == "AAPL");
  REQUIRE(refused.error().code() == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  REQUIRE(refused.error().message().find("rows of 2 features") != std::string::npos);
  REQUIRE(stream->Write(Ticks("nobody", {1.0f, 2.0f}, false)));
  REQUIRE(Read(*stream).error().code() == static_cast<int>(grpc::StatusCode::NOT_FOUND));
  v1::StreamRequest empty;
  empty.set_key("AAPL");
  REQUIRE(stream->Write(empty));
  REQUIRE(Read(*stream).error().code() == static_cast<int>(grpc::StatusCode::INVALID_ARGUMENT));
  REQUIRE(stream->WritesDone());
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());

  // The key was kept: a new connection resumes it where it left off.
  auto context2 = Context();
  std::unique_ptr<Stream> again = f.stub->Stream(context2.get());
  REQUIRE(again->Write(Open("AAPL", "ticks", /*resume=*/true)));
  const v1::StreamResponse resumed = Read(*again);
  INFO(resumed.DebugString());
  REQUIRE(resumed.status().resumed());
  REQUIRE(resumed.status().sequence() == N);
  const std::vector<float> next = Windows(1, 1, 99);
  REQUIRE(again->Write(Ticks("AAPL", next, false)));
  const v1::StreamResponse after = Read(*again);
  REQUIRE(after.forecast().sequence() == N + 1);
  std::vector<float> all = series;
  all.insert(all.end(), next.begin(), next.end());
  RequireClose(Floats(after.forecast().forecast()), Expected(*WithLookback(*f.state, N + 1), all));
  REQUIRE(again->WritesDone());
  REQUIRE(again->Finish().ok());

  const std::string metrics = Metrics(*f.daemon);
  INFO(metrics);
  using ::forecastd::testing::SumSamples;
  // N + 1 good tick messages on AAPL; the bad one is counted under its code.
  REQUIRE(SumSamples(metrics, "forecastd_stream_ticks_total", {{"model", "ticks"}, {"code", "OK"}})
              .sum == N + 1);
  REQUIRE(SumSamples(metrics, "forecastd_stream_ticks_total",
                     {{"model", "ticks"}, {"code", "INVALID_ARGUMENT"}})
              .sum == 1);
  REQUIRE(
      SumSamples(metrics, "forecastd_streams_open", {{"model", "ticks"}, {"mode", "state"}}).sum ==
      1);
  REQUIRE(SumSamples(metrics, "forecastd_stream_state_bytes", {{"model", "ticks"}}).sum > 0);
  REQUIRE(SumSamples(metrics, "forecastd_stream_tick_duration_seconds_count", {{"model", "ticks"}})
              .sum == N + 1);
}

TEST_CASE("A burst of ticks written without reading is answered in full, in each key's order",
          "[integration][api][stream]") {
  // Many replies queue behind the one being written: they go out with gRPC's buffer hint, the
  // last one without it. Every answer is read before the half-close, so one held back by the
  // hint would stall the test rather than be flushed by the call's end.
  Fixture f;
  auto context = Context();
  std::unique_ptr<Stream> stream = f.stub->Stream(context.get());
  constexpr int kKeys = 64;
  const int N = 2 * kT;  // ticks per key
  const auto key = [](int i) { return absl::StrCat("k", i); };
  for (int i = 0; i < kKeys; ++i) REQUIRE(stream->Write(Open(key(i), "ticks")));
  for (int i = 0; i < kKeys; ++i) REQUIRE(Read(*stream).has_status());
  const std::vector<float> series = Windows(1, N, 23);  // (N, F), every key's ticks
  for (int n = 1; n <= N; ++n) {
    const std::vector<float> row(series.begin() + (n - 1) * kF, series.begin() + n * kF);
    for (int i = 0; i < kKeys; ++i) REQUIRE(stream->Write(Ticks(key(i), row, (i + n) % 2 == 0)));
  }
  std::map<std::string, int64_t> last;
  std::map<std::string, std::vector<float>> final_forecast;
  for (int r = 0; r < kKeys * N; ++r) {
    const v1::StreamResponse reply = Read(*stream);
    INFO(reply.DebugString());
    REQUIRE(reply.has_forecast());
    REQUIRE(reply.forecast().sequence() == ++last[reply.key()]);
    if (reply.forecast().sequence() == N) {
      final_forecast[reply.key()] = Floats(reply.forecast().forecast());
    }
  }
  REQUIRE(last.size() == kKeys);
  const std::vector<float> want = Expected(*WithLookback(*f.state, N), series);
  for (int i = 0; i < kKeys; ++i) {
    CAPTURE(i);
    REQUIRE(last[key(i)] == N);
    RequireClose(final_forecast[key(i)], want);
  }
  REQUIRE(stream->WritesDone());
  v1::StreamResponse extra;
  REQUIRE_FALSE(stream->Read(&extra));
  const grpc::Status status = stream->Finish();
  INFO(status.error_message());
  REQUIRE(status.ok());
}

// Feeds `rows` (n, F) one tick per message to `key` on a new connection (opening or resuming it)
// and returns each forecast's raw bytes; leaves the key kept for a later resume.
std::vector<std::string> Feed(ForecastdDaemon& daemon, const std::string& key, bool resume,
                              const std::vector<float>& rows) {
  auto stub = v1::Forecaster::NewStub(
      grpc::CreateChannel(daemon.grpc_address(), grpc::InsecureChannelCredentials()));
  auto context = Context();
  std::unique_ptr<Stream> stream = stub->Stream(context.get());
  REQUIRE(stream->Write(Open(key, "ticks", resume)));
  const v1::StreamResponse opened = Read(*stream);
  INFO(opened.DebugString());
  REQUIRE(opened.has_status());
  REQUIRE(opened.status().resumed() == resume);
  std::vector<std::string> forecasts;
  for (size_t i = 0; i < rows.size(); i += kF) {
    REQUIRE(stream->Write(Ticks(key, std::vector<float>(rows.begin() + i, rows.begin() + i + kF),
                                /*raw=*/true)));
    const v1::StreamResponse reply = Read(*stream);
    INFO(reply.DebugString());
    REQUIRE(reply.has_forecast());
    forecasts.push_back(reply.forecast().forecast().raw());
  }
  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());
  return forecasts;
}

TEST_CASE("A stream resumed after a SIGTERM restart forecasts bit for bit as without the restart",
          "[integration][api][stream]") {
  TempDir dir;
  const std::shared_ptr<Forecaster> model =
      MakeModel(StreamConfig("ticks", v1::StreamingConfig::STREAM_MODE_STATE), 5);
  Publish(dir, *model, 1);
  const int N = 3 * kT, k = 2 * kT;  // ticks in all; the restart after k of them
  const std::vector<float> series = Windows(1, N, 41);
  const std::vector<float> before(series.begin(), series.begin() + k * kF);
  const std::vector<float> after(series.begin() + k * kF, series.end());

  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(dir.path());
  // The run without a restart.
  Feed(*daemon, "straight", false, before);
  const std::vector<std::string> want = Feed(*daemon, "straight", true, after);
  // The run with one: k ticks, a drain, a new daemon, the rest.
  Feed(*daemon, "restarted", false, before);
  REQUIRE(daemon->process().Signal(SIGTERM));
  const absl::StatusOr<int> code = daemon->process().WaitForExit(kExitBound);
  REQUIRE(code.ok());
  REQUIRE(*code == 0);
  REQUIRE(daemon->process().Output().find("tick streams: 2 written to") != std::string::npos);
  daemon = StartDaemon(dir.path());
  const std::vector<std::string> got = Feed(*daemon, "restarted", true, after);
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    CAPTURE(i);
    REQUIRE(got[i] == want[i]);
  }
  REQUIRE(daemon->process().Output().find("2 restored from") != std::string::npos);
}

TEST_CASE("Admin.ExportStream and ImportStream move a stream to another replica bit for bit",
          "[integration][api][stream]") {
  TempDir dir;
  const std::shared_ptr<Forecaster> model =
      MakeModel(StreamConfig("ticks", v1::StreamingConfig::STREAM_MODE_STATE), 5);
  Publish(dir, *model, 1);
  std::unique_ptr<ForecastdDaemon> a = StartDaemon(dir.path());
  std::unique_ptr<ForecastdDaemon> b = StartDaemon(dir.path(), {"--state-dir", dir.path() + "/b"});
  const std::vector<float> series = Windows(1, 3 * kT, 61);
  const std::vector<float> head(series.begin(), series.begin() + 2 * kT * kF);
  const std::vector<float> tail(series.begin() + 2 * kT * kF, series.end());
  Feed(*a, "stay", false, head);
  Feed(*a, "move", false, head);
  v1::ExportStreamRequest request;
  request.set_model("ticks");
  request.set_key("move");
  v1::StreamRecord record;
  grpc::Status status = a->admin().ExportStream(Context().get(), request, &record);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(record.sequence() == 2 * kT);
  v1::StreamInfo imported;
  status = b->admin().ImportStream(Context().get(), record, &imported);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(imported.key() == "move");
  REQUIRE(imported.sequence() == 2 * kT);
  REQUIRE_FALSE(imported.connected());
  // The moved stream on b forecasts exactly what the one that stayed on a does.
  const std::vector<std::string> want = Feed(*a, "stay", true, tail);
  const std::vector<std::string> got = Feed(*b, "move", true, tail);
  REQUIRE(got == want);
  // Importing onto a key that is open there is refused.
  request.set_key("stay");
  REQUIRE(a->admin().ExportStream(Context().get(), request, &record).ok());
  auto stub = v1::Forecaster::NewStub(
      grpc::CreateChannel(b->grpc_address(), grpc::InsecureChannelCredentials()));
  auto context = Context();
  std::unique_ptr<Stream> open = stub->Stream(context.get());
  REQUIRE(open->Write(Open("stay", "ticks")));
  REQUIRE(Read(*open).has_status());
  status = b->admin().ImportStream(Context().get(), record, &imported);
  REQUIRE(status.error_code() == grpc::StatusCode::FAILED_PRECONDITION);
  REQUIRE(open->WritesDone());
  REQUIRE(open->Finish().ok());
}

inference::ModelInferRequest SequenceRequest(const std::string& model, int64_t id, bool start,
                                             bool end, const std::vector<float>& rows) {
  inference::ModelInferRequest request;
  request.set_model_name(model);
  request.set_id(absl::StrCat("r", rows.size()));
  (*request.mutable_parameters())["sequence_id"].set_int64_param(id);
  if (start) (*request.mutable_parameters())["sequence_start"].set_bool_param(true);
  if (end) (*request.mutable_parameters())["sequence_end"].set_bool_param(true);
  auto* input = request.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  input->add_shape(1);
  input->add_shape(static_cast<int64_t>(rows.size()) / kF);
  input->add_shape(kF);
  request.add_raw_input_contents(reinterpret_cast<const char*>(rows.data()),
                                 rows.size() * sizeof(float));
  return request;
}

std::vector<float> RawFloats(const std::string& raw) {
  std::vector<float> out(raw.size() / sizeof(float));
  std::memcpy(out.data(), raw.data(), raw.size());
  return out;
}

TEST_CASE("KServe sequence requests (Triton's sequence_id) run on the model's tick streams",
          "[integration][api][stream]") {
  Fixture f;
  auto kserve = inference::GRPCInferenceService::NewStub(f.channel);
  // A model configured for tick streams is a sequence model to Triton's clients.
  inference::ModelConfigRequest config_request;
  config_request.set_name("ticks");
  inference::ModelConfigResponse config;
  REQUIRE(kserve->ModelConfig(Context().get(), config_request, &config).ok());
  REQUIRE(config.config().has_sequence_batching());
  REQUIRE(config.config().sequence_batching().oldest().max_candidate_sequences() == 10000);

  const int N = kT + 2;
  const std::vector<float> series = Windows(1, N, 71);
  // ModelInfer: the first request starts the sequence with two ticks, then one at a time.
  for (int n = 2; n <= N; ++n) {
    const bool start = n == 2;
    const std::vector<float> rows(series.begin() + (start ? 0 : (n - 1) * kF),
                                  series.begin() + n * kF);
    inference::ModelInferResponse response;
    const grpc::Status status = kserve->ModelInfer(
        Context().get(), SequenceRequest("ticks", 42, start, n == N, rows), &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(response.outputs(0).name() == "FORECAST");
    REQUIRE(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                 response.outputs(0).shape().end()) ==
            std::vector<int64_t>{1, kP, 1});
    const std::vector<float> ticks(series.begin(), series.begin() + n * kF);
    RequireClose(RawFloats(response.raw_output_contents(0)),
                 Expected(*WithLookback(*f.state, n), ticks));
  }
  // The sequence ended: a request without sequence_start is refused, saying so.
  inference::ModelInferResponse response;
  grpc::Status status = kserve->ModelInfer(
      Context().get(), SequenceRequest("ticks", 42, false, false, Windows(1, 1, 3)), &response);
  REQUIRE(status.error_code() == grpc::StatusCode::INVALID_ARGUMENT);
  REQUIRE(status.error_message().find("sequence_start") != std::string::npos);
  // A window-mode sequence says how many ticks it still needs.
  status = kserve->ModelInfer(
      Context().get(), SequenceRequest("windows", 1, true, false, Windows(1, 1, 3)), &response);
  REQUIRE(status.ok());
  REQUIRE(response.parameters().at("ticks_needed").int64_param() == kT - 1);

  // ModelStreamInfer: two sequences interleaved on one stream, answered in order per sequence.
  auto context = Context();
  auto stream = kserve->ModelStreamInfer(context.get());
  for (int n = 1; n <= 3; ++n) {
    for (const int64_t id : {int64_t{7}, int64_t{8}}) {
      const std::vector<float> rows(series.begin() + (n - 1) * kF, series.begin() + n * kF);
      REQUIRE(stream->Write(SequenceRequest("ticks", id, n == 1, false, rows)));
    }
  }
  REQUIRE(stream->WritesDone());
  inference::ModelStreamInferResponse reply;
  std::map<std::string, int> answered;
  while (stream->Read(&reply)) {
    INFO(reply.error_message());
    REQUIRE(reply.error_message().empty());
    ++answered[reply.infer_response().id()];
  }
  const grpc::Status finished = stream->Finish();
  INFO(finished.error_code() << ": " << finished.error_message());
  REQUIRE(finished.ok());
  REQUIRE(answered["r2"] == 6);
}

TEST_CASE("After SIGKILL a restart restores the last periodic snapshot and says ticks were lost",
          "[integration][api][stream]") {
  TempDir dir;
  TempDir state;
  const std::shared_ptr<Forecaster> model =
      MakeModel(StreamConfig("ticks", v1::StreamingConfig::STREAM_MODE_STATE), 5);
  Publish(dir, *model, 1);
  const std::vector<std::string> flags = {"--state-dir", state.path(), "--stream-snapshot-interval",
                                          "1"};
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(dir.path(), flags);
  const int k = kT + 3;
  Feed(*daemon, "x", false, Windows(1, k, 5));
  // Wait (a bound, not a measurement) for a periodic snapshot that has seen all k ticks.
  const std::string path = state.path() + "/streams.pb";
  bool saved = false;
  for (int i = 0; i < 600 && !saved; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    absl::StatusOr<std::string> bytes = ReadFileBytes(path, "snapshot");
    v1::StreamSnapshot snapshot;
    saved = bytes.ok() && snapshot.ParseFromString(*bytes) && snapshot.streams_size() == 1 &&
            snapshot.streams(0).sequence() == k && !snapshot.clean();
  }
  REQUIRE(saved);
  REQUIRE(daemon->process().Signal(SIGKILL));
  REQUIRE(daemon->process().WaitForExit(kExitBound).ok());
  daemon = StartDaemon(dir.path(), flags);
  REQUIRE(daemon->process().Output().find("did not drain") != std::string::npos);
  auto stub = v1::Forecaster::NewStub(
      grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials()));
  auto context = Context();
  std::unique_ptr<Stream> stream = stub->Stream(context.get());
  REQUIRE(stream->Write(Open("x", "ticks", /*resume=*/true)));
  const v1::StreamResponse resumed = Read(*stream);
  INFO(resumed.DebugString());
  REQUIRE(resumed.status().resumed());
  REQUIRE(resumed.status().sequence() == k);
  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());
}

TEST_CASE("Admin.ListStreams lists open and kept streams per model", "[integration][api][stream]") {
  Fixture f;
  const auto list = [&](const std::string& model) {
    v1::ListStreamsRequest request;
    request.set_model(model);
    v1::ListStreamsResponse response;
    auto context = Context();
    const grpc::Status status = f.daemon->admin().ListStreams(context.get(), request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    return response;
  };
  REQUIRE(list("").streams().empty());

  auto context = Context();
  std::unique_ptr<Stream> stream = f.stub->Stream(context.get());
  REQUIRE(stream->Write(Open("AAPL", "ticks")));
  REQUIRE(stream->Write(Open("MSFT", "windows")));
  REQUIRE(Read(*stream).has_status());
  REQUIRE(Read(*stream).has_status());
  const std::vector<float> rows = Windows(1, 3, 5);  // three ticks in one message
  REQUIRE(stream->Write(Ticks("AAPL", rows, true)));
  REQUIRE(Read(*stream).forecast().sequence() == 3);

  const v1::ListStreamsResponse all = list("");
  INFO(all.DebugString());
  REQUIRE(all.streams_size() == 2);
  const v1::StreamInfo& aapl = all.streams(0);  // by model: "ticks" < "windows"
  REQUIRE(aapl.model() == "ticks");
  REQUIRE(aapl.key() == "AAPL");
  REQUIRE(aapl.version() == 1);
  REQUIRE(aapl.requested_version() == 0);
  REQUIRE(aapl.mode() == v1::StreamingConfig::STREAM_MODE_STATE);
  REQUIRE(aapl.sequence() == 3);
  REQUIRE(aapl.ticks_buffered() == 3);
  REQUIRE(aapl.lookback() == kT);
  REQUIRE(aapl.connected());
  REQUIRE(aapl.idle_ms() >= 0);
  REQUIRE(all.streams(1).key() == "MSFT");
  REQUIRE(all.streams(1).mode() == v1::StreamingConfig::STREAM_MODE_WINDOW);
  REQUIRE(list("windows").streams_size() == 1);

  // After the connection ends the streams are kept (on_disconnect KEEP), detached. The server
  // lets go of the connection just after the call finishes, so look until it has.
  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());
  v1::ListStreamsResponse kept;
  const absl::Time give_up = absl::Now() + kRpcBound;
  do {
    kept = list("ticks");
    REQUIRE(kept.streams_size() == 1);
  } while (kept.streams(0).connected() && absl::Now() < give_up);
  REQUIRE_FALSE(kept.streams(0).connected());
  REQUIRE(kept.streams(0).sequence() == 3);

  v1::ListStreamsRequest unknown;
  unknown.set_model("nope");
  v1::ListStreamsResponse response;
  auto context2 = Context();
  RequireError(f.daemon->admin().ListStreams(context2.get(), unknown, &response),
               grpc::StatusCode::NOT_FOUND, "nope");
}

TEST_CASE("A model with window scaling forecasts alike through Predict, KServe and window ticks",
          "[integration][api][stream]") {
  ModelConfig config = BaseConfig("scaled", kT, {"temp", "load"});
  config.mutable_gru()->set_hidden_size(8);
  config.mutable_gru()->set_num_layers(1);
  config.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
  config.mutable_window_scaling()->set_affine(true);
  config.mutable_window_scaling()->set_forecast_change(true);
  config.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_WINDOW);
  std::shared_ptr<Forecaster> model = MakeModel(config, 13);
  float* gain = model->parameters().at("window_scaling.weight");
  gain[0] = 1.2f, gain[1] = 0.9f;
  TempDir dir;
  Publish(dir, *model, 1);
  std::unique_ptr<ForecastdDaemon> daemon = StartDaemon(dir.path());
  auto channel = grpc::CreateChannel(daemon->grpc_address(), grpc::InsecureChannelCredentials());

  // A series that has left the normaliser's range by far: the level moves every window.
  const int N = kT + 3;
  std::vector<float> series = Windows(1, N, 23);
  for (int n = 0; n < N; ++n) {
    for (int f = 0; f < kF; ++f) series[n * kF + f] += 500.0f + 40.0f * static_cast<float>(n);
  }
  const std::vector<float> window(series.end() - kT * kF, series.end());
  const std::vector<float> want = Expected(*model, window);

  v1::PredictResponse predicted;
  const grpc::Status predict =
      Predict(*daemon, Request("scaled", {1, kT, kF}, window, Encoding::kRaw), &predicted);
  INFO(predict.error_message());
  REQUIRE(predict.ok());
  RequireClose(Floats(predicted.forecasts()), want);

  auto kserve = inference::GRPCInferenceService::NewStub(channel);
  inference::ModelInferRequest infer;
  infer.set_model_name("scaled");
  auto* input = infer.add_inputs();
  input->set_name("INPUT");
  input->set_datatype("FP32");
  for (const int64_t d : {int64_t{1}, int64_t{kT}, int64_t{kF}}) input->add_shape(d);
  infer.add_raw_input_contents(reinterpret_cast<const char*>(window.data()),
                               window.size() * sizeof(float));
  inference::ModelInferResponse inferred;
  const grpc::Status kserve_status = kserve->ModelInfer(Context().get(), infer, &inferred);
  INFO(kserve_status.error_message());
  REQUIRE(kserve_status.ok());
  RequireClose(RawFloats(inferred.raw_output_contents(0)), want);

  auto stub = v1::Forecaster::NewStub(channel);
  auto context = Context();
  std::unique_ptr<Stream> stream = stub->Stream(context.get());
  REQUIRE(stream->Write(Open("EURUSD", "scaled")));
  REQUIRE(Read(*stream).status().mode() == v1::StreamingConfig::STREAM_MODE_WINDOW);
  for (int n = 1; n <= N; ++n) {
    REQUIRE(stream->Write(
        Ticks("EURUSD", std::vector<float>(series.begin() + (n - 1) * kF, series.begin() + n * kF),
              n % 2 == 0)));
    const v1::StreamResponse reply = Read(*stream);
    INFO(reply.DebugString());
    REQUIRE(reply.has_forecast());
    if (n < kT) {
      REQUIRE(reply.forecast().ticks_needed() == kT - n);
      continue;
    }
    const std::vector<float> last(series.begin() + (n - kT) * kF, series.begin() + n * kF);
    RequireClose(Floats(reply.forecast().forecast()), Expected(*model, last));
  }
  REQUIRE(stream->WritesDone());
  REQUIRE(stream->Finish().ok());

  // The model scales windows: no state mode, said when the config asks for it.
  ModelConfig state = config;
  state.set_name("scaled_state");
  state.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  const absl::Status refused = ValidateModelConfig(state);
  REQUIRE(refused.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(refused.message()).find("STREAM_MODE_STATE is not available") !=
          std::string::npos);
}

}  // namespace
}  // namespace forecastd::api_test
