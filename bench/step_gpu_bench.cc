// step_gpu_bench: the GPU time of one tick-stream step (state mode) of a stacked LSTM / GRU on
// CudaBackend, for several numbers of streams. What one step covers: the recurrent layers of B
// streams whose states sit in scattered slots of a slab on the device, from standardised ticks
// xn (B, F) on the device to the top layer's new h (B, H), the slab updated in place; the head
// and the (de)standardisation are left out, as in the PyTorch peer (bench/step_torch.py).
//
// Paths timed, each on its own CudaBackend: `fused` (CudaBackend::RecurrentStep, the kernels
// chosen by batch size), `cluster`, `warp` and `tiled` (one kind forced), and `cudnn` (what a step
// did before the fused kernels: per layer, gather h and c by slot, a T = 1 cuDNN layer,
// scatter them back). Each path runs one eager step from the same slab first (its result is
// written for the peer to check), then `--steps-per-graph` consecutive steps are captured into
// one CUDA graph, which is replayed `--replays` times, each replay timed between two cudaEvents;
// a step's time is a replay's divided by the steps in it (so host launch costs do not count).
//
// Writes, per B, into `--dir`: the parameters (arena order: w_ih, w_hh, b_ih, b_hh per layer),
// xn, slots, the slab before and after the eager fused step and its top h, as raw float32 /
// int32 files, and `manifest.json` describing them. Prints one JSON line per B:
//   {"B":...,"fused":{"median_us":...,...},"cluster":{...},"warp":{...},"tiled":{...},
//    "cudnn":{...}}
//
// `--latency` instead times one step as a server waits for it: host wall time from queuing the
// step to cudaStreamSynchronize's return, one step at a time (--latency-steps of them, after
// 50 untimed), for the full forecast step (ticks in, forecasts out, head included):
//   "floor": a 4-byte cudaMemsetAsync and the synchronize (what any launch and wait costs);
//   "one_launch_pinned": RecurrentStepForecast reading ticks and slots from pinned host memory
//     and writing forecasts there (what a state-mode step of few streams now is);
//   "one_launch_device": the same on device buffers (no bus reads);
//   "composed_graph": a captured graph of the copies in, RecurrentStep, the head's Linear and
//     the copy out (each bias added by Linear; no normaliser), launched and synchronized;
//   "one_launch_gpu": GPU time of the one-launch step in graph replays (as the main mode);
//   "resident_pinned": the step of one_launch_pinned posted to a resident kernel
//     (backends/cuda/resident_step.h; up to kResidentStepMaxStreams streams): no launch, the
//     host spinning on the kernel's answer in pinned memory.
// --gap-us spaces the timed steps (busy waiting), as a server's ticks arrive.
// One JSON line per B: {"B":...,"latency":true,"floor":{...},...}.
// Exit codes: 0 success, 1 a failure, 2 bad arguments.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_graph.h"
#include "backends/cuda/instance_streams.h"
#include "backends/cuda/resident_step.h"
#include "bench/bench_timing.h"
#include "engine/models/cuda_data_ops.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd {
namespace {

struct Flags {
  std::vector<int64_t> streams = {1, 64, 1024, 4096};
  std::string cell = "lstm";
  int64_t hidden = 128;
  int layers = 2;
  int64_t features = 10;
  int steps_per_graph = 20;
  int replays = 50;
  std::string dir = "/tmp/step_bench";
  bool latency = false;
  int latency_steps = 2000;
  double gap_us = 0.0;
};

// Device buffers freed with the object.
class DeviceArena {
 public:
  explicit DeviceArena(CudaAllocator* allocator) : allocator_(allocator) {}
  template <typename T>
  absl::StatusOr<T*> Upload(const std::vector<T>& host) {
    ASSIGN_OR_RETURN(
        DeviceBuffer buffer,
        allocator_->Allocate(static_cast<int64_t>(std::max<size_t>(host.size(), 1) * sizeof(T))));
    T* p = buffer.as<T>();
    buffers_.push_back(std::move(buffer));
    CUDA_RETURN_IF_ERROR(
        cudaMemcpy(p, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice));
    return p;
  }

 private:
  CudaAllocator* allocator_;
  std::vector<DeviceBuffer> buffers_;
};

template <typename T>
absl::StatusOr<std::vector<T>> Download(const T* dev, int64_t n) {
  std::vector<T> host(static_cast<size_t>(n));
  CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(host.data(), dev, host.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return host;
}

template <typename T>
absl::Status WriteRaw(const std::string& path, const std::vector<T>& v) {
  std::ofstream f(path, std::ios::binary);
  f.write(reinterpret_cast<const char*>(v.data()),
          static_cast<std::streamsize>(v.size() * sizeof(T)));
  return f ? absl::OkStatus() : absl::InternalError(absl::StrCat("cannot write ", path));
}

std::vector<float> Uniform(int64_t n, uint32_t seed, float bound) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<float> dist(-bound, bound);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(gen);
  return v;
}

// L layers' parameters, PyTorch's initialisation (uniform in +-1/sqrt(H)), in arena order
// (w_ih, w_hh, b_ih, b_hh per layer; G gates), and where each tensor starts.
void LayerParams(int L, int64_t F, int64_t H, int64_t G, std::vector<float>* params,
                 std::vector<int64_t>* offsets) {
  for (int l = 0; l < L; ++l) {
    const int64_t I = l == 0 ? F : H;
    for (const int64_t n : {G * H * I, G * H * H, G * H, G * H}) {
      offsets->push_back(static_cast<int64_t>(params->size()));
      const std::vector<float> v = Uniform(n, static_cast<uint32_t>(offsets->size()),
                                           1.0f / std::sqrt(static_cast<float>(H)));
      params->insert(params->end(), v.begin(), v.end());
    }
  }
}

// The layers' weights in a copy of LayerParams' array at w.
std::vector<RecurrentDirectionWeights> LayerWeightsAt(const float* w,
                                                      const std::vector<int64_t>& offsets, int L) {
  std::vector<RecurrentDirectionWeights> weights;
  for (int l = 0; l < L; ++l) {
    weights.push_back({w + offsets[4 * l], w + offsets[4 * l + 1], w + offsets[4 * l + 2],
                       w + offsets[4 * l + 3]});
  }
  return weights;
}

// One path's step, queued on its backend's stream.
using StepFn = std::function<absl::Status()>;

// Median etc. of a step's GPU time over graph replays of `steps` steps each.
absl::StatusOr<bench::Timing> TimeGraph(cudaStream_t stream, const StepFn& step, int steps,
                                        int replays) {
  ASSIGN_OR_RETURN(CudaGraph graph, CudaGraph::Capture(stream, [&]() -> absl::Status {
                     for (int s = 0; s < steps; ++s) RETURN_IF_ERROR(step());
                     return absl::OkStatus();
                   }));
  cudaEvent_t start, stop;
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&start));
  CUDA_RETURN_IF_ERROR(cudaEventCreate(&stop));
  std::vector<double> us;
  for (int r = 0; r < replays + 3; ++r) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start, stream));
    RETURN_IF_ERROR(graph.Launch(stream));
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop, stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop));
    float ms = 0.0f;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start, stop));
    if (r >= 3) us.push_back(1000.0 * ms / steps);  // the first replays warm up
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return bench::Summarize(std::move(us));
}

// Host wall time of `step` followed by a synchronize of `stream`, one at a time, `gap_us` of
// busy waiting apart (a server's ticks arrive with gaps in which the GPU idles).
absl::StatusOr<bench::Timing> TimeWall(cudaStream_t stream, const StepFn& step, int steps,
                                       double gap_us) {
  std::vector<double> us;
  for (int r = 0; r < steps + 50; ++r) {
    const auto idle = std::chrono::steady_clock::now();
    while (
        std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - idle).count() <
        gap_us) {
    }
    const auto start = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(step());
    CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(stream));
    const auto stop = std::chrono::steady_clock::now();
    if (r >= 50) us.push_back(std::chrono::duration<double, std::micro>(stop - start).count());
  }
  return bench::Summarize(std::move(us));
}

absl::Status RunLatency(const Flags& flags) {
  const bool lstm = flags.cell == "lstm";
  const RecurrentCell cell = lstm ? RecurrentCell::kLstm : RecurrentCell::kGru;
  const int64_t H = flags.hidden, F = flags.features, G = lstm ? 4 : 3, O = 10;
  const int L = flags.layers;
  const int64_t S = L * (lstm ? 2 : 1) * H;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaAllocator> allocator, CudaAllocator::Create({}));
  InstanceStreams::Options stream_options;
  stream_options.num_streams = 2;
  ASSIGN_OR_RETURN(std::unique_ptr<InstanceStreams> streams,
                   InstanceStreams::Create(stream_options, allocator.get()));
  std::vector<float> params;
  std::vector<int64_t> offsets;
  LayerParams(L, F, H, G, &params, &offsets);
  const int64_t head_at = static_cast<int64_t>(params.size());
  const std::vector<float> head = Uniform(O * H + O, 77, 1.0f / std::sqrt(static_cast<float>(H)));
  params.insert(params.end(), head.begin(), head.end());
  CudaBackend::Options options;  // kFp32, kAuto
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create(streams->Lease(), allocator.get(), options));
  const cudaStream_t stream = backend->stream();
  // The resident kernel stays between the timed steps (limits far beyond their gaps).
  ResidentStep::Turn turn;
  ResidentStep::Options resident_options;
  resident_options.turn = &turn;
  resident_options.idle_us = 1'000'000;
  resident_options.max_run_us = 60'000'000;
  ASSIGN_OR_RETURN(std::unique_ptr<ResidentStep> resident, ResidentStep::Create(resident_options));
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> resident_backend,
                   CudaBackend::Create(streams->Lease(), allocator.get(), options));
  resident_backend->set_resident_step(resident.get());
  DeviceArena mem(allocator.get());
  ASSIGN_OR_RETURN(const float* w, mem.Upload(params));
  const std::vector<RecurrentDirectionWeights> weights = LayerWeightsAt(w, offsets, L);
  const int targets[1] = {0};
  RecurrentStepForecastSpec spec;
  spec.head_weight = w + head_at;
  spec.head_bias = w + head_at + O * H;
  spec.outputs = O;
  spec.target_features = targets;
  for (const int64_t B : flags.streams) {
    if (!backend->RecurrentStepForecastFits({B, 1, F, H, 1}, L, spec)) {
      std::printf(
          "{\"B\":%lld,\"latency\":true,\"skipped\":\"more streams than one launch "
          "takes\"}\n",
          static_cast<long long>(B));
      continue;
    }
    std::vector<int32_t> slots(static_cast<size_t>(B));
    std::iota(slots.begin(), slots.end(), 0);
    ASSIGN_OR_RETURN(float* slab, mem.Upload(Uniform(B * S, 101, 1.0f)));
    ASSIGN_OR_RETURN(int32_t * dslots, mem.Upload(slots));
    ASSIGN_OR_RETURN(float* dx, mem.Upload(Uniform(B * F, 102, 2.0f)));
    ASSIGN_OR_RETURN(float* dy, mem.Upload(std::vector<float>(B * O, 0.0f)));
    ASSIGN_OR_RETURN(float* dh, mem.Upload(std::vector<float>(2 * B * H, 0.0f)));
    void* pinned = nullptr;
    CUDA_RETURN_IF_ERROR(
        cudaHostAlloc(&pinned, static_cast<size_t>(B * (1 + F + O) * 4), cudaHostAllocDefault));
    auto* hslots = static_cast<int32_t*>(pinned);
    float* hx = static_cast<float*>(pinned) + B;
    float* hy = hx + B * F;
    std::copy(slots.begin(), slots.end(), hslots);
    const std::vector<float> x = Uniform(B * F, 102, 2.0f);
    std::copy(x.begin(), x.end(), hx);
    const StepFn floor = [&]() -> absl::Status {
      CUDA_RETURN_IF_ERROR(cudaMemsetAsync(dy, 0, 4, stream));
      return absl::OkStatus();
    };
    const StepFn pinned_step = [&, b = B]() {
      return backend->RecurrentStepForecast(cell, hy, slab, hslots, hx, weights.data(),
                                            {b, 1, F, H, 1}, L, spec);
    };
    const StepFn device_step = [&, b = B]() {
      return backend->RecurrentStepForecast(cell, dy, slab, dslots, dx, weights.data(),
                                            {b, 1, F, H, 1}, L, spec);
    };
    const StepFn composed = [&, b = B]() -> absl::Status {
      CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(dslots, hslots, static_cast<size_t>(b) * 4,
                                           cudaMemcpyHostToDevice, stream));
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(dx, hx, static_cast<size_t>(b * F) * 4, cudaMemcpyHostToDevice, stream));
      RETURN_IF_ERROR(backend->RecurrentStep(cell, dh, dh + b * H, slab, dslots, dx, weights.data(),
                                             {b, 1, F, H, 1}, L));
      RETURN_IF_ERROR(backend->Linear(dy, dh, spec.head_weight, spec.head_bias, b, H, O));
      CUDA_RETURN_IF_ERROR(
          cudaMemcpyAsync(hy, dy, static_cast<size_t>(b * O) * 4, cudaMemcpyDeviceToHost, stream));
      return absl::OkStatus();
    };
    RETURN_IF_ERROR(composed());  // builds plans and scratch before the capture
    RETURN_IF_ERROR(backend->Synchronize());
    ASSIGN_OR_RETURN(CudaGraph graph, CudaGraph::Capture(stream, composed));
    const StepFn composed_graph = [&]() { return graph.Launch(stream); };
    const StepFn resident_step = [&, b = B]() {
      return resident_backend->RecurrentStepForecast(cell, hy, slab, hslots, hx, weights.data(),
                                                     {b, 1, F, H, 1}, L, spec);
    };
    std::string line = absl::StrCat(R"({"B":)", B, R"(,"latency":true)");
    for (const auto& [name, fn] : {std::pair<const char*, const StepFn*>{"floor", &floor},
                                   {"one_launch_pinned", &pinned_step},
                                   {"one_launch_device", &device_step},
                                   {"composed_graph", &composed_graph},
                                   {"resident_pinned", &resident_step}}) {
      const bool on_resident = fn == &resident_step;
      if (on_resident && B > cuda::kResidentStepMaxStreams) continue;
      const cudaStream_t synced = on_resident ? resident_backend->stream() : stream;
      const int64_t steps_before = resident->steps();
      std::vector<double> step_us, kernel_us;
      const StepFn& step = *fn;  // a lambda may not capture a structured binding (C++17)
      const StepFn timed = [&]() -> absl::Status {
        RETURN_IF_ERROR(step());
        if (on_resident) {
          const auto [step_ns, kernel_ns] = resident->last_kernel_ns();
          step_us.push_back(1e-3 * static_cast<double>(step_ns));
          kernel_us.push_back(1e-3 * static_cast<double>(kernel_ns));
        }
        return absl::OkStatus();
      };
      ASSIGN_OR_RETURN(bench::Timing t, TimeWall(synced, timed, flags.latency_steps, flags.gap_us));
      absl::StrAppend(&line, R"(,")", name, R"(":{)", bench::TimingJson(t));
      if (on_resident) {
        // Steps the kernel took (all of them, unless another kernel held the GPU's turn), and
        // their time in the kernel from its seeing the step: to the step's end ("step") and to
        // the forecasts' write-out ("kernel").
        absl::StrAppend(&line, R"(,"resident_steps":)", resident->steps() - steps_before,
                        R"(,"launches":)", resident->launches(), R"(,"step":{)",
                        bench::TimingJson(bench::Summarize(std::move(step_us))), R"(},"kernel":{)",
                        bench::TimingJson(bench::Summarize(std::move(kernel_us))), "}");
      }
      absl::StrAppend(&line, "}");
    }
    ASSIGN_OR_RETURN(bench::Timing gpu,
                     TimeGraph(stream, device_step, flags.steps_per_graph, flags.replays));
    absl::StrAppend(&line, R"(,"one_launch_gpu":{)", bench::TimingJson(gpu), "}");
    RETURN_IF_ERROR(backend->Synchronize());
    cudaFreeHost(pinned);
    std::printf("%s}\n", line.c_str());
    std::fflush(stdout);
  }
  return absl::OkStatus();
}

absl::Status Run(const Flags& flags) {
  if (flags.latency) return RunLatency(flags);
  const bool lstm = flags.cell == "lstm";
  const RecurrentCell cell = lstm ? RecurrentCell::kLstm : RecurrentCell::kGru;
  const int64_t H = flags.hidden, F = flags.features, G = lstm ? 4 : 3;
  const int L = flags.layers;
  const int64_t SL = (lstm ? 2 : 1) * H, S = L * SL;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaAllocator> allocator, CudaAllocator::Create({}));
  InstanceStreams::Options stream_options;
  stream_options.num_streams = 2;
  ASSIGN_OR_RETURN(std::unique_ptr<InstanceStreams> streams,
                   InstanceStreams::Create(stream_options, allocator.get()));

  std::vector<float> params;
  std::vector<int64_t> offsets;
  LayerParams(L, F, H, G, &params, &offsets);
  RETURN_IF_ERROR(WriteRaw(flags.dir + "/params.f32", params));

  std::string manifest = absl::StrCat(R"({"cell":")", flags.cell, R"(","H":)", H, R"(,"L":)", L,
                                      R"(,"F":)", F, R"(,"S":)", S, R"(,"cases":[)");
  using StepKernel = CudaBackend::Options::StepKernel;
  const std::pair<const char*, StepKernel> kPaths[] = {{"fused", StepKernel::kAuto},
                                                       {"cluster", StepKernel::kCluster},
                                                       {"warp", StepKernel::kWarp},
                                                       {"tiled", StepKernel::kTiled},
                                                       {"cudnn", StepKernel::kAuto}};
  for (size_t c = 0; c < flags.streams.size(); ++c) {
    const int64_t B = flags.streams[c], rows = 2 * B + 1;
    std::vector<int32_t> slots(static_cast<size_t>(rows));
    std::iota(slots.begin(), slots.end(), 0);
    std::shuffle(slots.begin(), slots.end(), std::mt19937(static_cast<uint32_t>(B)));
    slots.resize(static_cast<size_t>(B));
    const std::vector<float> slab_0 = Uniform(rows * S, 101, 1.0f);
    const std::vector<float> xn = Uniform(B * F, 102, 2.0f);
    const std::string prefix = absl::StrCat(flags.dir, "/b", B, "_");
    RETURN_IF_ERROR(WriteRaw(prefix + "slots.i32", slots));
    RETURN_IF_ERROR(WriteRaw(prefix + "slab0.f32", slab_0));
    RETURN_IF_ERROR(WriteRaw(prefix + "xn.f32", xn));

    std::string line = absl::StrCat(R"({"B":)", B);
    for (const auto& [name, kernel] : kPaths) {
      CudaBackend::Options options;  // kFp32
      options.step_kernel = kernel;
      ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                       CudaBackend::Create(streams->Lease(), allocator.get(), options));
      const cudaStream_t stream = backend->stream();
      DeviceArena mem(allocator.get());
      ASSIGN_OR_RETURN(const float* w, mem.Upload(params));
      const std::vector<RecurrentDirectionWeights> weights = LayerWeightsAt(w, offsets, L);
      ASSIGN_OR_RETURN(float* slab, mem.Upload(slab_0));
      ASSIGN_OR_RETURN(const int32_t* dslots, mem.Upload(slots));
      ASSIGN_OR_RETURN(const float* dxn, mem.Upload(xn));
      ASSIGN_OR_RETURN(float* out, mem.Upload(std::vector<float>(B * H, 0.0f)));
      ASSIGN_OR_RETURN(float* scratch, mem.Upload(std::vector<float>(4 * B * H, 0.0f)));
      CudaDataOps data(stream);
      StepFn step;
      if (std::string(name) != "cudnn") {
        step = [&, b = B]() {
          return backend->RecurrentStep(cell, out, scratch, slab, dslots, dxn, weights.data(),
                                        {b, 1, F, H, 1}, L);
        };
      } else {
        // Per layer: gather, a T = 1 cuDNN layer, scatter (scratch: h_0, c_0, c_n, ping-pong).
        step = [&, b = B]() -> absl::Status {
          float* h_0 = scratch;
          float* c_0 = scratch + b * H;
          float* c_n = scratch + 2 * b * H;
          const float* inp = dxn;
          for (int l = 0; l < L; ++l) {
            float* h = slab + l * SL;
            float* layer_out = (L - 1 - l) % 2 == 0 ? out : scratch + 3 * b * H;
            const RecurrentDims dims{b, 1, l == 0 ? F : H, H, 1};
            RETURN_IF_ERROR(data.GatherSlots(h_0, h, dslots, b, S, H));
            if (lstm) {
              RETURN_IF_ERROR(data.GatherSlots(c_0, h + H, dslots, b, S, H));
              RETURN_IF_ERROR(
                  backend->LstmLayer(layer_out, nullptr, c_n, inp, h_0, c_0, &weights[l], dims));
              RETURN_IF_ERROR(data.ScatterSlots(h + H, c_n, dslots, b, S, H));
            } else {
              RETURN_IF_ERROR(backend->GruLayer(layer_out, nullptr, inp, h_0, &weights[l], dims));
            }
            RETURN_IF_ERROR(data.ScatterSlots(h, layer_out, dslots, b, S, H));
            inp = layer_out;
          }
          return absl::OkStatus();
        };
      }
      RETURN_IF_ERROR(step());  // the eager step (also builds plans, grows scratch)
      RETURN_IF_ERROR(backend->Synchronize());
      if (std::string(name) == "fused") {
        ASSIGN_OR_RETURN(std::vector<float> slab_1, Download(slab, rows * S));
        ASSIGN_OR_RETURN(std::vector<float> h_top, Download(out, B * H));
        RETURN_IF_ERROR(WriteRaw(prefix + "slab1.f32", slab_1));
        RETURN_IF_ERROR(WriteRaw(prefix + "out1.f32", h_top));
      }
      ASSIGN_OR_RETURN(bench::Timing timing,
                       TimeGraph(stream, step, flags.steps_per_graph, flags.replays));
      RETURN_IF_ERROR(backend->Synchronize());
      absl::StrAppend(&line, R"(,")", name, R"(":{)", bench::TimingJson(timing), "}");
    }
    absl::StrAppend(&manifest, c == 0 ? "" : ",", R"({"B":)", B, R"(,"rows":)", rows, "}");
    std::printf("%s}\n", line.c_str());
    std::fflush(stdout);
  }
  absl::StrAppend(&manifest, "]}\n");
  std::ofstream(flags.dir + "/manifest.json") << manifest;
  return absl::OkStatus();
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  forecastd::Flags flags;
  CLI::App app{"GPU time of one tick-stream step (state mode) on CudaBackend"};
  app.add_option("--streams", flags.streams, "numbers of streams B")->delimiter(',');
  app.add_option("--cell", flags.cell, "lstm or gru")->check(CLI::IsMember({"lstm", "gru"}));
  app.add_option("--hidden", flags.hidden, "H")->check(CLI::PositiveNumber);
  app.add_option("--layers", flags.layers, "L")->check(CLI::PositiveNumber);
  app.add_option("--features", flags.features, "F")->check(CLI::PositiveNumber);
  app.add_option("--steps-per-graph", flags.steps_per_graph, "steps in one captured graph")
      ->check(CLI::PositiveNumber);
  app.add_option("--replays", flags.replays, "timed graph replays")->check(CLI::PositiveNumber);
  app.add_option("--dir", flags.dir, "where the inputs and results go (must exist)");
  app.add_flag("--latency", flags.latency, "time one step as a server waits for it (see above)");
  app.add_option("--latency-steps", flags.latency_steps, "timed steps per path in --latency")
      ->check(CLI::PositiveNumber);
  app.add_option("--gap-us", flags.gap_us, "idle microseconds between timed steps in --latency")
      ->check(CLI::NonNegativeNumber);
  CLI11_PARSE(app, argc, argv);
  const absl::Status status = forecastd::Run(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "step_gpu_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
