// DnnlBackend under bf16 math (Options::Math::kBf16) against the reference kernels: each
// product of bf16-rounded operands accumulated in fp32, within bf16's stated error and
// measurably not fp32. Runs only on a CPU with AVX512-BF16 or AMX: elsewhere main() says so and
// exits with 77, which ctest reports as skipped. (That DnnlBackend takes bf16 exactly where the
// CPU runs it is backend_ops_test's.)
// Catch2 first, with its runner: this binary has a main() of its own (below).
#include "tests/testing/catch_session.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "backends/cpu/bf16.h"
#include "backends/cpu/dnnl_backend.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/recurrent.h"
#include "tests/backends/op_test_util.h"

namespace forecastd {
namespace {

using op_test::Cell;
using op_test::DimsString;
using op_test::DropoutMask;
using op_test::ExpectAllClose;
using op_test::MaxAbsDiff;
using op_test::RecurrentWeightsHost;
using op_test::Uniform;

// The bf16 backend (main() has made sure the CPU runs bf16).
std::unique_ptr<DnnlBackend> Bf16Backend() {
  absl::StatusOr<std::unique_ptr<DnnlBackend>> backend =
      DnnlBackend::Create({.math = DnnlBackend::Options::Math::kBf16});
  INFO(backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

// Linear under bf16 is exactly a product of bf16-rounded inputs and weights summed in fp32:
// against that sum taken in double (bias added) it is within fp32's accumulation error
// (IN = 256 products of magnitude <= 1: ~1e-5 typically, 1.5e-4 at worst), and against the fp32
// reference within bf16's (each product off by up to 2^-8 relative: 0.25 + 2e-2 |ref|, the
// CUDA backend's bound), and measurably off it (fp32 products would be within ~1e-5).
TEST_CASE("DnnlBackend's bf16 Linear is a product of bf16-rounded operands in fp32", "[bf16]") {
  std::unique_ptr<DnnlBackend> backend = Bf16Backend();
  for (const int64_t N : {int64_t{1}, int64_t{3}, int64_t{64}}) {
    for (const bool with_bias : {false, true}) {
      const int64_t IN = 256, OUT = 41;
      CAPTURE(N, with_bias);
      std::mt19937 rng(31000 + N);
      const std::vector<float> inp = Uniform(rng, N * IN), weight = Uniform(rng, OUT * IN),
                               bias = Uniform(rng, OUT);
      const float* b = with_bias ? bias.data() : nullptr;
      std::vector<float> want(N * OUT), want16(N * OUT), got(N * OUT, std::nanf(""));
      ref::LinearForward(want.data(), inp.data(), weight.data(), b, N, IN, OUT);
      for (int64_t n = 0; n < N; ++n) {
        for (int64_t o = 0; o < OUT; ++o) {
          double sum = with_bias ? bias[o] : 0.0;
          for (int64_t i = 0; i < IN; ++i) {
            sum += static_cast<double>(cpu::RoundToBf16(inp[n * IN + i])) *
                   cpu::RoundToBf16(weight[o * IN + i]);
          }
          want16[n * OUT + o] = static_cast<float>(sum);
        }
      }
      REQUIRE(backend->Linear(got.data(), inp.data(), weight.data(), b, N, IN, OUT).ok());
      ExpectAllClose("bf16 Linear against bf16 operands", got, want16, 2e-4, 1e-5);
      ExpectAllClose("bf16 Linear against fp32", got, want, 0.25, 2e-2);
      INFO("max |diff| from fp32 " << MaxAbsDiff(got, want));
      CHECK(MaxAbsDiff(got, want) > 1e-4);
    }
  }
  REQUIRE(backend->fallback_calls() == 0);
}

// The recurrent layers under bf16 run on bf16 inputs, weights, outputs and h (c fp32): outputs
// bounded by 1 carry about 1e-2 after 24 steps (the CUDA backend's 6e-2 bound), and are
// measurably not fp32's. Both cells, one and two directions, one and several rows, with and
// without initial and final states.
TEST_CASE("DnnlBackend's bf16 LSTM and GRU layers stay within bf16's error", "[bf16]") {
  std::unique_ptr<DnnlBackend> backend = Bf16Backend();
  for (const Cell cell : {Cell::kLstm, Cell::kGru}) {
    for (const RecurrentDims dims :
         {RecurrentDims{1, 24, 10, 32, 1}, RecurrentDims{8, 24, 10, 33, 2},
          RecurrentDims{5, 7, 3, 16, 1}}) {
      for (const bool states : {false, true}) {
        const auto [B, T, I, H, ND] = dims;
        CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU", DimsString(dims), states);
        std::mt19937 rng(32000 + B * 100 + H + ND);
        const RecurrentWeightsHost weights(rng, cell, dims);
        const std::vector<RecurrentDirectionWeights> w = weights.Host();
        const std::vector<float> inp = Uniform(rng, B * T * I), h_0 = Uniform(rng, ND * B * H),
                                 c_0 = Uniform(rng, ND * B * H);
        const int64_t out_n = B * T * ND * H, state_n = ND * B * H;
        std::vector<float> want(out_n), want_h(state_n), want_c(state_n);
        std::vector<float> got(out_n, std::nanf("")), got_h(state_n, std::nanf("")),
            got_c(state_n, std::nanf(""));
        const float* h0 = states ? h_0.data() : nullptr;
        const float* c0 = states ? c_0.data() : nullptr;
        absl::Status status;
        if (cell == Cell::kLstm) {
          ref::LstmLayerForward(want.data(), want_h.data(), want_c.data(), inp.data(), h0, c0,
                                w.data(), dims);
          status = backend->LstmLayer(got.data(), states ? got_h.data() : nullptr,
                                      states ? got_c.data() : nullptr, inp.data(), h0, c0, w.data(),
                                      dims);
        } else {
          ref::GruLayerForward(want.data(), want_h.data(), inp.data(), h0, w.data(), dims);
          status = backend->GruLayer(got.data(), states ? got_h.data() : nullptr, inp.data(), h0,
                                     w.data(), dims);
        }
        INFO(status.ToString());
        REQUIRE(status.ok());
        ExpectAllClose("bf16 recurrent out", got, want, 6e-2, 0.0);
        INFO("max |diff| from fp32 " << MaxAbsDiff(got, want));
        CHECK(MaxAbsDiff(got, want) > 1e-5);
        if (states) {
          ExpectAllClose("bf16 recurrent h_n", got_h, want_h, 6e-2, 0.0);
          if (cell == Cell::kLstm) ExpectAllClose("bf16 recurrent c_n", got_c, want_c, 6e-2, 0.0);
        }
      }
    }
  }
  REQUIRE(backend->fallback_calls() == 0);
}

// The attention core under bf16: scores from bf16 Q and K (each product off by up to 2^-8
// relative; hs = 8 products of magnitude <= 1), an fp32 softmax, and the context from bf16
// weights and V: outputs bounded by 1 within 3e-2, and measurably not fp32's.
TEST_CASE("DnnlBackend's bf16 attention stays within bf16's error", "[bf16]") {
  std::unique_ptr<DnnlBackend> backend = Bf16Backend();
  const int64_t B = 2, T = 16, D = 32, NH = 4;
  for (const bool causal : {false, true}) {
    for (const float dropout : {0.0f, 0.3f}) {
      CAPTURE(causal, dropout);
      std::mt19937 rng(33000 + causal);
      const std::vector<float> qkv = Uniform(rng, B * T * 3 * D);
      const int64_t att_n = B * NH * T * T;
      const std::vector<float> mask = DropoutMask(rng, att_n, dropout);
      const float* m = dropout > 0.0f ? mask.data() : nullptr;
      std::vector<float> want(B * T * D), want_att(att_n);
      std::vector<float> got(B * T * D, std::nanf("")), got_att(att_n, std::nanf(""));
      ref::AttentionForward(want.data(), want_att.data(), qkv.data(), m, B, T, D, NH, causal);
      REQUIRE(
          backend->Attention(got.data(), got_att.data(), qkv.data(), m, B, T, D, NH, causal).ok());
      ExpectAllClose("bf16 attention out", got, want, 3e-2, 0.0);
      ExpectAllClose("bf16 attention weights", got_att, want_att, 3e-2, 0.0);
      INFO("max |diff| from fp32 " << MaxAbsDiff(got, want));
      CHECK(MaxAbsDiff(got, want) > 1e-5);
    }
  }
  REQUIRE(backend->fallback_calls() == 0);
}

}  // namespace
}  // namespace forecastd

int main(int argc, char* argv[]) {
  return forecastd::RunTestsWhere(forecastd::DnnlBackend::CpuRunsBf16(),
                                  "this CPU (" + forecastd::DnnlBackend::CpuIsa() +
                                      ") has neither AVX512-BF16 nor AMX; bf16 tests run only "
                                      "where it has.",
                                  argc, argv);
}
