// Every op on every backend against the reference kernels (kernels/ref/), on random inputs from
// fixed-seed generators, over shapes chosen to hit the edges: B = 1 and B > 1, T = 1 and T > 1,
// odd sizes, one and two directions, optional states present and absent. Plus the oneDNN
// backend's own promises: one primitive per shape, and concurrent calls.
//
// Tolerances are |got - ref| <= atol + rtol * |ref|, per op below with the reason. The
// reference accumulates in double; a backend accumulates in fp32 (2^-24 ~ 6e-8 relative per
// rounding) in an order of its own, and may evaluate exp/erf/tanh with its own approximations.
//
// The same cases run on the CUDA backend in the gpu-labelled binary cuda_backend_gpu_test, whose
// source defines FORECASTD_BACKEND_OPS_CUDA to 1 and includes this file: its backend table then
// holds the CUDA backend alone (with a TestMemory of device buffers), defined by that source as
// CudaBackendUnderTest(), and the oneDNN backend's own tests at the end are left out. This
// binary, built without the define, is unchanged by that.
#ifndef FORECASTD_BACKEND_OPS_CUDA
#define FORECASTD_BACKEND_OPS_CUDA 0
#endif

#include <algorithm>
#include <array>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/backend.h"
#if !FORECASTD_BACKEND_OPS_CUDA
#include "backends/cpu/cpu_helpers.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/cpu/dnnl_primitive.h"
#include "backends/cpu/recurrent_avx2.h"
#endif
#include "backends/reference_backend.h"
#include "kernels/ref/activation.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/normalization.h"
#include "kernels/ref/positional_encoding.h"
#include "kernels/ref/recurrent.h"
#include "tests/backends/op_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using op_test::Cell;
using op_test::DimsString;
using op_test::DropoutMask;
using op_test::ExpectAllClose;
using op_test::HostMemory;
using op_test::RecurrentWeightsHost;
using op_test::TestMemory;
using op_test::Uniform;

// ------------------------------------------------------------------------------------------
// The backends under test: one table. A backend whose memory is not host memory (CUDA) adds an
// entry with a TestMemory of its own that copies to and from its device.

struct BackendUnderTest {
  const char* name;
  std::function<absl::StatusOr<std::unique_ptr<Backend>>()> make;
  std::function<std::unique_ptr<TestMemory>()> memory;
  // Calls of ops that SupportsOp reports native which ran the reference all the same.
  std::function<int64_t(const Backend&)> fallback_calls;
};

#if FORECASTD_BACKEND_OPS_CUDA
// Defined by tests/backends/cuda/cuda_backend_gpu_test.cc, which includes this file.
BackendUnderTest CudaBackendUnderTest();

const std::vector<BackendUnderTest>& Backends() {
  static const auto* const backends = new std::vector<BackendUnderTest>{CudaBackendUnderTest()};
  return *backends;
}
#else
const std::vector<BackendUnderTest>& Backends() {
  static const auto* const backends = new std::vector<BackendUnderTest>{
      {"reference",
       []() -> absl::StatusOr<std::unique_ptr<Backend>> {
         return std::make_unique<ReferenceBackend>();
       },
       [] { return std::make_unique<HostMemory>(); }, [](const Backend&) { return int64_t{0}; }},
      {"onednn",
       []() -> absl::StatusOr<std::unique_ptr<Backend>> {
         auto backend = DnnlBackend::Create({});
         if (!backend.ok()) return backend.status();
         return std::unique_ptr<Backend>(std::move(*backend));
       },
       [] { return std::make_unique<HostMemory>(); },
       [](const Backend& b) { return static_cast<const DnnlBackend&>(b).fallback_calls(); }},
  };
  return *backends;
}
#endif  // FORECASTD_BACKEND_OPS_CUDA

std::unique_ptr<Backend> Make(const BackendUnderTest& under_test) {
  absl::StatusOr<std::unique_ptr<Backend>> backend = under_test.make();
  INFO(under_test.name << ": " << backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

// The ops a test ran natively on a backend must not have fallen back.
void RequireNoFallback(const BackendUnderTest& under_test, const Backend& backend, Op op) {
  if (!backend.SupportsOp(op)) return;
  INFO(under_test.name << " ran a shape of a native op on the reference");
  REQUIRE(under_test.fallback_calls(backend) == 0);
}

// ------------------------------------------------------------------------------------------
// Inputs and comparison.

std::string Describe(const BackendUnderTest& under_test, const std::string& op,
                     const std::string& shape) {
  return std::string(under_test.name) + " " + op + " " + shape;
}

// ------------------------------------------------------------------------------------------
// Linear. IN <= 67 products of magnitude <= 1, summed in fp32: the rounding error is ~
// sqrt(IN) * 6e-8 * |sum| typically and IN * 6e-8 * sum|products| at worst (~2.7e-4 for
// IN = 67). Observed on oneDNN: max |diff| 2.4e-6.
constexpr double kLinearAtol = 1e-5, kLinearRtol = 1e-4;

TEST_CASE("Linear matches the reference on every backend") {
  struct Shape {
    int64_t N, IN, OUT;
  };
  // The last is past the CPU's panel Linear: oneDNN's matmul.
  const std::vector<Shape> shapes = {{1, 1, 1},    {1, 7, 5},  {6, 13, 17},
                                     {32, 64, 48}, {3, 67, 1}, {80, 128, 112}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [N, IN, OUT] : shapes) {
      for (const bool with_bias : {true, false}) {
        std::mt19937 rng(1000 + N * 100 + IN * 10 + OUT);
        const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                                 bias = Uniform(rng, OUT);
        std::vector<float> want(N * OUT);
        ref::LinearForward(want.data(), inp.data(), weight.data(),
                           with_bias ? bias.data() : nullptr, N, IN, OUT);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* out = mem->Output(N * OUT);
        REQUIRE(backend
                    ->Linear(out, mem->Upload(inp), mem->Upload(weight),
                             with_bias ? mem->Upload(bias) : nullptr, N, IN, OUT)
                    .ok());
        ExpectAllClose(Describe(under_test, "Linear",
                                "N=" + std::to_string(N) + " IN=" + std::to_string(IN) + " OUT=" +
                                    std::to_string(OUT) + " bias=" + std::to_string(with_bias)),
                       mem->Download(out, N * OUT), want, kLinearAtol, kLinearRtol);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLinear);
  }
}

// ------------------------------------------------------------------------------------------
// LSTM and GRU. Weights are U(-1/sqrt(H), 1/sqrt(H)) as PyTorch initialises them, which keeps
// the gates out of saturation, where a wrong gate or bias would hide. Each step is a Linear of
// I + H inputs (<= 28 here) followed by sigmoid/tanh, which oneDNN evaluates with polynomial
// approximations good to a few ulp; the error carried through the state is damped by the gates
// (|d tanh|, |d sigmoid| <= 1, forget gate < 1), so it stays at the Linear's level.
// Observed on oneDNN: max |diff| 1.2e-7 (LSTM), 9e-8 (GRU).
constexpr double kRecurrentAtol = 1e-5, kRecurrentRtol = 1e-4;

const std::vector<RecurrentDims>& RecurrentShapes() {
  static const auto* const shapes = new std::vector<RecurrentDims>{
      // B, T, I, H, ND
      {1, 1, 1, 1, 1},
      {1, 5, 3, 4, 1},
      {3, 1, 5, 7, 2},
      {4, 6, 5, 8, 2},
      {2, 9, 16, 12, 1},
      // Every batch tile (4 rows, then 1-3) and a hidden size past a whole vector with a tail.
      {9, 4, 5, 19, 2},
      {7, 3, 6, 17, 1},
      {1, 12, 4, 33, 2},
      // Batched rows over more gate rows than one tile of panels holds, each row tail.
      {5, 3, 4, 40, 1},
      {6, 2, 3, 41, 2},
      {7, 2, 3, 33, 1},
      // One direction of a row or two and H >= 64: with 2 or more threads its hidden units
      // are shared out between them, with a barrier per step.
      {1, 7, 5, 67, 1},
      {2, 5, 3, 130, 1},
  };
  return *shapes;
}

// Runs one recurrent case on `backend` and the reference and compares every output asked for.
// c_0 / c_n are used for the LSTM only.
void CheckRecurrent(const BackendUnderTest& under_test, Backend& backend, Cell cell,
                    const RecurrentDims& dims, bool with_h_0, bool with_c_0, bool want_h_n,
                    bool want_c_n) {
  const auto [B, T, I, H, ND] = dims;
  std::mt19937 rng(2000 + B * 1000 + T * 100 + I * 10 + H + ND);
  const RecurrentWeightsHost weights(rng, cell, dims);
  const std::vector<float> inp = Uniform(rng, B * T * I), h_0 = Uniform(rng, ND * B * H),
                           c_0 = Uniform(rng, ND * B * H);
  const int64_t out_n = B * T * ND * H, state_n = ND * B * H;

  std::vector<float> want_out(out_n), want_h(state_n), want_c(state_n);
  const std::vector<RecurrentDirectionWeights> host_weights = weights.Host();
  if (cell == Cell::kLstm) {
    ref::LstmLayerForward(want_out.data(), want_h_n ? want_h.data() : nullptr,
                          want_c_n ? want_c.data() : nullptr, inp.data(),
                          with_h_0 ? h_0.data() : nullptr, with_c_0 ? c_0.data() : nullptr,
                          host_weights.data(), dims);
  } else {
    ref::GruLayerForward(want_out.data(), want_h_n ? want_h.data() : nullptr, inp.data(),
                         with_h_0 ? h_0.data() : nullptr, host_weights.data(), dims);
  }

  std::unique_ptr<TestMemory> mem = under_test.memory();
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(*mem);
  float* out = mem->Output(out_n);
  float* h_n = want_h_n ? mem->Output(state_n) : nullptr;
  float* c_n = want_c_n ? mem->Output(state_n) : nullptr;
  const float* dev_inp = mem->Upload(inp);
  const float* dev_h_0 = with_h_0 ? mem->Upload(h_0) : nullptr;
  const float* dev_c_0 = with_c_0 ? mem->Upload(c_0) : nullptr;
  const absl::Status status =
      cell == Cell::kLstm
          ? backend.LstmLayer(out, h_n, c_n, dev_inp, dev_h_0, dev_c_0, dev_weights.data(), dims)
          : backend.GruLayer(out, h_n, dev_inp, dev_h_0, dev_weights.data(), dims);
  const std::string what = Describe(
      under_test, cell == Cell::kLstm ? "LstmLayer" : "GruLayer",
      DimsString(dims) + " h_0=" + std::to_string(with_h_0) + " c_0=" + std::to_string(with_c_0) +
          " h_n=" + std::to_string(want_h_n) + " c_n=" + std::to_string(want_c_n));
  INFO(what << ": " << status.ToString());
  REQUIRE(status.ok());
  ExpectAllClose(what + " out", mem->Download(out, out_n), want_out, kRecurrentAtol,
                 kRecurrentRtol);
  if (want_h_n) {
    ExpectAllClose(what + " h_n", mem->Download(h_n, state_n), want_h, kRecurrentAtol,
                   kRecurrentRtol);
  }
  if (want_c_n) {
    ExpectAllClose(what + " c_n", mem->Download(c_n, state_n), want_c, kRecurrentAtol,
                   kRecurrentRtol);
  }
}

TEST_CASE("LstmLayer matches the reference on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const RecurrentDims& dims : RecurrentShapes()) {
      for (const bool with_h_0 : {false, true}) {
        for (const bool with_c_0 : {false, true}) {
          for (const bool want_h_n : {false, true}) {
            for (const bool want_c_n : {false, true}) {
              CheckRecurrent(under_test, *backend, Cell::kLstm, dims, with_h_0, with_c_0, want_h_n,
                             want_c_n);
            }
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLstmLayer);
  }
}

TEST_CASE("GruLayer matches the reference on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const RecurrentDims& dims : RecurrentShapes()) {
      for (const bool with_h_0 : {false, true}) {
        for (const bool want_h_n : {false, true}) {
          CheckRecurrent(under_test, *backend, Cell::kGru, dims, with_h_0, /*with_c_0=*/false,
                         want_h_n, /*want_c_n=*/false);
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kGruLayer);
  }
}

#if !FORECASTD_BACKEND_OPS_CUDA
// The calling thread's OpenMP thread count as it was, and no CpuHelpers, once out of scope.
class RestoreThreadSettings {
 public:
  RestoreThreadSettings() : threads_(DnnlBackend::ThreadsForCallingThread()) {}
  ~RestoreThreadSettings() {
    DnnlBackend::SetThreadsForCallingThread(threads_);
    cpu::SetThisThreadCpuHelpers(nullptr);
  }
  RestoreThreadSettings(const RestoreThreadSettings&) = delete;
  RestoreThreadSettings& operator=(const RestoreThreadSettings&) = delete;

 private:
  const int threads_;
};

// The CPU backend's OpenMP threads.
TEST_CASE("Recurrent layers on more threads than pieces of rows share each piece's units") {
  // 8 threads: 8 or 12 rows make 2 or 3 pieces of 4 rows, and the threads left over share each
  // piece's hidden units (H a multiple of every panel width) with a barrier per step; the two
  // directions of one or two rows share their units on 4 threads each.
  const RestoreThreadSettings restore;
  DnnlBackend::SetThreadsForCallingThread(8);
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const RecurrentDims& dims : {RecurrentDims{8, 5, 3, 64, 1}, RecurrentDims{12, 4, 5, 96, 1},
                                      RecurrentDims{8, 3, 4, 128, 1}, RecurrentDims{1, 5, 3, 96, 2},
                                      RecurrentDims{2, 4, 4, 67, 2}}) {
      for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
        CheckRecurrent(under_test, *backend, cell, dims, /*with_h_0=*/true,
                       /*with_c_0=*/cell == Cell::kLstm, /*want_h_n=*/true,
                       /*want_c_n=*/cell == Cell::kLstm);
      }
    }
  }
}

// Lends teams of up to `most` members, each helper a thread of its own for one Run; counts the
// members the teams that ran had.
class ThreadHelpers final : public cpu::CpuHelpers {
 public:
  explicit ThreadHelpers(int most) : most_(most) {}

  std::unique_ptr<cpu::CpuTeam> Borrow(int threads) override {
    const int size = std::min(threads, most_);
    if (size <= 1) return nullptr;
    return std::make_unique<Team>(this, size);
  }
  int members_run() const { return members_run_.load(); }

 private:
  class Team final : public cpu::CpuTeam {
   public:
    Team(ThreadHelpers* helpers, int size) : helpers_(helpers), size_(size) {}
    int size() const override { return size_; }
    void Run(absl::FunctionRef<void(int member)> fn) override {
      std::vector<std::thread> threads;
      for (int q = 1; q < size_; ++q) threads.emplace_back([&fn, q] { fn(q); });
      fn(0);
      for (std::thread& thread : threads) thread.join();
      helpers_->members_run_.fetch_add(size_);
    }

   private:
    ThreadHelpers* const helpers_;
    const int size_;
  };

  const int most_;
  std::atomic<int> members_run_{0};
};

TEST_CASE("Recurrent layers on one OpenMP thread spread over the threads CpuHelpers lend") {
  // One OpenMP thread and helpers installed: a single direction of a row or two shares its
  // units, two directions take one each, 8 rows make pieces whose units the rest share.
  const RestoreThreadSettings restore;
  DnnlBackend::SetThreadsForCallingThread(1);
  for (const int most : {2, 4, 8}) {
    ThreadHelpers helpers(most);
    cpu::SetThisThreadCpuHelpers(&helpers);
    const BackendUnderTest& onednn = Backends().back();
    REQUIRE(std::string(onednn.name) == "onednn");
    std::unique_ptr<Backend> backend = Make(onednn);
    for (const RecurrentDims& dims :
         {RecurrentDims{1, 6, 3, 128, 1}, RecurrentDims{2, 5, 4, 67, 1},
          RecurrentDims{1, 4, 3, 64, 2}, RecurrentDims{8, 3, 4, 96, 1}}) {
      for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
        CheckRecurrent(onednn, *backend, cell, dims, /*with_h_0=*/true,
                       /*with_c_0=*/cell == Cell::kLstm, /*want_h_n=*/true,
                       /*want_c_n=*/cell == Cell::kLstm);
      }
    }
    cpu::SetThisThreadCpuHelpers(nullptr);
    if (cpu::HasAvx2Fma()) REQUIRE(helpers.members_run() > 0);
  }
}
#endif

// RecurrentStack: L layers against the reference run layer by layer (layer l > 0 reads the
// previous layer's ND*H outputs), zero initial states; and RecurrentStackLast where the backend
// has it.
void CheckRecurrentStack(const BackendUnderTest& under_test, Backend& backend, Cell cell,
                         const RecurrentDims& dims, int L) {
  const auto [B, T, I, H, ND] = dims;
  std::mt19937 rng(static_cast<uint32_t>(7000 + L * 100 + B * 10 + H + ND));
  std::vector<RecurrentWeightsHost> layers;
  for (int l = 0; l < L; ++l) {
    RecurrentDims layer_dims = dims;
    if (l > 0) layer_dims.I = ND * H;
    layers.emplace_back(rng, cell, layer_dims);
  }
  const std::vector<float> inp = Uniform(rng, B * T * I);
  const int64_t out_n = B * T * ND * H;

  std::vector<float> want(inp), next(out_n);
  std::vector<RecurrentDirectionWeights> host_weights, dev_weights;
  std::unique_ptr<TestMemory> mem = under_test.memory();
  for (int l = 0; l < L; ++l) {
    RecurrentDims layer_dims = dims;
    if (l > 0) layer_dims.I = ND * H;
    const std::vector<RecurrentDirectionWeights> h = layers[l].Host();
    if (cell == Cell::kLstm) {
      ref::LstmLayerForward(next.data(), nullptr, nullptr, want.data(), nullptr, nullptr, h.data(),
                            layer_dims);
    } else {
      ref::GruLayerForward(next.data(), nullptr, want.data(), nullptr, h.data(), layer_dims);
    }
    want = next;
    for (const RecurrentDirectionWeights& w : layers[l].Upload(*mem)) {
      dev_weights.push_back(w);
    }
  }
  float* out = mem->Output(out_n);
  float* scratch = mem->Output(out_n);
  const absl::Status status =
      backend.RecurrentStack(cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru, out,
                             scratch, mem->Upload(inp), dev_weights.data(), dims, L);
  const std::string what =
      Describe(under_test, cell == Cell::kLstm ? "RecurrentStack LSTM" : "RecurrentStack GRU",
               DimsString(dims) + " L=" + std::to_string(L));
  INFO(what << ": " << status.ToString());
  REQUIRE(status.ok());
  ExpectAllClose(what, mem->Download(out, out_n), want, kRecurrentAtol, kRecurrentRtol);
  // RecurrentStackLast, where the backend has it: out[:, T-1, :] alone.
  const int64_t C = ND * H;
  float* last = mem->Output(B * C);
  const absl::Status last_status = backend.RecurrentStackLast(
      cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru, last, mem->Output(out_n),
      mem->Upload(inp), dev_weights.data(), dims, L);
  if (!backend.HasFastPath(FastPath::kRecurrentStackLast)) {
    CHECK(last_status.code() == absl::StatusCode::kUnimplemented);
    return;
  }
  INFO(what << " RecurrentStackLast: " << last_status.ToString());
  REQUIRE(last_status.ok());
  std::vector<float> want_last(B * C);
  for (int64_t b = 0; b < B; ++b) {
    std::copy_n(want.begin() + (b * T + T - 1) * C, C, want_last.begin() + b * C);
  }
  ExpectAllClose(what + " RecurrentStackLast", mem->Download(last, B * C), want_last,
                 kRecurrentAtol, kRecurrentRtol);
}

// A backend's native stack (cuDNN with numLayers = L) and the default per-layer loop both meet
// the layers' tolerance.
TEST_CASE("RecurrentStack matches the reference layers on every backend") {
  // B, T, I, H, ND
  const std::vector<RecurrentDims> shapes = {
      {1, 7, 3, 5, 1}, {1, 6, 4, 8, 2}, {4, 5, 3, 6, 2}, {3, 9, 5, 12, 1}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const RecurrentDims& dims : shapes) {
        for (const int L : {1, 2, 3}) {
          CheckRecurrentStack(under_test, *backend, cell, dims, L);
        }
      }
    }
    std::unique_ptr<TestMemory> mem = under_test.memory();
    REQUIRE(backend
                ->RecurrentStack(RecurrentCell::kLstm, mem->Output(8), nullptr,
                                 mem->Upload(std::vector<float>(8, 0.5f)), nullptr,
                                 RecurrentDims{1, 2, 4, 4, 1}, 0)
                .code() == absl::StatusCode::kInvalidArgument);
  }
}

#if !FORECASTD_BACKEND_OPS_CUDA
// One row of a unidirectional stack on 2 * L threads or more, at most 32 units a thread above
// the first layer, runs as one wavefront over the layers (RunStackWavefront): on OpenMP's
// threads, and on one OpenMP thread with helpers lent. Widths with and without whole blocks of
// 16 units, and a layer narrower than two blocks; rows and widths where it does not run check
// the layer-by-layer path it leaves them to.
TEST_CASE("A unidirectional stack of one row runs as one wavefront on enough threads") {
  const RestoreThreadSettings restore;
  const BackendUnderTest& onednn = Backends().back();
  REQUIRE(std::string(onednn.name) == "onednn");
  std::unique_ptr<Backend> backend = Make(onednn);
  // B, T, I, H, ND
  const std::vector<RecurrentDims> shapes = {
      {1, 7, 3, 40, 1}, {1, 5, 4, 33, 1}, {1, 6, 10, 128, 1}, {1, 4, 2, 9, 1}, {2, 6, 10, 64, 1}};
  const auto check_all = [&] {
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const RecurrentDims& dims : shapes) {
        for (const int L : {2, 3}) CheckRecurrentStack(onednn, *backend, cell, dims, L);
      }
    }
  };
  for (const int threads : {4, 6, 8}) {
    DnnlBackend::SetThreadsForCallingThread(threads);
    check_all();
  }
  DnnlBackend::SetThreadsForCallingThread(1);
  ThreadHelpers helpers(8);
  cpu::SetThisThreadCpuHelpers(&helpers);
  check_all();
  cpu::SetThisThreadCpuHelpers(nullptr);
  if (cpu::HasAvx2Fma()) REQUIRE(helpers.members_run() > 0);
}
#endif

// RecurrentStep, where a backend has it: one time step of a stack of layers on states that stay
// in a slab, at scattered slots, against the reference layers at T = 1 from the gathered
// states; two steps in a row (the second from the first's states), and the slab's other rows
// untouched. Batch sizes cross the 4-row tiles; hidden sizes have vector tails.
TEST_CASE("RecurrentStep matches the reference layers at T = 1 on every backend that has it") {
  // B, I, H
  const std::vector<std::array<int64_t, 3>> shapes = {{1, 3, 5},  {3, 10, 8},  {4, 1, 12},
                                                      {5, 7, 33}, {9, 10, 17}, {2, 4, 128}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    if (!backend->HasFastPath(FastPath::kRecurrentStep)) {
      std::unique_ptr<TestMemory> mem = under_test.memory();
      CHECK(backend
                ->RecurrentStep(RecurrentCell::kLstm, mem->Output(4), nullptr, mem->Output(8),
                                nullptr, mem->Output(4), nullptr, RecurrentDims{1, 1, 4, 4, 1}, 1)
                .code() == absl::StatusCode::kUnimplemented);
      continue;
    }
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const auto& [B, I, H] : shapes) {
        for (const int L : {1, 2, 3}) {
          const bool lstm = cell == Cell::kLstm;
          const int64_t SL = (lstm ? 2 : 1) * H, S = L * SL, slots_n = 2 * B + 3;
          std::mt19937 rng(static_cast<uint32_t>(9100 + L * 100 + B * 10 + H + I));
          std::vector<RecurrentWeightsHost> layers;
          for (int l = 0; l < L; ++l)
            layers.emplace_back(rng, cell, RecurrentDims{B, 1, l == 0 ? I : H, H, 1});
          std::vector<float> slab = Uniform(rng, slots_n * S, -0.5f, 0.5f);
          // Slots 2b + 1, from the back: scattered and out of order.
          std::vector<int32_t> slots(static_cast<size_t>(B));
          for (int64_t b = 0; b < B; ++b) slots[b] = static_cast<int32_t>(2 * (B - 1 - b) + 1);
          std::unique_ptr<TestMemory> mem = under_test.memory();
          std::vector<RecurrentDirectionWeights> dev_weights;
          for (int l = 0; l < L; ++l) dev_weights.push_back(layers[l].Upload(*mem)[0]);
          float* dev_slab = mem->Upload(slab);
          // Slots as floats' bit patterns, so that TestMemory carries them to the device.
          std::vector<float> slot_bits(static_cast<size_t>(B));
          std::memcpy(slot_bits.data(), slots.data(), slots.size() * sizeof(int32_t));
          const auto* dev_slots = reinterpret_cast<const int32_t*>(mem->Upload(slot_bits));
          for (int step = 0; step < 2; ++step) {
            const std::vector<float> inp = Uniform(rng, B * I);
            // The reference: gather, one step per layer, scatter.
            std::vector<float> want_slab = slab, x = inp, top;
            for (int l = 0; l < L; ++l) {
              const int64_t K = l == 0 ? I : H;
              std::vector<float> h_0(B * H), c_0(B * H), out(B * H), c_n(B * H);
              for (int64_t b = 0; b < B; ++b) {
                const float* state = want_slab.data() + slots[b] * S + l * SL;
                std::copy_n(state, H, h_0.begin() + b * H);
                if (lstm) std::copy_n(state + H, H, c_0.begin() + b * H);
              }
              const std::vector<RecurrentDirectionWeights> w = layers[l].Host();
              const RecurrentDims dims{B, 1, K, H, 1};
              if (lstm) {
                ref::LstmLayerForward(out.data(), nullptr, c_n.data(), x.data(), h_0.data(),
                                      c_0.data(), w.data(), dims);
              } else {
                ref::GruLayerForward(out.data(), nullptr, x.data(), h_0.data(), w.data(), dims);
              }
              for (int64_t b = 0; b < B; ++b) {
                float* state = want_slab.data() + slots[b] * S + l * SL;
                std::copy_n(out.begin() + b * H, H, state);
                if (lstm) std::copy_n(c_n.begin() + b * H, H, state + H);
              }
              x = out;
            }
            top = x;
            float* dev_top = mem->Output(B * H);
            const absl::Status status =
                backend->RecurrentStep(lstm ? RecurrentCell::kLstm : RecurrentCell::kGru, dev_top,
                                       mem->Output(B * H), dev_slab, dev_slots, mem->Upload(inp),
                                       dev_weights.data(), RecurrentDims{B, 1, I, H, 1}, L);
            const std::string what = Describe(
                under_test, lstm ? "RecurrentStep LSTM" : "RecurrentStep GRU",
                "B=" + std::to_string(B) + " I=" + std::to_string(I) + " H=" + std::to_string(H) +
                    " L=" + std::to_string(L) + " step " + std::to_string(step));
            INFO(what << ": " << status.ToString());
            REQUIRE(status.ok());
            ExpectAllClose(what + " top", mem->Download(dev_top, B * H), top, kRecurrentAtol,
                           kRecurrentRtol);
            // Every row of the slab: the stepped ones against the reference, the others as
            // they were (bit for bit: compared with zero tolerance).
            const std::vector<float> got_slab = mem->Download(dev_slab, slots_n * S);
            ExpectAllClose(what + " slab", got_slab, want_slab, kRecurrentAtol, kRecurrentRtol);
            for (int64_t r = 0; r < slots_n; r += 2) {
              const std::vector<float> row(got_slab.begin() + r * S,
                                           got_slab.begin() + (r + 1) * S);
              const std::vector<float> was(slab.begin() + r * S, slab.begin() + (r + 1) * S);
              ExpectAllClose(what + " untouched row " + std::to_string(r), row, was, 0.0, 0.0);
            }
            slab = got_slab;
          }
        }
      }
    }
  }
}

// ------------------------------------------------------------------------------------------
// LayerNorm. Mean and variance are fp32 sums of C <= 96 terms; with |x| <= 4 and rstd <= ~2
// (C > 1) the output's error is a few 1e-7. The C = 1 row has zero variance, so rstd is
// 1/sqrt(eps) ~ 316 and out is exactly beta: compared with the same relative tolerance.
// Observed on oneDNN: max |diff| 1.1e-6, on the rows offset by 3, where x - mean starts from
// inputs whose fp32 ulp is 2.4e-7 and is then scaled by rstd ~ 1.7.
constexpr double kLayerNormAtol = 1e-5, kLayerNormRtol = 1e-4;

TEST_CASE("LayerNorm matches the reference on every backend") {
  struct Shape {
    int64_t N, C;
    float offset;  // added to every input: a mean far from zero tests the variance's stability
  };
  // The last shares its rows out over threads (N * C well past a thread's least share).
  const std::vector<Shape> shapes = {
      {3, 1, 0.0f}, {1, 8, 0.0f}, {5, 13, 3.0f}, {64, 96, 0.0f}, {700, 131, 1.0f}};
  constexpr float kEps = 1e-5f;
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [N, C, offset] : shapes) {
      for (const bool want_mean : {false, true}) {
        for (const bool want_rstd : {false, true}) {
          std::mt19937 rng(3000 + N * 100 + C);
          std::vector<float> inp = Uniform(rng, N * C);
          for (float& x : inp) x += offset;
          const std::vector<float> gamma = Uniform(rng, C), beta = Uniform(rng, C);
          std::vector<float> want(N * C), want_mean_v(N), want_rstd_v(N);
          ref::LayerNormForward(want.data(), want_mean_v.data(), want_rstd_v.data(), inp.data(),
                                gamma.data(), beta.data(), N, C, kEps);

          std::unique_ptr<TestMemory> mem = under_test.memory();
          float* out = mem->Output(N * C);
          float* mean = want_mean ? mem->Output(N) : nullptr;
          float* rstd = want_rstd ? mem->Output(N) : nullptr;
          REQUIRE(backend
                      ->LayerNorm(out, mean, rstd, mem->Upload(inp), mem->Upload(gamma),
                                  mem->Upload(beta), N, C, kEps)
                      .ok());
          const std::string what = Describe(under_test, "LayerNorm",
                                            "N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                                " mean=" + std::to_string(want_mean) +
                                                " rstd=" + std::to_string(want_rstd));
          ExpectAllClose(what + " out", mem->Download(out, N * C), want, kLayerNormAtol,
                         kLayerNormRtol);
          if (want_mean) {
            ExpectAllClose(what + " mean", mem->Download(mean, N), want_mean_v, kLayerNormAtol,
                           kLayerNormRtol);
          }
          if (want_rstd) {
            ExpectAllClose(what + " rstd", mem->Download(rstd, N), want_rstd_v, kLayerNormAtol,
                           kLayerNormRtol);
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLayerNorm);
  }
}

// ------------------------------------------------------------------------------------------
// Element-wise and row-wise ops, out of place and in place (out == inp, which the reference
// allows).

const std::vector<int64_t>& ElementCounts() {
  // The last is long enough to be shared out over threads.
  static const auto* const counts = new std::vector<int64_t>{1, 7, 1000, 4099, 40003};
  return *counts;
}

// GELU: one evaluation per element. oneDNN's erf and tanh are polynomial/rational
// approximations accurate to a few fp32 ulp over [-4, 4], i.e. ~1e-6 relative. Observed on
// oneDNN: max |diff| 2.6e-7.
constexpr double kGeluAtol = 1e-6, kGeluRtol = 1e-5;

TEST_CASE("Gelu, both forms, matches the reference on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
      for (const int64_t n : ElementCounts()) {
        for (const bool in_place : {false, true}) {
          std::mt19937 rng(4000 + n);
          const std::vector<float> inp = Uniform(rng, n, -4.0f, 4.0f);
          std::vector<float> want(n);
          ref::GeluForward(want.data(), inp.data(), n, form);

          std::unique_ptr<TestMemory> mem = under_test.memory();
          float* x = mem->Upload(inp);
          float* out = in_place ? x : mem->Output(n);
          REQUIRE(backend->Gelu(out, x, n, form).ok());
          ExpectAllClose(Describe(under_test, "Gelu",
                                  std::string(form == GeluForm::kErf ? "erf" : "tanh") + " n=" +
                                      std::to_string(n) + " in_place=" + std::to_string(in_place)),
                         mem->Download(out, n), want, kGeluAtol, kGeluRtol);
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kGelu);
  }
}

// ReLU is exact on every backend: max(x, 0) rounds nothing.
TEST_CASE("Relu matches the reference exactly on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const int64_t n : ElementCounts()) {
      for (const bool in_place : {false, true}) {
        std::mt19937 rng(5000 + n);
        const std::vector<float> inp = Uniform(rng, n);
        std::vector<float> want(n);
        ref::ReluForward(want.data(), inp.data(), n);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* x = mem->Upload(inp);
        float* out = in_place ? x : mem->Output(n);
        REQUIRE(backend->Relu(out, x, n).ok());
        ExpectAllClose(Describe(under_test, "Relu",
                                "n=" + std::to_string(n) + " in_place=" + std::to_string(in_place)),
                       mem->Download(out, n), want, 0.0, 0.0);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kRelu);
  }
}

// Softmax: outputs in (0, 1]; exp approximated to a few ulp and a row sum of C <= 128 fp32
// terms give ~1e-6 relative. Observed on oneDNN: max |diff| 6e-8.
constexpr double kSoftmaxAtol = 1e-6, kSoftmaxRtol = 1e-5;

TEST_CASE("Softmax matches the reference on every backend") {
  struct Shape {
    int64_t R, C;
  };
  const std::vector<Shape> shapes = {{1, 1}, {1, 9}, {7, 33}, {64, 128}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [R, C] : shapes) {
      for (const bool in_place : {false, true}) {
        std::mt19937 rng(6000 + R * 100 + C);
        const std::vector<float> inp = Uniform(rng, R * C, -4.0f, 4.0f);
        std::vector<float> want(R * C);
        ref::SoftmaxForward(want.data(), inp.data(), R, C);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* x = mem->Upload(inp);
        float* out = in_place ? x : mem->Output(R * C);
        REQUIRE(backend->Softmax(out, x, R, C).ok());
        ExpectAllClose(Describe(under_test, "Softmax",
                                "R=" + std::to_string(R) + " C=" + std::to_string(C) +
                                    " in_place=" + std::to_string(in_place)),
                       mem->Download(out, R * C), want, kSoftmaxAtol, kSoftmaxRtol);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kSoftmax);
  }
}

// ------------------------------------------------------------------------------------------
// Attention: two fp32 matmuls of depth hs <= 8 and T <= 16 around a softmax; |q.k| * scale is
// small, so the error is the Linear's order. Masked weights must be exactly 0 (they are
// exp(-inf) on oneDNN). Observed on oneDNN: max |diff| 9e-8.
constexpr double kAttentionAtol = 1e-5, kAttentionRtol = 1e-4;

TEST_CASE("Attention, causal and not, with and without dropout, matches the reference") {
  struct Shape {
    int64_t B, T, D, NH;
  };
  const std::vector<Shape> shapes = {{1, 1, 4, 1}, {2, 5, 8, 2}, {3, 7, 12, 3}, {2, 16, 32, 4}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [B, T, D, NH] : shapes) {
      for (const bool causal : {false, true}) {
        for (const bool want_att : {false, true}) {
          for (const float dropout : {0.0f, 0.3f}) {
            std::mt19937 rng(7000 + B * 1000 + T * 10 + D);
            const std::vector<float> qkv = Uniform(rng, B * T * 3 * D);
            const int64_t att_n = B * NH * T * T;
            const std::vector<float> mask = DropoutMask(rng, att_n, dropout);
            const float* want_mask = dropout > 0.0f ? mask.data() : nullptr;
            std::vector<float> want(B * T * D), want_att_v(att_n);
            ref::AttentionForward(want.data(), want_att_v.data(), qkv.data(), want_mask, B, T, D,
                                  NH, causal);

            std::unique_ptr<TestMemory> mem = under_test.memory();
            float* out = mem->Output(B * T * D);
            float* att = want_att ? mem->Output(att_n) : nullptr;
            const float* dev_mask = want_mask != nullptr ? mem->Upload(mask) : nullptr;
            REQUIRE(
                backend->Attention(out, att, mem->Upload(qkv), dev_mask, B, T, D, NH, causal).ok());
            const std::string what = Describe(
                under_test, "Attention",
                "B=" + std::to_string(B) + " T=" + std::to_string(T) + " D=" + std::to_string(D) +
                    " NH=" + std::to_string(NH) + " causal=" + std::to_string(causal) +
                    " att=" + std::to_string(want_att) + " dropout=" + std::to_string(dropout));
            ExpectAllClose(what + " out", mem->Download(out, B * T * D), want, kAttentionAtol,
                           kAttentionRtol);
            if (want_att) {
              ExpectAllClose(what + " att", mem->Download(att, att_n), want_att_v, kAttentionAtol,
                             kAttentionRtol);
            }
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kAttention);
  }
}

TEST_CASE("AttentionLastQuery matches the reference and the full attention's last row") {
  struct Shape {
    int64_t B, T, D, NH;
  };
  const std::vector<Shape> shapes = {{1, 1, 4, 1}, {2, 5, 8, 2}, {3, 7, 12, 3}, {5, 16, 32, 4}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [B, T, D, NH] : shapes) {
      std::mt19937 rng(7500 + B * 1000 + T * 10 + D);
      const std::vector<float> qkv = Uniform(rng, B * T * 3 * D);
      // The same numbers split as the last layer of a forecaster splits them.
      std::vector<float> q(B * D), kv(B * T * 2 * D);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t t = 0; t < T; ++t) {
          const float* row = qkv.data() + (b * T + t) * 3 * D;
          std::copy(row + D, row + 3 * D, kv.data() + (b * T + t) * 2 * D);
          if (t == T - 1) std::copy(row, row + D, q.data() + b * D);
        }
      }
      std::vector<float> want(B * D), full(B * T * D);
      ref::AttentionLastQueryForward(want.data(), q.data(), kv.data(), B, T, D, NH);
      for (const bool causal : {false, true}) {
        ref::AttentionForward(full.data(), nullptr, qkv.data(), nullptr, B, T, D, NH, causal);
        for (int64_t b = 0; b < B; ++b) {
          const std::vector<float> last(full.begin() + (b * T + T - 1) * D,
                                        full.begin() + (b * T + T) * D);
          const std::vector<float> mine(want.begin() + b * D, want.begin() + (b + 1) * D);
          ExpectAllClose("reference last row vs full attention", mine, last, 1e-6, 1e-6);
        }
      }

      std::unique_ptr<TestMemory> mem = under_test.memory();
      float* out = mem->Output(B * D);
      REQUIRE(backend->AttentionLastQuery(out, mem->Upload(q), mem->Upload(kv), B, T, D, NH).ok());
      ExpectAllClose(Describe(under_test, "AttentionLastQuery",
                              "B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                  " D=" + std::to_string(D) + " NH=" + std::to_string(NH)),
                     mem->Download(out, B * D), want, kAttentionAtol, kAttentionRtol);
    }
    RequireNoFallback(under_test, *backend, Op::kAttentionLastQuery);
  }
}

// ------------------------------------------------------------------------------------------
// Residual: one correctly rounded fp32 add per element, so exact everywhere; out may alias
// either input.

TEST_CASE("Residual matches the reference exactly on every backend, in place too") {
  enum class Alias { kNone, kA, kB };
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const int64_t n : ElementCounts()) {
      for (const Alias alias : {Alias::kNone, Alias::kA, Alias::kB}) {
        std::mt19937 rng(8000 + n);
        const std::vector<float> a = Uniform(rng, n), b = Uniform(rng, n);
        std::vector<float> want(n);
        ref::ResidualForward(want.data(), a.data(), b.data(), n);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* dev_a = mem->Upload(a);
        float* dev_b = mem->Upload(b);
        float* out = alias == Alias::kA ? dev_a : alias == Alias::kB ? dev_b : mem->Output(n);
        REQUIRE(backend->Residual(out, dev_a, dev_b, n).ok());
        ExpectAllClose(Describe(under_test, "Residual",
                                "n=" + std::to_string(n) +
                                    " alias=" + std::to_string(static_cast<int>(alias))),
                       mem->Download(out, n), want, 0.0, 0.0);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kResidual);
  }
}

// PositionalEncoding: |pe| <= 1 and |inp| <= 1; a backend that evaluates sin/cos in fp32 rather
// than double is off by a few ulp of 2, i.e. < 1e-6.
constexpr double kPositionalAtol = 1e-6, kPositionalRtol = 1e-6;

TEST_CASE("PositionalEncoding matches the reference on every backend, in place too") {
  struct Shape {
    int64_t B, T, D;
  };
  const std::vector<Shape> shapes = {{1, 1, 1}, {2, 5, 7}, {3, 9, 16}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [B, T, D] : shapes) {
      for (const bool in_place : {false, true}) {
        std::mt19937 rng(9000 + B * 100 + T * 10 + D);
        const std::vector<float> inp = Uniform(rng, B * T * D);
        std::vector<float> want(B * T * D);
        ref::PositionalEncodingForward(want.data(), inp.data(), B, T, D);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* x = mem->Upload(inp);
        float* out = in_place ? x : mem->Output(B * T * D);
        REQUIRE(backend->PositionalEncoding(out, x, B, T, D).ok());
        ExpectAllClose(Describe(under_test, "PositionalEncoding",
                                "B=" + std::to_string(B) + " T=" + std::to_string(T) + " D=" +
                                    std::to_string(D) + " in_place=" + std::to_string(in_place)),
                       mem->Download(out, B * T * D), want, kPositionalAtol, kPositionalRtol);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kPositionalEncoding);
  }
}

// ------------------------------------------------------------------------------------------
// Backward passes. Each is compared with its kernels/ref counterpart, which accumulates in
// double and rounds once; every gradient buffer starts as NaN, so one that is not written
// fails. dout is U(-1, 1) throughout.

// LinearBackward: the three gradients are fp32 sums of OUT <= 48 (dinp) or N <= 32 (dweight,
// dbias) products of magnitude <= 1, the same order of error as the forward's, so the same
// tolerance. Observed on oneDNN: max |diff| 1.4e-6 (dinp, dweight), 9.5e-7 (dbias).
constexpr double kLinearBackwardAtol = kLinearAtol, kLinearBackwardRtol = kLinearRtol;

TEST_CASE("LinearBackward matches the reference on every backend") {
  struct Shape {
    int64_t N, IN, OUT;
  };
  // The last one's bias gradient sums rows on several threads.
  const std::vector<Shape> shapes = {{1, 1, 1},    {1, 7, 5},  {6, 13, 17},
                                     {32, 64, 48}, {3, 67, 1}, {600, 24, 133}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [N, IN, OUT] : shapes) {
      for (const bool want_dinp : {true, false}) {
        for (const bool want_dbias : {true, false}) {
          std::mt19937 rng(1500 + N * 100 + IN * 10 + OUT);
          const std::vector<float> dout = Uniform(rng, N * OUT), inp = Uniform(rng, N * IN),
                                   weight = Uniform(rng, OUT * IN);
          std::vector<float> want_dinp_v(N * IN), want_dweight(OUT * IN), want_dbias_v(OUT);
          ref::LinearBackward(want_dinp_v.data(), want_dweight.data(), want_dbias_v.data(),
                              dout.data(), inp.data(), weight.data(), N, IN, OUT);

          std::unique_ptr<TestMemory> mem = under_test.memory();
          float* dinp = want_dinp ? mem->Output(N * IN) : nullptr;
          float* dweight = mem->Output(OUT * IN);
          float* dbias = want_dbias ? mem->Output(OUT) : nullptr;
          REQUIRE(backend
                      ->LinearBackward(dinp, dweight, dbias, mem->Upload(dout), mem->Upload(inp),
                                       nullptr, mem->Upload(weight), N, IN, OUT)
                      .ok());
          const std::string what =
              Describe(under_test, "LinearBackward",
                       "N=" + std::to_string(N) + " IN=" + std::to_string(IN) +
                           " OUT=" + std::to_string(OUT) + " dinp=" + std::to_string(want_dinp) +
                           " dbias=" + std::to_string(want_dbias));
          if (want_dinp) {
            ExpectAllClose(what + " dinp", mem->Download(dinp, N * IN), want_dinp_v,
                           kLinearBackwardAtol, kLinearBackwardRtol);
          }
          ExpectAllClose(what + " dweight", mem->Download(dweight, OUT * IN), want_dweight,
                         kLinearBackwardAtol, kLinearBackwardRtol);
          if (want_dbias) {
            ExpectAllClose(what + " dbias", mem->Download(dbias, OUT), want_dbias_v,
                           kLinearBackwardAtol, kLinearBackwardRtol);
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLinearBackward);
  }
}

// LstmLayerBackward / GruLayerBackward. Backpropagation through time recomputes the forward
// (the forward's errors in the states), then sums over up to B * T = 36 steps per weight
// gradient and carries dh back through T <= 12 steps, each through the gates' derivatives
// (<= 1) and W_hh (entries <= 1/sqrt(H)), so the error stays at a few fp32 ulp of those sums:
// the forward's tolerance. A wrong gate order or bias mapping is off by O(0.01) or more.
// Observed on oneDNN: max |diff| 3e-7 (dW), 9.5e-7 (db), 1.8e-7 (dinp).
constexpr double kRecurrentBackwardAtol = kRecurrentAtol, kRecurrentBackwardRtol = kRecurrentRtol;

void CheckRecurrentBackward(const BackendUnderTest& under_test, Backend& backend, Cell cell,
                            const RecurrentDims& dims, bool with_h_0, bool with_c_0,
                            bool want_dinp) {
  const auto [B, T, I, H, ND] = dims;
  const bool lstm = cell == Cell::kLstm;
  const int64_t GH = (lstm ? 4 : 3) * H;
  std::mt19937 rng(2500 + B * 1000 + T * 100 + I * 10 + H + ND);
  const RecurrentWeightsHost weights(rng, cell, dims);
  const std::vector<float> inp = Uniform(rng, B * T * I), h_0 = Uniform(rng, ND * B * H),
                           c_0 = Uniform(rng, ND * B * H), dout = Uniform(rng, B * T * ND * H);

  std::vector<float> want_dinp_v(B * T * I);
  std::vector<std::vector<float>> want_dw_ih(ND, std::vector<float>(GH * I)),
      want_dw_hh(ND, std::vector<float>(GH * H)), want_db_ih(ND, std::vector<float>(GH)),
      want_db_hh(ND, std::vector<float>(GH));
  std::vector<RecurrentDirectionGrads> want_grads;
  for (int64_t d = 0; d < ND; ++d) {
    want_grads.push_back(
        {want_dw_ih[d].data(), want_dw_hh[d].data(), want_db_ih[d].data(), want_db_hh[d].data()});
  }
  const std::vector<RecurrentDirectionWeights> host_weights = weights.Host();
  if (lstm) {
    ref::LstmLayerBackward(want_dinp_v.data(), want_grads.data(), dout.data(), inp.data(),
                           with_h_0 ? h_0.data() : nullptr, with_c_0 ? c_0.data() : nullptr,
                           host_weights.data(), dims);
  } else {
    ref::GruLayerBackward(want_dinp_v.data(), want_grads.data(), dout.data(), inp.data(),
                          with_h_0 ? h_0.data() : nullptr, host_weights.data(), dims);
  }

  std::unique_ptr<TestMemory> mem = under_test.memory();
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(*mem);
  std::vector<RecurrentDirectionGrads> grads;
  for (int64_t d = 0; d < ND; ++d) {
    grads.push_back({mem->Output(GH * I), mem->Output(GH * H), mem->Output(GH), mem->Output(GH)});
  }
  float* dinp = want_dinp ? mem->Output(B * T * I) : nullptr;
  const float* dev_dout = mem->Upload(dout);
  const float* dev_inp = mem->Upload(inp);
  const float* dev_h_0 = with_h_0 ? mem->Upload(h_0) : nullptr;
  const float* dev_c_0 = with_c_0 ? mem->Upload(c_0) : nullptr;
  const absl::Status status =
      lstm ? backend.LstmLayerBackward(dinp, grads.data(), dev_dout, dev_inp, dev_h_0, dev_c_0,
                                       dev_weights.data(), dims)
           : backend.GruLayerBackward(dinp, grads.data(), dev_dout, dev_inp, dev_h_0,
                                      dev_weights.data(), dims);
  const std::string what =
      Describe(under_test, lstm ? "LstmLayerBackward" : "GruLayerBackward",
               DimsString(dims) + " h_0=" + std::to_string(with_h_0) +
                   " c_0=" + std::to_string(with_c_0) + " dinp=" + std::to_string(want_dinp));
  INFO(what << ": " << status.ToString());
  REQUIRE(status.ok());
  if (want_dinp) {
    ExpectAllClose(what + " dinp", mem->Download(dinp, B * T * I), want_dinp_v,
                   kRecurrentBackwardAtol, kRecurrentBackwardRtol);
  }
  for (int64_t d = 0; d < ND; ++d) {
    const std::string dir = " d=" + std::to_string(d);
    ExpectAllClose(what + dir + " dw_ih", mem->Download(grads[d].dw_ih, GH * I), want_dw_ih[d],
                   kRecurrentBackwardAtol, kRecurrentBackwardRtol);
    ExpectAllClose(what + dir + " dw_hh", mem->Download(grads[d].dw_hh, GH * H), want_dw_hh[d],
                   kRecurrentBackwardAtol, kRecurrentBackwardRtol);
    ExpectAllClose(what + dir + " db_ih", mem->Download(grads[d].db_ih, GH), want_db_ih[d],
                   kRecurrentBackwardAtol, kRecurrentBackwardRtol);
    ExpectAllClose(what + dir + " db_hh", mem->Download(grads[d].db_hh, GH), want_db_hh[d],
                   kRecurrentBackwardAtol, kRecurrentBackwardRtol);
  }
}

TEST_CASE("LstmLayerBackward matches the reference on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const RecurrentDims& dims : RecurrentShapes()) {
      for (const bool with_h_0 : {false, true}) {
        for (const bool with_c_0 : {false, true}) {
          for (const bool want_dinp : {true, false}) {
            CheckRecurrentBackward(under_test, *backend, Cell::kLstm, dims, with_h_0, with_c_0,
                                   want_dinp);
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLstmLayerBackward);
  }
}

TEST_CASE("GruLayerBackward matches the reference on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const RecurrentDims& dims : RecurrentShapes()) {
      for (const bool with_h_0 : {false, true}) {
        for (const bool want_dinp : {true, false}) {
          CheckRecurrentBackward(under_test, *backend, Cell::kGru, dims, with_h_0,
                                 /*with_c_0=*/false, want_dinp);
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kGruLayerBackward);
  }
}

// The recurrent stack's training pair: RecurrentStackForTraining with a RecurrentSaved of the
// size the backend states, then RecurrentStackBackward given it, against the reference layers
// run forward and then backward top down. A backend without the fast path runs the default
// composition and leaves the state unfilled; one with it fills the state wherever it keeps one
// for the cell (RecurrentSavedFloats > 0), and the backward reads it.
TEST_CASE("The RecurrentStack training pair matches the reference layers on every backend") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      const RecurrentCell rcell = cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru;
      for (const RecurrentDims& dims :
           {RecurrentDims{3, 5, 4, 6, 2}, RecurrentDims{2, 7, 3, 9, 1}}) {
        for (const int L : {1, 3}) {
          const auto [B, T, I, H, ND] = dims;
          const int64_t GH = (cell == Cell::kLstm ? 4 : 3) * H, S = B * T * ND * H;
          const auto layer_dims = [&dims](int l) {
            RecurrentDims d = dims;
            if (l > 0) d.I = dims.ND * dims.H;
            return d;
          };
          std::mt19937 rng(4100 + static_cast<int>(B * 100 + T * 10 + ND) + L);
          std::vector<RecurrentWeightsHost> layers;
          for (int l = 0; l < L; ++l) layers.emplace_back(rng, cell, layer_dims(l));
          const std::vector<float> inp = Uniform(rng, B * T * I), dout = Uniform(rng, S);

          // The reference: each layer's input kept, then the layer backwards top down.
          std::vector<std::vector<float>> layer_in{inp};
          std::vector<float> want_out(S);
          for (int l = 0; l < L; ++l) {
            const std::vector<RecurrentDirectionWeights> w = layers[l].Host();
            if (cell == Cell::kLstm) {
              ref::LstmLayerForward(want_out.data(), nullptr, nullptr, layer_in.back().data(),
                                    nullptr, nullptr, w.data(), layer_dims(l));
            } else {
              ref::GruLayerForward(want_out.data(), nullptr, layer_in.back().data(), nullptr,
                                   w.data(), layer_dims(l));
            }
            if (l + 1 < L) layer_in.push_back(want_out);
          }
          std::vector<std::vector<float>> want_grads;  // [l * ND + d] * 4 tensors
          std::vector<float> dl_out = dout, want_dinp;
          for (int l = L - 1; l >= 0; --l) {
            const RecurrentDims ld = layer_dims(l);
            std::vector<float> dl_in(B * T * ld.I);
            std::vector<std::vector<float>> g;
            std::vector<RecurrentDirectionGrads> views;
            for (int64_t d = 0; d < ND; ++d) {
              for (const int64_t n : {GH * ld.I, GH * H, GH, GH}) g.emplace_back(n);
              views.push_back(
                  {g[d * 4].data(), g[d * 4 + 1].data(), g[d * 4 + 2].data(), g[d * 4 + 3].data()});
            }
            const std::vector<RecurrentDirectionWeights> w = layers[l].Host();
            if (cell == Cell::kLstm) {
              ref::LstmLayerBackward(dl_in.data(), views.data(), dl_out.data(), layer_in[l].data(),
                                     nullptr, nullptr, w.data(), ld);
            } else {
              ref::GruLayerBackward(dl_in.data(), views.data(), dl_out.data(), layer_in[l].data(),
                                    nullptr, w.data(), ld);
            }
            want_grads.insert(want_grads.begin(), g.begin(), g.end());
            dl_out = dl_in;
          }
          want_dinp = dl_out;

          std::unique_ptr<TestMemory> mem = under_test.memory();
          std::vector<RecurrentDirectionWeights> dev_weights;
          std::vector<RecurrentDirectionGrads> grads;
          std::vector<float*> grad_buffers;
          for (int l = 0; l < L; ++l) {
            for (const RecurrentDirectionWeights& w : layers[l].Upload(*mem)) {
              dev_weights.push_back(w);
            }
            for (int64_t d = 0; d < ND; ++d) {
              for (const int64_t n : {GH * layer_dims(l).I, GH * H, GH, GH}) {
                grad_buffers.push_back(mem->Output(n));
              }
              const size_t k = grad_buffers.size();
              grads.push_back({grad_buffers[k - 4], grad_buffers[k - 3], grad_buffers[k - 2],
                               grad_buffers[k - 1]});
            }
          }
          const std::string what = Describe(under_test, "RecurrentStack training pair",
                                            DimsString(dims) + " L=" + std::to_string(L) +
                                                (cell == Cell::kLstm ? " LSTM" : " GRU"));
          const absl::StatusOr<int64_t> state_floats =
              backend->RecurrentSavedFloats(rcell, dims, L);
          INFO(what << ": " << state_floats.status().ToString());
          REQUIRE(state_floats.ok());
          RecurrentSaved saved;
          saved.state_floats = *state_floats;
          saved.state = *state_floats > 0 ? mem->Output(*state_floats) : nullptr;
          const float* dev_inp = mem->Upload(inp);
          float* out = mem->Output(S);
          REQUIRE(backend
                      ->RecurrentStackForTraining(rcell, out, mem->Output(S), dev_inp,
                                                  dev_weights.data(), dims, L, &saved)
                      .ok());
          CHECK(saved.filled ==
                (backend->HasFastPath(FastPath::kRecurrentStackBackward) && *state_floats > 0));
          ExpectAllClose(what + " out", mem->Download(out, S), want_out, kRecurrentAtol,
                         kRecurrentRtol);
          float* dinp = mem->Output(B * T * I);
          REQUIRE(backend
                      ->RecurrentStackBackward(rcell, dinp, grads.data(), mem->Upload(dout),
                                               mem->Output((L + 1) * S), dev_inp,
                                               dev_weights.data(), dims, L, &saved)
                      .ok());
          ExpectAllClose(what + " dinp", mem->Download(dinp, B * T * I), want_dinp,
                         kRecurrentBackwardAtol, kRecurrentBackwardRtol);
          for (size_t i = 0; i < grad_buffers.size(); ++i) {
            const int64_t n = static_cast<int64_t>(want_grads[i].size());
            ExpectAllClose(what + " weight gradient " + std::to_string(i),
                           mem->Download(grad_buffers[i], n), want_grads[i], kRecurrentBackwardAtol,
                           kRecurrentBackwardRtol);
          }
        }
      }
    }
  }
}

// LayerNormBackward: dgamma and dbeta are fp32 sums over N <= 64 rows of terms <= ~2; dinp is
// rstd times a difference of row means of C <= 96 terms, where cancellation leaves an absolute
// error of a few ulp of the terms (~1e-7) times rstd (~1.7; the C = 1 row's rstd ~ 316 meets
// an exact 0, since x - mean is 0 there). The forward's tolerance covers both. Observed on
// oneDNN: max |diff| 1.9e-6 (dgamma, N = 64), 9.5e-7 (dbeta), 2.4e-7 (dinp).
constexpr double kLayerNormBackwardAtol = kLayerNormAtol, kLayerNormBackwardRtol = kLayerNormRtol;

TEST_CASE("LayerNormBackward matches the reference on every backend") {
  struct Shape {
    int64_t N, C;
    float offset;  // as in the forward test
  };
  // The last shares its rows out over threads (N * C well past a thread's least share).
  const std::vector<Shape> shapes = {
      {3, 1, 0.0f}, {1, 8, 0.0f}, {5, 13, 3.0f}, {64, 96, 0.0f}, {700, 131, 1.0f}};
  constexpr float kEps = 1e-5f;
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [N, C, offset] : shapes) {
      for (const bool want_dinp : {true, false}) {
        for (const bool want_dgamma : {true, false}) {
          for (const bool want_dbeta : {true, false}) {
            std::mt19937 rng(3500 + N * 100 + C);
            std::vector<float> inp = Uniform(rng, N * C);
            for (float& x : inp) x += offset;
            const std::vector<float> gamma = Uniform(rng, C), dout = Uniform(rng, N * C);
            std::vector<float> want_dinp_v(N * C), want_dgamma_v(C), want_dbeta_v(C);
            ref::LayerNormBackward(want_dinp_v.data(), want_dgamma_v.data(), want_dbeta_v.data(),
                                   dout.data(), inp.data(), gamma.data(), N, C, kEps);

            std::unique_ptr<TestMemory> mem = under_test.memory();
            float* dinp = want_dinp ? mem->Output(N * C) : nullptr;
            float* dgamma = want_dgamma ? mem->Output(C) : nullptr;
            float* dbeta = want_dbeta ? mem->Output(C) : nullptr;
            REQUIRE(backend
                        ->LayerNormBackward(dinp, dgamma, dbeta, mem->Upload(dout),
                                            mem->Upload(inp), mem->Upload(gamma), N, C, kEps)
                        .ok());
            const std::string what = Describe(under_test, "LayerNormBackward",
                                              "N=" + std::to_string(N) + " C=" + std::to_string(C) +
                                                  " dinp=" + std::to_string(want_dinp) +
                                                  " dgamma=" + std::to_string(want_dgamma) +
                                                  " dbeta=" + std::to_string(want_dbeta));
            if (want_dinp) {
              ExpectAllClose(what + " dinp", mem->Download(dinp, N * C), want_dinp_v,
                             kLayerNormBackwardAtol, kLayerNormBackwardRtol);
            }
            if (want_dgamma) {
              ExpectAllClose(what + " dgamma", mem->Download(dgamma, C), want_dgamma_v,
                             kLayerNormBackwardAtol, kLayerNormBackwardRtol);
            }
            if (want_dbeta) {
              ExpectAllClose(what + " dbeta", mem->Download(dbeta, C), want_dbeta_v,
                             kLayerNormBackwardAtol, kLayerNormBackwardRtol);
            }
          }
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kLayerNormBackward);
  }
}

// GeluBackward: one evaluation of gelu' (|gelu'| <= 1.13 on [-4, 4]) times dout, with oneDNN's
// erf / tanh / exp approximations good to a few ulp. Unlike the forward, gelu' has a term
// x * (1 - tanh^2) * (...) whose fp32 1 - tanh^2 loses ~1 ulp of 1 (6e-8) and is then scaled
// by up to ~5 at |x| = 4, so the absolute tolerance is the forward's times 2. Observed on
// oneDNN: max |diff| 5.4e-7 (tanh form), 2.6e-7 (erf form).
constexpr double kGeluBackwardAtol = 2 * kGeluAtol, kGeluBackwardRtol = kGeluRtol;

TEST_CASE("GeluBackward, both forms, matches the reference on every backend, in place too") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
      for (const int64_t n : ElementCounts()) {
        for (const bool in_place : {false, true}) {
          std::mt19937 rng(4500 + n);
          const std::vector<float> inp = Uniform(rng, n, -4.0f, 4.0f), dout = Uniform(rng, n);
          std::vector<float> want(n);
          ref::GeluBackward(want.data(), dout.data(), inp.data(), n, form);

          std::unique_ptr<TestMemory> mem = under_test.memory();
          float* dev_dout = mem->Upload(dout);
          float* dinp = in_place ? dev_dout : mem->Output(n);
          REQUIRE(backend->GeluBackward(dinp, dev_dout, mem->Upload(inp), n, form).ok());
          ExpectAllClose(Describe(under_test, "GeluBackward",
                                  std::string(form == GeluForm::kErf ? "erf" : "tanh") + " n=" +
                                      std::to_string(n) + " in_place=" + std::to_string(in_place)),
                         mem->Download(dinp, n), want, kGeluBackwardAtol, kGeluBackwardRtol);
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kGeluBackward);
  }
}

// ReluBackward is exact: it selects dout or 0. Every fifth input is exactly 0, where the
// derivative must be 0 (PyTorch's convention), not dout.
TEST_CASE("ReluBackward matches the reference exactly on every backend, in place too") {
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const int64_t n : ElementCounts()) {
      for (const bool in_place : {false, true}) {
        std::mt19937 rng(5500 + n);
        std::vector<float> inp = Uniform(rng, n);
        for (int64_t i = 0; i < n; i += 5) inp[i] = 0.0f;
        const std::vector<float> dout = Uniform(rng, n);
        std::vector<float> want(n);
        ref::ReluBackward(want.data(), dout.data(), inp.data(), n);
        REQUIRE(want[0] == 0.0f);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* dev_dout = mem->Upload(dout);
        float* dinp = in_place ? dev_dout : mem->Output(n);
        REQUIRE(backend->ReluBackward(dinp, dev_dout, mem->Upload(inp), n).ok());
        ExpectAllClose(Describe(under_test, "ReluBackward",
                                "n=" + std::to_string(n) + " in_place=" + std::to_string(in_place)),
                       mem->Download(dinp, n), want, 0.0, 0.0);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kReluBackward);
  }
}

// SoftmaxBackward: out * (dout - dot) with dot an fp32 sum of C <= 128 terms out * dout, which
// sum to at most 1 in magnitude: errors of a few 1e-8, well inside the forward's tolerance.
// Observed on oneDNN: max |diff| 7.5e-9.
constexpr double kSoftmaxBackwardAtol = kSoftmaxAtol, kSoftmaxBackwardRtol = kSoftmaxRtol;

TEST_CASE("SoftmaxBackward matches the reference on every backend, in place too") {
  struct Shape {
    int64_t R, C;
  };
  const std::vector<Shape> shapes = {{1, 1}, {1, 9}, {7, 33}, {64, 128}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [R, C] : shapes) {
      for (const bool in_place : {false, true}) {
        std::mt19937 rng(6500 + R * 100 + C);
        const std::vector<float> inp = Uniform(rng, R * C, -4.0f, 4.0f), dout = Uniform(rng, R * C);
        std::vector<float> out(R * C), want(R * C);
        ref::SoftmaxForward(out.data(), inp.data(), R, C);
        ref::SoftmaxBackward(want.data(), dout.data(), out.data(), R, C);

        std::unique_ptr<TestMemory> mem = under_test.memory();
        float* dev_dout = mem->Upload(dout);
        float* dinp = in_place ? dev_dout : mem->Output(R * C);
        REQUIRE(backend->SoftmaxBackward(dinp, dev_dout, mem->Upload(out), R, C).ok());
        ExpectAllClose(Describe(under_test, "SoftmaxBackward",
                                "R=" + std::to_string(R) + " C=" + std::to_string(C) +
                                    " in_place=" + std::to_string(in_place)),
                       mem->Download(dinp, R * C), want, kSoftmaxBackwardAtol,
                       kSoftmaxBackwardRtol);
      }
    }
    RequireNoFallback(under_test, *backend, Op::kSoftmaxBackward);
  }
}

// AttentionBackward / AttentionLastQueryBackward: fp32 matmuls of depth hs <= 8 or T <= 16
// around a softmax backward, with every factor <= 1: the forward's order of error. Observed on
// oneDNN: max |diff| 2.4e-7 (AttentionBackward; AttentionLastQueryBackward runs the
// reference there).
constexpr double kAttentionBackwardAtol = kAttentionAtol, kAttentionBackwardRtol = kAttentionRtol;

TEST_CASE("AttentionBackward, causal and not, with and without dropout, matches the reference") {
  struct Shape {
    int64_t B, T, D, NH;
  };
  const std::vector<Shape> shapes = {{1, 1, 4, 1}, {2, 5, 8, 2}, {3, 7, 12, 3}, {2, 16, 32, 4}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [B, T, D, NH] : shapes) {
      for (const bool causal : {false, true}) {
        for (const float dropout : {0.0f, 0.3f}) {
          std::mt19937 rng(7700 + B * 1000 + T * 10 + D);
          const std::vector<float> qkv = Uniform(rng, B * T * 3 * D);
          const std::vector<float> dout = Uniform(rng, B * T * D);
          const std::vector<float> mask = DropoutMask(rng, B * NH * T * T, dropout);
          const float* want_mask = dropout > 0.0f ? mask.data() : nullptr;
          std::vector<float> out(B * T * D), att(B * NH * T * T), want(B * T * 3 * D);
          ref::AttentionForward(out.data(), att.data(), qkv.data(), want_mask, B, T, D, NH, causal);
          ref::AttentionBackward(want.data(), dout.data(), qkv.data(), att.data(), want_mask, B, T,
                                 D, NH);

          std::unique_ptr<TestMemory> mem = under_test.memory();
          float* dqkv = mem->Output(B * T * 3 * D);
          const float* dev_mask = want_mask != nullptr ? mem->Upload(mask) : nullptr;
          REQUIRE(backend
                      ->AttentionBackward(dqkv, mem->Upload(dout), mem->Upload(qkv),
                                          mem->Upload(att), dev_mask, B, T, D, NH, causal)
                      .ok());
          ExpectAllClose(Describe(under_test, "AttentionBackward",
                                  "B=" + std::to_string(B) + " T=" + std::to_string(T) +
                                      " D=" + std::to_string(D) + " NH=" + std::to_string(NH) +
                                      " causal=" + std::to_string(causal) +
                                      " dropout=" + std::to_string(dropout)),
                         mem->Download(dqkv, B * T * 3 * D), want, kAttentionBackwardAtol,
                         kAttentionBackwardRtol);
        }
      }
    }
    RequireNoFallback(under_test, *backend, Op::kAttentionBackward);
  }
}

TEST_CASE("AttentionLastQueryBackward matches the reference on every backend") {
  struct Shape {
    int64_t B, T, D, NH;
  };
  const std::vector<Shape> shapes = {{1, 1, 4, 1}, {2, 5, 8, 2}, {3, 7, 12, 3}, {5, 16, 32, 4}};
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    for (const auto [B, T, D, NH] : shapes) {
      std::mt19937 rng(7900 + B * 1000 + T * 10 + D);
      const std::vector<float> q = Uniform(rng, B * D), kv = Uniform(rng, B * T * 2 * D),
                               dout = Uniform(rng, B * D);
      std::vector<float> want_dq(B * D), want_dkv(B * T * 2 * D);
      ref::AttentionLastQueryBackward(want_dq.data(), want_dkv.data(), dout.data(), q.data(),
                                      kv.data(), B, T, D, NH);

      std::unique_ptr<TestMemory> mem = under_test.memory();
      float* dq = mem->Output(B * D);
      float* dkv = mem->Output(B * T * 2 * D);
      REQUIRE(backend
                  ->AttentionLastQueryBackward(dq, dkv, mem->Upload(dout), mem->Upload(q),
                                               mem->Upload(kv), B, T, D, NH)
                  .ok());
      const std::string what =
          Describe(under_test, "AttentionLastQueryBackward",
                   "B=" + std::to_string(B) + " T=" + std::to_string(T) +
                       " D=" + std::to_string(D) + " NH=" + std::to_string(NH));
      ExpectAllClose(what + " dq", mem->Download(dq, B * D), want_dq, kAttentionBackwardAtol,
                     kAttentionBackwardRtol);
      ExpectAllClose(what + " dkv", mem->Download(dkv, B * T * 2 * D), want_dkv,
                     kAttentionBackwardAtol, kAttentionBackwardRtol);
    }
    RequireNoFallback(under_test, *backend, Op::kAttentionLastQueryBackward);
  }
}

// ------------------------------------------------------------------------------------------
// Concurrency: several threads run a mix of ops on their own buffers against one backend;
// some shapes are shared by all threads (one cached primitive run concurrently), some are
// per thread (primitives built concurrently). Results are checked after the join, since
// Catch2's assertions are not thread-safe.

TEST_CASE("Concurrent calls from several threads give the reference's results") {
  constexpr int kThreads = 8;
  constexpr int kIterations = 5;
  for (const BackendUnderTest& under_test : Backends()) {
    std::unique_ptr<Backend> backend = Make(under_test);
    std::unique_ptr<TestMemory> mem = under_test.memory();

    struct Work {
      // Linear, shared shape.
      int64_t N = 16, IN = 24, OUT = 20;
      std::vector<float> lin_want;
      float *lin_out, *lin_inp, *lin_w, *lin_b;
      // LSTM, shared shape, both directions; GRU, a shape of this thread's.
      RecurrentDims lstm_dims{3, 6, 5, 8, 2}, gru_dims{};
      std::vector<float> lstm_want, lstm_h_want, gru_want;
      std::vector<RecurrentDirectionWeights> lstm_w, gru_w;
      float *lstm_out, *lstm_h_n, *lstm_inp, *gru_out, *gru_inp;
      // The LSTM's backward pass on the same layer: dinp, then per direction dw_ih, dw_hh,
      // db_ih, db_hh.
      std::vector<std::vector<float>> lstm_grads_want;
      std::vector<float*> lstm_grads;
      std::vector<RecurrentDirectionGrads> lstm_dw;
      float* lstm_dout;
      // Attention, causal, shared shape.
      int64_t B = 2, T = 6, D = 8, NH = 2;
      std::vector<float> att_want;
      float *att_out, *att_qkv;
      absl::Status status;
    };
    std::vector<Work> work(kThreads);
    std::vector<std::unique_ptr<RecurrentWeightsHost>> keep;
    for (int i = 0; i < kThreads; ++i) {
      Work& w = work[i];
      std::mt19937 rng(10000 + i);
      const std::vector<float> lin_inp = Uniform(rng, w.N * w.IN),
                               lin_w = Uniform(rng, w.OUT * w.IN), lin_b = Uniform(rng, w.OUT);
      w.lin_want.resize(w.N * w.OUT);
      ref::LinearForward(w.lin_want.data(), lin_inp.data(), lin_w.data(), lin_b.data(), w.N, w.IN,
                         w.OUT);
      w.lin_out = mem->Output(w.N * w.OUT);
      w.lin_inp = mem->Upload(lin_inp);
      w.lin_w = mem->Upload(lin_w);
      w.lin_b = mem->Upload(lin_b);

      const RecurrentDims& ld = w.lstm_dims;
      keep.push_back(std::make_unique<RecurrentWeightsHost>(rng, Cell::kLstm, ld));
      const std::vector<float> lstm_inp = Uniform(rng, ld.B * ld.T * ld.I);
      w.lstm_want.resize(ld.B * ld.T * ld.ND * ld.H);
      w.lstm_h_want.resize(ld.ND * ld.B * ld.H);
      ref::LstmLayerForward(w.lstm_want.data(), w.lstm_h_want.data(), nullptr, lstm_inp.data(),
                            nullptr, nullptr, keep.back()->Host().data(), ld);
      w.lstm_w = keep.back()->Upload(*mem);
      w.lstm_out = mem->Output(w.lstm_want.size());
      w.lstm_h_n = mem->Output(w.lstm_h_want.size());
      w.lstm_inp = mem->Upload(lstm_inp);

      const std::vector<float> lstm_dout = Uniform(rng, w.lstm_want.size());
      const int64_t GH = 4 * ld.H;
      w.lstm_grads_want.emplace_back(ld.B * ld.T * ld.I);
      for (int64_t d = 0; d < ld.ND; ++d) {
        for (const int64_t n : {GH * ld.I, GH * ld.H, GH, GH}) w.lstm_grads_want.emplace_back(n);
      }
      std::vector<RecurrentDirectionGrads> want_dw;
      for (size_t k = 0; k < w.lstm_grads_want.size(); ++k) {
        w.lstm_grads.push_back(mem->Output(w.lstm_grads_want[k].size()));
      }
      for (int64_t d = 0; d < ld.ND; ++d) {
        want_dw.push_back({w.lstm_grads_want[1 + 4 * d].data(), w.lstm_grads_want[2 + 4 * d].data(),
                           w.lstm_grads_want[3 + 4 * d].data(),
                           w.lstm_grads_want[4 + 4 * d].data()});
        w.lstm_dw.push_back({w.lstm_grads[1 + 4 * d], w.lstm_grads[2 + 4 * d],
                             w.lstm_grads[3 + 4 * d], w.lstm_grads[4 + 4 * d]});
      }
      ref::LstmLayerBackward(w.lstm_grads_want[0].data(), want_dw.data(), lstm_dout.data(),
                             lstm_inp.data(), nullptr, nullptr, keep.back()->Host().data(), ld);
      w.lstm_dout = mem->Upload(lstm_dout);

      w.gru_dims = RecurrentDims{1 + i % 3, 2 + i, 3, 5 + i % 2, 1 + i % 2};
      const RecurrentDims& gd = w.gru_dims;
      keep.push_back(std::make_unique<RecurrentWeightsHost>(rng, Cell::kGru, gd));
      const std::vector<float> gru_inp = Uniform(rng, gd.B * gd.T * gd.I);
      w.gru_want.resize(gd.B * gd.T * gd.ND * gd.H);
      ref::GruLayerForward(w.gru_want.data(), nullptr, gru_inp.data(), nullptr,
                           keep.back()->Host().data(), gd);
      w.gru_w = keep.back()->Upload(*mem);
      w.gru_out = mem->Output(w.gru_want.size());
      w.gru_inp = mem->Upload(gru_inp);

      const std::vector<float> qkv = Uniform(rng, w.B * w.T * 3 * w.D);
      w.att_want.resize(w.B * w.T * w.D);
      ref::AttentionForward(w.att_want.data(), nullptr, qkv.data(), nullptr, w.B, w.T, w.D, w.NH,
                            true);
      w.att_out = mem->Output(w.att_want.size());
      w.att_qkv = mem->Upload(qkv);
    }

    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&backend, &w = work[i]] {
        for (int it = 0; it < kIterations && w.status.ok(); ++it) {
          w.status.Update(
              backend->Linear(w.lin_out, w.lin_inp, w.lin_w, w.lin_b, w.N, w.IN, w.OUT));
          w.status.Update(backend->LstmLayer(w.lstm_out, w.lstm_h_n, nullptr, w.lstm_inp, nullptr,
                                             nullptr, w.lstm_w.data(), w.lstm_dims));
          w.status.Update(backend->LstmLayerBackward(w.lstm_grads[0], w.lstm_dw.data(), w.lstm_dout,
                                                     w.lstm_inp, nullptr, nullptr, w.lstm_w.data(),
                                                     w.lstm_dims));
          w.status.Update(backend->GruLayer(w.gru_out, nullptr, w.gru_inp, nullptr, w.gru_w.data(),
                                            w.gru_dims));
          w.status.Update(backend->Attention(w.att_out, nullptr, w.att_qkv, nullptr, w.B, w.T, w.D,
                                             w.NH, true));
        }
      });
    }
    for (std::thread& t : threads) t.join();

    for (int i = 0; i < kThreads; ++i) {
      const Work& w = work[i];
      const std::string what = Describe(under_test, "thread", std::to_string(i));
      INFO(what << ": " << w.status.ToString());
      REQUIRE(w.status.ok());
      ExpectAllClose(what + " Linear", mem->Download(w.lin_out, w.lin_want.size()), w.lin_want,
                     kLinearAtol, kLinearRtol);
      ExpectAllClose(what + " LstmLayer out", mem->Download(w.lstm_out, w.lstm_want.size()),
                     w.lstm_want, kRecurrentAtol, kRecurrentRtol);
      ExpectAllClose(what + " LstmLayer h_n", mem->Download(w.lstm_h_n, w.lstm_h_want.size()),
                     w.lstm_h_want, kRecurrentAtol, kRecurrentRtol);
      for (size_t k = 0; k < w.lstm_grads_want.size(); ++k) {
        ExpectAllClose(what + " LstmLayerBackward gradient " + std::to_string(k),
                       mem->Download(w.lstm_grads[k], w.lstm_grads_want[k].size()),
                       w.lstm_grads_want[k], kRecurrentBackwardAtol, kRecurrentBackwardRtol);
      }
      ExpectAllClose(what + " GruLayer out", mem->Download(w.gru_out, w.gru_want.size()),
                     w.gru_want, kRecurrentAtol, kRecurrentRtol);
      ExpectAllClose(what + " Attention out", mem->Download(w.att_out, w.att_want.size()),
                     w.att_want, kAttentionAtol, kAttentionRtol);
    }
  }
}

#if !FORECASTD_BACKEND_OPS_CUDA
// ------------------------------------------------------------------------------------------
// The oneDNN backend's own promises.

TEST_CASE("DnnlBackend reports which ops are native") {
  absl::StatusOr<std::unique_ptr<DnnlBackend>> backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  for (const Op op :
       {Op::kLinear, Op::kLstmLayer, Op::kGruLayer, Op::kLayerNorm, Op::kGelu, Op::kRelu,
        Op::kSoftmax, Op::kAttention, Op::kAttentionLastQuery, Op::kResidual, Op::kLinearBackward,
        Op::kLstmLayerBackward, Op::kGruLayerBackward, Op::kLayerNormBackward, Op::kGeluBackward,
        Op::kReluBackward, Op::kSoftmaxBackward, Op::kAttentionBackward, Op::kPositionalEncoding}) {
    CAPTURE(static_cast<int>(op));
    REQUIRE((*backend)->SupportsOp(op));
  }
  REQUIRE_FALSE((*backend)->SupportsOp(Op::kAttentionLastQueryBackward));
  // No inference stack fast paths: the default compositions run the stack layer by layer. The
  // one step of tick streams, alone and with its forecast, and the training pair of a stack are
  // its own where the CPU has AVX2 and FMA.
  for (const FastPath path : {FastPath::kRecurrentStack, FastPath::kRecurrentStackLast}) {
    CAPTURE(static_cast<int>(path));
    REQUIRE_FALSE((*backend)->HasFastPath(path));
  }
  const bool avx2_fma = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  REQUIRE((*backend)->HasFastPath(FastPath::kRecurrentStep) == avx2_fma);
  REQUIRE((*backend)->HasFastPath(FastPath::kRecurrentStepForecast) == avx2_fma);
  REQUIRE((*backend)->HasFastPath(FastPath::kRecurrentStackBackward) == avx2_fma);
}

TEST_CASE("DnnlBackend::Create rejects a zero primitive cache capacity") {
  DnnlBackend::Options options;
  options.primitive_cache_capacity = 0;
  REQUIRE(DnnlBackend::Create(options).status().code() == absl::StatusCode::kInvalidArgument);
}

// DnnlBackend::Linear against the reference (within 1e-5 relative, bias or not) for every N of
// `rows` and (IN, OUT) of `shapes` that `runs` says a path of its own takes, and no oneDNN
// primitive built for any of them where the CPU has AVX2 and FMA.
void CheckLinearsWithoutPrimitive(const std::vector<int64_t>& rows,
                                  const std::vector<std::pair<int64_t, int64_t>>& shapes,
                                  uint32_t seed) {
  absl::StatusOr<std::unique_ptr<DnnlBackend>> created = DnnlBackend::Create({});
  REQUIRE(created.ok());
  DnnlBackend& backend = **created;
  ReferenceBackend reference;
  std::mt19937 rng(seed);
  for (const int64_t N : rows) {
    for (const auto& [IN, OUT] : shapes) {
      if (N > 4 && N * IN * OUT > cpu::kPanelLinearMacs) continue;  // oneDNN's
      CAPTURE(N, IN, OUT);
      const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                               bias = Uniform(rng, OUT);
      for (const bool with_bias : {true, false}) {
        // Filled with NaN: every output must be written.
        std::vector<float> got(static_cast<size_t>(N * OUT), NAN), want(got.size());
        const float* b = with_bias ? bias.data() : nullptr;
        REQUIRE(backend.Linear(got.data(), inp.data(), weight.data(), b, N, IN, OUT).ok());
        REQUIRE(reference.Linear(want.data(), inp.data(), weight.data(), b, N, IN, OUT).ok());
        for (size_t i = 0; i < got.size(); ++i) {
          CAPTURE(i);
          REQUIRE(std::fabs(got[i] - want[i]) <= 1e-5f * (1.0f + std::fabs(want[i])));
        }
      }
    }
  }
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    REQUIRE(backend.cache_stats().builds == 0);
  }
}

TEST_CASE("DnnlBackend runs a Linear of at most four rows without a primitive, as the reference") {
  // Odd sizes: IN not a multiple of 8 (masked tails), OUT not of the 8-row tiles.
  CheckLinearsWithoutPrimitive({1, 2, 3, 4}, {{13, 10}, {128, 17}, {7, 1}}, 11001);
}

TEST_CASE("DnnlBackend runs a Linear of few multiply-adds without a primitive, as the reference") {
  // Rows: a few tiles and a ragged one, and enough for several threads; OUT whole panels of
  // eight or not (the padded path); IN from 1 up ({32, 128} at N = 48: a recurrent layer's
  // projection of a window).
  CheckLinearsWithoutPrimitive(
      {5, 48, 1031}, {{3, 128}, {1, 17}, {10, 512}, {16, 9}, {7, 1}, {32, 128}, {33, 20}}, 11002);
}

TEST_CASE("DnnlBackend builds a primitive once per shape and reuses it") {
  absl::StatusOr<std::unique_ptr<DnnlBackend>> created = DnnlBackend::Create({});
  REQUIRE(created.ok());
  DnnlBackend& backend = **created;
  std::mt19937 rng(11000);
  // More rows than a small Linear and more multiply-adds than a panel Linear takes (neither
  // needs a primitive: below).
  constexpr int64_t kN = 72, kIn = 128, kOut = 128;
  const std::vector<float> inp = Uniform(rng, kN * kIn), weight = Uniform(rng, kOut * kIn),
                           bias = Uniform(rng, kOut);
  std::vector<float> out(kN * kOut);
  REQUIRE(backend.cache_stats().builds == 0);

  REQUIRE(backend.Linear(out.data(), inp.data(), weight.data(), bias.data(), kN, kIn, kOut).ok());
  REQUIRE(backend.cache_stats().builds == 1);
  REQUIRE(backend.cache_stats().native == 1);
  // Same shape, other buffers: no new primitive.
  std::vector<float> out2(kN * kOut);
  REQUIRE(backend.Linear(out2.data(), inp.data(), weight.data(), bias.data(), kN, kIn, kOut).ok());
  REQUIRE(backend.cache_stats().builds == 1);
  REQUIRE(out2 == out);
  // Another batch size, or no bias, is another primitive.
  REQUIRE(
      backend.Linear(out.data(), inp.data(), weight.data(), bias.data(), kN - 1, kIn, kOut).ok());
  REQUIRE(backend.Linear(out.data(), inp.data(), weight.data(), nullptr, kN, kIn, kOut).ok());
  REQUIRE(backend.cache_stats().builds == 3);

  // A recurrent layer (with AVX2 its input projection's matmul, past a panel Linear's size;
  // otherwise oneDNN's recurrent primitive and its weight reorders): one entry, built once.
  const RecurrentDims dims{2, 65, 32, 64, 2};
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  std::vector<float> lstm_out(dims.B * dims.T * dims.ND * dims.H);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(backend
                .LstmLayer(lstm_out.data(), nullptr, nullptr, inp.data(), nullptr, nullptr,
                           weights.Host().data(), dims)
                .ok());
  }
  REQUIRE(backend.cache_stats().builds == 4);
  REQUIRE(backend.cache_stats().native == 4);
  REQUIRE(backend.cache_stats().rejected == 0);
  REQUIRE(backend.fallback_calls() == 0);
}

TEST_CASE("DnnlBackend builds a recurrent backward once per shape and reuses it") {
  absl::StatusOr<std::unique_ptr<DnnlBackend>> created = DnnlBackend::Create({});
  REQUIRE(created.ok());
  DnnlBackend& backend = **created;
  std::mt19937 rng(11500);
  const RecurrentDims dims{2, 3, 6, 4, 2};
  const RecurrentWeightsHost weights(rng, Cell::kGru, dims);
  const int64_t GH = 3 * dims.H;
  const std::vector<float> inp = Uniform(rng, dims.B * dims.T * dims.I),
                           dout = Uniform(rng, dims.B * dims.T * dims.ND * dims.H);
  std::vector<float> dinp(inp.size());
  std::vector<std::vector<float>> buffers;
  std::vector<RecurrentDirectionGrads> grads;
  buffers.reserve(4 * dims.ND);
  for (int64_t d = 0; d < dims.ND; ++d) {
    float* dw_ih = buffers.emplace_back(GH * dims.I).data();
    float* dw_hh = buffers.emplace_back(GH * dims.H).data();
    float* db_ih = buffers.emplace_back(GH).data();
    float* db_hh = buffers.emplace_back(GH).data();
    grads.push_back({dw_ih, dw_hh, db_ih, db_hh});
  }
  // The forward_training pass, the backward and all their reorders are one entry.
  std::vector<std::vector<float>> first;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(backend
                .GruLayerBackward(dinp.data(), grads.data(), dout.data(), inp.data(), nullptr,
                                  weights.Host().data(), dims)
                .ok());
    REQUIRE(backend.cache_stats().builds == 1);
    // Written, not accumulated: every call gives the same gradients.
    if (i == 0) first = buffers;
    REQUIRE(buffers == first);
  }
  REQUIRE(backend.cache_stats().rejected == 0);
  REQUIRE(backend.fallback_calls() == 0);
}

TEST_CASE("DnnlBackend evicts the least recently used primitive beyond its capacity") {
  DnnlBackend::Options options;
  options.primitive_cache_capacity = 2;
  absl::StatusOr<std::unique_ptr<DnnlBackend>> created = DnnlBackend::Create(options);
  REQUIRE(created.ok());
  DnnlBackend& backend = **created;
  std::mt19937 rng(12000);
  const std::vector<float> inp = Uniform(rng, 64);
  std::vector<float> out(64), want(64);
  for (const int64_t n : {8, 16, 8, 32, 16}) {  // 16 is evicted by 32, then rebuilt
    REQUIRE(backend.Relu(out.data(), inp.data(), n).ok());
    ref::ReluForward(want.data(), inp.data(), n);
    REQUIRE(out == want);
  }
  REQUIRE(backend.cache_stats().native == 2);
  REQUIRE(backend.cache_stats().builds == 4);
}

// ------------------------------------------------------------------------------------------
// bf16 math (DnnlBackend::Options::Math::kBf16), where the CPU has AVX512-BF16 or AMX.

// Attention's scores past dnnl_internal::kKeptScratchBytes (2 x 2 x 1,500^2 floats: 36 MB) are
// the call's own allocation, not the thread's kept buffer: forward and backward still give the
// reference's results, with and without dropout.
TEST_CASE("DnnlBackend's attention past the kept scratch size matches the reference") {
  const int64_t B = 2, T = 1500, D = 8, NH = 2;
  const int64_t att_n = B * NH * T * T;
  REQUIRE(att_n * int64_t{sizeof(float)} > int64_t{dnnl_internal::kKeptScratchBytes});
  absl::StatusOr<std::unique_ptr<DnnlBackend>> backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  for (const float dropout : {0.0f, 0.3f}) {
    CAPTURE(dropout);
    std::mt19937 rng(34000);
    const std::vector<float> qkv = Uniform(rng, B * T * 3 * D), dout = Uniform(rng, B * T * D);
    const std::vector<float> mask = DropoutMask(rng, att_n, dropout);
    const float* m = dropout > 0.0f ? mask.data() : nullptr;
    std::vector<float> want(B * T * D), att(att_n), want_dqkv(B * T * 3 * D);
    ref::AttentionForward(want.data(), att.data(), qkv.data(), m, B, T, D, NH, /*causal=*/false);
    ref::AttentionBackward(want_dqkv.data(), dout.data(), qkv.data(), att.data(), m, B, T, D, NH);
    std::vector<float> got(B * T * D), got_dqkv(B * T * 3 * D);
    REQUIRE((*backend)->Attention(got.data(), nullptr, qkv.data(), m, B, T, D, NH, false).ok());
    ExpectAllClose("Attention", got, want, kAttentionAtol, kAttentionRtol);
    REQUIRE((*backend)
                ->AttentionBackward(got_dqkv.data(), dout.data(), qkv.data(), att.data(), m, B, T,
                                    D, NH, false)
                .ok());
    ExpectAllClose("AttentionBackward", got_dqkv, want_dqkv, kAttentionBackwardAtol,
                   kAttentionBackwardRtol);
  }
}

TEST_CASE("DnnlBackend takes bf16 math exactly where the CPU runs bf16, and says how it computes") {
  const std::string isa = DnnlBackend::CpuIsa();
  INFO("oneDNN's ISA here: " << isa);
  REQUIRE(!isa.empty());
  absl::StatusOr<std::unique_ptr<DnnlBackend>> fp32 = DnnlBackend::Create({});
  REQUIRE(fp32.ok());
  REQUIRE((*fp32)->compute() == "fp32 on " + isa);
  absl::StatusOr<std::unique_ptr<DnnlBackend>> bf16 =
      DnnlBackend::Create({.math = DnnlBackend::Options::Math::kBf16});
  REQUIRE(bf16.ok() == DnnlBackend::CpuRunsBf16());
  if (bf16.ok()) {
    REQUIRE((*bf16)->compute() == "bf16 on " + isa);
    // The tick streams' step takes the bf16 layers, not the fp32 time loop.
    REQUIRE_FALSE((*bf16)->HasFastPath(FastPath::kRecurrentStep));
    REQUIRE_FALSE((*bf16)->HasFastPath(FastPath::kRecurrentStepForecast));
  } else {
    REQUIRE(bf16.status().code() == absl::StatusCode::kFailedPrecondition);
    REQUIRE(std::string(bf16.status().message()).find(isa) != std::string::npos);
  }
}

#endif  // !FORECASTD_BACKEND_OPS_CUDA

}  // namespace
}  // namespace forecastd
