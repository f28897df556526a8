// Needs a GPU: the CUDA optimiser updates (kernels/cuda/optimizer.h) against kernels/ref over a
// few steps of SGD (plain, momentum with dampening and decay, Nesterov) and Adam/AdamW, and
// the device-side clipping (squared norm, then scale) against ref::GradNorm / ClipGradNorm.
#include "kernels/cuda/optimizer.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/optimizer.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// The kernels evaluate the reference's double expressions step for step (no FMA contraction)
// and round once to float, so they should agree bit for bit; 1e-6 relative only guards a
// rounding-order slip, and a real mistake moves values by far more. Bit equality is reported.
constexpr double kRtol = 1e-6;

void WarnUnlessIdentical(const std::string& name, const std::vector<float>& got,
                         const std::vector<float>& want) {
  if (std::memcmp(got.data(), want.data(), want.size() * sizeof(float)) != 0) {
    WARN(name << ": within tolerance but not bit-identical to the reference");
  }
}

constexpr int kSteps = 4;
const std::vector<int64_t> kSizes = {1, 1000, 100003};

TEST_CASE("SgdUpdate matches the reference over several steps", "[gpu]") {
  std::vector<ref::SgdHyper> hypers(3);
  hypers[0].lr = 0.05f;  // plain
  hypers[1] = {0.02f, 0.9f, 0.1f, 0.01f, false};
  hypers[2] = {0.02f, 0.8f, 0.0f, 0.001f, true};
  for (size_t k = 0; k < hypers.size(); ++k) {
    for (int64_t n : kSizes) {
      CAPTURE(k, n);
      std::mt19937 rng(static_cast<unsigned>(n + k));
      std::vector<float> param = RandomVector(rng, n);
      std::vector<float> velocity(n, 0.0f);
      DeviceArray d_param(param), d_velocity(velocity);
      for (int step = 0; step < kSteps; ++step) {
        CAPTURE(step);
        const std::vector<float> grad = RandomVector(rng, n);
        ref::SgdUpdate(param.data(), velocity.data(), grad.data(), n, hypers[k], step == 0);
        DeviceArray d_grad(grad);
        REQUIRE_OK(cuda::SgdUpdate(d_param.get(), d_velocity.get(), d_grad.get(), n, hypers[k],
                                   step == 0, nullptr));
        const std::vector<float> got_param = d_param.Download();
        const std::vector<float> got_velocity = d_velocity.Download();
        ExpectNear("param", got_param, param, {n}, 0.0, kRtol);
        ExpectNear("velocity", got_velocity, velocity, {n}, 0.0, kRtol);
        WarnUnlessIdentical("param", got_param, param);
      }
    }
  }
}

TEST_CASE("SgdUpdate without momentum needs no velocity", "[gpu]") {
  constexpr int64_t n = 77;
  std::mt19937 rng(5);
  std::vector<float> param = RandomVector(rng, n);
  const std::vector<float> grad = RandomVector(rng, n);
  ref::SgdHyper hyper;
  hyper.weight_decay = 0.1f;
  DeviceArray d_param(param), d_grad(grad);
  ref::SgdUpdate(param.data(), nullptr, grad.data(), n, hyper, true);
  REQUIRE_OK(cuda::SgdUpdate(d_param.get(), nullptr, d_grad.get(), n, hyper, true, nullptr));
  ExpectNear("param", d_param.Download(), param, {n}, 0.0, kRtol);
}

TEST_CASE("AdamUpdate matches the reference over several steps (Adam and AdamW)", "[gpu]") {
  std::vector<ref::AdamHyper> hypers(3);
  hypers[1].weight_decay = 0.01f;  // Adam with L2
  hypers[2].lr = 3e-3f;
  hypers[2].weight_decay = 0.05f;
  hypers[2].decoupled_weight_decay = true;  // AdamW
  for (size_t k = 0; k < hypers.size(); ++k) {
    for (int64_t n : kSizes) {
      CAPTURE(k, n);
      std::mt19937 rng(static_cast<unsigned>(10 * n + k));
      std::vector<float> param = RandomVector(rng, n);
      std::vector<float> m(n, 0.0f), v(n, 0.0f);
      DeviceArray d_param(param), d_m(m), d_v(v);
      for (int64_t t = 1; t <= kSteps; ++t) {
        CAPTURE(t);
        const std::vector<float> grad = RandomVector(rng, n);
        ref::AdamUpdate(param.data(), m.data(), v.data(), grad.data(), n, t, hypers[k]);
        DeviceArray d_grad(grad);
        REQUIRE_OK(cuda::AdamUpdate(d_param.get(), d_m.get(), d_v.get(), d_grad.get(), n, t,
                                    hypers[k], nullptr));
        const std::vector<float> got_param = d_param.Download();
        ExpectNear("param", got_param, param, {n}, 0.0, kRtol);
        ExpectNear("m", d_m.Download(), m, {n}, 0.0, kRtol);
        ExpectNear("v", d_v.Download(), v, {n}, 0.0, kRtol);
        WarnUnlessIdentical("param", got_param, param);
      }
    }
  }
}

// The update moves four floats at a time from where the arrays are 16-byte aligned, so a range
// of the arena may start off that boundary (a head of 1-3 elements), end off it (a tail), or
// have arrays aligned unlike each other (one element at a time throughout).
TEST_CASE("Updates of ranges off a 16-byte boundary match the reference", "[gpu]") {
  constexpr int64_t n = 1029;  // 4 * 257 + 1
  ref::AdamHyper adam;
  adam.weight_decay = 0.01f;
  const ref::SgdHyper sgd{0.02f, 0.9f, 0.1f, 0.01f, true};
  // Offsets in floats of param, its state arrays and grad into their buffers.
  const std::vector<std::vector<int64_t>> offsets = {
      {0, 0, 0, 0}, {1, 1, 1, 1}, {2, 2, 2, 2}, {3, 3, 3, 3}, {1, 2, 3, 0}};
  for (const std::vector<int64_t>& off : offsets) {
    CAPTURE(off[0], off[1], off[2], off[3]);
    std::mt19937 rng(static_cast<unsigned>(off[0] * 7 + off[1]));
    std::vector<float> param = RandomVector(rng, n + 3);
    std::vector<float> m(n + 3, 0.0f), v(n + 3, 0.0f), velocity(n + 3, 0.0f);
    std::vector<float> sgd_param = param;
    DeviceArray d_param(param), d_m(m), d_v(v), d_sgd_param(param), d_velocity(velocity);
    for (int64_t t = 1; t <= 2; ++t) {
      const std::vector<float> grad = RandomVector(rng, n + 3);
      DeviceArray d_grad(grad);
      ref::AdamUpdate(param.data() + off[0], m.data() + off[1], v.data() + off[2],
                      grad.data() + off[3], n, t, adam);
      REQUIRE_OK(cuda::AdamUpdate(d_param.get() + off[0], d_m.get() + off[1], d_v.get() + off[2],
                                  d_grad.get() + off[3], n, t, adam, nullptr));
      ref::SgdUpdate(sgd_param.data() + off[0], velocity.data() + off[1], grad.data() + off[3], n,
                     sgd, t == 1);
      REQUIRE_OK(cuda::SgdUpdate(d_sgd_param.get() + off[0], d_velocity.get() + off[1],
                                 d_grad.get() + off[3], n, sgd, t == 1, nullptr));
    }
    // Whole buffers: the elements outside the ranges must be as they were.
    ExpectNear("adam param", d_param.Download(), param, {n + 3}, 0.0, kRtol);
    ExpectNear("m", d_m.Download(), m, {n + 3}, 0.0, kRtol);
    ExpectNear("v", d_v.Download(), v, {n + 3}, 0.0, kRtol);
    ExpectNear("sgd param", d_sgd_param.Download(), sgd_param, {n + 3}, 0.0, kRtol);
    ExpectNear("velocity", d_velocity.Download(), velocity, {n + 3}, 0.0, kRtol);
  }
}

TEST_CASE("GradNormSquared and ScaleByClip match GradNorm and ClipGradNorm", "[gpu]") {
  for (int64_t n : std::vector<int64_t>{1, 1000, 4096, 4097, (1 << 20) + 7}) {
    for (double max_norm : {0.5, 1e6}) {  // clipped, and left alone
      CAPTURE(n, max_norm);
      std::mt19937 rng(static_cast<unsigned>(n));
      std::vector<float> grad = RandomVector(rng, n);
      const double norm = ref::GradNorm(grad.data(), n);

      DeviceArray d_grad(grad), d_norm_sq(NanVector(1));
      REQUIRE_OK(cuda::GradNormSquared(d_norm_sq.get(), d_grad.get(), n, nullptr));
      const float norm_sq = d_norm_sq.Download()[0];
      INFO("norm^2: got " << norm_sq << ", want " << norm * norm);
      CHECK(std::abs(norm_sq - norm * norm) <= 1e-6 * norm * norm);

      REQUIRE_OK(cuda::GradNormSquared(d_norm_sq.get(), d_grad.get(), n, nullptr));
      const float again = d_norm_sq.Download()[0];
      CHECK(std::memcmp(&norm_sq, &again, sizeof(float)) == 0);  // reproducible

      // The reference from the same (float) squared norm the device saw.
      ref::ClipGradNorm(grad.data(), n, std::sqrt(static_cast<double>(norm_sq)), max_norm);
      REQUIRE_OK(cuda::ScaleByClip(d_grad.get(), n, d_norm_sq.get(), static_cast<float>(max_norm),
                                   nullptr));
      ExpectNear("grad", d_grad.Download(), grad, {n}, 0.0, 0.0);
    }
  }
}

TEST_CASE("GradNormSquared of nothing is 0", "[gpu]") {
  DeviceArray d_out(NanVector(1));
  REQUIRE_OK(cuda::GradNormSquared(d_out.get(), nullptr, 0, nullptr));
  CHECK(d_out.Download()[0] == 0.0f);
}

TEST_CASE("Optimiser launchers reject bad sizes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  ref::SgdHyper momentum;
  momentum.momentum = 0.9f;
  CHECK(cuda::SgdUpdate(d.get(), nullptr, d.get(), 4, momentum, true, nullptr).code() == kInvalid);
  CHECK(cuda::SgdUpdate(d.get(), d.get(), d.get(), -1, momentum, true, nullptr).code() == kInvalid);
  CHECK(cuda::AdamUpdate(d.get(), d.get(), d.get(), d.get(), 4, 0, ref::AdamHyper{}, nullptr)
            .code() == kInvalid);
  CHECK(cuda::GradNormSquared(nullptr, d.get(), 4, nullptr).code() == kInvalid);
  CHECK(cuda::ScaleByClip(d.get(), 4, nullptr, 1.0f, nullptr).code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
