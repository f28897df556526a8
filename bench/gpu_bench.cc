// gpu_bench: forecast_bench on a GPU. Loads `--model DIR` version `--version`, uploads its
// parameter arena to the device once, and runs the forward pass on a CudaBackend (the one stream
// of an InstanceStreams), reading that device copy of the weights (Forecaster::Forward with a
// ForwardPlacement) and standardising / de-standardising with engine/models/cuda_data_ops.h, so the
// whole forecast runs on the GPU. Inputs are the first `--batch` windows of tensor `input` of
// `--io FILE`, or seeded N(0, 1) values without one.
//
// What one timed call covers: (B, T, F) raw windows already on the device to (B, P, targets)
// raw forecasts on the device, as a PyTorch module called on a CUDA tensor; no host copies.
// Each call is timed alone between two cudaEvents on the backend's stream, the host waiting for
// the second before the next call, so host launch overhead counts whenever it exceeds the GPU
// time. After `--warmup` calls (which also build the cuDNN plans and grow the backend's
// scratch) come `--iters` timed eager calls; then, unless `--no-graph`, the forward is captured
// once into a CUDA graph on the backend's stream (backends/cuda/cuda_graph.h: any cudaMalloc or
// synchronisation inside would fail the capture rather than pass unnoticed) and `--iters`
// replays are timed the same way. A capture that fails is reported (`graph_error`) and the run
// still succeeds; a replay whose forecast differs from the eager one by more than 1e-6 fails it.
//
// Writes the eager forecast as tensor `output` of `--output FILE` (safetensors) and prints one
// JSON line:
//   {"backend":"cuda","device":...,"batch":...,"iters":...,"median_us":...,"p90_us":...,
//    "mean_us":...,"min_us":...,"graph":{"median_us":...,...} or null,"graph_error":...}
// p90 is the nearest-rank 90th percentile.
//
// With `--train`, times training steps instead (engine/train/cuda_training_engine.h): each is
// one TrainingEngine::Step on `--batch` seeded standardised windows and targets (Adam, MSE,
// the model's dropout, `--math` as the training precision): the batch copied in from host
// memory, forward, loss, backward, the optimiser's update, and the loss read back, as a
// PyTorch training loop that calls loss.item() does. Steps are timed on the host clock (each
// ends in a synchronisation). `--devices cuda:0,cuda:1` trains data-parallel instead
// (engine/train/data_parallel.h): one rank per listed GPU, each a CudaTrainingEngine joined to
// the others by an NCCL communicator, `--batch` being the global batch the step splits over
// them. After the timed steps the engine is ended and the gradient all-reduce alone is timed:
// one arena-sized AllReduceScaledSum per rank on its own stream, each rank a thread, until its
// Communicator::Wait returns (the slowest rank's time per iteration; median over `--iters`).
// Prints {"backend":"cuda","mode":"train",...,"devices":N,"median_us":...,"samples_per_s":...,
// "allreduce_us":... (null on one device)}, samples/s being the global batch / median step.
// Exit codes: 0 success, 1 a failure while loading or running, 2 bad arguments.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_graph.h"
#include "backends/cuda/instance_streams.h"
#include "backends/cuda/nccl_communicator.h"
#include "bench/bench_timing.h"
#include "bench/train_steps.h"
#include "engine/models/cuda_data_ops.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "engine/train/cuda_training_engine.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd {
namespace {

struct Flags {
  std::string model;
  int64_t version = 1;
  std::string io;
  uint64_t seed = 1;
  int64_t batch = 1;
  int64_t warmup = 20;
  int64_t iters = 100;
  int device = 0;
  // CUDA ordinals of --devices (data-parallel training over them when more than one); empty:
  // `device` alone.
  std::vector<int> devices;
  std::string math = "fp32";
  std::string rnn_algo = "auto";
  std::string recurrent_kernel = "auto";
  int64_t attention_scratch_mib = 0;  // 0: CudaBackend's default
  int64_t bucket_mib = -1;            // -1: CudaTrainingEngineOptions' default
  bool no_graph = false;
  bool train = false;
  std::string output;
};

// JSON string literal of s (quotes, backslashes and control characters escaped).
std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
    } else {
      out += c;
    }
  }
  return out + "\"";
}

// Two events on one stream; destroyed with the object.
class EventPair {
 public:
  static absl::StatusOr<EventPair> Create() {
    EventPair pair;
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&pair.start_));
    CUDA_RETURN_IF_ERROR(cudaEventCreate(&pair.stop_));
    return pair;
  }
  EventPair(EventPair&& other) noexcept
      : start_(std::exchange(other.start_, nullptr)), stop_(std::exchange(other.stop_, nullptr)) {}
  EventPair& operator=(EventPair&&) = delete;
  ~EventPair() {
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stop_ != nullptr) cudaEventDestroy(stop_);
  }

  // Microseconds taken by what `body` queues on `stream`, waiting for it to finish.
  template <typename Body>
  absl::StatusOr<double> Time(cudaStream_t stream, Body body) {
    CUDA_RETURN_IF_ERROR(cudaEventRecord(start_, stream));
    RETURN_IF_ERROR(body());
    CUDA_RETURN_IF_ERROR(cudaEventRecord(stop_, stream));
    CUDA_RETURN_IF_ERROR(cudaEventSynchronize(stop_));
    float ms = 0.0f;
    CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, start_, stop_));
    return 1e3 * static_cast<double>(ms);
  }

 private:
  EventPair() = default;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
};

absl::StatusOr<std::vector<float>> ReadInput(const Flags& flags, const Forecaster& model) {
  const int64_t T = model.lookback(), F = model.num_features(), B = flags.batch;
  if (flags.io.empty()) {
    std::mt19937_64 rng(flags.seed);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> input(static_cast<size_t>(B * T * F));
    for (float& v : input) v = normal(rng);
    return input;
  }
  ASSIGN_OR_RETURN(const SafetensorsFile io, SafetensorsFile::Read(flags.io));
  ASSIGN_OR_RETURN(const TensorInfo* info, io.Find("input"));
  if (info->shape.size() != 3 || info->shape[1] != T || info->shape[2] != F) {
    return absl::InvalidArgumentError(
        absl::StrCat(flags.io, ": input must be (B, ", T, ", ", F, ") for this model"));
  }
  if (B > info->shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("--batch ", B, " but ", flags.io, " holds only ", info->shape[0], " windows"));
  }
  ASSIGN_OR_RETURN(const std::vector<float> all, io.ReadF32("input", info->shape));
  return std::vector<float>(all.begin(), all.begin() + B * T * F);
}

// "cuda:0,cuda:1" (or "0,1") -> {0, 1}: distinct CUDA ordinals, at least one.
absl::StatusOr<std::vector<int>> ParseDevices(const std::string& text) {
  std::vector<int> ordinals;
  for (absl::string_view item : absl::StrSplit(text, ',')) {
    item = absl::StripAsciiWhitespace(item);
    absl::ConsumePrefix(&item, "cuda:");
    int ordinal = -1;
    if (!absl::SimpleAtoi(item, &ordinal) || ordinal < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: '", item, "' is not cuda:N (in '", text, "')"));
    }
    if (std::find(ordinals.begin(), ordinals.end(), ordinal) != ordinals.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--devices: cuda:", ordinal, " is listed twice (one rank per GPU)"));
    }
    ordinals.push_back(ordinal);
  }
  return ordinals;
}

// The all-reduce of a data-parallel step alone: `count` floats (the gradient arena) summed
// over one rank per ordinal in `devices`, each rank a thread with its own NcclCommunicator,
// device buffer and stream, timed on the host from queueing AllReduceScaledSum until
// Communicator::Wait returns. An iteration's time is its slowest rank's (the ranks leave each
// Wait together, so they start the next iteration together). `warmup` untimed iterations first.
absl::StatusOr<bench::Timing> TimeAllReduce(const std::vector<int>& devices, int64_t count,
                                            int64_t warmup, int64_t iters) {
  const int R = static_cast<int>(devices.size());
  ASSIGN_OR_RETURN(const std::string unique_id, NewNcclUniqueId());
  std::vector<absl::Status> statuses(R);
  std::vector<std::vector<double>> rank_us(R);
  const auto run_rank = [&](int rank) -> absl::Status {
    CUDA_RETURN_IF_ERROR(cudaSetDevice(devices[rank]));
    // The buffer and the stream come before the communicator: once this rank has joined the
    // group, a failure of its own would leave the others waiting for their timeout.
    void* data = nullptr;
    CUDA_RETURN_IF_ERROR(cudaMalloc(&data, count * sizeof(float)));
    const absl::Cleanup free_data = [data] { cudaFree(data); };
    CUDA_RETURN_IF_ERROR(cudaMemset(data, 0, count * sizeof(float)));
    cudaStream_t stream = nullptr;
    CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const absl::Cleanup destroy_stream = [stream] { cudaStreamDestroy(stream); };
    CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
    NcclCommunicatorOptions options;
    options.device = devices[rank];
    options.rank = rank;
    options.size = R;
    options.unique_id = unique_id;
    ASSIGN_OR_RETURN(std::unique_ptr<Communicator> communicator, CreateNcclCommunicator(options));
    float* const buffer = static_cast<float*>(data);
    const float share = 1.0f / static_cast<float>(R);
    const auto all_reduce = [&]() -> absl::Status {
      RETURN_IF_ERROR(communicator->AllReduceScaledSum(buffer, count, share, stream));
      return communicator->Wait(stream);
    };
    for (int64_t i = 0; i < warmup; ++i) RETURN_IF_ERROR(all_reduce());
    rank_us[rank].reserve(iters);
    for (int64_t i = 0; i < iters; ++i) {
      const auto start = std::chrono::steady_clock::now();
      RETURN_IF_ERROR(all_reduce());
      rank_us[rank].push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
              .count());
    }
    return absl::OkStatus();
  };
  {
    std::vector<std::thread> threads;
    threads.reserve(R);
    for (int rank = 0; rank < R; ++rank) {
      threads.emplace_back([&, rank] { statuses[rank] = run_rank(rank); });
    }
    for (std::thread& thread : threads) thread.join();
  }
  for (int rank = 0; rank < R; ++rank) {
    if (!statuses[rank].ok()) {
      return absl::Status(statuses[rank].code(),
                          absl::StrCat("all-reduce on cuda:", devices[rank], " (rank ", rank,
                                       "): ", statuses[rank].message()));
    }
  }
  std::vector<double> slowest(static_cast<size_t>(iters), 0.0);
  for (const std::vector<double>& us : rank_us) {
    for (int64_t i = 0; i < iters; ++i) slowest[i] = std::max(slowest[i], us[i]);
  }
  return bench::Summarize(std::move(slowest));
}

absl::Status BenchTrain(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, LoadForecaster(flags.model, flags.version));
  const std::vector<int> devices =
      flags.devices.empty() ? std::vector<int>{flags.device} : flags.devices;
  const int R = static_cast<int>(devices.size());
  const int64_t B = flags.batch;  // the global batch
  v1::TrainingConfig training;
  training.set_precision(flags.math == "bf16"   ? v1::PRECISION_BF16
                         : flags.math == "tf32" ? v1::PRECISION_TF32
                         : flags.math == "fp16" ? v1::PRECISION_FP16
                                                : v1::PRECISION_FP32);
  // What a job training on this batch would say (the data-parallel engine checks it splits).
  training.set_batch_size(static_cast<int32_t>(B));
  ASSIGN_OR_RETURN(std::unique_ptr<Optimizer> optimizer,
                   Optimizer::Create(training.optimizer(), model->parameters()));
  ASSIGN_OR_RETURN(const TrainingLoss loss, TrainingLoss::Create(training.loss(), model->config()));
  CudaTrainingEngineOptions options;
  if (flags.attention_scratch_mib > 0) {
    options.attention_scratch_bytes = flags.attention_scratch_mib << 20;
  }
  if (flags.bucket_mib >= 0) options.gradient_bucket_bytes = flags.bucket_mib << 20;
  // One GPU: its engine; several: data-parallel ranks over NCCL, as a job on them trains.
  std::vector<CudaTrainingEngineOptions> ranks;
  for (const int device : devices) {
    options.device = device;
    ranks.push_back(options);
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TrainingEngine> engine,
                   MakeGpuTrainingEngineFactory(std::move(ranks), absl::Seconds(60))(
                       *model, *optimizer, loss, training));
  RETURN_IF_ERROR(engine->Push());
  ASSIGN_OR_RETURN(
      const bench::TrainSteps steps,
      bench::TimeTrainingSteps(*engine, B, model->lookback() * model->num_features(),
                               loss.per_window(), flags.seed, flags.warmup, flags.iters));
  const bench::Timing& timing = steps.timing;
  const double last_loss = steps.last_loss;
  // The engine's ranks (their memory and communicators) end before the all-reduce is timed
  // alone, so nothing else runs on the GPUs meanwhile.
  engine.reset();
  std::string all_reduce_json = "null";
  if (R > 1) {
    ASSIGN_OR_RETURN(const bench::Timing all_reduce,
                     TimeAllReduce(devices, model->parameters().size(),
                                   std::max<int64_t>(flags.warmup, 3), flags.iters));
    all_reduce_json = absl::StrFormat("%.3f", all_reduce.median_us);
  }
  cudaDeviceProp prop{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, devices[0]));
  std::printf(
      "%s\n",
      absl::StrCat("{\"backend\":\"cuda\",\"mode\":\"train\",\"device\":", JsonString(prop.name),
                   ",\"devices\":", R, ",\"device_ordinals\":[", absl::StrJoin(devices, ","),
                   "],\"batch\":", B, ",\"iters\":", flags.iters, ",\"math\":\"", flags.math, "\",",
                   bench::TimingJson(timing), ",\"samples_per_s\":",
                   absl::StrFormat("%.3f", 1e6 * static_cast<double>(B) / timing.median_us),
                   ",\"bucket_bytes\":", options.gradient_bucket_bytes, ",\"allreduce_us\":",
                   all_reduce_json, ",\"allreduce_floats\":", model->parameters().size(),
                   ",\"last_loss\":", last_loss, "}")
          .c_str());
  return absl::OkStatus();
}

absl::Status Bench(const Flags& flags) {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, LoadForecaster(flags.model, flags.version));
  ASSIGN_OR_RETURN(const std::vector<float> input, ReadInput(flags, *model));
  const int64_t B = flags.batch, P = model->horizon(), K = model->num_targets(),
                Q = model->num_quantiles();
  const int64_t out_floats = B * P * K * Q;

  CUDA_RETURN_IF_ERROR(cudaSetDevice(flags.device));
  cudaDeviceProp prop{};
  CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, flags.device));
  CudaAllocator::Options allocator_options;
  allocator_options.device = flags.device;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaAllocator> allocator,
                   CudaAllocator::Create(allocator_options));
  InstanceStreams::Options stream_options;
  stream_options.device = flags.device;
  stream_options.num_streams = 1;
  ASSIGN_OR_RETURN(std::unique_ptr<InstanceStreams> streams,
                   InstanceStreams::Create(stream_options, allocator.get()));
  CudaBackend::Options backend_options;
  backend_options.math = flags.math == "tf32"   ? CudaBackend::Options::Math::kTf32
                         : flags.math == "bf16" ? CudaBackend::Options::Math::kBf16
                         : flags.math == "fp16" ? CudaBackend::Options::Math::kFp16
                                                : CudaBackend::Options::Math::kFp32;
  if (flags.attention_scratch_mib > 0) {
    backend_options.attention_scratch_bytes = flags.attention_scratch_mib << 20;
  }
  backend_options.rnn_algo =
      flags.rnn_algo == "standard"  ? CudaBackend::Options::RnnAlgo::kStandard
      : flags.rnn_algo == "persist" ? CudaBackend::Options::RnnAlgo::kPersistStatic
      : flags.rnn_algo == "small-h" ? CudaBackend::Options::RnnAlgo::kPersistStaticSmallH
                                    : CudaBackend::Options::RnnAlgo::kAuto;
  backend_options.recurrent_kernel =
      flags.recurrent_kernel == "cudnn"        ? CudaBackend::Options::RecurrentKernel::kCudnn
      : flags.recurrent_kernel == "persistent" ? CudaBackend::Options::RecurrentKernel::kPersistent
                                               : CudaBackend::Options::RecurrentKernel::kAuto;
  ASSIGN_OR_RETURN(std::unique_ptr<CudaBackend> backend,
                   CudaBackend::Create(streams->Lease(), allocator.get(), backend_options));
  const cudaStream_t stream = backend->stream();

  // The arena, the input, the output and the workspace, all on the device; the buffers are
  // declared after the backend's allocator and destroyed before it.
  const ParameterArena& arena = model->parameters();
  ASSIGN_OR_RETURN(DeviceBuffer weights, allocator->Allocate(arena.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer inp, allocator->Allocate(input.size() * sizeof(float)));
  ASSIGN_OR_RETURN(DeviceBuffer out, allocator->Allocate(out_floats * sizeof(float)));
  const int64_t workspace_floats = model->WorkspaceFloats(B);
  ASSIGN_OR_RETURN(DeviceBuffer scratch, allocator->Allocate(workspace_floats * sizeof(float)));
  CUDA_RETURN_IF_ERROR(cudaMemcpy(weights.data(), arena.data(), arena.size() * sizeof(float),
                                  cudaMemcpyHostToDevice));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(inp.data(), input.data(), input.size() * sizeof(float), cudaMemcpyHostToDevice));
  // NaN everywhere, so an element the forward never writes cannot pass the check.
  CUDA_RETURN_IF_ERROR(cudaMemset(out.data(), 0xff, out_floats * sizeof(float)));

  Workspace workspace(static_cast<float*>(scratch.data()), workspace_floats);
  CudaDataOps data(stream);
  const ForwardPlacement placement{static_cast<const float*>(weights.data()), &data};
  float* const out_ptr = static_cast<float*>(out.data());
  const float* const inp_ptr = static_cast<const float*>(inp.data());
  const auto forward = [&]() -> absl::Status {
    return model->Forward(*backend, out_ptr, inp_ptr, B, workspace, placement);
  };

  for (int64_t i = 0; i < flags.warmup; ++i) RETURN_IF_ERROR(forward());
  RETURN_IF_ERROR(backend->Synchronize());

  ASSIGN_OR_RETURN(EventPair events, EventPair::Create());
  std::vector<double> eager_us;
  eager_us.reserve(flags.iters);
  for (int64_t i = 0; i < flags.iters; ++i) {
    ASSIGN_OR_RETURN(const double us, events.Time(stream, forward));
    eager_us.push_back(us);
  }
  RETURN_IF_ERROR(backend->Synchronize());
  std::vector<float> output(static_cast<size_t>(out_floats));
  CUDA_RETURN_IF_ERROR(
      cudaMemcpy(output.data(), out_ptr, out_floats * sizeof(float), cudaMemcpyDeviceToHost));

  std::optional<bench::Timing> graph_timing;
  std::string graph_error;
  if (!flags.no_graph) {
    absl::StatusOr<CudaGraph> captured = CudaGraph::Capture(stream, forward);
    if (!captured.ok()) {
      graph_error = captured.status().ToString();
    } else {
      CUDA_RETURN_IF_ERROR(cudaMemset(out.data(), 0xff, out_floats * sizeof(float)));
      const auto replay = [&]() -> absl::Status { return captured->Launch(stream); };
      for (int64_t i = 0; i < std::max<int64_t>(flags.warmup, 3); ++i) RETURN_IF_ERROR(replay());
      std::vector<double> graph_us;
      graph_us.reserve(flags.iters);
      for (int64_t i = 0; i < flags.iters; ++i) {
        ASSIGN_OR_RETURN(const double us, events.Time(stream, replay));
        graph_us.push_back(us);
      }
      RETURN_IF_ERROR(backend->Synchronize());
      std::vector<float> replayed(static_cast<size_t>(out_floats));
      CUDA_RETURN_IF_ERROR(
          cudaMemcpy(replayed.data(), out_ptr, out_floats * sizeof(float), cudaMemcpyDeviceToHost));
      double worst = 0.0;
      for (size_t i = 0; i < output.size(); ++i) {
        const double err = std::abs(static_cast<double>(replayed[i]) - output[i]) /
                           std::max(1.0, std::abs(static_cast<double>(output[i])));
        worst = std::isnan(err) ? INFINITY : std::max(worst, err);
      }
      if (!(worst <= 1e-6)) {
        return absl::InternalError(absl::StrCat(
            "the CUDA graph's forecast differs from the eager one by ", worst, " (max rel)"));
      }
      graph_timing = bench::Summarize(std::move(graph_us));
    }
  }

  if (!flags.output.empty()) {
    RETURN_IF_ERROR(WriteSafetensors(
        flags.output,
        {{"output", Q > 1 ? std::vector<int64_t>{B, P, K, Q} : std::vector<int64_t>{B, P, K},
          output}},
        {{"generator", "gpu_bench"}}));
  }
  const CudaBackend::Stats stats = backend->stats();
  std::printf(
      "%s\n",
      absl::StrCat("{\"backend\":\"cuda\",\"device\":", JsonString(prop.name), ",\"batch\":", B,
                   ",\"iters\":", flags.iters, ",\"math\":\"", flags.math, "\",",
                   bench::TimingJson(bench::Summarize(std::move(eager_us))), ",\"graph\":",
                   graph_timing ? absl::StrCat("{", bench::TimingJson(*graph_timing), "}") : "null",
                   ",\"graph_error\":", graph_error.empty() ? "null" : JsonString(graph_error),
                   ",\"workspace_bytes\":", workspace_floats * 4, ",\"scratch_bytes\":",
                   stats.scratch_bytes, ",\"rnn_plans_built\":", stats.rnn_plans_built,
                   ",\"persistent_stacks\":", stats.persistent_stacks, "}")
          .c_str());
  return absl::OkStatus();
}

}  // namespace
}  // namespace forecastd

int main(int argc, char** argv) {
  forecastd::Flags flags;
  CLI::App app{"Times forecastd's forward pass on a CUDA GPU; prints one JSON line."};
  app.add_option("--model", flags.model, "model directory (holds config.json)")->required();
  app.add_option("--version", flags.version, "version subdirectory")->check(CLI::PositiveNumber);
  app.add_option("--io", flags.io,
                 "safetensors file with tensor 'input' (B, T, F); "
                 "without it, seeded N(0,1) inputs");
  app.add_option("--seed", flags.seed, "seed of the inputs without --io");
  app.add_option("--batch", flags.batch,
                 "windows per forecast (with --train: per step, split over --devices)")
      ->check(CLI::PositiveNumber);
  app.add_option("--warmup", flags.warmup, "untimed calls first")->check(CLI::NonNegativeNumber);
  app.add_option("--iters", flags.iters, "timed calls (and graph replays)")
      ->check(CLI::PositiveNumber);
  app.add_option("--device", flags.device, "CUDA device ordinal")->check(CLI::NonNegativeNumber);
  std::string devices;
  app.add_option("--devices", devices,
                 "with --train: the GPUs, e.g. cuda:0,cuda:1; more than one trains data-parallel "
                 "(one rank per GPU over NCCL, --batch the global batch); default: --device");
  app.add_option("--math", flags.math,
                 "GEMM input rounding: fp32 (none), tf32, bf16, fp16 (CudaBackend::Options::math)")
      ->check(CLI::IsMember({"fp32", "tf32", "bf16", "fp16"}));
  app.add_flag("--no-graph", flags.no_graph, "time eager calls only");
  app.add_flag("--train", flags.train,
               "time training steps (Adam, MSE, --math as the precision) instead of forecasts");
  app.add_option("--rnn-algo", flags.rnn_algo,
                 "cuDNN RNN algorithm: auto (CudaBackend's choice), standard, persist, small-h")
      ->check(CLI::IsMember({"auto", "standard", "persist", "small-h"}));
  app.add_option("--recurrent-kernel", flags.recurrent_kernel,
                 "recurrent inference: auto (CudaBackend's choice), cudnn, persistent (our "
                 "persistent kernels where they take the sizes)")
      ->check(CLI::IsMember({"auto", "cudnn", "persistent"}));
  app.add_option("--bucket-mib", flags.bucket_mib,
                 "with --train on several GPUs: gradient sums in buckets of this many MiB "
                 "overlapping the backward; 0: one sum after it (default: the engine's)");
  app.add_option("--attention-scratch-mib", flags.attention_scratch_mib,
                 "chunk of attention scores in MiB (CudaBackend::Options::attention_scratch_bytes)")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--output", flags.output, "write the eager forecast here (safetensors)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  if (!devices.empty()) {
    absl::StatusOr<std::vector<int>> ordinals = forecastd::ParseDevices(devices);
    if (ordinals.ok() && ordinals->size() > 1 && !flags.train) {
      ordinals = absl::InvalidArgumentError("--devices lists several GPUs: only with --train");
    }
    if (!ordinals.ok()) {
      std::fprintf(stderr, "gpu_bench: %s\n", std::string(ordinals.status().message()).c_str());
      return 2;
    }
    flags.devices = *std::move(ordinals);
    flags.device = flags.devices[0];
  }
  const absl::Status status = flags.train ? forecastd::BenchTrain(flags) : forecastd::Bench(flags);
  if (!status.ok()) {
    std::fprintf(stderr, "gpu_bench: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
