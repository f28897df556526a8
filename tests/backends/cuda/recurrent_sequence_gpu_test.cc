// Needs a GPU. The persistent recurrent kernels (kernels/cuda/recurrent_sequence.h) as
// CudaBackend runs them for RecurrentStack and RecurrentStackLast (Options::recurrent_kernel
// kPersistent), against the reference layers (kernels/ref/recurrent.h) stacked on the host:
// LSTM and GRU, uni- and bidirectional, 1 to 4 layers, random shapes with odd sizes (B 1-32,
// H 1-256, I 1-64, T 1-40) and the benchmark's shapes (T=100), every path (the wavefront with
// layer 0's input in the kernel or projected first, the layer-by-layer sweeps); within
// 1e-5 + 1e-4 |ref|, as every fp32 recurrent check of the backend. Stats::persistent_stacks
// proves the kernels ran. Then the 16-bit precisions within their bounds, a graph replay, and
// shapes the kernels do not take falling back to cuDNN.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/cuda_graph.h"
#include "tests/backends/cuda/cuda_test_memory.h"
#include "tests/backends/op_test_util.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

using op_test::Cell;
using op_test::CudaTestMemory;
using op_test::DimsString;
using op_test::ExpectAllClose;
using op_test::MakeStack;
using op_test::MaxAbsDiff;
using op_test::StackCase;

constexpr double kAtol = 1e-5, kRtol = 1e-4;

std::unique_ptr<CudaBackend> PersistentBackend(
    CudaBackend::Options::RecurrentKernel kernel =
        CudaBackend::Options::RecurrentKernel::kPersistent,
    CudaBackend::Options::Math math = CudaBackend::Options::Math::kFp32) {
  CudaBackend::Options options;
  options.recurrent_kernel = kernel;
  options.math = math;
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = CudaBackend::Create(
      testing::SharedGpuEnv().streams->Lease(), testing::SharedGpuEnv().allocator.get(), options);
  INFO(backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

RecurrentCell Of(Cell cell) {
  return cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru;
}

// The reference's out[:, T-1, :].
std::vector<float> LastStep(const std::vector<float>& all, const RecurrentDims& dims) {
  const int64_t C = dims.ND * dims.H;
  std::vector<float> last(dims.B * C);
  for (int64_t b = 0; b < dims.B; ++b) {
    std::copy_n(all.begin() + (b * dims.T + dims.T - 1) * C, C, last.begin() + b * C);
  }
  return last;
}

// Runs RecurrentStack and RecurrentStackLast of the case on `backend`, checks both against the
// reference and that each ran on the persistent kernels; returns the larger max |diff|.
double CheckStack(CudaBackend& backend, Cell cell, const RecurrentDims& dims, int64_t L,
                  uint32_t seed) {
  CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU", DimsString(dims), L);
  CudaTestMemory mem;
  std::mt19937 rng(seed);
  const StackCase s = MakeStack(rng, cell, dims, L, mem);
  const float* inp = mem.Upload(s.inp);
  const int64_t C = dims.ND * dims.H;
  float* out = mem.Output(dims.B * dims.T * C);
  float* scratch = mem.Output(dims.B * dims.T * C);
  float* last = mem.Output(dims.B * C);
  const int64_t before = backend.stats().persistent_stacks;
  const absl::Status stack = backend.RecurrentStack(
      Of(cell), out, scratch, inp, s.dev_weights.data(), dims, static_cast<int>(L));
  INFO(stack.ToString());
  REQUIRE(stack.ok());
  const absl::Status stack_last = backend.RecurrentStackLast(
      Of(cell), last, scratch, inp, s.dev_weights.data(), dims, static_cast<int>(L));
  INFO(stack_last.ToString());
  REQUIRE(stack_last.ok());
  REQUIRE(backend.Synchronize().ok());
  CHECK(backend.stats().persistent_stacks == before + 2);
  const std::vector<float> got = mem.Download(out, dims.B * dims.T * C);
  const std::vector<float> got_last = mem.Download(last, dims.B * C);
  const std::vector<float> want_last = LastStep(s.want, dims);
  ExpectAllClose("RecurrentStack", got, s.want, kAtol, kRtol);
  ExpectAllClose("RecurrentStackLast", got_last, want_last, kAtol, kRtol);
  return std::max(MaxAbsDiff(got, s.want), MaxAbsDiff(got_last, want_last));
}

TEST_CASE("The persistent kernels run the benchmark's stacks as the reference does") {
  std::unique_ptr<CudaBackend> backend = PersistentBackend();
  struct Case {
    Cell cell;
    int64_t B, H, ND, L;
  };
  double worst = 0.0;
  for (const Case c : {Case{Cell::kLstm, 1, 128, 1, 2}, Case{Cell::kLstm, 32, 128, 1, 2},
                       Case{Cell::kLstm, 1, 128, 2, 2}, Case{Cell::kLstm, 8, 128, 2, 2},
                       Case{Cell::kLstm, 1, 256, 2, 2}, Case{Cell::kLstm, 32, 256, 2, 2},
                       Case{Cell::kGru, 1, 128, 1, 2}, Case{Cell::kGru, 4, 256, 2, 2}}) {
    const RecurrentDims dims{c.B, 100, 10, c.H, c.ND};
    worst = std::max(worst, CheckStack(*backend, c.cell, dims, c.L, 31000 + c.B + c.H + c.ND));
  }
  std::printf("benchmark shapes: max |persistent - reference| = %.3g\n", worst);
}

TEST_CASE("The persistent kernels match the reference on random shapes, odd sizes included") {
  std::unique_ptr<CudaBackend> backend = PersistentBackend();
  std::mt19937 pick(31100);
  const auto in = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(pick);
  };
  double worst = 0.0;
  for (int n = 0; n < 48; ++n) {
    const Cell cell = n % 2 == 0 ? Cell::kLstm : Cell::kGru;
    const int64_t ND = (n / 2) % 2 == 0 ? 1 : 2;
    // Mostly small hidden sizes (the wavefront's), some up to the sweep's 256.
    const int64_t H = n % 5 == 4 ? in(129, 256) : in(1, 128);
    const RecurrentDims dims{in(1, 32), in(1, 40), in(1, 64), H, ND};
    const int64_t L = in(1, 4);
    worst = std::max(worst, CheckStack(*backend, cell, dims, L, 31200 + n));
  }
  // Layer 0's input too wide for the kernel (projected first), and a unidirectional stack too
  // large for one cluster's wavefront (a sweep per layer).
  worst = std::max(worst, CheckStack(*backend, Cell::kLstm, {3, 9, 300, 64, 1}, 2, 31300));
  worst = std::max(worst, CheckStack(*backend, Cell::kGru, {5, 11, 300, 33, 1}, 3, 31301));
  worst = std::max(worst, CheckStack(*backend, Cell::kLstm, {2, 13, 7, 200, 1}, 2, 31302));
  worst = std::max(worst, CheckStack(*backend, Cell::kGru, {9, 6, 5, 250, 1}, 3, 31303));
  std::printf("random shapes: max |persistent - reference| = %.3g\n", worst);
}

// Under the 16-bit precisions the kernels round the products' operands (weights, inputs, each h
// passed on) to bf16 or fp16, as those precisions' GEMMs do, and keep the rest in fp32: within
// the bounds the backend states for its 16-bit recurrent stacks (6e-2 bf16, 1e-2 fp16, absolute,
// on outputs bounded by 1), and coarser than fp32 (so the rounding is really there).
TEST_CASE("Under bf16 and fp16 the persistent kernels stay within the stated bounds") {
  struct Case {
    CudaBackend::Options::Math math;
    const char* name;
    double atol;
  };
  for (const Case c : {Case{CudaBackend::Options::Math::kBf16, "bf16", 6e-2},
                       Case{CudaBackend::Options::Math::kFp16, "fp16", 1e-2}}) {
    std::unique_ptr<CudaBackend> backend =
        PersistentBackend(CudaBackend::Options::RecurrentKernel::kPersistent, c.math);
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const RecurrentDims dims :
           {RecurrentDims{1, 100, 10, 128, 1}, RecurrentDims{8, 24, 10, 32, 2},
            RecurrentDims{5, 30, 300, 64, 1}, RecurrentDims{3, 20, 7, 256, 2}}) {
        CAPTURE(c.name, cell == Cell::kLstm ? "LSTM" : "GRU", DimsString(dims));
        CudaTestMemory mem;
        std::mt19937 rng(31600 + dims.H);
        const StackCase s = MakeStack(rng, cell, dims, 2, mem);
        const int64_t C = dims.ND * dims.H;
        float* last = mem.Output(dims.B * C);
        const int64_t before = backend->stats().persistent_stacks;
        REQUIRE(backend
                    ->RecurrentStackLast(Of(cell), last, mem.Output(dims.B * dims.T * C),
                                         mem.Upload(s.inp), s.dev_weights.data(), dims, 2)
                    .ok());
        REQUIRE(backend->Synchronize().ok());
        CHECK(backend->stats().persistent_stacks == before + 1);
        const std::vector<float> got = mem.Download(last, dims.B * C);
        const std::vector<float> want = LastStep(s.want, dims);
        ExpectAllClose(std::string("RecurrentStackLast with ") + c.name, got, want, c.atol, 0.0);
        const double worst = MaxAbsDiff(got, want);
        INFO(c.name << " max |diff| " << worst);
        CHECK(worst > 1e-5);
      }
    }
  }
}

TEST_CASE("A persistent stack replays from a CUDA graph with the same result") {
  std::unique_ptr<CudaBackend> backend = PersistentBackend();
  for (const int64_t ND : {int64_t{1}, int64_t{2}}) {
    CAPTURE(ND);
    CudaTestMemory mem;
    std::mt19937 rng(31400 + ND);
    const RecurrentDims dims{4, 30, 10, 64, ND};
    const StackCase s = MakeStack(rng, Cell::kLstm, dims, 2, mem);
    const float* inp = mem.Upload(s.inp);
    float* scratch = mem.Output(dims.B * dims.T * dims.ND * dims.H);
    float* last = mem.Output(dims.B * dims.ND * dims.H);
    // A first call outside the capture sizes the backend's scratch.
    REQUIRE(backend
                ->RecurrentStackLast(RecurrentCell::kLstm, last, scratch, inp, s.dev_weights.data(),
                                     dims, 2)
                .ok());
    REQUIRE(cudaMemsetAsync(last, 0xff, dims.B * dims.ND * dims.H * sizeof(float),
                            backend->stream()) == cudaSuccess);
    absl::StatusOr<CudaGraph> graph = CudaGraph::Capture(backend->stream(), [&]() -> absl::Status {
      return backend->RecurrentStackLast(RecurrentCell::kLstm, last, scratch, inp,
                                         s.dev_weights.data(), dims, 2);
    });
    INFO(graph.status().ToString());
    REQUIRE(graph.ok());
    for (int i = 0; i < 3; ++i) REQUIRE(graph->Launch(backend->stream()).ok());
    REQUIRE(backend->Synchronize().ok());
    ExpectAllClose("replayed RecurrentStackLast", mem.Download(last, dims.B * dims.ND * dims.H),
                   LastStep(s.want, dims), kAtol, kRtol);
  }
}

TEST_CASE("Stacks the persistent kernels do not take, or kCudnn, run on cuDNN") {
  struct Case {
    CudaBackend::Options::RecurrentKernel kernel;
    RecurrentDims dims;
    bool persistent;
  };
  using Kernel = CudaBackend::Options::RecurrentKernel;
  for (const Case c :
       {Case{Kernel::kPersistent, {2, 7, 5, 300, 1}, false},  // H past a cluster
        Case{Kernel::kCudnn, {2, 7, 5, 64, 1}, false}, Case{Kernel::kAuto, {2, 7, 5, 64, 2}, true},
        Case{Kernel::kAuto, {65, 7, 5, 64, 1}, false}}) {  // past max batch
    CAPTURE(DimsString(c.dims), static_cast<int>(c.kernel));
    std::unique_ptr<CudaBackend> backend = PersistentBackend(c.kernel);
    CudaTestMemory mem;
    std::mt19937 rng(31500);
    const StackCase s = MakeStack(rng, Cell::kGru, c.dims, 2, mem);
    const int64_t n = c.dims.B * c.dims.T * c.dims.ND * c.dims.H;
    float* out = mem.Output(n);
    REQUIRE(backend
                ->RecurrentStack(RecurrentCell::kGru, out, mem.Output(n), mem.Upload(s.inp),
                                 s.dev_weights.data(), c.dims, 2)
                .ok());
    REQUIRE(backend->Synchronize().ok());
    CHECK((backend->stats().persistent_stacks == 1) == c.persistent);
    CHECK((backend->stats().rnn_plans_built == 0) == c.persistent);
    ExpectAllClose("RecurrentStack", mem.Download(out, n), s.want, kAtol, kRtol);
  }
}

}  // namespace
}  // namespace forecastd
