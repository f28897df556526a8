// Needs a GPU: the CUDA losses (kernels/cuda/loss.h) against kernels/ref for every kind, on one
// element, a few, and enough for the multi-block reduction, with ties (pred == target) and
// Huber errors on both sides of delta; and the reproducibility of the loss.
#include "kernels/cuda/loss.h"

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/loss.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// Each gradient element is the reference's double expression rounded once to float, so it
// should match bit for bit; 1e-6 relative only guards against a rounding-order difference. The
// loss is a double sum in another order (relative 1e-15) rounded to float: 1e-6 relative.
constexpr double kGradRtol = 1e-6;
constexpr double kLossRtol = 1e-6;

const char* KindName(ref::LossKind kind) {
  switch (kind) {
    case ref::LossKind::kMse:
      return "mse";
    case ref::LossKind::kMae:
      return "mae";
    case ref::LossKind::kHuber:
      return "huber";
    case ref::LossKind::kQuantile:
      return "quantile";
  }
  return "?";
}

void CheckLoss(ref::LossKind kind, int64_t N, int64_t Q) {
  const std::string where =
      std::string(KindName(kind)) + " N=" + std::to_string(N) + " Q=" + std::to_string(Q);
  CAPTURE(where);
  std::mt19937 rng(static_cast<unsigned>(N * 4 + static_cast<int>(kind) + Q * 1000));
  const int64_t count = N * Q;
  const std::vector<float> target = RandomVector(rng, N, -2.0f, 2.0f);
  std::vector<float> pred = RandomVector(rng, count, -3.0f, 3.0f);
  for (int64_t e = 0; e < count; e += 10) pred[e] = target[e / Q];  // ties: gradient 0 or 0.5-tau
  const std::vector<float> taus = {0.1f, 0.5f, 0.9f, 0.25f};

  ref::LossSpec spec;
  spec.kind = kind;
  spec.huber_delta = 0.75f;
  spec.Q = Q;
  spec.quantiles = taus.data();
  std::vector<float> dpred(count);
  const double loss = ref::LossForwardBackward(dpred.data(), pred.data(), target.data(), N, spec);

  DeviceArray d_pred(pred), d_target(target), d_taus(taus);
  DeviceArray d_dpred(NanVector(count)), d_loss(NanVector(1));
  spec.quantiles = d_taus.get();
  REQUIRE_OK(cuda::LossForwardBackward(d_dpred.get(), d_loss.get(), d_pred.get(), d_target.get(), N,
                                       spec, nullptr));
  ExpectNear("dpred", d_dpred.Download(), dpred, {N, Q}, 0.0, kGradRtol);
  const float got = d_loss.Download()[0];
  INFO("loss: got " << got << ", want " << loss);
  CHECK(std::abs(got - loss) <= kLossRtol * std::abs(loss));

  // The same call again gives the same bits.
  REQUIRE_OK(cuda::LossForwardBackward(d_dpred.get(), d_loss.get(), d_pred.get(), d_target.get(), N,
                                       spec, nullptr));
  const float again = d_loss.Download()[0];
  CHECK(std::memcmp(&got, &again, sizeof(float)) == 0);
}

TEST_CASE("LossForwardBackward matches the reference for every kind", "[gpu]") {
  for (ref::LossKind kind : {ref::LossKind::kMse, ref::LossKind::kMae, ref::LossKind::kHuber}) {
    for (int64_t N : {1, 5, 1000, 4096, 4097, 100003}) CheckLoss(kind, N, 1);
  }
  for (int64_t N : {1, 7, 1500, 50000}) CheckLoss(ref::LossKind::kQuantile, N, 3);
  CheckLoss(ref::LossKind::kQuantile, 33, 1);
  CheckLoss(ref::LossKind::kQuantile, 2000, 4);
}

TEST_CASE("LossForwardBackward rejects bad sizes and specs", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  ref::LossSpec mse;
  CHECK(cuda::LossForwardBackward(d.get(), d.get(), d.get(), d.get(), 0, mse, nullptr).code() ==
        kInvalid);
  CHECK(cuda::LossForwardBackward(d.get(), nullptr, d.get(), d.get(), 2, mse, nullptr).code() ==
        kInvalid);
  ref::LossSpec quantile;
  quantile.kind = ref::LossKind::kQuantile;
  quantile.Q = 2;  // quantiles missing
  CHECK(
      cuda::LossForwardBackward(d.get(), d.get(), d.get(), d.get(), 2, quantile, nullptr).code() ==
      kInvalid);
  ref::LossSpec huber;
  huber.kind = ref::LossKind::kHuber;
  huber.huber_delta = 0.0f;
  CHECK(cuda::LossForwardBackward(d.get(), d.get(), d.get(), d.get(), 2, huber, nullptr).code() ==
        kInvalid);
}

}  // namespace
}  // namespace forecastd
