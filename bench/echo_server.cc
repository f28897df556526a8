// echo_server: the floor of gRPC on this machine for bench/load.py. It serves
// forecastd.v1.Forecaster with a Predict that computes nothing: it checks that the request
// holds a (B, T, F) `raw` window, and answers with a fixed (B, P, targets) forecast of zeros
// in `raw`, the model name, the target names and a Timing, so request and response are the
// same messages, of the same size, as forecastd's. Predict runs on the callback API and
// finishes inline, like forecastd's handler without the queue and the forward pass. Stream
// (bench/stream.sh's floor) answers each StreamOpen / StreamClose with a StreamStatus and each
// StreamTicks with a StreamForecast of zeros (P, targets), numbered per key, `raw` when the
// ticks were: forecastd's tick messages without the hub and the step. Its reactor reads and
// writes concurrently and writes from an outbox with gRPC's buffer hint while more answers wait
// behind the one being written, as forecastd's does. The other Forecaster methods answer
// UNIMPLEMENTED.
//
// Prints "echo_server listening on port N" once serving, then serves until SIGTERM or SIGINT.
// Exit codes: 0 stopped by a signal, 1 cannot serve, 2 bad arguments.
#include <grpcpp/grpcpp.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "forecastd/v1/forecaster.grpc.pb.h"

namespace forecastd {
namespace {

struct EchoOptions {
  int64_t horizon = 12;  // P
  std::vector<std::string> target_names = {"price", "load"};
  int64_t version = 1;
  int64_t max_batch_rows = 64;
  // Predict holds its gRPC thread this long before answering (a busy wait, as a server that
  // computes on the thread that read the request would): 0, none.
  int64_t busy_us = 0;
  // With busy_us: Predict returns at once and one thread of the echo's own, which polls
  // without sleeping, answers busy_us after the request (as a server whose device finishes the
  // work and whose poller notices it would).
  bool busy_elsewhere = false;
};

// One Stream call. gRPC runs at most one OnReadDone and one OnWriteDone at a time, but the two
// may overlap: the outbox and the flags are guarded by mu_; sequences_ is touched by reads only.
// A write started while more answers are queued behind it carries the buffer hint; the last one
// queued goes without it and flushes those held before it (server/stream_call.h).
class EchoStream final : public grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse> {
 public:
  EchoStream(const EchoOptions& options, const std::string& zeros)
      : options_(options), zeros_(zeros) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {
      bool finish = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        read_done_ = true;
        finish = !writing_ && !finished_;
        finished_ = finished_ || finish;
      }
      if (finish) Finish(grpc::Status::OK);
      return;
    }
    // Queued before the next read starts, so answers keep the order of the requests.
    v1::StreamResponse response = Answer(request_);
    const v1::StreamResponse* start = nullptr;
    grpc::WriteOptions options;
    {
      std::lock_guard<std::mutex> lock(mu_);
      outbox_.push_back(std::move(response));
      if (!writing_) {
        writing_ = true;
        start = &outbox_.front();
        options = FrontOptions();
      }
    }
    StartRead(&request_);
    if (start != nullptr) StartWrite(start, options);
  }

  void OnWriteDone(bool ok) override {
    const v1::StreamResponse* next = nullptr;
    grpc::WriteOptions options;
    bool finish = false;
    {
      std::lock_guard<std::mutex> lock(mu_);
      outbox_.pop_front();
      if (ok && !outbox_.empty()) {
        next = &outbox_.front();
        options = FrontOptions();
      } else {
        writing_ = false;
        finish = (read_done_ || !ok) && !finished_;
        finished_ = finished_ || finish;
      }
    }
    if (next != nullptr) StartWrite(next, options);
    if (finish) Finish(grpc::Status::OK);
  }

  void OnDone() override { delete this; }

 private:
  // The options for writing outbox_.front(); mu_ held.
  grpc::WriteOptions FrontOptions() const {
    grpc::WriteOptions options;
    if (outbox_.size() > 1) options.set_buffer_hint();
    return options;
  }

  v1::StreamResponse Answer(const v1::StreamRequest& request) {
    v1::StreamResponse response;
    response.set_key(request.key());
    if (request.has_ticks()) {
      const int64_t P = options_.horizon, K = static_cast<int64_t>(options_.target_names.size());
      v1::StreamForecast* forecast = response.mutable_forecast();
      forecast->set_sequence(++sequences_[request.key()]);
      forecast->set_version(options_.version);
      v1::Tensor* out = forecast->mutable_forecast();
      out->add_shape(P);
      out->add_shape(K);
      if (!request.ticks().raw().empty()) {
        out->set_raw(zeros_.data(), P * K * sizeof(float));
      } else {
        for (int64_t i = 0; i < P * K; ++i) out->add_values(0.0f);
      }
      forecast->mutable_timing()->set_batch_size(1);
    } else {
      v1::StreamStatus* status = response.mutable_status();
      status->set_model(request.has_open() ? request.open().model() : "");
      status->set_version(options_.version);
      status->set_sequence(sequences_[request.key()]);
      status->set_closed(request.has_close());
      if (request.has_close()) sequences_.erase(request.key());
    }
    return response;
  }

  const EchoOptions& options_;
  const std::string& zeros_;
  v1::StreamRequest request_;
  std::map<std::string, int64_t> sequences_;

  std::mutex mu_;
  std::deque<v1::StreamResponse> outbox_;  // guarded by mu_; front() is being written
  bool writing_ = false;                   // guarded by mu_
  bool read_done_ = false;                 // guarded by mu_
  bool finished_ = false;                  // guarded by mu_
};

// Thread-safe: constant after construction but for the answers queued for the finisher.
class EchoForecaster final : public v1::Forecaster::CallbackService {
 public:
  explicit EchoForecaster(EchoOptions options)
      : options_(std::move(options)),
        zeros_(options_.max_batch_rows * options_.horizon * options_.target_names.size() *
                   sizeof(float),
               '\0') {
    if (options_.busy_us > 0 && options_.busy_elsewhere) {
      finisher_ = std::thread([this] { Finisher(); });
    }
  }
  ~EchoForecaster() override {
    stop_.store(true);
    if (finisher_.joinable()) finisher_.join();
  }

  grpc::ServerUnaryReactor* Predict(grpc::CallbackServerContext* context,
                                    const v1::PredictRequest* request,
                                    v1::PredictResponse* response) override {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    const v1::Tensor& in = request->inputs();
    int64_t floats = 1;
    for (int64_t d : in.shape()) floats *= d;
    if (in.shape_size() != 3 || in.shape(0) < 1 || in.shape(0) > options_.max_batch_rows ||
        static_cast<int64_t>(in.raw().size()) != floats * static_cast<int64_t>(sizeof(float))) {
      reactor->Finish(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                   absl::StrCat("inputs must be a (B, T, F) raw tensor with B in "
                                                "[1, ",
                                                options_.max_batch_rows, "]")));
      return reactor;
    }
    const int64_t B = in.shape(0), P = options_.horizon,
                  K = static_cast<int64_t>(options_.target_names.size());
    response->set_model(request->model());
    response->set_version(options_.version);
    v1::Tensor* out = response->mutable_forecasts();
    for (int64_t d : {B, P, K}) out->add_shape(d);
    out->set_raw(zeros_.data(), B * P * K * sizeof(float));
    for (const std::string& name : options_.target_names) response->add_target_names(name);
    v1::Timing* timing = response->mutable_timing();
    timing->set_batch_size(B);
    if (options_.busy_us > 0) {
      const auto until =
          std::chrono::steady_clock::now() + std::chrono::microseconds(options_.busy_us);
      timing->set_compute_us(static_cast<uint64_t>(options_.busy_us));
      if (options_.busy_elsewhere) {
        std::lock_guard<std::mutex> lock(mu_);
        pending_.push_back({reactor, until});
        return reactor;
      }
      while (std::chrono::steady_clock::now() < until) {
      }
    }
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

  grpc::ServerBidiReactor<v1::StreamRequest, v1::StreamResponse>* Stream(
      grpc::CallbackServerContext* /*context*/) override {
    return new EchoStream(options_, zeros_);
  }

 private:
  struct Pending {
    grpc::ServerUnaryReactor* reactor;
    std::chrono::steady_clock::time_point until;
  };

  // Answers each pending Predict once its time has come, polling without sleeping.
  void Finisher() {
    while (!stop_.load(std::memory_order_relaxed)) {
      std::optional<Pending> next;
      {
        std::lock_guard<std::mutex> lock(mu_);
        if (!pending_.empty() && std::chrono::steady_clock::now() >= pending_.front().until) {
          next = pending_.front();
          pending_.pop_front();
        }
      }
      if (next) next->reactor->Finish(grpc::Status::OK);
    }
  }

  const EchoOptions options_;
  const std::string zeros_;  // the largest forecast's bytes
  std::mutex mu_;
  std::deque<Pending> pending_;  // guarded by mu_, in arrival order (so in time order)
  std::atomic<bool> stop_{false};
  std::thread finisher_;
};

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  std::string address = "127.0.0.1:0";
  forecastd::EchoOptions options;
  CLI::App app{"A Forecaster whose Predict returns zeros without computing: the gRPC floor."};
  app.add_option("--address", address, "host:port to serve on (port 0: any free port)")
      ->capture_default_str();
  app.add_option("--horizon", options.horizon, "P of the forecasts returned")
      ->check(CLI::PositiveNumber);
  app.add_option("--target-names", options.target_names, "names of the targets (K of them)")
      ->delimiter(',');
  app.add_option("--max-batch-rows", options.max_batch_rows, "largest B accepted")
      ->check(CLI::PositiveNumber);
  app.add_option("--busy-us", options.busy_us,
                 "Predict busy-waits this long on its gRPC thread before answering (default 0)")
      ->check(CLI::NonNegativeNumber);
  app.add_flag("--busy-elsewhere", options.busy_elsewhere,
               "with --busy-us: Predict returns at once and a polling thread answers busy-us "
               "later");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (options.target_names.empty()) {
    std::fprintf(stderr, "echo_server: --target-names is empty\n");
    return 2;
  }

  // Blocked before gRPC starts its threads, so only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  forecastd::EchoForecaster service(options);
  grpc::ServerBuilder builder;
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);  // as forecastd
  int port = 0;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    std::fprintf(stderr, "echo_server: cannot serve on %s\n", address.c_str());
    return 1;
  }
  std::printf("echo_server listening on port %d\n", port);
  std::fflush(stdout);
  int signal_number = 0;
  sigwait(&stop_signals, &signal_number);
  server->Shutdown();
  return 0;
}
