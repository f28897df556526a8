// Needs a GPU. Forecaster::Step of an LSTM / GRU on the CUDA backend, whose recurrent part runs
// as the fused step kernels (CudaBackend::RecurrentStep, kernels/cuda/recurrent_step.h),
// against the same Step on the reference backend (host gather, reference layers, scatter): 1-3
// layers, odd and even hidden sizes, 1 to 4096 streams in scattered slots of a slab whose other
// rows must stay untouched, several consecutive steps from random states, every kernel choice
// (kAuto, kCluster, kWarp, kTiled; up to 64 streams kAuto and kCluster make the whole step one
// launch, RecurrentStepForecast); forecasts and states within 1e-5 (abs + rel). Then the step
// captured in a CUDA graph and replayed, and the one-launch step reading its ticks and slots
// from pinned host memory and writing its forecasts there, with quantiles and without a
// normaliser. Last, the resident step (backends/cuda/resident_step.h): the same forecasts and
// states as the one-launch step over consecutive steps of 1 to 8 streams, its kernel leaving
// when idle and after its longest run, one kernel per GPU at a time, and a change of model.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_graph.h"
#include "backends/cuda/resident_step.h"
#include "backends/reference_backend.h"
#include "engine/models/cuda_data_ops.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

constexpr int kF = 10, kP = 2;

ModelConfig Config(bool lstm, int layers, int hidden) {
  ModelConfig c;
  c.set_name(lstm ? "lstm" : "gru");
  c.set_lookback(8);
  c.set_horizon(kP);
  for (int f = 0; f < kF; ++f) c.add_feature_names(absl::StrCat("f", f));
  c.add_target_names("f3");
  c.add_target_names("f0");
  v1::RecurrentConfig* rnn = lstm ? c.mutable_lstm() : c.mutable_gru();
  rnn->set_hidden_size(hidden);
  rnn->set_num_layers(layers);
  return c;
}

std::vector<float> Normal(int64_t n, uint32_t seed, float scale) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// Random weights of PyTorch's scale (about 1/sqrt(H)) and normaliser statistics.
std::unique_ptr<Forecaster> Build(const ModelConfig& config, int hidden, uint32_t seed) {
  auto model = Forecaster::Create(config).value();
  ParameterArena& p = model->parameters();
  const std::vector<float> w = Normal(p.size(), seed, 0.6f / std::sqrt(static_cast<float>(hidden)));
  std::copy(w.begin(), w.end(), p.data());
  if (!model->standardized()) return model;
  float* mean = p.at("normalizer.mean");
  float* std = p.at("normalizer.std");
  for (int f = 0; f < kF; ++f) {
    mean[f] = 0.5f * f;
    std[f] = 0.5f + 0.1f * f;
  }
  return model;
}

void Cuda(cudaError_t error, const char* what) {
  INFO(what << ": " << cudaGetErrorString(error));
  REQUIRE(error == cudaSuccess);
}

void Ok(const absl::Status& status, const std::string& what) {
  INFO(what << ": " << status.ToString());
  REQUIRE(status.ok());
}

// Device buffers, freed (after the device is idle) with the object. Copies are synchronous
// with the whole device, so they are ordered with the backend's non-blocking stream.
class DeviceMemory {
 public:
  ~DeviceMemory() { cudaDeviceSynchronize(); }
  template <typename T>
  T* Upload(const std::vector<T>& host) {
    absl::StatusOr<DeviceBuffer> buffer = testing::SharedGpuEnv().allocator->Allocate(
        static_cast<int64_t>(std::max<size_t>(host.size(), 1) * sizeof(T)));
    if (!buffer.ok()) FAIL("Allocate: " << buffer.status().ToString());
    T* p = buffer->as<T>();
    buffers_.push_back(std::move(*buffer));
    Put(p, host);
    return p;
  }
  template <typename T>
  static void Put(T* dev, const std::vector<T>& host) {
    Cuda(cudaDeviceSynchronize(), "before upload");
    Cuda(cudaMemcpy(dev, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
    Cuda(cudaDeviceSynchronize(), "after upload");
  }
  static std::vector<float> Get(const float* dev, int64_t n) {
    std::vector<float> host(static_cast<size_t>(n));
    Cuda(cudaDeviceSynchronize(), "before download");
    Cuda(cudaMemcpy(host.data(), dev, host.size() * sizeof(float), cudaMemcpyDeviceToHost),
         "download");
    return host;
  }

 private:
  std::vector<DeviceBuffer> buffers_;
};

std::unique_ptr<CudaBackend> MakeCuda(CudaBackend::Options::StepKernel kernel) {
  CudaBackend::Options options;  // math = kFp32
  options.step_kernel = kernel;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(
      testing::SharedGpuEnv().streams->Lease(), testing::SharedGpuEnv().allocator.get(), options);
  if (!backend.ok()) FAIL("CudaBackend::Create: " << backend.status().ToString());
  return std::move(*backend);
}

// Elements outside |got - want| <= 1e-5 + 1e-5 |want|, with the worst one described.
struct Mismatch {
  int64_t bad = 0;
  double worst = 0.0;
  std::string where;
};

Mismatch Compare(const std::vector<float>& got, const std::vector<float>& want) {
  Mismatch m;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= 1e-5 + 1e-5 * std::fabs(want[i]))) {
      ++m.bad;
      if (!(d <= m.worst)) {
        m.worst = d;
        m.where = absl::StrCat("[", i, "] got ", got[i], " want ", want[i]);
      }
    }
  }
  return m;
}

// B distinct slots among `rows`, in scattered order.
std::vector<int32_t> ScatteredSlots(int64_t B, int64_t rows, uint32_t seed) {
  std::vector<int32_t> all(static_cast<size_t>(rows));
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  all.resize(static_cast<size_t>(B));
  return all;
}

using StepKernel = CudaBackend::Options::StepKernel;
constexpr StepKernel kKernels[] = {StepKernel::kAuto, StepKernel::kCluster, StepKernel::kWarp,
                                   StepKernel::kTiled};
constexpr const char* kKernelNames[] = {"auto", "cluster", "warp", "tiled"};
constexpr int kKernelCount = 4;

TEST_CASE("The fused step on the GPU gives the reference backend's Step", "[gpu][model][stream]") {
  constexpr int kSteps = 3;
  ReferenceBackend reference;
  std::unique_ptr<CudaBackend> cuda[kKernelCount];
  for (int k = 0; k < kKernelCount; ++k) cuda[k] = MakeCuda(kKernels[k]);
  for (const bool lstm : {true, false}) {
    for (const int layers : {1, 2, 3}) {
      for (const int hidden : {9, 33, 128}) {
        const auto model = Build(Config(lstm, layers, hidden), hidden, 7 + layers + hidden);
        REQUIRE(model->StateFloats() == int64_t{layers} * (lstm ? 2 : 1) * hidden);
        const int64_t S = model->StateFloats(), outs = model->num_outputs();
        for (const int64_t B :
             {int64_t{1}, int64_t{7}, int64_t{64}, int64_t{1000}, int64_t{4096}}) {
          const std::string label =
              absl::StrCat(lstm ? "lstm" : "gru", " L=", layers, " H=", hidden, " B=", B);
          CAPTURE(label);
          const int64_t rows = B + B / 2 + 3;
          const std::vector<int32_t> slots = ScatteredSlots(B, rows, static_cast<uint32_t>(B));
          const std::vector<float> slab_0 = Normal(rows * S, 3, 0.8f);
          const std::vector<float> ticks = Normal(kSteps * B * kF, 11, 2.0f);  // (steps, B, F)

          // The reference on the host.
          std::vector<float> ref_slab = slab_0;
          std::vector<std::vector<float>> ref_out(kSteps, std::vector<float>(B * outs));
          std::vector<std::vector<float>> ref_slabs;
          Workspace host_workspace;
          for (int t = 0; t < kSteps; ++t) {
            const std::vector<float> x(ticks.begin() + t * B * kF,
                                       ticks.begin() + (t + 1) * B * kF);
            Ok(model->Step(reference, ref_out[t].data(), x.data(), ref_slab.data(), slots.data(), B,
                           host_workspace, ForwardPlacement{}),
               label + " reference Step");
            ref_slabs.push_back(ref_slab);
          }

          DeviceMemory mem;
          const ParameterArena& arena = model->parameters();
          const float* weights =
              mem.Upload(std::vector<float>(arena.data(), arena.data() + arena.size()));
          const int32_t* dslots = mem.Upload(slots);
          const float* dticks = mem.Upload(ticks);
          float* out = mem.Upload(std::vector<float>(B * outs, 0.0f));
          const int64_t ws_floats = model->StepWorkspaceFloats(B);
          float* ws = mem.Upload(std::vector<float>(ws_floats, 0.0f));
          for (int k = 0; k < kKernelCount; ++k) {
            CAPTURE(kKernelNames[k]);
            float* slab = mem.Upload(slab_0);
            CudaDataOps data(cuda[k]->stream());
            Workspace workspace(ws, ws_floats);
            for (int t = 0; t < kSteps; ++t) {
              CAPTURE(t);
              workspace.Reset();
              Ok(model->Step(*cuda[k], out, dticks + t * B * kF, slab, dslots, B, workspace,
                             ForwardPlacement{weights, &data}),
                 label + " cuda Step");
              Ok(cuda[k]->Synchronize(), label + " cuda Synchronize");
              const Mismatch forecast = Compare(DeviceMemory::Get(out, B * outs), ref_out[t]);
              INFO("forecast: " << forecast.bad << " bad, worst " << forecast.where);
              CHECK(forecast.bad == 0);
              // Touched rows near the reference's, every other row bit for bit as it was.
              const Mismatch state = Compare(DeviceMemory::Get(slab, rows * S), ref_slabs[t]);
              INFO("states: " << state.bad << " bad, worst " << state.where);
              CHECK(state.bad == 0);
            }
            const std::vector<float> got = DeviceMemory::Get(slab, rows * S);
            std::vector<bool> touched(static_cast<size_t>(rows), false);
            for (const int32_t s : slots) touched[static_cast<size_t>(s)] = true;
            int64_t changed = 0;
            for (int64_t r = 0; r < rows; ++r) {
              if (touched[static_cast<size_t>(r)]) continue;
              for (int64_t i = 0; i < S; ++i) changed += got[r * S + i] != slab_0[r * S + i];
            }
            CHECK(changed == 0);
          }
        }
      }
    }
  }
}

TEST_CASE("The fused step replays in a CUDA graph", "[gpu][model][stream]") {
  constexpr int kSteps = 4;
  constexpr int64_t kB = 64, kRows = 100, kHidden = 128;
  ReferenceBackend reference;
  std::unique_ptr<CudaBackend> cuda = MakeCuda(StepKernel::kAuto);
  for (const bool lstm : {true, false}) {
    CAPTURE(lstm);
    const auto model = Build(Config(lstm, 2, kHidden), kHidden, 5);
    const int64_t S = model->StateFloats(), outs = model->num_outputs();
    const std::vector<int32_t> slots = ScatteredSlots(kB, kRows, 9);
    const std::vector<float> slab_0 = Normal(kRows * S, 4, 0.8f);
    const std::vector<float> x = Normal(kB * kF, 12, 2.0f);
    std::vector<float> ref_slab = slab_0, ref_out(kB * outs);
    Workspace host_workspace;

    DeviceMemory mem;
    const ParameterArena& arena = model->parameters();
    const float* weights =
        mem.Upload(std::vector<float>(arena.data(), arena.data() + arena.size()));
    const int32_t* dslots = mem.Upload(slots);
    const float* dx = mem.Upload(x);
    float* out = mem.Upload(std::vector<float>(kB * outs, 0.0f));
    float* slab = mem.Upload(slab_0);
    const int64_t ws_floats = model->StepWorkspaceFloats(kB);
    Workspace workspace(mem.Upload(std::vector<float>(ws_floats, 0.0f)), ws_floats);
    CudaDataOps data(cuda->stream());
    const auto step = [&]() {
      workspace.Reset();
      return model->Step(*cuda, out, dx, slab, dslots, kB, workspace,
                         ForwardPlacement{weights, &data});
    };
    // The first call of a shape may allocate; it is a step like the others.
    Ok(step(), "warm-up Step");
    Ok(model->Step(reference, ref_out.data(), x.data(), ref_slab.data(), slots.data(), kB,
                   host_workspace, ForwardPlacement{}),
       "reference Step");
    absl::StatusOr<CudaGraph> graph = CudaGraph::Capture(cuda->stream(), step);
    Ok(graph.status(), "Capture");
    for (int t = 1; t < kSteps; ++t) {
      CAPTURE(t);
      Ok(graph->Launch(cuda->stream()), "Launch");
      Ok(model->Step(reference, ref_out.data(), x.data(), ref_slab.data(), slots.data(), kB,
                     host_workspace, ForwardPlacement{}),
         "reference Step");
      Ok(cuda->Synchronize(), "Synchronize");
      const Mismatch forecast = Compare(DeviceMemory::Get(out, kB * outs), ref_out);
      INFO("forecast: " << forecast.bad << " bad, worst " << forecast.where);
      CHECK(forecast.bad == 0);
      const Mismatch state = Compare(DeviceMemory::Get(slab, kRows * S), ref_slab);
      INFO("states: " << state.bad << " bad, worst " << state.where);
      CHECK(state.bad == 0);
    }
  }
}

// Pinned host memory for one step's slots, ticks and forecasts of up to B streams.
class PinnedStep {
 public:
  PinnedStep(int64_t B, int64_t outs) {
    Cuda(cudaHostAlloc(&memory_, static_cast<size_t>(B * (kF + 1 + outs)) * sizeof(float),
                       cudaHostAllocDefault),
         "cudaHostAlloc");
    slots = static_cast<int32_t*>(memory_);
    x = static_cast<float*>(memory_) + B;
    out = x + B * kF;
  }
  ~PinnedStep() {
    if (memory_ != nullptr) cudaFreeHost(memory_);
  }
  PinnedStep(const PinnedStep&) = delete;
  PinnedStep& operator=(const PinnedStep&) = delete;

  // Frees the memory now, requiring that it succeeds.
  void Free() {
    Cuda(cudaFreeHost(memory_), "cudaFreeHost");
    memory_ = nullptr;
  }

  int32_t* slots = nullptr;
  float* x = nullptr;
  float* out = nullptr;

 private:
  void* memory_ = nullptr;
};

TEST_CASE("A step of few streams is one launch on pinned host memory, quantiles included",
          "[gpu][model][stream]") {
  ReferenceBackend reference;
  std::unique_ptr<CudaBackend> cuda = MakeCuda(StepKernel::kAuto);
  std::unique_ptr<CudaBackend> warp = MakeCuda(StepKernel::kWarp);
  for (const bool lstm : {true, false}) {
    for (const bool standard : {true, false}) {
      ModelConfig config = Config(lstm, 2, 128);
      for (const float q : {0.1f, 0.5f, 0.9f}) config.add_quantiles(q);
      if (!standard) config.set_normalization(v1::NORMALIZATION_NONE);
      const auto model = Build(config, 128, lstm ? 21 : 22);
      const int64_t S = model->StateFloats(), outs = model->num_outputs();
      REQUIRE(outs == int64_t{kP} * 2 * 3);
      CHECK(model->StepIsOneCall(*cuda, 1));
      CHECK(model->StepIsOneCall(*cuda, 64));
      CHECK_FALSE(model->StepIsOneCall(*cuda, 65));
      CHECK_FALSE(model->StepIsOneCall(*warp, 1));  // a forced per-layer kernel composes
      CHECK_FALSE(model->StepIsOneCall(reference, 1));
      for (const int64_t B : {int64_t{1}, int64_t{9}, int64_t{64}}) {
        const std::string label =
            absl::StrCat(lstm ? "lstm" : "gru", standard ? " standard" : " raw", " B=", B);
        CAPTURE(label);
        const int64_t rows = 2 * B + 5;
        const std::vector<int32_t> slots = ScatteredSlots(B, rows, static_cast<uint32_t>(B + 1));
        const std::vector<float> slab_0 = Normal(rows * S, 6, 0.8f);
        const std::vector<float> x = Normal(B * kF, 13, 2.0f);
        std::vector<float> ref_slab = slab_0, ref_out(static_cast<size_t>(B * outs));
        Workspace host_workspace;
        Ok(model->Step(reference, ref_out.data(), x.data(), ref_slab.data(), slots.data(), B,
                       host_workspace, ForwardPlacement{}),
           "reference Step");

        DeviceMemory mem;
        const ParameterArena& arena = model->parameters();
        const float* weights =
            mem.Upload(std::vector<float>(arena.data(), arena.data() + arena.size()));
        float* slab = mem.Upload(slab_0);
        // Pinned host memory for the ticks, the slots and the forecasts.
        PinnedStep pinned(B, outs);
        int32_t* host_slots = pinned.slots;
        float* host_x = pinned.x;
        float* host_out = pinned.out;
        std::copy(slots.begin(), slots.end(), host_slots);
        std::copy(x.begin(), x.end(), host_x);
        std::fill(host_out, host_out + B * outs, -1.0f);
        Workspace workspace;  // the one-launch step takes none
        CudaDataOps data(cuda->stream());
        Ok(model->Step(*cuda, host_out, host_x, slab, host_slots, B, workspace,
                       ForwardPlacement{weights, &data}),
           "one-launch Step");
        Ok(cuda->Synchronize(), "Synchronize");
        const Mismatch forecast =
            Compare(std::vector<float>(host_out, host_out + B * outs), ref_out);
        INFO("forecast: " << forecast.bad << " bad, worst " << forecast.where);
        CHECK(forecast.bad == 0);
        const Mismatch state = Compare(DeviceMemory::Get(slab, rows * S), ref_slab);
        INFO("states: " << state.bad << " bad, worst " << state.where);
        CHECK(state.bad == 0);
        pinned.Free();
      }
    }
  }
}

std::unique_ptr<ResidentStep> MakeResident(ResidentStep::Turn* turn, int64_t idle_us,
                                           int64_t max_run_us) {
  ResidentStep::Options options;
  options.device = testing::SharedGpuEnv().allocator->device();
  options.turn = turn;
  options.idle_us = idle_us;
  options.max_run_us = max_run_us;
  absl::StatusOr<std::unique_ptr<ResidentStep>> resident = ResidentStep::Create(options);
  if (!resident.ok()) FAIL("ResidentStep::Create: " << resident.status().ToString());
  return std::move(*resident);
}

// One model's step on two copies of a slab: through `with` (a backend that may hand it to a
// resident step) and through a plain backend's one launch; each step's forecasts compared.
class TwinSteps {
 public:
  static constexpr int64_t kMaxStreams = 16;

  TwinSteps(const Forecaster& model, CudaBackend* with, int64_t rows, uint32_t seed)
      : model_(model),
        with_(with),
        plain_(MakeCuda(StepKernel::kAuto)),
        rows_(rows),
        S_(model.StateFloats()),
        outs_(model.num_outputs()),
        a_(kMaxStreams, outs_),
        b_(kMaxStreams, outs_),
        data_with_(with->stream()),
        data_plain_(plain_->stream()) {
    const ParameterArena& arena = model.parameters();
    weights_ = mem_.Upload(std::vector<float>(arena.data(), arena.data() + arena.size()));
    const std::vector<float> slab_0 = Normal(rows * S_, seed, 0.8f);
    slab_a_ = mem_.Upload(slab_0);
    slab_b_ = mem_.Upload(slab_0);
  }

  // Steps B (<= kMaxStreams) streams in random slots with random ticks on both and compares
  // the forecasts.
  void Step(int64_t B, uint32_t seed) {
    REQUIRE(B <= kMaxStreams);
    const std::vector<int32_t> slots = ScatteredSlots(B, rows_, seed);
    const std::vector<float> x = Normal(B * kF, seed + 1000, 2.0f);
    for (PinnedStep* p : {&a_, &b_}) {
      std::copy(slots.begin(), slots.end(), p->slots);
      std::copy(x.begin(), x.end(), p->x);
      std::fill(p->out, p->out + B * outs_, -1.0f);
    }
    Ok(model_.Step(*with_, a_.out, a_.x, slab_a_, a_.slots, B, workspace_,
                   ForwardPlacement{weights_, &data_with_}),
       "Step through the resident step's backend");
    Ok(with_->Synchronize(), "Synchronize");
    Ok(model_.Step(*plain_, b_.out, b_.x, slab_b_, b_.slots, B, workspace_,
                   ForwardPlacement{weights_, &data_plain_}),
       "one-launch Step");
    Ok(plain_->Synchronize(), "Synchronize");
    const Mismatch forecast = Compare(std::vector<float>(a_.out, a_.out + B * outs_),
                                      std::vector<float>(b_.out, b_.out + B * outs_));
    INFO("B=" << B << " forecast: " << forecast.bad << " bad, worst " << forecast.where);
    CHECK(forecast.bad == 0);
  }

  // The two slabs (every row: other rows must be untouched alike). Synchronises the device,
  // so a resident kernel has left when it returns.
  void CompareStates() {
    const Mismatch state =
        Compare(DeviceMemory::Get(slab_a_, rows_ * S_), DeviceMemory::Get(slab_b_, rows_ * S_));
    INFO("states: " << state.bad << " bad, worst " << state.where);
    CHECK(state.bad == 0);
  }

 private:
  const Forecaster& model_;
  CudaBackend* const with_;
  std::unique_ptr<CudaBackend> plain_;
  const int64_t rows_, S_, outs_;
  DeviceMemory mem_;
  PinnedStep a_, b_;
  Workspace workspace_;  // the one-launch step takes none
  CudaDataOps data_with_, data_plain_;
  const float* weights_ = nullptr;
  float* slab_a_ = nullptr;
  float* slab_b_ = nullptr;
};

TEST_CASE("A resident step gives the one-launch step's forecasts and states, step after step",
          "[gpu][model][stream]") {
  ResidentStep::Turn turn;
  for (const bool lstm : {true, false}) {
    for (const int hidden : {128, 37}) {
      CAPTURE(lstm, hidden);
      ModelConfig config = Config(lstm, 2, hidden);
      for (const float q : {0.1f, 0.5f, 0.9f}) config.add_quantiles(q);
      const auto model = Build(config, hidden, lstm ? 41u : 42u);
      // Idle and run limits far beyond the test's pauses, so that the kernel stays for all 24
      // steps on any machine.
      const std::unique_ptr<ResidentStep> resident = MakeResident(&turn, 200'000, 10'000'000);
      std::unique_ptr<CudaBackend> with = MakeCuda(StepKernel::kAuto);
      with->set_resident_step(resident.get());
      TwinSteps twins(*model, with.get(), 40, 7);
      for (int step = 0; step < 24; ++step) twins.Step(1 + step % 8, static_cast<uint32_t>(step));
      // More streams than the kernel takes: a launch, as without it.
      twins.Step(9, 99);
      CHECK(resident->steps() == 24);
      CHECK(resident->launches() == 1);
      CHECK(resident->last_kernel_ns().second > 0);
      CHECK(resident->kernel_running());
      twins.CompareStates();
      CHECK_FALSE(resident->kernel_running());
      // After it left, the next step launches it again.
      twins.Step(3, 100);
      CHECK(resident->steps() == 25);
      CHECK(resident->launches() == 2);
      twins.CompareStates();
    }
  }
}

TEST_CASE("The resident kernel leaves when idle and after its longest run, one per GPU at a time",
          "[gpu][model][stream]") {
  const ModelConfig config = Config(true, 2, 64);
  const auto model_1 = Build(config, 64, 51);
  const auto model_2 = Build(config, 64, 52);
  ResidentStep::Turn turn;
  const std::unique_ptr<ResidentStep> resident_1 = MakeResident(&turn, 100'000, 10'000'000);
  const std::unique_ptr<ResidentStep> resident_2 = MakeResident(&turn, 100'000, 10'000'000);
  std::unique_ptr<CudaBackend> with_1 = MakeCuda(StepKernel::kAuto);
  std::unique_ptr<CudaBackend> with_2 = MakeCuda(StepKernel::kAuto);
  with_1->set_resident_step(resident_1.get());
  with_2->set_resident_step(resident_2.get());
  TwinSteps twins_1(*model_1, with_1.get(), 16, 3);
  TwinSteps twins_2(*model_2, with_2.get(), 16, 4);
  twins_1.Step(2, 1);
  CHECK(resident_1->steps() == 1);
  CHECK(resident_1->kernel_running());
  // The GPU's turn is taken while resident_1's kernel runs: resident_2's steps launch.
  twins_2.Step(2, 2);
  CHECK(resident_2->steps() == 0);
  CHECK(resident_2->launches() == 0);
  // resident_1's kernel leaves after 100 ms without a step; then resident_2 may run its own.
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK_FALSE(resident_1->kernel_running());
  twins_2.Step(4, 3);
  CHECK(resident_2->steps() == 1);
  CHECK(resident_2->kernel_running());
  twins_1.Step(1, 4);
  CHECK(resident_1->steps() == 1);
  twins_1.CompareStates();
  twins_2.CompareStates();

  // One resident step, two models in turn: each change stops the kernel and launches another.
  ResidentStep::Turn own_turn;
  const std::unique_ptr<ResidentStep> shared = MakeResident(&own_turn, 100'000, 10'000'000);
  with_1->set_resident_step(shared.get());
  with_2->set_resident_step(shared.get());
  for (int round = 0; round < 3; ++round) {
    twins_1.Step(5, static_cast<uint32_t>(10 + round));
    twins_2.Step(6, static_cast<uint32_t>(20 + round));
  }
  CHECK(shared->steps() == 6);
  CHECK(shared->launches() == 6);
  twins_1.CompareStates();
  twins_2.CompareStates();

  // The longest run: a kernel with steps still coming leaves after max_run_us all the same.
  ResidentStep::Turn short_turn;
  const std::unique_ptr<ResidentStep> brief = MakeResident(&short_turn, 10'000'000, 100'000);
  with_1->set_resident_step(brief.get());
  twins_1.Step(1, 30);
  CHECK(brief->kernel_running());
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  CHECK_FALSE(brief->kernel_running());
  with_1->set_resident_step(nullptr);
  with_2->set_resident_step(nullptr);
}

}  // namespace
}  // namespace forecastd
