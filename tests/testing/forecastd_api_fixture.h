// What the forecastd API integration tests (tests/server/forecastd_api_test.cc) share: small
// models written into a temporary repository with PublishVersion, their forecasts computed
// in-process as the reference for every reply, request builders, the daemon started on that
// repository, and client threads that keep Predict busy. Built into that test only (it uses
// Catch2 assertions and the FORECASTD_BINARY path). Helpers are thread-compatible; PredictLoad
// runs its own threads and is driven from one test thread.
#ifndef FORECASTD_TESTS_TESTING_FORECASTD_API_FIXTURE_H_
#define FORECASTD_TESTS_TESTING_FORECASTD_API_FIXTURE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "engine/models/forecaster.h"
#include "forecastd/v1/forecaster.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "tests/testing/forecastd_daemon.h"
#include "tests/testing/process.h"

namespace forecastd::api_test {

// Safety bounds only: a healthy run finishes far inside them on any machine.
inline constexpr absl::Duration kExitBound = absl::Seconds(60);
inline constexpr absl::Duration kRpcBound = absl::Seconds(60);

// The small models' shapes: lookback, horizon, features (load, temp), largest batch.
inline constexpr int kT = 8, kP = 3, kF = 2;
inline constexpr int kMaxBatch = 8;
// Every test series' per-feature scale, also the models' normaliser statistics.
inline constexpr float kMean[kF] = {10.0f, 20.0f};
inline constexpr float kStd[kF] = {2.0f, 5.0f};

// --- Models and the repository

// Features load and temp, lookback T, horizon kP, batching up to kMaxBatch rows with a 2 ms
// queue delay; no architecture yet.
ModelConfig BaseConfig(const std::string& name, int T, const std::vector<std::string>& targets);
// "toy": LSTM (H 16), targets temp and load, two priority levels (default 2).
ModelConfig ToyConfig();
// "quant": GRU (H 8), target load, quantiles 0.1, 0.5, 0.9.
ModelConfig QuantileConfig();
// "heavy": a 2-layer LSTM (H 256) over 64 steps: enough work that requests overlap.
ModelConfig HeavyConfig();
// A small LSTM with target load, for training.
ModelConfig TrainedConfig(const std::string& name);

// A model with uniform(-0.3, 0.3) weights from `seed` and the normaliser at kMean, kStd.
std::shared_ptr<Forecaster> MakeModel(const ModelConfig& config, uint32_t seed);
void Publish(const testing::TempDir& repository, const Forecaster& model, int64_t version);

// toy (versions 1 and 2, different weights; config.serving_version unset, so 2 serves),
// quant (version 1) and broken (config.json asks for H 12, its weights have H 8).
struct Repository {
  Repository();

  testing::TempDir dir;
  std::shared_ptr<Forecaster> toy_v1, toy_v2, quant;
};

// --- Inputs and expected forecasts

// (B, T, F) raw windows around kMean, within 1.5 kStd.
std::vector<float> Windows(int64_t B, int T, uint32_t seed);
// What the engine computes in-process (oneDNN backend) for windows `x` (input records, for a
// model with covariates or series).
std::vector<float> Expected(const Forecaster& model, const std::vector<float>& x);
// Equal within 1e-5 relative (plus 1e-5 absolute): the batch a request ran in may hold other
// rows, which may change the last bits.
bool Close(float got, float want);
void RequireClose(const std::vector<float>& got, const std::vector<float>& want);

// --- Requests

enum class Encoding { kValues, kRaw };

v1::PredictRequest Request(const std::string& model, const std::vector<int64_t>& shape,
                           const std::vector<float>& x, Encoding encoding = Encoding::kValues);
// B windows of toy from Windows(B, kT, seed).
v1::PredictRequest ToyRequest(int64_t B, uint32_t seed, Encoding encoding = Encoding::kValues);
// A tensor's floats, from `raw` or `values`.
std::vector<float> Floats(const v1::Tensor& tensor);
std::vector<int64_t> Shape(const v1::Tensor& tensor);
std::unique_ptr<grpc::ClientContext> Context(absl::Duration timeout = kRpcBound);
// The status has `code` and its message contains `phrase`.
void RequireError(const grpc::Status& status, grpc::StatusCode code, const std::string& phrase);

// ~200 rows of two smooth features on the test scale; `epochs` epochs of batch 16, seed 1.
v1::TrainingConfig Training(int epochs);
// `config` may be nullptr (train an existing model).
v1::TrainRequest TrainRequest(const std::string& model, const ModelConfig* config,
                              const v1::TrainingConfig& training);

// --- The daemon

// forecastd (FORECASTD_BINARY) on `repository` with two CPU workers, SERVING.
std::unique_ptr<testing::ForecastdDaemon> StartDaemon(const std::string& repository,
                                                      std::vector<std::string> extra_flags = {});
grpc::Status Predict(testing::ForecastdDaemon& daemon, const v1::PredictRequest& request,
                     v1::PredictResponse* response);
// The job id is left in `job_id` when not nullptr.
grpc::Status Train(testing::ForecastdDaemon& daemon, const v1::TrainRequest& request,
                   std::string* job_id);
std::string Metrics(const testing::ForecastdDaemon& daemon);
v1::ModelStatus GetModel(testing::ForecastdDaemon& daemon, const std::string& name);

// One daemon on a standard Repository for the test cases that do not change what it serves;
// started on first use, killed when the process exits.
struct SharedDaemon {
  Repository repository;
  std::unique_ptr<testing::ForecastdDaemon> daemon = StartDaemon(repository.dir.path());
};
SharedDaemon& Shared();

// Client threads, one per request, each sending its request in a loop until its first
// refusal (or Stop), recording every reply. The destructor stops and joins them.
class PredictLoad {
 public:
  struct Outcome {
    size_t request = 0;  // index into the requests
    grpc::StatusCode code = grpc::StatusCode::OK;
    std::string message;
    int64_t version = 0;
    std::vector<float> forecasts;
    bool after_mark = false;  // completed after Mark()
  };

  PredictLoad(testing::ForecastdDaemon& daemon, std::vector<v1::PredictRequest> requests);
  ~PredictLoad();

  // Wait (bounded by kRpcBound) until `n` requests in all have succeeded, or until every
  // client has met its refusal; false if that did not happen in time.
  bool AwaitAnswers(int n);
  bool AwaitAllRefused();
  int answered() const { return answered_.load(); }
  // Outcomes completing from now on have after_mark set.
  void Mark() { marked_.store(true); }
  // Ends the loops (each after its request in flight) and returns every outcome.
  std::vector<Outcome> Stop();

 private:
  void Run(size_t i);

  // Constant after construction.
  testing::ForecastdDaemon& daemon_;
  const std::vector<v1::PredictRequest> requests_;

  std::atomic<bool> stop_{false};
  std::atomic<bool> marked_{false};
  std::atomic<int> answered_{0};
  std::atomic<int> refused_{0};

  absl::Mutex mu_;
  std::vector<Outcome> outcomes_ ABSL_GUARDED_BY(mu_);

  // Only the test thread touches it.
  std::vector<std::thread> threads_;
};

}  // namespace forecastd::api_test

#endif  // FORECASTD_TESTS_TESTING_FORECASTD_API_FIXTURE_H_
