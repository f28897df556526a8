// Needs a GPU. The CUDA backend against the reference kernels: every op case of
// tests/backends/backend_ops_test.cc (included below with FORECASTD_BACKEND_OPS_CUDA, so the
// CUDA backend runs exactly the cases, shapes and tolerances the CPU backends run), then the
// CUDA backend's own promises (one cuDNN plan per shape, weights read on every call, gradients
// written not accumulated, bad arguments refused), and NVML. InstanceStreams has its own test
// (instance_streams_gpu_test.cc).
//
// Tolerances are backend_ops_test.cc's. What differs on the GPU, and why they still hold:
// cuBLAS (CUBLAS_COMPUTE_32F, no TF32) and cuDNN's RNN (CUDNN_FMA_MATH, no TF32) accumulate in
// fp32 in orders of their own, blocked and possibly split over the reduction, so a sum of K
// products carries ~sqrt(K) * 6e-8 relative error typically and K * 6e-8 at worst, the same
// budget as any fp32 CPU backend (K <= 67 here: at most ~4e-6 against the 1e-5 + 1e-4 * |ref|
// allowed). cuDNN's sigmoid and tanh may be fast approximations (documented nowhere; assumed a
// few ulp, ~1e-6 relative), damped through the recurrence as the CPU comment explains; the
// first H100 run records the observed maxima here. Our kernels use CUDA's expf/erff/tanhf
// (<= 2 ulp). With TF32 (a separate test below) inputs are rounded to a 10-bit mantissa, ~5e-4
// relative per product, so that test allows 1e-2.
//
// The forecaster-level GPU run (a whole model on CudaBackend against the CPU result) needs the
// model's parameter arena on the device; the engine does not upload it yet, so that test comes
// with the engine's device placement.
#define FORECASTD_BACKEND_OPS_CUDA 1
#include "tests/backends/backend_ops_test.cc"  // NOLINT(build/include): shares the cases

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>

#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/instance_streams.h"
#include "backends/cuda/nvml.h"
#include "tests/backends/cuda/cuda_test_memory.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

using testing::GpuEnv;
GpuEnv& Env() { return testing::SharedGpuEnv(); }

void RequireCuda(cudaError_t error, const char* what) {
  INFO(what << ": " << cudaGetErrorString(error));
  REQUIRE(error == cudaSuccess);
}

using op_test::CudaTestMemory;

absl::StatusOr<std::unique_ptr<CudaBackend>> MakeCudaBackend(
    const CudaBackend::Options& options = {}) {
  return CudaBackend::Create(Env().streams->Lease(), Env().allocator.get(), options);
}

}  // namespace

// Declared in backend_ops_test.cc (same unnamed namespace of this translation unit).
namespace {
BackendUnderTest CudaBackendUnderTest() {
  return {"cuda",
          []() -> absl::StatusOr<std::unique_ptr<Backend>> {
            absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeCudaBackend();
            if (!backend.ok()) return backend.status();
            return std::unique_ptr<Backend>(std::move(*backend));
          },
          [] { return std::make_unique<CudaTestMemory>(); },
          // Every op is native and there is no fallback path: a shape cuDNN or our kernels
          // refuse is an error, which the cases would see.
          [](const Backend&) { return int64_t{0}; }};
}

// ------------------------------------------------------------------------------------------
// The CUDA backend's own promises.

std::unique_ptr<CudaBackend> RequireBackend(const CudaBackend::Options& options = {}) {
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend = MakeCudaBackend(options);
  INFO(backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

TEST_CASE("CudaBackend runs every op natively and has every fast path") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  REQUIRE(backend->name() == "cuda");
  for (int op = static_cast<int>(Op::kLinear);
       op <= static_cast<int>(Op::kAttentionLastQueryBackward); ++op) {
    CAPTURE(op);
    REQUIRE(backend->SupportsOp(static_cast<Op>(op)));
  }
  for (const FastPath path : {FastPath::kRecurrentStack, FastPath::kRecurrentStackLast,
                              FastPath::kRecurrentStackBackward, FastPath::kRecurrentStep}) {
    CAPTURE(static_cast<int>(path));
    REQUIRE(backend->HasFastPath(path));
  }
}

TEST_CASE("CudaBackend::Create refuses bad arguments") {
  CudaBackend::Options options;
  options.rnn_plan_capacity = 0;
  REQUIRE(MakeCudaBackend(options).status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(CudaBackend::Create(Env().streams->Lease(), nullptr, {}).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(CudaBackend::Create(CudaStreamContext{}, Env().allocator.get(), {}).status().code() ==
          absl::StatusCode::kInvalidArgument);
}

TEST_CASE("CudaBackend refuses bad recurrent dims without touching the device") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  for (const RecurrentDims& dims : {RecurrentDims{1, 2, 3, 4, 3}, RecurrentDims{1, 2, 0, 4, 1},
                                    RecurrentDims{1, 2, 3, 0, 1}, RecurrentDims{-1, 2, 3, 4, 1}}) {
    CAPTURE(DimsString(dims));
    REQUIRE(backend->LstmLayer(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dims)
                .code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(backend->GruLayerBackward(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, dims)
                .code() == absl::StatusCode::kInvalidArgument);
  }
  REQUIRE(backend->Synchronize().ok());
}

TEST_CASE("CudaBackend builds one cuDNN plan per recurrent shape and keeps its scratch") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20100);
  const RecurrentDims dims{3, 5, 4, 6, 2};
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(mem);
  const std::vector<float> inp = Uniform(rng, dims.B * dims.T * dims.I);
  const float* dev_inp = mem.Upload(inp);
  float* out = mem.Output(dims.B * dims.T * dims.ND * dims.H);
  for (int i = 0; i < 3; ++i) {
    REQUIRE(
        backend
            ->LstmLayer(out, nullptr, nullptr, dev_inp, nullptr, nullptr, dev_weights.data(), dims)
            .ok());
  }
  REQUIRE(backend->Synchronize().ok());
  CudaBackend::Stats stats = backend->stats();
  REQUIRE(stats.rnn_plans_built == 1);
  REQUIRE(stats.rnn_plans_cached == 1);
  const int64_t grows = stats.scratch_grows;
  // The same shape again grows nothing; another batch size is another plan.
  REQUIRE(
      backend->LstmLayer(out, nullptr, nullptr, dev_inp, nullptr, nullptr, dev_weights.data(), dims)
          .ok());
  REQUIRE(backend->stats().scratch_grows == grows);
  RecurrentDims smaller = dims;
  smaller.B = 2;
  REQUIRE(
      backend
          ->LstmLayer(out, nullptr, nullptr, dev_inp, nullptr, nullptr, dev_weights.data(), smaller)
          .ok());
  stats = backend->stats();
  REQUIRE(stats.rnn_plans_built == 2);
  REQUIRE(stats.rnn_plans_cached == 2);
  REQUIRE(backend->Synchronize().ok());
}

TEST_CASE("CudaBackend evicts the least recently used recurrent plan beyond its capacity") {
  CudaBackend::Options options;
  options.rnn_plan_capacity = 2;
  std::unique_ptr<CudaBackend> backend = RequireBackend(options);
  CudaTestMemory mem;
  std::mt19937 rng(20200);
  const RecurrentDims big{4, 6, 3, 5, 1};
  const RecurrentWeightsHost weights(rng, Cell::kGru, big);
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(mem);
  const float* inp = mem.Upload(Uniform(rng, big.B * big.T * big.I));
  float* out = mem.Output(big.B * big.T * big.H);
  for (const int64_t B : {1, 2, 1, 3, 2}) {  // 2 is evicted by 3, then rebuilt
    RecurrentDims dims = big;
    dims.B = B;
    REQUIRE(backend->GruLayer(out, nullptr, inp, nullptr, dev_weights.data(), dims).ok());
  }
  REQUIRE(backend->Synchronize().ok());
  REQUIRE(backend->stats().rnn_plans_cached == 2);
  REQUIRE(backend->stats().rnn_plans_built == 4);
}

TEST_CASE("CudaBackend reads recurrent weights on every call") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20300);
  const RecurrentDims dims{2, 4, 3, 5, 2};
  const int64_t out_n = dims.B * dims.T * dims.ND * dims.H;
  const std::vector<float> inp = Uniform(rng, dims.B * dims.T * dims.I);
  const float* dev_inp = mem.Upload(inp);
  float* out = mem.Output(out_n);
  // Two sets of weights written in turn into the same device buffers, as an optimiser step
  // rewrites a parameter arena in place.
  const RecurrentWeightsHost first(rng, Cell::kGru, dims), second(rng, Cell::kGru, dims);
  const std::vector<RecurrentDirectionWeights> dev_weights = first.Upload(mem);
  for (const RecurrentWeightsHost* weights : {&first, &second}) {
    for (int64_t d = 0; d < dims.ND; ++d) {
      const RecurrentDirectionWeights& w = dev_weights[d];
      for (const auto& [dst, src] :
           {std::pair{w.w_ih, &weights->w_ih[d]}, std::pair{w.w_hh, &weights->w_hh[d]},
            std::pair{w.b_ih, &weights->b_ih[d]}, std::pair{w.b_hh, &weights->b_hh[d]}}) {
        RequireCuda(cudaMemcpy(const_cast<float*>(dst), src->data(), src->size() * sizeof(float),
                               cudaMemcpyHostToDevice),
                    "rewriting weights");
      }
    }
    RequireCuda(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    std::vector<float> want(out_n);
    ref::GruLayerForward(want.data(), nullptr, inp.data(), nullptr, weights->Host().data(), dims);
    REQUIRE(backend->GruLayer(out, nullptr, dev_inp, nullptr, dev_weights.data(), dims).ok());
    ExpectAllClose("GruLayer after a weight update", mem.Download(out, out_n), want, kRecurrentAtol,
                   kRecurrentRtol);
  }
}

TEST_CASE("CudaBackend's recurrent weight gradients are written, not accumulated") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20400);
  const RecurrentDims dims{3, 4, 5, 6, 2};
  const int64_t GH = 4 * dims.H;
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(mem);
  const float* inp = mem.Upload(Uniform(rng, dims.B * dims.T * dims.I));
  const float* dout = mem.Upload(Uniform(rng, dims.B * dims.T * dims.ND * dims.H));
  std::vector<RecurrentDirectionGrads> grads;
  for (int64_t d = 0; d < dims.ND; ++d) {
    grads.push_back(
        {mem.Output(GH * dims.I), mem.Output(GH * dims.H), mem.Output(GH), mem.Output(GH)});
  }
  std::vector<float> first;
  for (int i = 0; i < 3; ++i) {
    REQUIRE(backend
                ->LstmLayerBackward(nullptr, grads.data(), dout, inp, nullptr, nullptr,
                                    dev_weights.data(), dims)
                .ok());
    std::vector<float> all;
    for (const RecurrentDirectionGrads& g : grads) {
      for (const auto& [p, n] : {std::pair{g.dw_ih, GH * dims.I}, std::pair{g.dw_hh, GH * dims.H},
                                 std::pair{g.db_ih, GH}, std::pair{g.db_hh, GH}}) {
        const std::vector<float> part = mem.Download(p, n);
        all.insert(all.end(), part.begin(), part.end());
      }
    }
    if (i == 0) first = all;
    // ADD mode into a zeroed space must give the first call's numbers again, not twice them.
    // (Compared with the usual tolerance rather than bit for bit: cuDNN does not promise a
    // deterministic reduction order for weight gradients.)
    ExpectAllClose("repeated LstmLayerBackward", all, first, kRecurrentBackwardAtol,
                   kRecurrentBackwardRtol);
  }
}

TEST_CASE("CudaBackend with no steps returns the initial states and zero weight gradients") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20500);
  const RecurrentDims dims{2, 0, 3, 4, 2};
  const int64_t state_n = dims.ND * dims.B * dims.H, GH = 4 * dims.H;
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(mem);
  const std::vector<float> h_0 = Uniform(rng, state_n);
  float* h_n = mem.Output(state_n);
  float* c_n = mem.Output(state_n);
  const float* empty = mem.Upload({});
  REQUIRE(backend
              ->LstmLayer(mem.Output(1), h_n, c_n, empty, mem.Upload(h_0), nullptr,
                          dev_weights.data(), dims)
              .ok());
  ExpectAllClose("h_n", mem.Download(h_n, state_n), h_0, 0.0, 0.0);
  ExpectAllClose("c_n", mem.Download(c_n, state_n), std::vector<float>(state_n, 0.0f), 0.0, 0.0);

  std::vector<RecurrentDirectionGrads> grads;
  for (int64_t d = 0; d < dims.ND; ++d) {
    grads.push_back(
        {mem.Output(GH * dims.I), mem.Output(GH * dims.H), mem.Output(GH), mem.Output(GH)});
  }
  REQUIRE(backend
              ->LstmLayerBackward(nullptr, grads.data(), empty, empty, nullptr, nullptr,
                                  dev_weights.data(), dims)
              .ok());
  ExpectAllClose("dw_hh", mem.Download(grads[1].dw_hh, GH * dims.H),
                 std::vector<float>(GH * dims.H, 0.0f), 0.0, 0.0);
}

// Linear of U(-1, 1) inputs (N = 64, IN = 256, OUT = 96) on `backend`, drawn from `rng`, and
// the reference's result, for the reduced-precision checks below.
struct LinearResult {
  std::vector<float> got, want;
};
LinearResult RunLinear(CudaBackend& backend, std::mt19937& rng) {
  const int64_t N = 64, IN = 256, OUT = 96;
  const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                           bias = Uniform(rng, OUT);
  LinearResult r;
  r.want.resize(N * OUT);
  ref::LinearForward(r.want.data(), inp.data(), weight.data(), bias.data(), N, IN, OUT);
  CudaTestMemory mem;
  float* out = mem.Output(N * OUT);
  REQUIRE(
      backend.Linear(out, mem.Upload(inp), mem.Upload(weight), mem.Upload(bias), N, IN, OUT).ok());
  r.got = mem.Download(out, N * OUT);
  return r;
}

// Linear adds its bias in cuBLASLt's epilogue where cuBLASLt has an algorithm for the shape and
// alignment, and with our bias kernel after the GEMM otherwise (a bias only 4-byte aligned
// here); both match the reference.
TEST_CASE("CudaBackend's Linear fuses the bias where it can and matches either way") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20550);
  const int64_t N = 64, IN = 96, OUT = 128;
  const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN);
  const std::vector<float> bias = Uniform(rng, OUT + 1);
  const float* dev_inp = mem.Upload(inp);
  const float* dev_weight = mem.Upload(weight);
  const float* dev_bias = mem.Upload(bias);
  for (const int64_t shift : {int64_t{0}, int64_t{1}}) {
    CAPTURE(shift);
    std::vector<float> want(N * OUT);
    ref::LinearForward(want.data(), inp.data(), weight.data(), bias.data() + shift, N, IN, OUT);
    const CudaBackend::Stats before = backend->stats();
    float* out = mem.Output(N * OUT);
    REQUIRE(backend->Linear(out, dev_inp, dev_weight, dev_bias + shift, N, IN, OUT).ok());
    ExpectAllClose("Linear with bias", mem.Download(out, N * OUT), want, 1e-5, 1e-5);
    const CudaBackend::Stats after = backend->stats();
    CHECK(after.fused_bias_gemms + after.bias_kernel_gemms ==
          before.fused_bias_gemms + before.bias_kernel_gemms + 1);
    if (shift == 0) CHECK(after.fused_bias_gemms == before.fused_bias_gemms + 1);
    if (shift == 1) CHECK(after.bias_kernel_gemms == before.bias_kernel_gemms + 1);
  }
}

// LinearBackward takes the bias gradient from the weight gradient's epilogue where cuBLASLt has
// an algorithm for it, and from our column-sum kernel otherwise (dbias only 4-byte aligned
// here); both match the reference, as do dinp and dweight.
TEST_CASE("CudaBackend's LinearBackward fuses the bias gradient where it can") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  std::mt19937 rng(20560);
  const int64_t N = 200, IN = 96, OUT = 128;
  const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                           dout = Uniform(rng, N * OUT);
  std::vector<float> want_dinp(N * IN), want_dweight(OUT * IN), want_dbias(OUT);
  ref::LinearBackward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(),
                      inp.data(), weight.data(), N, IN, OUT);
  const float* d_inp = mem.Upload(inp);
  const float* d_weight = mem.Upload(weight);
  const float* d_dout = mem.Upload(dout);
  float* const dbias_space = mem.Output(OUT + 1);
  CHECK(backend->LinearSavedFloats(N, IN, OUT) == 0);  // fp32: nothing to keep
  for (const int64_t shift : {int64_t{0}, int64_t{1}}) {
    CAPTURE(shift);
    float* dinp = mem.Output(N * IN);
    float* dweight = mem.Output(OUT * IN);
    float* dbias = dbias_space + shift;
    const CudaBackend::Stats before = backend->stats();
    REQUIRE(
        backend->LinearBackward(dinp, dweight, dbias, d_dout, d_inp, nullptr, d_weight, N, IN, OUT)
            .ok());
    const CudaBackend::Stats after = backend->stats();
    CHECK(after.fused_bias_grads == before.fused_bias_grads + (shift == 0 ? 1 : 0));
    ExpectAllClose("dinp", mem.Download(dinp, N * IN), want_dinp, 1e-5, 1e-5);
    ExpectAllClose("dweight", mem.Download(dweight, OUT * IN), want_dweight, 1e-5, 1e-5);
    ExpectAllClose("dbias", mem.Download(dbias, OUT), want_dbias, 1e-5, 1e-5);
  }
}

TEST_CASE("CudaBackend with TF32 allowed stays within TF32's error") {
  CudaBackend::Options options;
  options.math = CudaBackend::Options::Math::kTf32;
  std::unique_ptr<CudaBackend> backend = RequireBackend(options);
  CudaTestMemory mem;
  std::mt19937 rng(20600);
  const LinearResult linear = RunLinear(*backend, rng);
  // TF32 keeps 10 mantissa bits: each product is off by up to ~1e-3 relative, and a sum of 256
  // of them (|sum| ~ 10 at most) by ~1e-2 at worst.
  ExpectAllClose("Linear with TF32", linear.got, linear.want, 5e-2, 1e-2);

  const RecurrentDims dims{4, 8, 16, 32, 2};
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  const std::vector<float> x = Uniform(rng, dims.B * dims.T * dims.I);
  std::vector<float> want_y(dims.B * dims.T * dims.ND * dims.H);
  ref::LstmLayerForward(want_y.data(), nullptr, nullptr, x.data(), nullptr, nullptr,
                        weights.Host().data(), dims);
  float* y = mem.Output(want_y.size());
  REQUIRE(backend
              ->LstmLayer(y, nullptr, nullptr, mem.Upload(x), nullptr, nullptr,
                          weights.Upload(mem).data(), dims)
              .ok());
  ExpectAllClose("LstmLayer with TF32", mem.Download(y, want_y.size()), want_y, 1e-2, 1e-2);
}

// The reduced precisions' GEMMs, each within its stated tolerance of the fp32 reference (and
// bf16 measurably coarser than fp32, so the mode is really in effect). Inputs U(-1, 1), IN = 256:
// each product is off by up to 2^-8 (bf16) or 2^-11 (fp16, TF32) relative, and a sum of 256 of
// them (|sum| ~ 10 at most) by up to 256 * 2^-8 = 1 (bf16), typically sqrt(256) times less.
TEST_CASE("CudaBackend's bf16 and fp16 GEMMs stay within their stated error") {
  struct Case {
    CudaBackend::Options::Math math;
    const char* name;
    double atol, rtol;
  };
  for (const Case c : {Case{CudaBackend::Options::Math::kBf16, "bf16", 0.25, 2e-2},
                       Case{CudaBackend::Options::Math::kFp16, "fp16", 5e-2, 1e-2}}) {
    CudaBackend::Options options;
    options.math = c.math;
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    std::mt19937 rng(20650);
    const auto [got, want] = RunLinear(*backend, rng);
    ExpectAllClose(std::string("Linear with ") + c.name, got, want, c.atol, c.rtol);
    if (c.math == CudaBackend::Options::Math::kBf16) {
      double worst = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
      }
      INFO("bf16 max |diff| " << worst);
      CHECK(worst > 1e-4);  // fp32 products would be within ~1e-5
    }
  }
}

using op_test::MakeStack;
using op_test::StackCase;

// Under bf16 and fp16 a recurrent stack without states runs on 16-bit operands: up to
// persistent_max_batch_16 rows in the persistent kernels (weights, inputs and each h passed on
// rounded, fp32 accumulation), beyond on 16-bit data in cuDNN (fp16 where cuDNN takes it, bf16
// otherwise): each input, weight and layer output is rounded to 11 (fp16) or 8 (bf16)
// significant bits, and the outputs, bounded by 1 in magnitude, carry errors of about 1e-3
// (fp16) or 1e-2 (bf16) after two layers of 24 steps. Coarser than fp32 (so a 16-bit path is
// really taken), within bf16's reach under kBf16 and fp16's under kFp16.
TEST_CASE("CudaBackend's recurrent stack under bf16 and fp16 stays within their error") {
  struct Case {
    CudaBackend::Options::Math math;
    const char* name;
    double atol, min_worst;
  };
  for (const Case c : {Case{CudaBackend::Options::Math::kBf16, "bf16", 6e-2, 1e-5},
                       Case{CudaBackend::Options::Math::kFp16, "fp16", 1e-2, 1e-5}}) {
    CudaBackend::Options options;
    options.math = c.math;
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const int64_t B : {int64_t{1}, int64_t{8}, int64_t{64}}) {
        CAPTURE(c.name, cell == Cell::kLstm ? "LSTM" : "GRU", B);
        CudaTestMemory mem;
        std::mt19937 rng(20660 + B);
        const RecurrentDims dims{B, 24, 10, 32, 2};
        const int64_t L = 2;
        const auto [inp, want, dev_weights] = MakeStack(rng, cell, dims, L, mem);
        float* out = mem.Output(want.size());
        REQUIRE(
            backend
                ->RecurrentStack(cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru,
                                 out, nullptr, mem.Upload(inp), dev_weights.data(), dims, L)
                .ok());
        const std::vector<float> got = mem.Download(out, want.size());
        ExpectAllClose(std::string("RecurrentStack with ") + c.name, got, want, c.atol, 0.0);
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
        }
        INFO(c.name << " max |diff| " << worst);
        CHECK(worst > c.min_worst);  // fp32 data would be within ~1e-6
      }
    }
  }
}

// RecurrentStackLast runs the stack in cuDNN's sequence-major layout and returns the last step
// alone: the reference's out[:, T-1, :], in fp32 (tolerance as the other fp32 recurrent checks)
// and in the 16-bit precisions (as the test above), uni- and bidirectional, one row and more.
TEST_CASE("CudaBackend's RecurrentStackLast is the stack's last time step") {
  struct Case {
    CudaBackend::Options::Math math;
    const char* name;
    double atol;
  };
  for (const Case c : {Case{CudaBackend::Options::Math::kFp32, "fp32", kRecurrentAtol},
                       Case{CudaBackend::Options::Math::kBf16, "bf16", 6e-2},
                       Case{CudaBackend::Options::Math::kFp16, "fp16", 1e-2}}) {
    CudaBackend::Options options;
    options.math = c.math;
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    CHECK(backend->HasFastPath(FastPath::kRecurrentStackLast));
    for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
      for (const int64_t ND : {int64_t{1}, int64_t{2}}) {
        for (const int64_t B : {int64_t{1}, int64_t{8}, int64_t{64}}) {
          CAPTURE(c.name, cell == Cell::kLstm ? "LSTM" : "GRU", ND, B);
          CudaTestMemory mem;
          std::mt19937 rng(20670 + B + 10 * ND);
          const RecurrentDims dims{B, 17, 6, 32, ND};
          const int64_t L = 2, C = ND * dims.H;
          const auto [inp, all, dev_weights] = MakeStack(rng, cell, dims, L, mem);
          std::vector<float> want(B * C);
          for (int64_t b = 0; b < B; ++b) {
            std::copy_n(all.begin() + (b * dims.T + dims.T - 1) * C, C, want.begin() + b * C);
          }
          float* last = mem.Output(B * C);
          REQUIRE(backend
                      ->RecurrentStackLast(
                          cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru, last,
                          mem.Output(B * dims.T * C), mem.Upload(inp), dev_weights.data(), dims, L)
                      .ok());
          ExpectAllClose(std::string("RecurrentStackLast with ") + c.name,
                         mem.Download(last, B * C), want, c.atol,
                         c.math == CudaBackend::Options::Math::kFp32 ? kRecurrentRtol : 0.0);
        }
      }
    }
  }
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  CudaTestMemory mem;
  float* last = mem.Output(8);
  CHECK(
      backend
          ->RecurrentStackLast(RecurrentCell::kLstm, last, last, last, nullptr, {1, 0, 1, 4, 2}, 1)
          .code() == absl::StatusCode::kInvalidArgument);  // no time steps
}

// RecurrentStackForTraining saves cuDNN's training forward (its reserve space) in the caller's
// RecurrentSaved, and the backward given it reads it instead of recomputing (counted in
// Stats::rnn_saved_forwards_read); the gradients are those of the backward that recomputes the
// forward itself (given no saved state). The saved state is the caller's: other recurrent calls
// in between leave it valid; it serves one backward, which marks it used.
TEST_CASE("CudaBackend's recurrent backward reads the saved training forward") {
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
    CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU");
    CudaTestMemory mem;
    std::mt19937 rng(20670);
    const RecurrentDims dims{6, 20, 10, 32, 2};
    const int64_t L = 2, GH = (cell == Cell::kLstm ? 4 : 3) * dims.H;
    const RecurrentCell rcell = cell == Cell::kLstm ? RecurrentCell::kLstm : RecurrentCell::kGru;
    std::vector<RecurrentDirectionWeights> dev_weights;
    for (int64_t l = 0; l < L; ++l) {
      RecurrentDims layer = dims;
      layer.I = l == 0 ? dims.I : dims.ND * dims.H;
      for (const RecurrentDirectionWeights& w :
           RecurrentWeightsHost(rng, cell, layer).Upload(mem)) {
        dev_weights.push_back(w);
      }
    }
    const float* inp = mem.Upload(Uniform(rng, dims.B * dims.T * dims.I));
    const int64_t out_n = dims.B * dims.T * dims.ND * dims.H;
    const float* dout = mem.Upload(Uniform(rng, out_n));
    // Gradients of every weight matrix and bias, for both passes.
    auto grads = [&](std::vector<float*>& buffers) {
      std::vector<RecurrentDirectionGrads> g;
      for (int64_t p = 0; p < L * dims.ND; ++p) {
        const int64_t in = p < dims.ND ? dims.I : dims.ND * dims.H;
        for (const int64_t n : {GH * in, GH * dims.H, GH, GH}) buffers.push_back(mem.Output(n));
        const size_t k = buffers.size();
        g.push_back({buffers[k - 4], buffers[k - 3], buffers[k - 2], buffers[k - 1]});
      }
      return g;
    };
    std::vector<float*> recomputed_buffers, saved_buffers, again_buffers, between_buffers;
    const std::vector<RecurrentDirectionGrads> recomputed = grads(recomputed_buffers);
    const std::vector<RecurrentDirectionGrads> from_saved = grads(saved_buffers);
    const std::vector<RecurrentDirectionGrads> again = grads(again_buffers);
    const std::vector<RecurrentDirectionGrads> between = grads(between_buffers);
    float* out = mem.Output(out_n);
    float* train_out = mem.Output(out_n);
    const absl::StatusOr<int64_t> state_floats = backend->RecurrentSavedFloats(rcell, dims, L);
    REQUIRE(state_floats.ok());
    REQUIRE(*state_floats > 0);
    RecurrentSaved saved;
    saved.state = mem.Output(*state_floats);
    saved.state_floats = *state_floats;

    REQUIRE(backend->RecurrentStack(rcell, out, nullptr, inp, dev_weights.data(), dims, L).ok());
    const int64_t read = backend->stats().rnn_saved_forwards_read;
    REQUIRE(backend
                ->RecurrentStackBackward(rcell, nullptr, recomputed.data(), dout, nullptr, inp,
                                         dev_weights.data(), dims, L, /*saved=*/nullptr)
                .ok());
    CHECK(backend->stats().rnn_saved_forwards_read == read);

    REQUIRE(backend
                ->RecurrentStackForTraining(rcell, train_out, nullptr, inp, dev_weights.data(),
                                            dims, L, &saved)
                .ok());
    CHECK(saved.filled);
    CHECK(saved.out == train_out);
    ExpectAllClose("training forward's output", mem.Download(train_out, out_n),
                   mem.Download(out, out_n), 1e-5, 1e-5);
    REQUIRE(backend
                ->RecurrentStackBackward(rcell, nullptr, from_saved.data(), dout, nullptr, inp,
                                         dev_weights.data(), dims, L, &saved)
                .ok());
    CHECK(backend->stats().rnn_saved_forwards_read == read + 1);
    // The backward used the state up (cuDNN's backward writes into its reserve space): a second
    // backward given it recomputes, and its gradients are still right.
    CHECK_FALSE(saved.filled);
    REQUIRE(backend
                ->RecurrentStackBackward(rcell, nullptr, again.data(), dout, nullptr, inp,
                                         dev_weights.data(), dims, L, &saved)
                .ok());
    CHECK(backend->stats().rnn_saved_forwards_read == read + 1);

    // Other recurrent calls between a training forward and its backward (inference, and a
    // backward that recomputes into the backend's own scratch) leave the saved forward as it
    // was.
    REQUIRE(backend
                ->RecurrentStackForTraining(rcell, train_out, nullptr, inp, dev_weights.data(),
                                            dims, L, &saved)
                .ok());
    REQUIRE(backend->RecurrentStack(rcell, out, nullptr, inp, dev_weights.data(), dims, L).ok());
    REQUIRE(backend
                ->RecurrentStackBackward(rcell, nullptr, between.data(), dout, nullptr, inp,
                                         dev_weights.data(), dims, L, /*saved=*/nullptr)
                .ok());
    REQUIRE(backend
                ->RecurrentStackBackward(rcell, nullptr, between.data(), dout, nullptr, inp,
                                         dev_weights.data(), dims, L, &saved)
                .ok());
    CHECK(backend->stats().rnn_saved_forwards_read == read + 2);

    // A saved state too small for the stack is refused.
    RecurrentSaved small = saved;
    small.filled = true;
    small.state_floats = 1;
    CHECK(backend
              ->RecurrentStackBackward(rcell, nullptr, between.data(), dout, nullptr, inp,
                                       dev_weights.data(), dims, L, &small)
              .code() == absl::StatusCode::kInvalidArgument);

    for (size_t i = 0; i < recomputed_buffers.size(); ++i) {
      CAPTURE(i);
      const int64_t n = [&] {
        const int64_t p = static_cast<int64_t>(i / 4);
        const int64_t in = p < dims.ND ? dims.I : dims.ND * dims.H;
        const int64_t sizes[4] = {GH * in, GH * dims.H, GH, GH};
        return sizes[i % 4];
      }();
      const std::vector<float> want = mem.Download(recomputed_buffers[i], n);
      ExpectAllClose("gradient from the saved forward", mem.Download(saved_buffers[i], n), want,
                     1e-6, 1e-5);
      ExpectAllClose("gradient of a second backward given the used state",
                     mem.Download(again_buffers[i], n), want, 1e-6, 1e-5);
      ExpectAllClose("gradient from the saved forward after other calls",
                     mem.Download(between_buffers[i], n), want, 1e-6, 1e-5);
    }
  }
}

// A recurrent training call made a second time on the same memory is captured as a CUDA graph,
// and replayed from the third time on (Options::rnn_training_graphs): a replay reads the inputs
// and weights as they are then, and its results are bit for bit those of the call run directly.
TEST_CASE("CudaBackend replays a recurrent training call made again on the same memory") {
  CudaBackend::Options direct_options;
  direct_options.rnn_training_graphs = false;
  std::unique_ptr<CudaBackend> backend = RequireBackend();
  std::unique_ptr<CudaBackend> direct = RequireBackend(direct_options);
  // H=32 takes cuDNN's persistent small-H kernel in training, H=256 the standard algorithm.
  for (const int64_t H : {32, 256}) {
    CAPTURE(H);
    CudaTestMemory mem;
    std::mt19937 rng(static_cast<unsigned>(4100 + H));
    const RecurrentDims dims{5, 12, 7, H, 2};
    const int64_t L = 2, GH = 4 * H;
    std::vector<RecurrentDirectionWeights> weights;
    std::vector<std::pair<float*, int64_t>> weight_buffers;
    for (int64_t l = 0; l < L; ++l) {
      RecurrentDims layer = dims;
      layer.I = l == 0 ? dims.I : dims.ND * dims.H;
      for (const RecurrentDirectionWeights& w :
           RecurrentWeightsHost(rng, Cell::kLstm, layer).Upload(mem)) {
        weights.push_back(w);
        weight_buffers.emplace_back(const_cast<float*>(w.w_hh), GH * H);
      }
    }
    const int64_t in_n = dims.B * dims.T * dims.I, out_n = dims.B * dims.T * dims.ND * H;
    float* inp = mem.Output(in_n);
    float* dout = mem.Output(out_n);
    float* out = mem.Output(out_n);
    float* dinp = mem.Output(in_n);
    std::vector<float*> grad_buffers;
    std::vector<int64_t> grad_sizes;
    std::vector<RecurrentDirectionGrads> grads;
    for (int64_t p = 0; p < L * dims.ND; ++p) {
      const int64_t in = p < dims.ND ? dims.I : dims.ND * H;
      for (const int64_t n : {GH * in, GH * H, GH, GH}) {
        grad_buffers.push_back(mem.Output(n));
        grad_sizes.push_back(n);
      }
      const size_t k = grad_buffers.size();
      grads.push_back(
          {grad_buffers[k - 4], grad_buffers[k - 3], grad_buffers[k - 2], grad_buffers[k - 1]});
    }
    const absl::StatusOr<int64_t> state_floats =
        backend->RecurrentSavedFloats(RecurrentCell::kLstm, dims, L);
    REQUIRE(state_floats.ok());
    RecurrentSaved saved;
    saved.state = mem.Output(*state_floats);
    saved.state_floats = *state_floats;
    const auto fill = [](float* to, const std::vector<float>& from) {
      REQUIRE(cudaMemcpy(to, from.data(), from.size() * sizeof(float), cudaMemcpyHostToDevice) ==
              cudaSuccess);
    };
    // One training forward and backward on `on`; everything it wrote.
    const auto step = [&](CudaBackend& on) {
      saved.filled = false;
      REQUIRE(on.RecurrentStackForTraining(RecurrentCell::kLstm, out, nullptr, inp, weights.data(),
                                           dims, L, &saved)
                  .ok());
      REQUIRE(on.RecurrentStackBackward(RecurrentCell::kLstm, dinp, grads.data(), dout, nullptr,
                                        inp, weights.data(), dims, L, &saved)
                  .ok());
      std::vector<std::vector<float>> wrote = {mem.Download(out, out_n), mem.Download(dinp, in_n)};
      for (size_t i = 0; i < grad_buffers.size(); ++i) {
        wrote.push_back(mem.Download(grad_buffers[i], grad_sizes[i]));
      }
      return wrote;
    };
    const std::vector<float> a = Uniform(rng, in_n), b = Uniform(rng, in_n);
    const std::vector<float> da = Uniform(rng, out_n), db = Uniform(rng, out_n);
    const CudaBackend::Stats before = backend->stats();
    fill(inp, a), fill(dout, da);
    const auto first = step(*backend);  // run directly
    fill(inp, b), fill(dout, db);
    const auto second = step(*backend);  // captured, then launched
    const CudaBackend::Stats captured = backend->stats();
    CHECK(captured.rnn_training_capture_failures == before.rnn_training_capture_failures);
    CHECK(captured.rnn_training_graphs_captured == before.rnn_training_graphs_captured + 2);
    fill(inp, a), fill(dout, da);
    const auto third = step(*backend);  // replayed
    fill(inp, b), fill(dout, db);
    const auto fourth = step(*backend);
    CHECK(backend->stats().rnn_training_graph_replays == captured.rnn_training_graph_replays + 4);
    CHECK(first != second);
    CHECK(third == first);
    CHECK(fourth == second);
    CHECK(step(*direct) == second);
    // New weights in the same buffers: the replay reads them.
    for (const auto& [buffer, n] : weight_buffers) fill(buffer, Uniform(rng, n));
    const auto replayed = step(*backend);
    CHECK(replayed != second);
    CHECK(step(*direct) == replayed);

    // A call that fails on its own (no weights) fails the same way where it would be captured,
    // and leaves recording on: the plan's next calls on other memory are captured as before.
    const CudaBackend::Stats at = backend->stats();
    for (int i = 0; i < 2; ++i) {
      CHECK(backend
                ->RecurrentStackForTraining(RecurrentCell::kLstm, out, nullptr, inp, nullptr, dims,
                                            L, &saved)
                .code() == absl::StatusCode::kInvalidArgument);
    }
    float* other_out = mem.Output(out_n);
    for (int i = 0; i < 2; ++i) {
      REQUIRE(backend
                  ->RecurrentStackForTraining(RecurrentCell::kLstm, other_out, nullptr, inp,
                                              weights.data(), dims, L, &saved)
                  .ok());
    }
    CHECK(backend->stats().rnn_training_capture_failures == at.rnn_training_capture_failures);
    CHECK(backend->stats().rnn_training_graphs_captured == at.rnn_training_graphs_captured + 1);
  }
}

// Large GEMMs under bf16 / fp16 take operands rounded to 16 bits (kMinGemm16Macs): Linear and
// its backward at N=1024, IN=512, OUT=512 (2^28 multiply-adds each), within the 16-bit types'
// error of the fp32 reference (sums of up to 1024 products of U(-1, 1) values, each off by up
// to 2^-8 (bf16) or 2^-11 (fp16) relative) and measurably not fp32. The bias gradient comes from
// the weight gradient's epilogue, a sum of the 1024 rounded output gradients (each off by up to
// 2^-9 or 2^-12 relative): the same tolerances hold.
TEST_CASE("CudaBackend's large GEMMs under bf16 and fp16 use 16-bit operands within their error") {
  struct Case {
    CudaBackend::Options::Math math;
    const char* name;
    double atol, rtol;
  };
  const int64_t N = 1024, IN = 512, OUT = 512;
  std::mt19937 rng(20680);
  const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                           bias = Uniform(rng, OUT), dout = Uniform(rng, N * OUT);
  std::vector<float> want_out(N * OUT), want_dinp(N * IN), want_dweight(OUT * IN), want_dbias(OUT);
  ref::LinearForward(want_out.data(), inp.data(), weight.data(), bias.data(), N, IN, OUT);
  ref::LinearBackward(want_dinp.data(), want_dweight.data(), want_dbias.data(), dout.data(),
                      inp.data(), weight.data(), N, IN, OUT);
  for (const Case c : {Case{CudaBackend::Options::Math::kBf16, "bf16", 0.5, 3e-2},
                       Case{CudaBackend::Options::Math::kFp16, "fp16", 0.1, 1e-2}}) {
    CAPTURE(c.name);
    CudaBackend::Options options;
    options.math = c.math;
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    CudaTestMemory mem;
    const float* d_inp = mem.Upload(inp);
    const float* d_weight = mem.Upload(weight);
    const float* d_dout = mem.Upload(dout);
    float* out = mem.Output(N * OUT);
    float* dinp = mem.Output(N * IN);
    float* dweight = mem.Output(OUT * IN);
    float* dbias = mem.Output(OUT);
    const float* d_bias = mem.Upload(bias);
    REQUIRE(backend->Linear(out, d_inp, d_weight, d_bias, N, IN, OUT).ok());
    const CudaBackend::Stats before = backend->stats();
    REQUIRE(
        backend->LinearBackward(dinp, dweight, dbias, d_dout, d_inp, nullptr, d_weight, N, IN, OUT)
            .ok());
    CHECK(backend->stats().fused_bias_grads == before.fused_bias_grads + 1);
    const std::vector<float> got_out = mem.Download(out, N * OUT);
    ExpectAllClose(std::string("Linear ") + c.name, got_out, want_out, c.atol, c.rtol);
    ExpectAllClose(std::string("dinp ") + c.name, mem.Download(dinp, N * IN), want_dinp, c.atol,
                   c.rtol);
    ExpectAllClose(std::string("dweight ") + c.name, mem.Download(dweight, OUT * IN), want_dweight,
                   2 * c.atol, c.rtol);
    ExpectAllClose(std::string("dbias ") + c.name, mem.Download(dbias, OUT), want_dbias, c.atol,
                   c.rtol);
    double worst = 0.0;
    for (size_t i = 0; i < got_out.size(); ++i) {
      worst = std::max(worst, std::abs(static_cast<double>(got_out[i]) - want_out[i]));
    }
    INFO(c.name << " max |diff| " << worst);
    CHECK(worst > 1e-4);  // fp32 products would be within ~1e-5

    // The training pair: LinearForTraining keeps inp rounded to 16 bits and the backward's
    // weight gradient takes it from there; the same rounding once instead of twice, so the same
    // results to the bit.
    const int64_t saved_n = backend->LinearSavedFloats(N, IN, OUT);
    CHECK(saved_n == N * IN / 2);
    float* saved = mem.Output(saved_n);
    float* out2 = mem.Output(N * OUT);
    float* dinp2 = mem.Output(N * IN);
    float* dweight2 = mem.Output(OUT * IN);
    float* dbias2 = mem.Output(OUT);
    REQUIRE(backend->LinearForTraining(out2, saved, d_inp, d_weight, d_bias, N, IN, OUT).ok());
    REQUIRE(
        backend->LinearBackward(dinp2, dweight2, dbias2, d_dout, d_inp, saved, d_weight, N, IN, OUT)
            .ok());
    CHECK(mem.Download(out2, N * OUT) == got_out);
    CHECK(mem.Download(dinp2, N * IN) == mem.Download(dinp, N * IN));
    CHECK(mem.Download(dweight2, OUT * IN) == mem.Download(dweight, OUT * IN));
    CHECK(mem.Download(dbias2, OUT) == mem.Download(dbias, OUT));
  }
}

TEST_CASE("Two CUDA backends on two streams run concurrently and agree with the reference") {
  std::unique_ptr<CudaBackend> a = RequireBackend(), b = RequireBackend();
  REQUIRE(a->stream() != b->stream());
  CudaTestMemory mem;
  std::mt19937 rng(20700);
  const RecurrentDims dims{8, 16, 12, 24, 2};
  const RecurrentWeightsHost weights(rng, Cell::kLstm, dims);
  const std::vector<float> inp = Uniform(rng, dims.B * dims.T * dims.I);
  std::vector<float> want(dims.B * dims.T * dims.ND * dims.H);
  ref::LstmLayerForward(want.data(), nullptr, nullptr, inp.data(), nullptr, nullptr,
                        weights.Host().data(), dims);
  const std::vector<RecurrentDirectionWeights> dev_weights = weights.Upload(mem);
  const float* dev_inp = mem.Upload(inp);
  float* out_a = mem.Output(want.size());
  float* out_b = mem.Output(want.size());
  absl::Status status_a, status_b;
  std::thread thread_a([&] {
    for (int i = 0; i < 10 && status_a.ok(); ++i) {
      status_a = a->LstmLayer(out_a, nullptr, nullptr, dev_inp, nullptr, nullptr,
                              dev_weights.data(), dims);
    }
  });
  std::thread thread_b([&] {
    for (int i = 0; i < 10 && status_b.ok(); ++i) {
      status_b = b->LstmLayer(out_b, nullptr, nullptr, dev_inp, nullptr, nullptr,
                              dev_weights.data(), dims);
    }
  });
  thread_a.join();
  thread_b.join();
  INFO(status_a.ToString() << " / " << status_b.ToString());
  REQUIRE(status_a.ok());
  REQUIRE(status_b.ok());
  ExpectAllClose("stream a", mem.Download(out_a, want.size()), want, kRecurrentAtol,
                 kRecurrentRtol);
  ExpectAllClose("stream b", mem.Download(out_b, want.size()), want, kRecurrentAtol,
                 kRecurrentRtol);
}

// ------------------------------------------------------------------------------------------
// NVML, loaded at run time.

TEST_CASE("NVML reports the GPU's memory, or says clearly that it is unavailable") {
  absl::StatusOr<std::unique_ptr<Nvml>> nvml = Nvml::Load();
  if (!nvml.ok()) {
    REQUIRE(nvml.status().code() == absl::StatusCode::kUnavailable);
    REQUIRE(std::string(nvml.status().message()).find("NVML") != std::string::npos);
    WARN("NVML not loaded here: " << nvml.status().ToString());
    return;
  }
  absl::StatusOr<GpuUsage> usage = (*nvml)->Usage(0);
  INFO(usage.status().ToString());
  REQUIRE(usage.ok());
  size_t free_bytes = 0, total_bytes = 0;
  RequireCuda(cudaMemGetInfo(&free_bytes, &total_bytes), "cudaMemGetInfo");
  // The same board seen by both; they may differ by reserved memory, never by much.
  const int64_t cuda_total = static_cast<int64_t>(total_bytes);
  REQUIRE(std::llabs(usage->memory_total_bytes - cuda_total) <= cuda_total / 10);
  REQUIRE(usage->memory_used_bytes > 0);
  REQUIRE(usage->utilization_percent >= 0);
  REQUIRE(usage->utilization_percent <= 100);
  int count = 0;
  RequireCuda(cudaGetDeviceCount(&count), "cudaGetDeviceCount");
  REQUIRE((*nvml)->Usage(count).status().code() == absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace forecastd
