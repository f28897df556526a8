// Needs a GPU. CudaExecutionDevice and its CUDA model instances: forecasts of every batch size
// (graph replays of padded batches and eager runs) against the reference backend for an LSTM,
// a GRU and a transformer; no device allocation on the predict path after the instances are
// made; a model with covariates and series, whose batches are input records; batches started on
// the GPU and completed by its completion thread; memory back to its level over load/unload
// cycles; and a ModelRegistry serving a model on the GPU under concurrent requests.
#include "engine/serving/cuda_execution_device.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <future>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/reference_backend.h"
#include "engine/file_io.h"
#include "engine/models/model_files.h"
#include "engine/serving/model_registry.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

constexpr int64_t kLookback = 12;

ModelConfig BaseConfig(const std::string& name) {
  ModelConfig c;
  c.set_name(name);
  c.set_lookback(kLookback);
  c.set_horizon(3);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.add_target_names("volume");
  c.mutable_batching()->set_max_batch_size(12);
  return c;
}

std::vector<ModelConfig> Configs() {
  ModelConfig lstm = BaseConfig("lstm");
  lstm.mutable_lstm()->set_hidden_size(16);
  lstm.mutable_lstm()->set_num_layers(2);
  lstm.mutable_lstm()->set_bidirectional(true);
  ModelConfig gru = BaseConfig("gru");
  gru.mutable_gru()->set_hidden_size(8);
  gru.mutable_gru()->set_num_layers(1);
  ModelConfig transformer = BaseConfig("transformer");
  transformer.mutable_transformer()->set_d_model(16);
  transformer.mutable_transformer()->set_num_heads(2);
  transformer.mutable_transformer()->set_num_layers(2);
  transformer.mutable_transformer()->set_dim_feedforward(32);
  return {lstm, gru, transformer};
}

// Largest |got - want| / (1e-4 + |want|); the forecasts are O(10-100) raw values.
// Infinite for a size mismatch. Makes no assertions, so client threads may call it.
double WorstError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double worst = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double err = std::abs(double{got[i]} - want[i]) / (1e-4 + std::abs(double{want[i]}));
    worst = std::isfinite(err) ? std::max(worst, err) : INFINITY;
  }
  return worst;
}

std::unique_ptr<CudaExecutionDevice> MakeDevice(bool use_graphs, int instances = 2) {
  CudaExecutionDevice::Options options;
  options.device = 0;
  options.instances_per_model = instances;
  options.use_graphs = use_graphs;
  options.workspace_bytes_per_instance = int64_t{4} << 20;
  absl::StatusOr<std::unique_ptr<CudaExecutionDevice>> device =
      CudaExecutionDevice::Create(options);
  INFO(device.status().ToString());
  REQUIRE(device.ok());
  return *std::move(device);
}

std::vector<std::unique_ptr<ModelInstance>> MakeInstances(
    CudaExecutionDevice& device, const std::shared_ptr<const Forecaster>& model) {
  ExecutionDevice::InstanceOptions options;
  options.max_batch_size = model->config().batching().max_batch_size();
  options.preferred_batch_sizes = {6};
  absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> instances =
      device.CreateInstances(model, options);
  INFO(instances.status().ToString());
  REQUIRE(instances.ok());
  return *std::move(instances);
}

TEST_CASE("GPU instances forecast what the reference does at every batch size, padded or not",
          "[gpu][serving]") {
  for (const bool use_graphs : {true, false}) {
    std::unique_ptr<CudaExecutionDevice> device = MakeDevice(use_graphs);
    for (const ModelConfig& config : Configs()) {
      const std::shared_ptr<const Forecaster> model = testing::RandomModel(config, 7);
      std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
      REQUIRE(instances.size() == 2);
      // Captured sizes: 1 2 4 6 8 12 (powers of two, the preferred 6, the maximum 12).
      if (use_graphs) {
        CHECK(instances[0]->ComputedRows(3) == 4);
        CHECK(instances[0]->ComputedRows(5) == 6);
        CHECK(instances[0]->ComputedRows(7) == 8);
        CHECK(instances[0]->ComputedRows(9) == 12);
        CHECK(instances[1]->ComputedRows(12) == 12);
      } else {
        CHECK(instances[0]->ComputedRows(5) == 5);
      }
      // Large batches first, so the rows a small padded batch computes but never returns
      // hold other windows.
      for (int64_t rows = 12; rows >= 1; --rows) {
        const std::vector<float> input =
            testing::RandomWindows(rows, kLookback, static_cast<uint32_t>(100 + rows));
        const std::vector<float> want = testing::ReferenceForward(*model, input, rows);
        for (const std::unique_ptr<ModelInstance>& instance : instances) {
          std::vector<float> got(want.size(), NAN);
          const absl::Status status = instance->Run(input.data(), rows, got.data());
          INFO(config.name() << " graphs=" << use_graphs << " rows=" << rows << ": "
                             << status.ToString());
          REQUIRE(status.ok());
          const double worst = WorstError(got, want);
          std::printf("%-11s graphs=%d rows=%2lld  max rel err %.2e\n", config.name().c_str(),
                      use_graphs, static_cast<long long>(rows), worst);
          CHECK(worst < 1e-4);
        }
      }
      std::vector<float> out(200);
      const std::vector<float> input = testing::RandomWindows(13, kLookback, 1);
      CHECK(instances[0]->Run(input.data(), 13, out.data()).code() ==
            absl::StatusCode::kInvalidArgument);
      CHECK(instances[0]->Run(input.data(), 0, out.data()).code() ==
            absl::StatusCode::kInvalidArgument);
    }
  }
}

TEST_CASE("GPU instances forecast a model with covariates and series as the reference does",
          "[gpu][serving]") {
  ModelConfig config = testing::CovariateConfig("covariates", kLookback, 3);
  config.mutable_batching()->set_max_batch_size(12);
  const std::shared_ptr<const Forecaster> model = testing::RandomCovariateModel(config, 17);
  for (const bool use_graphs : {true, false}) {
    std::unique_ptr<CudaExecutionDevice> device = MakeDevice(use_graphs);
    std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
    // Input records of both series; a padded batch's extra rows hold earlier records.
    for (int64_t rows = 12; rows >= 1; --rows) {
      const std::vector<float> records = testing::CovariateRecords(
          *model, testing::RandomCovariateRequest(*model, rows, static_cast<uint32_t>(200 + rows)));
      const std::vector<float> want = testing::ReferenceForward(*model, records, rows);
      for (const std::unique_ptr<ModelInstance>& instance : instances) {
        std::vector<float> got(want.size(), NAN);
        const absl::Status status = instance->Run(records.data(), rows, got.data());
        INFO("graphs=" << use_graphs << " rows=" << rows << ": " << status.ToString());
        REQUIRE(status.ok());
        const double worst = WorstError(got, want);
        std::printf("covariates  graphs=%d rows=%2lld  max rel err %.2e\n", use_graphs,
                    static_cast<long long>(rows), worst);
        CHECK(worst < 1e-4);
      }
    }
  }
}

TEST_CASE("A started GPU batch completes on the device's completion thread with Run's forecasts",
          "[gpu][serving]") {
  std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true);
  const ModelConfig config = Configs().front();
  const std::shared_ptr<const Forecaster> model = testing::RandomModel(config, 7);
  std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
  for (const int64_t rows : {int64_t{1}, int64_t{5}, int64_t{12}}) {
    const std::vector<float> input =
        testing::RandomWindows(rows, kLookback, static_cast<uint32_t>(300 + rows));
    const std::vector<float> want = testing::ReferenceForward(*model, input, rows);
    std::vector<float> got(want.size(), NAN);
    std::promise<std::pair<absl::Status, std::thread::id>> finished;
    instances[0]->Start(input.data(), rows, got.data(), [&finished](absl::Status status) {
      finished.set_value({std::move(status), std::this_thread::get_id()});
    });
    std::future<std::pair<absl::Status, std::thread::id>> result = finished.get_future();
    REQUIRE(result.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
    const auto [status, thread] = result.get();
    INFO("rows=" << rows << ": " << status.ToString());
    REQUIRE(status.ok());
    CHECK(thread != std::this_thread::get_id());  // the completion thread, not the caller
    CHECK(WorstError(got, want) < 1e-4);
    // Run on the same instance afterwards agrees bit for bit.
    std::vector<float> again(want.size(), NAN);
    REQUIRE(instances[0]->Run(input.data(), rows, again.data()).ok());
    CHECK(again == got);
  }
  // A bad batch size finishes at once with the error, on the caller's thread.
  std::vector<float> out(200);
  const std::vector<float> input = testing::RandomWindows(13, kLookback, 1);
  absl::Status refused;
  std::thread::id refused_on;
  instances[1]->Start(input.data(), 13, out.data(), [&](absl::Status status) {
    refused = std::move(status);
    refused_on = std::this_thread::get_id();
  });
  CHECK(refused.code() == absl::StatusCode::kInvalidArgument);
  CHECK(refused_on == std::this_thread::get_id());
}

TEST_CASE("A model's precision setting reaches its GPU instances", "[gpu][serving]") {
  std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true);
  const std::vector<float> input = testing::RandomWindows(8, kLookback, 41);
  for (const v1::Precision precision : {v1::PRECISION_TF32, v1::PRECISION_BF16}) {
    ModelConfig config = Configs()[2];  // the transformer: mostly GEMMs
    config.set_precision(precision);
    const std::shared_ptr<const Forecaster> model = testing::RandomModel(config, 12);
    const std::vector<float> want = testing::ReferenceForward(*model, input, 8);
    std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
    std::vector<float> got(want.size(), NAN);
    REQUIRE(instances[0]->Run(input.data(), 8, got.data()).ok());
    const double worst = WorstError(got, want);
    std::printf("transformer %s: max rel err %.2e\n", v1::Precision_Name(precision).c_str(), worst);
    INFO(v1::Precision_Name(precision) << ": max rel err " << worst);
    // Coarser than fp32's ~1e-7 (the mode is in effect), within the precision's reach.
    CHECK(worst > 1e-6);
    CHECK(worst < 5e-2);
  }
}

TEST_CASE("After the instances are made, batches allocate no device memory", "[gpu][serving]") {
  std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true);
  for (const ModelConfig& config : Configs()) {
    const std::shared_ptr<const Forecaster> model = testing::RandomModel(config, 8);
    std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
    const CudaAllocator::Stats before = device->allocator().stats();
    std::mt19937 rng(3);
    std::vector<float> out(static_cast<size_t>(12 * model->num_outputs()));
    for (int i = 0; i < 100; ++i) {
      const int64_t rows = std::uniform_int_distribution<int64_t>(1, 12)(rng);
      const std::vector<float> input = testing::RandomWindows(rows, kLookback, i);
      REQUIRE(instances[static_cast<size_t>(i % 2)]->Run(input.data(), rows, out.data()).ok());
    }
    const CudaAllocator::Stats after = device->allocator().stats();
    INFO(config.name());
    CHECK(after.allocations == before.allocations);
    CHECK(after.cuda_malloc_calls == before.cuda_malloc_calls);
    CHECK(after.bytes_in_use == before.bytes_in_use);
  }
}

TEST_CASE("Making and dropping instances 100 times leaves device memory where it was",
          "[gpu][serving]") {
  std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true);
  const std::shared_ptr<const Forecaster> model = testing::RandomModel(Configs()[0], 9);
  const int64_t in_use_before = device->allocator().stats().bytes_in_use;
  size_t free_after_first = 0;
  int64_t mallocs_after_first = 0;
  const std::vector<float> input = testing::RandomWindows(5, kLookback, 2);
  std::vector<float> out(static_cast<size_t>(5 * model->num_outputs()));
  for (int cycle = 0; cycle < 100; ++cycle) {
    {
      std::vector<std::unique_ptr<ModelInstance>> instances = MakeInstances(*device, model);
      REQUIRE(instances[0]->Run(input.data(), 5, out.data()).ok());
    }
    REQUIRE(device->allocator().stats().bytes_in_use == in_use_before);
    size_t free_bytes = 0, total_bytes = 0;
    REQUIRE(cudaMemGetInfo(&free_bytes, &total_bytes) == cudaSuccess);
    if (cycle == 0) {
      free_after_first = free_bytes;
      mallocs_after_first = device->allocator().stats().cuda_malloc_calls;
    }
    if (cycle == 99) {
      // The caching allocator serves every later cycle from its free lists; the GPU's free
      // memory (streams, handles and pinned buffers included) is where the first cycle left it,
      // give or take 64 MiB for the driver's own pools.
      CHECK(device->allocator().stats().cuda_malloc_calls == mallocs_after_first);
      const double drift_mib =
          (static_cast<double>(free_after_first) - static_cast<double>(free_bytes)) / (1 << 20);
      std::printf("100 load/unload cycles: device free memory drift %.1f MiB\n", drift_mib);
      CHECK(drift_mib < 64.0);
    }
  }
}

TEST_CASE("A registry serves a model on the GPU under concurrent requests", "[gpu][serving]") {
  testing::TempDir dir;
  const std::string root = dir.path() + "/models";
  ModelConfig config = Configs()[0];
  config.mutable_instances()->add_devices("cuda:0");
  const std::unique_ptr<Forecaster> model = testing::RandomModel(config, 10);
  REQUIRE(PublishVersion(*model, root + "/" + config.name(), 1).ok());

  std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true);
  ModelRegistry::Options options;
  options.repository_path = root;
  options.devices = {device.get()};
  std::unique_ptr<ModelRegistry> registry = ModelRegistry::Create(options).value();
  REQUIRE(registry->Start().ok());
  const ModelStatus status = registry->GetModel("lstm").value();
  INFO(status.last_error.ToString());
  REQUIRE(status.state == ModelState::kReady);
  REQUIRE(status.loaded.at(0).device == "cuda:0");

  // Inputs and reference forecasts made here: Catch2's assertions are for the main thread.
  constexpr int kClients = 8, kRequests = 25;
  std::vector<std::vector<float>> inputs, wants;
  for (int c = 0; c < kClients; ++c) {
    for (int i = 0; i < kRequests; ++i) {
      const int64_t rows = 1 + (c + i) % 5;
      inputs.push_back(
          testing::RandomWindows(rows, kLookback, static_cast<uint32_t>(c * 1000 + i)));
      wants.push_back(testing::ReferenceForward(*model, inputs.back(), rows));
    }
  }
  std::vector<std::thread> clients;
  std::vector<double> worst(kClients, 0.0);
  for (int c = 0; c < kClients; ++c) {
    clients.emplace_back([&, c]() {
      double& w = worst[static_cast<size_t>(c)];
      for (int i = 0; i < kRequests; ++i) {
        const size_t k = static_cast<size_t>(c * kRequests + i);
        auto promise = std::make_shared<std::promise<PredictResult>>();
        std::future<PredictResult> result = promise->get_future();
        auto task = std::make_unique<PredictTask>();
        task->input = inputs[k];
        task->rows = 1 + (c + i) % 5;
        task->done = [promise](PredictResult r) { promise->set_value(std::move(r)); };
        if (!registry->Enqueue("lstm", 0, task).ok()) {
          w = INFINITY;
          return;
        }
        const PredictResult r = result.get();
        w = r.status.ok() ? std::max(w, WorstError(r.output, wants[k])) : INFINITY;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  for (const double w : worst) CHECK(w < 1e-4);
  registry.reset();  // before the device its instances live on
}

}  // namespace
}  // namespace forecastd

namespace forecastd {
namespace {

// State mode on the GPU: steps of up to 1,024 ticks over a slab of 10,000 streams, gathered and
// scattered by slot inside captured graphs, forecast what the reference's steps do on the CPU.
TEST_CASE("GPU state-mode steps forecast what the CPU's steps do, for 1 to 1,024 streams a step",
          "[gpu][serving][stream]") {
  constexpr int64_t kSlots = 10000, kMaxStep = 1024;
  for (const bool lstm : {true, false}) {
    ModelConfig config = BaseConfig(lstm ? "lstm_state" : "gru_state");
    v1::RecurrentConfig* rnn = lstm ? config.mutable_lstm() : config.mutable_gru();
    rnn->set_hidden_size(lstm ? 32 : 9);  // an odd H too
    rnn->set_num_layers(2);
    config.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
    const std::shared_ptr<const Forecaster> model = testing::RandomModel(config, 5);
    const int64_t S = model->StateFloats(), O = model->num_outputs();
    std::unique_ptr<CudaExecutionDevice> device = MakeDevice(/*use_graphs=*/true, 1);
    ExecutionDevice::InstanceOptions options;
    options.max_batch_size = 4;
    options.state_slots = kSlots;
    options.max_step_rows = kMaxStep;
    auto gpu = device->CreateInstances(model, options);
    INFO(gpu.status().ToString());
    REQUIRE(gpu.ok());
    ReferenceBackend reference;
    DeviceScheduler::Options scheduler_options;
    auto scheduler = DeviceScheduler::Create(scheduler_options).value();
    CpuExecutionDevice cpu_device(&reference, scheduler.get(), 1);
    auto cpu = cpu_device.CreateInstances(model, options).value();

    std::mt19937 gen(3);
    for (const int64_t B : {int64_t{1}, int64_t{3}, int64_t{100}, kMaxStep}) {
      // B distinct slots scattered over the slab, three steps from zero states.
      std::vector<int32_t> slots(static_cast<size_t>(kSlots));
      for (int32_t s = 0; s < kSlots; ++s) slots[static_cast<size_t>(s)] = s;
      std::shuffle(slots.begin(), slots.end(), gen);
      slots.resize(static_cast<size_t>(B));
      for (int step = 0; step < 3; ++step) {
        const std::vector<uint8_t> zero(static_cast<size_t>(B), step == 0 ? 1 : 0);
        const std::vector<float> x = testing::RandomWindows(B, 1, static_cast<uint32_t>(step));
        std::vector<float> want(static_cast<size_t>(B * O)), got(want.size(), NAN);
        REQUIRE(cpu[0]->Step(slots.data(), zero.data(), x.data(), B, want.data()).ok());
        const absl::Status status =
            (*gpu)[0]->Step(slots.data(), zero.data(), x.data(), B, got.data());
        INFO(status.ToString());
        REQUIRE(status.ok());
        const double worst = WorstError(got, want);
        std::printf("%-10s B=%4lld step %d  max rel err %.2e\n", config.name().c_str(),
                    static_cast<long long>(B), step, worst);
        CHECK(worst < 1e-4);
      }
      std::vector<float> state(static_cast<size_t>(S)), cpu_state(state.size());
      REQUIRE((*gpu)[0]->ReadState(slots[0], state.data()).ok());
      REQUIRE(cpu[0]->ReadState(slots[0], cpu_state.data()).ok());
      CHECK(WorstError(state, cpu_state) < 1e-4);
    }
    // Informational: one step of 1,024 of the 10,000 resident streams (graph replay).
    std::vector<int32_t> slots(static_cast<size_t>(kMaxStep));
    for (int64_t b = 0; b < kMaxStep; ++b)
      slots[static_cast<size_t>(b)] = static_cast<int32_t>(b * 9);
    const std::vector<uint8_t> zero(static_cast<size_t>(kMaxStep), 0);
    const std::vector<float> x = testing::RandomWindows(kMaxStep, 1, 9);
    std::vector<float> out(static_cast<size_t>(kMaxStep * O));
    for (int i = 0; i < 10; ++i)
      REQUIRE((*gpu)[0]->Step(slots.data(), zero.data(), x.data(), kMaxStep, out.data()).ok());
    const auto t0 = std::chrono::steady_clock::now();
    constexpr int kIters = 100;
    for (int i = 0; i < kIters; ++i) {
      REQUIRE((*gpu)[0]->Step(slots.data(), zero.data(), x.data(), kMaxStep, out.data()).ok());
    }
    const double us =
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count() /
        kIters;
    std::printf("%-10s %lld resident streams: a step of %lld ticks takes %.1f us end to end\n",
                config.name().c_str(), static_cast<long long>(kSlots),
                static_cast<long long>(kMaxStep), us);
    cpu.clear();
    scheduler->Shutdown();
  }
}

}  // namespace
}  // namespace forecastd
