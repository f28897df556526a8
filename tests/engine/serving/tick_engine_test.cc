// TickEngine on CPU instances: a state-mode step computes Forecaster::Step at the task's slot,
// state reads and writes round-trip, ticks queued while the device is busy share one batch,
// slots run out with RESOURCE_EXHAUSTED, a draining engine refuses new tasks, and a tick for an
// idle engine runs inline on the enqueuing thread; a batch's computed tasks but its last say that
// more of the batch follows; with a limit of one batch at a time, ticks wait for the computing
// batch and then share one.
#include "engine/serving/tick_engine.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/synchronization/notification.h"
#include "backends/reference_backend.h"
#include "tests/testing/catch.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

ModelConfig StateConfig() {
  ModelConfig c = testing::SmallGruConfig("g", 4, 2);
  c.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
  return c;
}

// A CPU instance whose first `blocked` steps wait at `gate` before computing, so a test can
// keep a batch computing.
class GatedInstance : public ModelInstance {
 public:
  GatedInstance(std::unique_ptr<ModelInstance> inner, absl::Notification* gate, int blocked)
      : inner_(std::move(inner)), gate_(gate), blocked_(blocked) {}
  absl::Status Run(const float* input, int64_t rows, float* output) override {
    return inner_->Run(input, rows, output);
  }
  float* input_staging() override { return inner_->input_staging(); }
  float* output_staging() override { return inner_->output_staging(); }
  std::string compute() const override { return inner_->compute(); }
  absl::Status Step(const int32_t* slots, const uint8_t* zero, const float* x, int64_t rows,
                    float* output) override {
    if (blocked_.fetch_sub(1) > 0) {
      entered_.Notify();
      gate_->WaitForNotification();
    }
    return inner_->Step(slots, zero, x, rows, output);
  }
  absl::Status ReadState(int32_t slot, float* state) override {
    return inner_->ReadState(slot, state);
  }
  absl::Status WriteState(int32_t slot, const float* state) override {
    return inner_->WriteState(slot, state);
  }
  absl::Notification& entered() { return entered_; }

 private:
  std::unique_ptr<ModelInstance> inner_;
  absl::Notification* gate_;
  std::atomic<int> blocked_;
  absl::Notification entered_;
};

struct Env {
  // With `gate`, every instance's first step waits for it (GatedInstance).
  explicit Env(int64_t slots = 4, int workers = 1, int64_t max_concurrent_batches = 0,
               absl::Notification* gate = nullptr) {
    model = testing::RandomModel(StateConfig(), 5);
    DeviceScheduler::Options scheduler_options;
    scheduler_options.num_workers = workers;
    scheduler = DeviceScheduler::Create(scheduler_options).value();
    CpuExecutionDevice device(&backend, scheduler.get());
    ExecutionDevice::InstanceOptions instance_options;
    instance_options.max_batch_size = 4;
    instance_options.state_slots = slots;
    instance_options.max_step_rows = 8;
    instances = device.CreateInstances(model, instance_options).value();
    if (gate != nullptr) {
      for (std::unique_ptr<ModelInstance>& instance : instances) {
        instance = std::make_unique<GatedInstance>(std::move(instance), gate, 1);
      }
    }
    TickEngine::Options options;
    options.version = 3;
    options.mode = v1::StreamingConfig::STREAM_MODE_STATE;
    options.slots = slots;
    options.max_batch = 8;
    options.tick_floats = model->num_features();
    options.window_floats = int64_t{model->lookback()} * model->num_features();
    options.output_floats = model->num_outputs();
    options.state_floats = model->StateFloats();
    options.instances = &instances;
    options.scheduler = scheduler.get();
    options.run_inline_when_idle = true;
    options.max_concurrent_batches = max_concurrent_batches;
    engine = TickEngine::Create(options).value();
  }
  ~Env() {
    engine.reset();
    scheduler->Shutdown();
  }

  std::future<TickResult> Submit(TickTask::Kind kind, int32_t slot, std::vector<float> input,
                                 bool zero = false) {
    auto promise = std::make_shared<std::promise<TickResult>>();
    auto task = std::make_unique<TickTask>();
    task->kind = kind;
    task->slot = slot;
    task->zero_state = zero;
    task->input = std::move(input);
    task->done = [promise](TickResult r) { promise->set_value(std::move(r)); };
    const absl::Status status = engine->Enqueue(task);
    INFO(status.ToString());
    REQUIRE(status.ok());
    return promise->get_future();
  }

  // Occupies the only worker until the returned notification is notified, so that tasks
  // enqueued meanwhile queue up and share a batch. Keep it until their results are in.
  std::unique_ptr<absl::Notification> HoldWorker() {
    auto release = std::make_unique<absl::Notification>();
    std::promise<void> holding;
    absl::Notification* r = release.get();
    scheduler->Submit(1, absl::InfiniteFuture(), [r, &holding](int, bool) {
      holding.set_value();
      r->WaitForNotification();
    });
    holding.get_future().wait();
    return release;
  }

  ReferenceBackend backend;
  std::shared_ptr<Forecaster> model;
  std::unique_ptr<DeviceScheduler> scheduler;
  std::vector<std::unique_ptr<ModelInstance>> instances;
  std::unique_ptr<TickEngine> engine;
};

// A step tick from a zeroed state in `slot`, answered to `done`.
std::unique_ptr<TickTask> StepTask(int32_t slot, std::function<void(TickResult)> done) {
  auto task = std::make_unique<TickTask>();
  task->kind = TickTask::Kind::kStep;
  task->slot = slot;
  task->zero_state = true;
  task->input = {10.0f, 100.0f};
  task->done = std::move(done);
  return task;
}

TickResult Get(std::future<TickResult>& f) {
  REQUIRE(f.wait_for(std::chrono::seconds(60)) == std::future_status::ready);
  return f.get();
}

TEST_CASE(
    "A step task computes Forecaster::Step at its slot, and state reads and writes round-trip",
    "[unit][stream]") {
  Env env;
  const std::vector<float> x = testing::RandomWindows(1, 1, 3);
  auto step = env.Submit(TickTask::Kind::kStep, 2, x, /*zero=*/true);
  const TickResult result = Get(step);
  INFO(result.status.ToString());
  REQUIRE(result.status.ok());
  REQUIRE(result.version == 3);
  // The reference: one step from a zero state is the model over the one-tick window.
  ModelConfig one = env.model->config();
  one.set_lookback(1);
  auto windowed = Forecaster::Create(one).value();
  std::copy_n(env.model->parameters().data(), env.model->parameters().size(),
              windowed->parameters().data());
  const std::vector<float> want = testing::ReferenceForward(*windowed, x, 1);
  REQUIRE(result.output.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) REQUIRE(std::fabs(result.output[i] - want[i]) < 1e-5f);

  auto read = env.Submit(TickTask::Kind::kReadState, 2, {});
  const std::vector<float> state = Get(read).output;
  REQUIRE(state.size() == static_cast<size_t>(env.model->StateFloats()));
  REQUIRE(std::any_of(state.begin(), state.end(), [](float v) { return v != 0.0f; }));
  auto write = env.Submit(TickTask::Kind::kWriteState, 1, state);
  REQUIRE(Get(write).status.ok());
  auto copy = env.Submit(TickTask::Kind::kReadState, 1, {});
  REQUIRE(Get(copy).output == state);
}

TEST_CASE("Ticks queued while the device is busy share one batch", "[unit][stream]") {
  Env env;
  const std::unique_ptr<absl::Notification> release = env.HoldWorker();
  std::vector<std::future<TickResult>> results;
  for (int32_t slot = 0; slot < 4; ++slot) {
    results.push_back(env.Submit(TickTask::Kind::kStep, slot, {10.0f, 100.0f}, true));
  }
  release->Notify();
  for (auto& r : results) {
    const TickResult result = Get(r);
    REQUIRE(result.status.ok());
    REQUIRE(result.batch_rows == 4);
  }
}

TEST_CASE("A batch's computed tasks but the last say more of the batch follows, state tasks never",
          "[unit][stream]") {
  Env env;
  const std::unique_ptr<absl::Notification> release = env.HoldWorker();
  // Queued in this order; the batch runs the state read first, then the steps.
  std::vector<std::future<TickResult>> steps;
  for (int32_t slot = 0; slot < 3; ++slot) {
    steps.push_back(env.Submit(TickTask::Kind::kStep, slot, {10.0f, 100.0f}, true));
  }
  auto read = env.Submit(TickTask::Kind::kReadState, 3, {});
  release->Notify();
  const TickResult state = Get(read);
  REQUIRE(state.status.ok());
  CHECK_FALSE(state.more_in_batch);
  int more = 0;
  for (auto& f : steps) {
    const TickResult r = Get(f);
    REQUIRE(r.status.ok());
    REQUIRE(r.batch_rows == 3);
    more += r.more_in_batch ? 1 : 0;
  }
  CHECK(more == 2);  // all but the last of the three
}

TEST_CASE("A tick for an idle engine runs inline - one enqueued from its completion queues",
          "[unit][stream]") {
  Env env;
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id first_on, second_on;
  absl::Notification second_done;
  bool inside_first = false, second_inside_first = true;
  absl::Status second_enqueued, first_status, second_status;
  auto second = StepTask(1, [&](TickResult r) {
    second_on = std::this_thread::get_id();
    second_inside_first = inside_first;
    second_status = r.status;
    second_done.Notify();
  });
  auto first = StepTask(0, [&](TickResult r) {
    first_on = std::this_thread::get_id();
    inside_first = true;
    // The next request of a stream, enqueued from the completion: it must not run inside it.
    second_enqueued = env.engine->Enqueue(second);
    inside_first = false;
    first_status = r.status;
  });
  REQUIRE(env.engine->Enqueue(first).ok());
  // The idle engine ran it before Enqueue returned, on this thread.
  REQUIRE(first_on == caller);
  REQUIRE(first_status.ok());
  REQUIRE(second_enqueued.ok());
  REQUIRE(second_done.WaitForNotificationWithTimeout(absl::Seconds(60)));
  REQUIRE_FALSE(second_inside_first);
  REQUIRE(second_on != caller);  // a worker ran it
  REQUIRE(second_status.ok());
}

TEST_CASE("A tick arriving while the last batch's answers go out runs inline", "[unit][stream]") {
  Env env(/*slots=*/4, /*workers=*/2);
  // The first tick runs inline on `first` and holds its answer there, as a slow reply would.
  absl::Notification answering, release;
  absl::Status first_enqueued, first_status;
  std::thread first([&] {
    auto task = StepTask(0, [&](TickResult r) {
      first_status = r.status;
      answering.Notify();
      release.WaitForNotification();
    });
    first_enqueued = env.engine->Enqueue(task);
  });
  REQUIRE(answering.WaitForNotificationWithTimeout(absl::Seconds(60)));
  // Its step is done: the next tick runs here and now, not on a worker.
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id second_on;
  absl::Status second_status;
  auto second = StepTask(1, [&](TickResult r) {
    second_on = std::this_thread::get_id();
    second_status = r.status;
  });
  REQUIRE(env.engine->Enqueue(second).ok());
  REQUIRE(second_on == caller);
  REQUIRE(second_status.ok());
  release.Notify();
  first.join();
  REQUIRE(first_enqueued.ok());
  REQUIRE(first_status.ok());
}

TEST_CASE("With one batch at a time - ticks wait for the computing one and then share a batch",
          "[unit][stream]") {
  absl::Notification gate;
  Env env(/*slots=*/4, /*workers=*/2, /*max_concurrent_batches=*/1, &gate);
  // The first tick runs inline on `first` and stays in its step at the gate.
  std::promise<TickResult> first_promise;
  absl::Status first_enqueued;
  std::thread first([&] {
    auto task = StepTask(0, [&](TickResult r) { first_promise.set_value(std::move(r)); });
    first_enqueued = env.engine->Enqueue(task);
  });
  GatedInstance* computing = nullptr;
  for (int i = 0; i < 60000 && computing == nullptr; ++i) {
    for (auto& instance : env.instances) {
      auto* g = static_cast<GatedInstance*>(instance.get());
      if (g->entered().WaitForNotificationWithTimeout(absl::Milliseconds(1))) computing = g;
    }
  }
  REQUIRE(computing != nullptr);
  // Three more ticks: the other worker is idle, but the limit holds them in the queue.
  std::vector<std::future<TickResult>> results;
  for (int32_t slot = 1; slot < 4; ++slot) {
    results.push_back(env.Submit(TickTask::Kind::kStep, slot, {1, 2}, true));
  }
  REQUIRE(env.scheduler->queued() == 0);
  REQUIRE(env.scheduler->busy_workers() == 1);
  gate.Notify();
  first.join();
  REQUIRE(first_enqueued.ok());
  std::future<TickResult> first_result = first_promise.get_future();
  REQUIRE(Get(first_result).batch_rows == 1);
  for (auto& r : results) {
    const TickResult result = Get(r);
    REQUIRE(result.status.ok());
    REQUIRE(result.batch_rows == 3);  // one batch, formed when the first one's step ended
  }
}

TEST_CASE("TickEngine::Create refuses a negative batch limit", "[unit][stream]") {
  Env env;
  TickEngine::Options options;
  options.version = 3;
  options.mode = v1::StreamingConfig::STREAM_MODE_STATE;
  options.slots = 4;
  options.max_batch = 8;
  options.tick_floats = env.model->num_features();
  options.window_floats = int64_t{env.model->lookback()} * env.model->num_features();
  options.output_floats = env.model->num_outputs();
  options.state_floats = env.model->StateFloats();
  options.instances = &env.instances;
  options.scheduler = env.scheduler.get();
  options.max_concurrent_batches = -1;
  REQUIRE(TickEngine::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
}

TEST_CASE("Slots run out with RESOURCE_EXHAUSTED and a draining engine refuses tasks",
          "[unit][stream]") {
  Env env(/*slots=*/2);
  const int32_t a = env.engine->AllocateSlot().value();
  const int32_t b = env.engine->AllocateSlot().value();
  REQUIRE(a != b);
  const absl::StatusOr<int32_t> none = env.engine->AllocateSlot();
  REQUIRE(none.status().code() == absl::StatusCode::kResourceExhausted);
  env.engine->ReleaseSlot(a);
  REQUIRE(env.engine->AllocateSlot().value() == a);
  REQUIRE(env.engine->slots_in_use() == 2);

  auto wrong = std::make_unique<TickTask>();
  wrong->kind = TickTask::Kind::kStep;
  wrong->slot = 0;
  wrong->input = {1.0f};
  wrong->done = [](TickResult) {};
  REQUIRE(env.engine->Enqueue(wrong).code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(wrong != nullptr);

  env.engine->Drain();
  auto late = std::make_unique<TickTask>();
  late->kind = TickTask::Kind::kStep;
  late->slot = 0;
  late->input = {10.0f, 100.0f};
  late->done = [](TickResult) {};
  REQUIRE(env.engine->Enqueue(late).code() == absl::StatusCode::kUnavailable);
}

}  // namespace
}  // namespace forecastd
