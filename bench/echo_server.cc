// echo_server: the floor of gRPC on this machine for bench/load.py. It serves
// forecastd.v1.Forecaster with a Predict that computes nothing: it checks that the request
// holds a (B, T, F) `raw` window, and answers with a fixed (B, P, targets) forecast of zeros
// in `raw`, the model name, the target names and a Timing, so request and response are the
// same messages, of the same size, as forecastd's. Predict runs on the callback API and
// finishes inline, like forecastd's handler without the queue and the forward pass; the other
// Forecaster methods answer UNIMPLEMENTED.
//
// Prints "echo_server listening on port N" once serving, then serves until SIGTERM or SIGINT.
// Exit codes: 0 stopped by a signal, 1 cannot serve, 2 bad arguments.
#include <grpcpp/grpcpp.h>

#include <csignal>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
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
};

// Thread-safe: constant after construction.
class EchoForecaster final : public v1::Forecaster::CallbackService {
 public:
  explicit EchoForecaster(EchoOptions options)
      : options_(std::move(options)),
        zeros_(options_.max_batch_rows * options_.horizon * options_.target_names.size() *
                   sizeof(float),
               '\0') {}

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
    reactor->Finish(grpc::Status::OK);
    return reactor;
  }

 private:
  const EchoOptions options_;
  const std::string zeros_;  // the largest forecast's bytes
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
