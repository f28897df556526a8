// Needs a GPU: the per-window scaling launchers (kernels/cuda/window_scaling.h) against
// kernels/ref/window_scaling on seeded random inputs of odd sizes: both statistics, with and
// without the affine parameters, the last values and their gradient, several targets with
// Q > 1, the accumulating outputs started from non-zero values, the reductions' run-to-run
// bits, one capture of every launcher into a CUDA graph, and the launchers' argument checks.
#include "kernels/cuda/window_scaling.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/ref/window_scaling.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using ref::WindowStatistic;
using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

constexpr float kEps = 1e-5f;
// Larger than a model's eps^2, so that an eps2 left out of gamma + eps2 shows.
constexpr float kEps2 = 1e-3f;
// The element-wise results and the statistics round each step as the reference does, so they
// should match it bit for bit; the tolerance is the other kernel tests' relative 1e-6 (a host
// compiler that fused multiply-adds would move the reference by an ulp).
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-6;
// The sums (dgamma, dbeta, dlast) add n O(1) float terms in another order than the reference's
// sequential loop; both orders' rounding errors grow with n, so the absolute term scales with
// sqrt(n) as in normalization_test.cc.
double SumAtol(int64_t n) { return 1e-5 * std::sqrt(static_cast<double>(std::max<int64_t>(n, 1))); }

bool SameBits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct WindowShape {
  int64_t B, T, F;
};
const std::vector<WindowShape> kWindowShapes = {
    {1, 1, 1}, {3, 7, 5}, {37, 101, 3}, {4, 1000, 2}, {65, 12, 130}};

// Values in [2, 6]: a mean well away from 0, so the statistics and the scaled windows cancel.
std::vector<float> MakeWindows(std::mt19937& rng, int64_t B, int64_t T, int64_t F) {
  return RandomVector(rng, B * T * F, 2.0f, 6.0f);
}

TEST_CASE("WindowStatsLaunch matches the reference for both statistics", "[gpu]") {
  for (const auto& [B, T, F] : kWindowShapes) {
    std::mt19937 rng(static_cast<unsigned>(B * 7919 + T * 31 + F));
    const std::vector<float> x = MakeWindows(rng, B, T, F);
    DeviceArray d_x(x);
    for (const WindowStatistic statistic :
         {WindowStatistic::kMeanStd, WindowStatistic::kLastValue}) {
      CAPTURE(B, T, F, static_cast<int>(statistic));
      std::vector<float> center(B * F), scale(B * F);
      ref::WindowStats(center.data(), scale.data(), x.data(), B, T, F, statistic, kEps);
      DeviceArray d_center(NanVector(B * F)), d_scale(NanVector(B * F));
      REQUIRE_OK(cuda::WindowStatsLaunch(d_center.get(), d_scale.get(), d_x.get(), B, T, F,
                                         statistic, kEps, nullptr));
      ExpectNear("center", d_center.Download(), center, {B, F}, kAtol, kRtol);
      ExpectNear("scale", d_scale.Download(), scale, {B, F}, kAtol, kRtol);
    }
  }
}

TEST_CASE("ScaleWindowsLaunch matches the reference with and without gamma and z, and in place",
          "[gpu]") {
  for (const auto& [B, T, F] : kWindowShapes) {
    std::mt19937 rng(static_cast<unsigned>(B * 7919 + T * 31 + F + 1));
    const int64_t n = B * T * F;
    const std::vector<float> x = MakeWindows(rng, B, T, F);
    std::vector<float> center(B * F), scale(B * F);
    ref::WindowStats(center.data(), scale.data(), x.data(), B, T, F, WindowStatistic::kMeanStd,
                     kEps);
    const std::vector<float> gamma = RandomVector(rng, F, 0.5f, 1.5f);
    const std::vector<float> beta = RandomVector(rng, F, -0.5f, 0.5f);
    DeviceArray d_x(x), d_center(center), d_scale(scale), d_gamma(gamma), d_beta(beta);
    for (const bool affine : {false, true}) {
      for (const bool keep_z : {false, true}) {
        CAPTURE(B, T, F, affine, keep_z);
        std::vector<float> xw(n), z(n);
        ref::ScaleWindows(xw.data(), keep_z ? z.data() : nullptr, x.data(), center.data(),
                          scale.data(), affine ? gamma.data() : nullptr,
                          affine ? beta.data() : nullptr, B, T, F);
        DeviceArray d_xw(NanVector(n)), d_z(NanVector(n));
        REQUIRE_OK(cuda::ScaleWindowsLaunch(
            d_xw.get(), keep_z ? d_z.get() : nullptr, d_x.get(), d_center.get(), d_scale.get(),
            affine ? d_gamma.get() : nullptr, affine ? d_beta.get() : nullptr, B, T, F, nullptr));
        ExpectNear("xw", d_xw.Download(), xw, {B, T, F}, kAtol, kRtol);
        const std::vector<float> got_z = d_z.Download();
        if (keep_z) {
          ExpectNear("z", got_z, z, {B, T, F}, kAtol, kRtol);
        } else {
          CHECK(std::isnan(got_z[0]));  // nothing written through a null pointer
        }
      }
    }
    CAPTURE(B, T, F);
    std::vector<float> in_place = x;
    ref::ScaleWindows(in_place.data(), nullptr, in_place.data(), center.data(), scale.data(),
                      gamma.data(), beta.data(), B, T, F);
    DeviceArray d_in_place(x);
    REQUIRE_OK(cuda::ScaleWindowsLaunch(d_in_place.get(), nullptr, d_in_place.get(), d_center.get(),
                                        d_scale.get(), d_gamma.get(), d_beta.get(), B, T, F,
                                        nullptr));
    ExpectNear("xw in place", d_in_place.Download(), in_place, {B, T, F}, kAtol, kRtol);
  }
}

// B rows of K targets with Q values each (C = K * Q columns) over J horizon steps; target k
// reads feature TargetFeature(k, F) of windows with T steps and F >= K features.
struct TargetShape {
  int64_t B, J, K, Q, T, F;
};
const std::vector<TargetShape> kTargetShapes = {{1, 1, 1, 1, 1, 1},
                                                {3, 7, 2, 3, 5, 4},
                                                {37, 24, 3, 1, 11, 5},
                                                {37, 5, 3, 5, 7, 3},
                                                {300, 24, 2, 3, 4, 2}};

int64_t TargetFeature(int64_t k, int64_t F) { return F - 1 - k; }

// With K > 1 the tests map every target but the first, whose columns must keep what they held.
int64_t FirstMappedTarget(int64_t K) { return K > 1 ? 1 : 0; }

struct TargetInputs {
  std::vector<float> d;              // (B, J, C): the model's output, or its gradient
  std::vector<float> v;              // (B, J, C): UnscaleTarget's v_out
  std::vector<float> xw;             // (B, T, F): the scaled windows, whose last row is `last`
  std::vector<float> center, scale;  // (B, F)
  std::vector<float> gamma, beta;    // (F)
  std::vector<float> before;         // (B, J, C): what out / dd hold before the call
  std::vector<float> before_v;       // (B, J, C): what v_out holds before the call
  std::vector<float> dparam_before;  // (F): what dgamma / dbeta hold before the call
  std::vector<float> dlast_before;   // (B, T, F): what dlast's array holds before the call
};

TargetInputs MakeTargetInputs(const TargetShape& s) {
  std::mt19937 rng(static_cast<unsigned>(s.B * 131 + s.J * 17 + s.K * 5 + s.Q + s.T * 3 + s.F));
  const int64_t C = s.K * s.Q;
  TargetInputs in;
  in.d = RandomVector(rng, s.B * s.J * C);
  in.v = RandomVector(rng, s.B * s.J * C, -2.0f, 2.0f);
  in.xw = RandomVector(rng, s.B * s.T * s.F, -2.0f, 2.0f);
  in.center = RandomVector(rng, s.B * s.F, -3.0f, 3.0f);
  in.scale = RandomVector(rng, s.B * s.F, 0.5f, 2.0f);
  in.gamma = RandomVector(rng, s.F, 0.5f, 1.5f);
  in.beta = RandomVector(rng, s.F, -0.5f, 0.5f);
  in.before = RandomVector(rng, s.B * s.J * C, 10.0f, 20.0f);
  in.before_v = RandomVector(rng, s.B * s.J * C, 10.0f, 20.0f);
  in.dparam_before = RandomVector(rng, s.F, 1.0f, 2.0f);
  in.dlast_before = RandomVector(rng, s.B * s.T * s.F, 1.0f, 2.0f);
  return in;
}

TEST_CASE(
    "UnscaleTargetLaunch matches the reference per target, with and without gamma, last "
    "and v_out",
    "[gpu]") {
  for (const TargetShape& s : kTargetShapes) {
    const auto [B, J, K, Q, T, F] = s;
    const int64_t C = K * Q;
    const TargetInputs in = MakeTargetInputs(s);
    DeviceArray d_d(in.d), d_xw(in.xw), d_center(in.center), d_scale(in.scale), d_gamma(in.gamma),
        d_beta(in.beta);
    for (int variant = 0; variant < 16; ++variant) {  // bits: gamma, last, v_out, statistics
      const bool affine = variant & 1, shifted = variant & 2, keep_v = variant & 4,
                 stats = !(variant & 8);
      CAPTURE(B, J, K, Q, T, F, affine, shifted, keep_v, stats);
      std::vector<float> out = in.before, v = in.before_v;
      DeviceArray d_out(in.before), d_v(in.before_v);
      for (int64_t k = FirstMappedTarget(K); k < K; ++k) {
        const int64_t f = TargetFeature(k, F), last_at = (T - 1) * F + f;
        ref::UnscaleTarget(
            out.data(), keep_v ? v.data() : nullptr, in.d.data(),
            shifted ? in.xw.data() + last_at : nullptr, T * F,
            stats ? in.center.data() + f : nullptr, stats ? in.scale.data() + f : nullptr, F,
            affine ? in.gamma.data() + f : nullptr, in.beta.data() + f, kEps2, B, J, C, k * Q, Q);
        REQUIRE_OK(cuda::UnscaleTargetLaunch(
            d_out.get(), keep_v ? d_v.get() : nullptr, d_d.get(),
            shifted ? d_xw.get() + last_at : nullptr, T * F, stats ? d_center.get() + f : nullptr,
            stats ? d_scale.get() + f : nullptr, F, affine ? d_gamma.get() + f : nullptr,
            d_beta.get() + f, kEps2, B, J, C, k * Q, Q, nullptr));
      }
      ExpectNear("out", d_out.Download(), out, {B, J, C}, kAtol, kRtol);
      ExpectNear("v_out", d_v.Download(), v, {B, J, C}, kAtol, kRtol);
    }
  }
}

TEST_CASE("UnscaleTargetBackwardLaunch matches the reference and adds to dgamma, dbeta, dlast",
          "[gpu]") {
  for (const TargetShape& s : kTargetShapes) {
    const auto [B, J, K, Q, T, F] = s;
    const int64_t C = K * Q;
    const TargetInputs in = MakeTargetInputs(s);
    DeviceArray d_dout(in.d), d_v(in.v), d_scale(in.scale), d_gamma(in.gamma);
    for (int variant = 0; variant < 16; ++variant) {  // bits: gamma, dlast, dd in place, scale
      const bool affine = variant & 1, with_dlast = variant & 2, in_place = variant & 4,
                 scaled = !(variant & 8);
      CAPTURE(B, J, K, Q, T, F, affine, with_dlast, in_place, scaled);
      std::vector<float> dd = in_place ? in.d : in.before;
      std::vector<float> dgamma = in.dparam_before, dbeta = in.dparam_before;
      std::vector<float> dlast = in.dlast_before;
      DeviceArray d_dd(dd), d_dgamma(dgamma), d_dbeta(dbeta), d_dlast(dlast);
      for (int64_t k = FirstMappedTarget(K); k < K; ++k) {
        const int64_t f = TargetFeature(k, F), last_at = (T - 1) * F + f;
        ref::UnscaleTargetBackward(
            dd.data(), dgamma.data() + f, dbeta.data() + f,
            with_dlast ? dlast.data() + last_at : nullptr, T * F,
            in_place ? dd.data() : in.d.data(), affine ? in.v.data() : nullptr,
            scaled ? in.scale.data() + f : nullptr, F, affine ? in.gamma.data() + f : nullptr,
            kEps2, B, J, C, k * Q, Q);
        REQUIRE_OK(cuda::UnscaleTargetBackwardLaunch(
            d_dd.get(), d_dgamma.get() + f, d_dbeta.get() + f,
            with_dlast ? d_dlast.get() + last_at : nullptr, T * F,
            in_place ? d_dd.get() : d_dout.get(), affine ? d_v.get() : nullptr,
            scaled ? d_scale.get() + f : nullptr, F, affine ? d_gamma.get() + f : nullptr, kEps2, B,
            J, C, k * Q, Q, nullptr));
      }
      ExpectNear("dd", d_dd.Download(), dd, {B, J, C}, kAtol, kRtol);
      // Without gamma the reference leaves dgamma and dbeta as they were, and without dlast the
      // array: the comparison checks that too.
      ExpectNear("dgamma", d_dgamma.Download(), dgamma, {F}, SumAtol(B * J * Q), kRtol);
      ExpectNear("dbeta", d_dbeta.Download(), dbeta, {F}, SumAtol(B * J * Q), kRtol);
      ExpectNear("dlast", d_dlast.Download(), dlast, {B, T, F}, SumAtol(J * Q), kRtol);
    }
  }
}

TEST_CASE("ScaleWindowsBackwardLaunch matches the reference and adds to dgamma and dbeta",
          "[gpu]") {
  struct Shape {
    int64_t R, F;
  };
  for (const auto& [R, F] :
       {Shape{1, 1}, Shape{21, 5}, Shape{3737, 3}, Shape{1000, 130}, Shape{7, 300}}) {
    CAPTURE(R, F);
    std::mt19937 rng(static_cast<unsigned>(R * 257 + F));
    const std::vector<float> dxw = RandomVector(rng, R * F);
    const std::vector<float> z = RandomVector(rng, R * F, -2.0f, 2.0f);
    std::vector<float> dgamma = RandomVector(rng, F, 1.0f, 2.0f);
    std::vector<float> dbeta = RandomVector(rng, F, -2.0f, -1.0f);
    DeviceArray d_dxw(dxw), d_z(z), d_dgamma(dgamma), d_dbeta(dbeta);
    ref::ScaleWindowsBackward(dgamma.data(), dbeta.data(), dxw.data(), z.data(), R, F);
    REQUIRE_OK(cuda::ScaleWindowsBackwardLaunch(d_dgamma.get(), d_dbeta.get(), d_dxw.get(),
                                                d_z.get(), R, F, nullptr));
    ExpectNear("dgamma", d_dgamma.Download(), dgamma, {F}, SumAtol(R), kRtol);
    ExpectNear("dbeta", d_dbeta.Download(), dbeta, {F}, SumAtol(R), kRtol);
  }
}

TEST_CASE("The window-scaling reductions give the same bits on every run", "[gpu]") {
  std::mt19937 rng(29);
  constexpr int kRuns = 3;

  constexpr int64_t B = 500, T = 1000, F = 7;
  DeviceArray d_x(MakeWindows(rng, B, T, F));
  std::vector<float> first_center, first_scale;
  for (int run = 0; run < kRuns; ++run) {
    DeviceArray d_center(NanVector(B * F)), d_scale(NanVector(B * F));
    REQUIRE_OK(cuda::WindowStatsLaunch(d_center.get(), d_scale.get(), d_x.get(), B, T, F,
                                       WindowStatistic::kMeanStd, kEps, nullptr));
    const std::vector<float> center = d_center.Download(), scale = d_scale.Download();
    if (run == 0) {
      first_center = center;
      first_scale = scale;
    } else {
      CHECK(SameBits(center, first_center));
      CHECK(SameBits(scale, first_scale));
    }
  }

  // Two thousand rows of a 96-step horizon of 9 quantiles; the last values sit in a (B, 4, 3)
  // window array, the target being feature 1.
  const TargetShape s{2000, 96, 1, 9, 4, 3};
  const TargetInputs in = MakeTargetInputs(s);
  const int64_t f = 1, last_at = (s.T - 1) * s.F + f;
  DeviceArray d_dout(in.d), d_v(in.v), d_scale(in.scale), d_gamma(in.gamma);
  std::vector<float> first_dd, first_dgamma, first_dbeta, first_dlast;
  for (int run = 0; run < kRuns; ++run) {
    DeviceArray d_dd(in.before), d_dgamma(in.dparam_before), d_dbeta(in.dparam_before),
        d_dlast(in.dlast_before);
    REQUIRE_OK(cuda::UnscaleTargetBackwardLaunch(
        d_dd.get(), d_dgamma.get() + f, d_dbeta.get() + f, d_dlast.get() + last_at, s.T * s.F,
        d_dout.get(), d_v.get(), d_scale.get() + f, s.F, d_gamma.get() + f, kEps2, s.B, s.J, s.Q, 0,
        s.Q, nullptr));
    const std::vector<float> dd = d_dd.Download(), dgamma = d_dgamma.Download(),
                             dbeta = d_dbeta.Download(), dlast = d_dlast.Download();
    if (run == 0) {
      first_dd = dd;
      first_dgamma = dgamma;
      first_dbeta = dbeta;
      first_dlast = dlast;
    } else {
      CHECK(SameBits(dd, first_dd));
      CHECK(SameBits(dgamma, first_dgamma));
      CHECK(SameBits(dbeta, first_dbeta));
      CHECK(SameBits(dlast, first_dlast));
    }
  }

  constexpr int64_t R = 100000, G = 37;
  DeviceArray d_dxw(RandomVector(rng, R * G)), d_z(RandomVector(rng, R * G, -2.0f, 2.0f));
  const std::vector<float> dparam_before = RandomVector(rng, G);
  std::vector<float> first_sw_dgamma, first_sw_dbeta;
  for (int run = 0; run < kRuns; ++run) {
    DeviceArray d_dgamma(dparam_before), d_dbeta(dparam_before);
    REQUIRE_OK(cuda::ScaleWindowsBackwardLaunch(d_dgamma.get(), d_dbeta.get(), d_dxw.get(),
                                                d_z.get(), R, G, nullptr));
    const std::vector<float> dgamma = d_dgamma.Download(), dbeta = d_dbeta.Download();
    if (run == 0) {
      first_sw_dgamma = dgamma;
      first_sw_dbeta = dbeta;
    } else {
      CHECK(SameBits(dgamma, first_sw_dgamma));
      CHECK(SameBits(dbeta, first_sw_dbeta));
    }
  }
}

// A training pass's chain on one target: statistics, scaled windows, the forecast mapped back,
// and both backward passes, the second reading the first's dlast as its dxw.
struct ChainBuffers {
  ChainBuffers(const TargetShape& s, const TargetInputs& in, const std::vector<float>& windows)
      : x(windows),
        center(NanVector(s.B * s.F)),
        scale(NanVector(s.B * s.F)),
        xw(NanVector(s.B * s.T * s.F)),
        z(NanVector(s.B * s.T * s.F)),
        d(in.d),
        out(in.before),
        v(in.before_v),
        dd(in.before),
        gamma(in.gamma),
        beta(in.beta),
        dgamma(in.dparam_before),
        dbeta(in.dparam_before),
        dxw(in.dlast_before) {}

  DeviceArray x, center, scale, xw, z, d, out, v, dd, gamma, beta, dgamma, dbeta, dxw;
};

absl::Status RunChain(const TargetShape& s, ChainBuffers& b, cudaStream_t stream) {
  const auto [B, J, K, Q, T, F] = s;
  const int64_t C = K * Q, k = K - 1, f = TargetFeature(k, F), last_at = (T - 1) * F + f;
  RETURN_IF_ERROR(cuda::WindowStatsLaunch(b.center.get(), b.scale.get(), b.x.get(), B, T, F,
                                          WindowStatistic::kMeanStd, kEps, stream));
  RETURN_IF_ERROR(cuda::ScaleWindowsLaunch(b.xw.get(), b.z.get(), b.x.get(), b.center.get(),
                                           b.scale.get(), b.gamma.get(), b.beta.get(), B, T, F,
                                           stream));
  RETURN_IF_ERROR(cuda::UnscaleTargetLaunch(
      b.out.get(), b.v.get(), b.d.get(), b.xw.get() + last_at, T * F, b.center.get() + f,
      b.scale.get() + f, F, b.gamma.get() + f, b.beta.get() + f, kEps2, B, J, C, k * Q, Q, stream));
  // The forecast's gradient is d itself, only to have non-zero values.
  RETURN_IF_ERROR(cuda::UnscaleTargetBackwardLaunch(
      b.dd.get(), b.dgamma.get() + f, b.dbeta.get() + f, b.dxw.get() + last_at, T * F, b.d.get(),
      b.v.get(), b.scale.get() + f, F, b.gamma.get() + f, kEps2, B, J, C, k * Q, Q, stream));
  return cuda::ScaleWindowsBackwardLaunch(b.dgamma.get(), b.dbeta.get(), b.dxw.get(), b.z.get(),
                                          B * T, F, stream);
}

TEST_CASE("Every window-scaling launcher records into a CUDA graph that replays the eager results",
          "[gpu]") {
  const TargetShape s{37, 24, 2, 3, 11, 5};
  const TargetInputs in = MakeTargetInputs(s);
  std::mt19937 rng(41);
  const std::vector<float> x = MakeWindows(rng, s.B, s.T, s.F);
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) == cudaSuccess);

  ChainBuffers eager(s, in, x);
  REQUIRE_OK(RunChain(s, eager, stream));
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);

  // Global mode: any call that is unsafe during capture, from any thread, fails the capture.
  ChainBuffers replayed(s, in, x);
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const absl::Status recorded = RunChain(s, replayed, stream);
  cudaGraph_t graph = nullptr;
  const cudaError_t ended = cudaStreamEndCapture(stream, &graph);
  INFO(recorded.ToString() << "; end capture: " << cudaGetErrorString(ended));
  REQUIRE(recorded.ok());
  REQUIRE(ended == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);

  CHECK(SameBits(replayed.center.Download(), eager.center.Download()));
  CHECK(SameBits(replayed.scale.Download(), eager.scale.Download()));
  CHECK(SameBits(replayed.xw.Download(), eager.xw.Download()));
  CHECK(SameBits(replayed.z.Download(), eager.z.Download()));
  CHECK(SameBits(replayed.out.Download(), eager.out.Download()));
  CHECK(SameBits(replayed.v.Download(), eager.v.Download()));
  CHECK(SameBits(replayed.dd.Download(), eager.dd.Download()));
  CHECK(SameBits(replayed.dgamma.Download(), eager.dgamma.Download()));
  CHECK(SameBits(replayed.dbeta.Download(), eager.dbeta.Download()));
  CHECK(SameBits(replayed.dxw.Download(), eager.dxw.Download()));
  CHECK(cudaGraphExecDestroy(exec) == cudaSuccess);
  CHECK(cudaGraphDestroy(graph) == cudaSuccess);
  CHECK(cudaStreamDestroy(stream) == cudaSuccess);
}

TEST_CASE("Window-scaling launchers launch nothing for zero sizes and reject bad arguments",
          "[gpu]") {
  const auto kMeanStd = WindowStatistic::kMeanStd;
  // Zero sizes: nothing is read or written, so null pointers are fine.
  CHECK(cuda::WindowStatsLaunch(nullptr, nullptr, nullptr, 0, 5, 3, kMeanStd, kEps, nullptr).ok());
  CHECK(cuda::WindowStatsLaunch(nullptr, nullptr, nullptr, 4, 0, 0, kMeanStd, kEps, nullptr).ok());
  CHECK(cuda::ScaleWindowsLaunch(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 3,
                                 0, 4, nullptr)
            .ok());
  CHECK(cuda::UnscaleTargetLaunch(nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0,
                                  nullptr, nullptr, kEps2, 0, 4, 6, 0, 3, nullptr)
            .ok());
  CHECK(cuda::UnscaleTargetBackwardLaunch(nullptr, nullptr, nullptr, nullptr, 0, nullptr, nullptr,
                                          nullptr, 0, nullptr, kEps2, 5, 4, 6, 6, 0, nullptr)
            .ok());
  const std::vector<float> held = {1.0f, -2.0f, 3.0f};
  DeviceArray d_dgamma(held), d_dbeta(held);
  REQUIRE_OK(cuda::ScaleWindowsBackwardLaunch(d_dgamma.get(), d_dbeta.get(), nullptr, nullptr, 0, 3,
                                              nullptr));
  CHECK(SameBits(d_dgamma.Download(), held));
  CHECK(SameBits(d_dbeta.Download(), held));

  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(64, 1.0f));
  float* p = d.get();
  CHECK(cuda::WindowStatsLaunch(p, p, p, -1, 2, 2, kMeanStd, kEps, nullptr).code() == kInvalid);
  CHECK(cuda::WindowStatsLaunch(p, p, p, 2, 0, 2, kMeanStd, kEps, nullptr).code() == kInvalid);
  CHECK(cuda::WindowStatsLaunch(p, p, nullptr, 2, 2, 2, kMeanStd, kEps, nullptr).code() ==
        kInvalid);
  CHECK(cuda::ScaleWindowsLaunch(p, nullptr, p, p, p, p, nullptr, 2, 2, 2, nullptr).code() ==
        kInvalid);  // gamma without beta
  CHECK(cuda::UnscaleTargetLaunch(p, nullptr, p, nullptr, 0, p, p, 1, nullptr, nullptr, kEps2, 2, 2,
                                  4, 2, 3, nullptr)
            .code() == kInvalid);  // columns past C
  CHECK(cuda::UnscaleTargetLaunch(p, nullptr, p, nullptr, 0, p, p, -1, nullptr, nullptr, kEps2, 2,
                                  2, 4, 0, 2, nullptr)
            .code() == kInvalid);
  CHECK(cuda::UnscaleTargetLaunch(p, nullptr, nullptr, nullptr, 0, p, p, 1, nullptr, nullptr, kEps2,
                                  2, 2, 4, 0, 2, nullptr)
            .code() == kInvalid);
  CHECK(cuda::UnscaleTargetBackwardLaunch(p, p, p, nullptr, 0, p, nullptr, p, 1, p, kEps2, 2, 2, 4,
                                          0, 2, nullptr)
            .code() == kInvalid);  // gamma without v
  CHECK(cuda::UnscaleTargetBackwardLaunch(p, nullptr, nullptr, nullptr, 0, p, nullptr, p, 1,
                                          nullptr, kEps2, 2, 2, 4, -1, 2, nullptr)
            .code() == kInvalid);
  CHECK(cuda::ScaleWindowsBackwardLaunch(p, p, p, p, -1, 2, nullptr).code() == kInvalid);
  CHECK(cuda::ScaleWindowsBackwardLaunch(p, p, p, nullptr, 2, 2, nullptr).code() == kInvalid);
  testing::RequireDeviceOk();
}

}  // namespace
}  // namespace forecastd
