// Needs a GPU: the attention CUDA kernels (kernels/cuda/attention.h) on seeded random inputs:
// the streaming inference kernel and the last-query variant against kernels/ref (T = 1, T not a
// multiple of 32, causal and not, head sizes around the block size, a transformer-sized case),
// and the softmax steps around the backend's attention GEMMs against their formulas in double.
// The whole GEMM attention, forward and backward, is tested through the backend
// (tests/backends/cuda/cuda_attention_gpu_test.cc).
#include "kernels/cuda/attention.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "kernels/ref/attention.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::DropoutMask;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// The kernels compute scores, softmax (expf) and the sums over keys and queries in float where
// the reference uses double: weights carry a relative error of a few 1e-7, and the outputs and
// gradients, sums of up to T terms that may cancel, an absolute error well below 1e-7 for
// these O(1) inputs. Relative 1e-5 plus absolute 1e-6 leaves an order of magnitude, and is
// still far below any real mistake (a missing term is as large as the values themselves).
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;
constexpr double kAttAtol = 1e-8;  // the weights themselves are relative-accurate

// Scores of roughly the spread q.k / sqrt(hs) has, so the weights are far from uniform.
std::vector<float> Scores(std::mt19937& rng, int64_t n) {
  return RandomVector(rng, n, -4.0f, 4.0f);
}

// Row r is query r % T: causal rows see keys 0..r % T, and the rest must come back exactly 0.
TEST_CASE("AttentionSoftmax is the (causal) row softmax of the scores, in place", "[gpu]") {
  for (const bool causal : {false, true}) {
    for (const auto& [rows, T] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {3, 5}, {24, 37}, {9, 512}, {37, 300}}) {
      CAPTURE(causal, rows, T);
      std::mt19937 rng(static_cast<unsigned>(rows * 131 + T + causal));
      const std::vector<float> scores = Scores(rng, rows * T);
      std::vector<float> want(static_cast<size_t>(rows * T), 0.0f);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t S = causal ? r % T + 1 : T;
        double max = -1e300, sum = 0.0;
        for (int64_t s = 0; s < S; ++s) max = std::max<double>(max, scores[r * T + s]);
        for (int64_t s = 0; s < S; ++s) sum += std::exp(scores[r * T + s] - max);
        for (int64_t s = 0; s < S; ++s) {
          want[r * T + s] = static_cast<float>(std::exp(scores[r * T + s] - max) / sum);
        }
      }
      DeviceArray d(scores);
      REQUIRE_OK(cuda::AttentionSoftmax(d.get(), rows, T, causal, nullptr));
      const std::vector<float> got = d.Download();
      ExpectNear("att", got, want, {rows, T}, kAttAtol, kRtol);
      if (causal) {
        int64_t nonzero = 0;
        for (int64_t r = 0; r < rows; ++r) {
          for (int64_t s = r % T + 1; s < T; ++s) nonzero += got[r * T + s] != 0.0f;
        }
        CHECK(nonzero == 0);
      }
    }
  }
}

TEST_CASE("AttentionSoftmaxBackward is the softmax backward of the dropped weights", "[gpu]") {
  for (const bool dropout : {false, true}) {
    for (const auto& [rows, T] :
         std::vector<std::pair<int64_t, int64_t>>{{1, 1}, {4, 33}, {10, 512}, {37, 300}}) {
      CAPTURE(dropout, rows, T);
      std::mt19937 rng(static_cast<unsigned>(rows * 71 + T + dropout));
      // Weights from the forward kernel's formula, with causal zeros in them.
      std::vector<float> att = Scores(rng, rows * T);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t S = r % T + 1;
        double sum = 0.0;
        for (int64_t s = 0; s < T; ++s) {
          att[r * T + s] = s < S ? std::exp(att[r * T + s]) : 0.0f;
          sum += att[r * T + s];
        }
        for (int64_t s = 0; s < T; ++s) att[r * T + s] = static_cast<float>(att[r * T + s] / sum);
      }
      const std::vector<float> dw = RandomVector(rng, rows * T);
      const std::vector<float> mask = dropout ? DropoutMask(rng, rows * T) : std::vector<float>();
      const float scale = 0.125f;
      std::vector<float> want(static_cast<size_t>(rows * T));
      for (int64_t r = 0; r < rows; ++r) {
        double rowdot = 0.0;
        for (int64_t s = 0; s < T; ++s) {
          const double g = dw[r * T + s] * (dropout ? mask[r * T + s] : 1.0f);
          rowdot += att[r * T + s] * g;
        }
        for (int64_t s = 0; s < T; ++s) {
          const double g = dw[r * T + s] * (dropout ? mask[r * T + s] : 1.0f);
          want[r * T + s] = static_cast<float>(att[r * T + s] * (g - rowdot) * scale);
        }
      }
      DeviceArray d_dw(dw), d_att(att), d_mask(mask);
      REQUIRE_OK(cuda::AttentionSoftmaxBackward(
          d_dw.get(), d_att.get(), dropout ? d_mask.get() : nullptr, rows, T, scale, nullptr));
      ExpectNear("dS", d_dw.Download(), want, {rows, T}, kAtol, kRtol);
    }
  }
}

// Inference over head sizes 8-64: keys and values in shared-memory chunks, online softmax.
// Shapes cross the 64-query blocks and the key chunks (4096 / hs keys), causal and not.
TEST_CASE("AttentionInference matches the reference without saved weights", "[gpu]") {
  struct Shape {
    int64_t B, T, D, NH;
    bool causal;
  };
  for (const Shape c : std::vector<Shape>{{2, 33, 32, 4, true},      // hs = 8
                                          {3, 100, 128, 8, false},   // hs = 16, the small model
                                          {1, 300, 128, 8, true},    // hs = 16, > one key chunk
                                          {2, 65, 64, 2, true},      // hs = 32
                                          {1, 1, 64, 1, false},      // hs = 64, one query
                                          {2, 130, 768, 12, false},  // hs = 64, > one chunk
                                          {1, 512, 768, 12, true}}) {
    CAPTURE(c.B, c.T, c.D, c.NH, c.causal);
    REQUIRE(cuda::AttentionInferenceSupports(c.B, c.D, c.NH));
    std::mt19937 rng(static_cast<unsigned>(3 + c.T + c.D));
    const std::vector<float> qkv = RandomVector(rng, c.B * c.T * 3 * c.D);
    std::vector<float> out(c.B * c.T * c.D);
    ref::AttentionForward(out.data(), nullptr, qkv.data(), nullptr, c.B, c.T, c.D, c.NH, c.causal);
    DeviceArray d_qkv(qkv), d_out(NanVector(c.B * c.T * c.D));
    REQUIRE_OK(
        cuda::AttentionInference(d_out.get(), d_qkv.get(), c.B, c.T, c.D, c.NH, c.causal, nullptr));
    ExpectNear("out", d_out.Download(), out, {c.B, c.T, c.D}, kAtol, kRtol);
  }
  // Other head sizes are the backend's GEMMs'.
  CHECK_FALSE(cuda::AttentionInferenceSupports(2, 48, 4));   // hs = 12
  CHECK_FALSE(cuda::AttentionInferenceSupports(1, 768, 6));  // hs = 128
}

void CheckLastQuery(int64_t B, int64_t T, int64_t D, int64_t NH) {
  CAPTURE(B, T, D, NH);
  std::mt19937 rng(static_cast<unsigned>(B * 31 + T * 17 + D + NH));
  const std::vector<float> q = RandomVector(rng, B * D);
  const std::vector<float> kv = RandomVector(rng, B * T * 2 * D);
  const std::vector<float> dout = RandomVector(rng, B * D);
  std::vector<float> out(B * D), dq(B * D), dkv(B * T * 2 * D);
  ref::AttentionLastQueryForward(out.data(), q.data(), kv.data(), B, T, D, NH);
  ref::AttentionLastQueryBackward(dq.data(), dkv.data(), dout.data(), q.data(), kv.data(), B, T, D,
                                  NH);

  DeviceArray d_q(q), d_kv(kv), d_dout(dout);
  DeviceArray d_out(NanVector(B * D)), d_dq(NanVector(B * D)), d_dkv(NanVector(B * T * 2 * D));
  REQUIRE_OK(
      cuda::AttentionLastQueryForward(d_out.get(), d_q.get(), d_kv.get(), B, T, D, NH, nullptr));
  REQUIRE_OK(cuda::AttentionLastQueryBackward(d_dq.get(), d_dkv.get(), d_dout.get(), d_q.get(),
                                              d_kv.get(), B, T, D, NH, nullptr));
  ExpectNear("out", d_out.Download(), out, {B, D}, kAtol, kRtol);
  ExpectNear("dq", d_dq.Download(), dq, {B, D}, kAtol, kRtol);
  ExpectNear("dkv", d_dkv.Download(), dkv, {B, T, 2, D}, kAtol, kRtol);
}

TEST_CASE("AttentionLastQuery forward and backward match the reference", "[gpu]") {
  CheckLastQuery(1, 1, 4, 1);
  CheckLastQuery(3, 17, 24, 3);
  CheckLastQuery(2, 40, 768, 1);
  CheckLastQuery(4, 300, 96, 2);
  CheckLastQuery(2, 512, 768, 12);
}

TEST_CASE("Attention launchers reject bad shapes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(64, 1.0f));
  CHECK(cuda::AttentionInference(d.get(), d.get(), 1, 2, 6, 4, false, nullptr).code() ==
        kInvalid);  // D % NH != 0
  CHECK(cuda::AttentionInference(d.get(), d.get(), 1, 0, 4, 1, false, nullptr).code() == kInvalid);
  CHECK(cuda::AttentionInference(d.get(), d.get(), 1, 2, 48, 4, false, nullptr).code() ==
        kInvalid);  // hs = 12: not the streaming kernel's
  CHECK(cuda::AttentionSoftmax(nullptr, 2, 4, false, nullptr).code() == kInvalid);
  CHECK(cuda::AttentionSoftmax(d.get(), 2, 0, false, nullptr).code() == kInvalid);
  CHECK(cuda::AttentionSoftmaxBackward(d.get(), nullptr, nullptr, 2, 4, 1.0f, nullptr).code() ==
        kInvalid);  // att is required
  CHECK(cuda::AttentionLastQueryForward(nullptr, d.get(), d.get(), 1, 2, 4, 1, nullptr).code() ==
        kInvalid);
  CHECK(cuda::AttentionLastQueryBackward(d.get(), d.get(), d.get(), d.get(), d.get(), 1, 2, 4, 0,
                                         nullptr)
            .code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
