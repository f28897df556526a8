// Needs a GPU: the tensor-core attention kernels (kernels/cuda/flash_attention.h) against
// kernels/ref on seeded random inputs, in bf16 and fp16: T = 1, T not a multiple of the 64- or
// 128-query blocks or the 64-row tiles, causal and not, head sizes 16, 32 and 64, a
// transformer-sized case; and what they refuse.
#include "kernels/cuda/flash_attention.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "kernels/ref/attention.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// q, k and v are rounded to the 16-bit type (relative 2^-9 for bf16, 2^-12 for fp16), and so are
// the weights before the second product: a score q.k / sqrt(hs) of U(-1, 1) entries (|s| < ~3)
// moves by up to ~1e-2 (bf16), each weight by about as much relative, and an output, an average
// of values in [-1, 1], by a few 1e-3. 2e-2 (bf16) and 3e-3 (fp16) absolute leave room and
// still catch any missing or misplaced term (O(1e-1) and more at these T).
struct Precision {
  cuda::Storage16 type;
  const char* name;
  double atol;       // forward outputs
  double grad_atol;  // dq, dk, dv (see the training test)
};
constexpr Precision kPrecisions[] = {{cuda::Storage16::kBf16, "bf16", 2e-2, 5e-3},
                                     {cuda::Storage16::kFp16, "fp16", 3e-3, 1e-3}};

// Floats of scratch for FlashOperandBytes.
int64_t OperandFloats(int64_t B, int64_t T, int64_t D) {
  return cuda::FlashOperandBytes(B, T, D) / static_cast<int64_t>(sizeof(float));
}

struct Shape {
  int64_t B, T, D, NH;
  bool causal;
};

TEST_CASE("FlashAttentionInference matches the reference within 16-bit rounding", "[gpu]") {
  for (const Precision& p : kPrecisions) {
    for (const Shape c : std::vector<Shape>{{1, 1, 64, 1, false},      // hs = 64, one query
                                            {2, 33, 64, 4, true},      // hs = 16
                                            {3, 100, 128, 8, false},   // hs = 16, the small model
                                            {2, 65, 64, 2, true},      // hs = 32, > one block
                                            {2, 130, 768, 12, false},  // hs = 64, > two tiles
                                            {1, 200, 128, 2, true},    // hs = 64, causal tiles
                                            {2, 512, 768, 12, false},  // the large model
                                            {1, 512, 768, 12, true}}) {
      CAPTURE(p.name, c.B, c.T, c.D, c.NH, c.causal);
      std::mt19937 rng(static_cast<unsigned>(11 + c.T * 7 + c.D + c.causal));
      const std::vector<float> qkv = RandomVector(rng, c.B * c.T * 3 * c.D);
      std::vector<float> want(c.B * c.T * c.D);
      ref::AttentionForward(want.data(), nullptr, qkv.data(), nullptr, c.B, c.T, c.D, c.NH,
                            c.causal);
      DeviceArray d_qkv(qkv), d_out(NanVector(c.B * c.T * c.D)),
          d_operands(NanVector(OperandFloats(c.B, c.T, c.D)));
      REQUIRE(cuda::FlashAttentionSupports(d_out.get(), d_qkv.get(), c.B, c.D, c.NH));
      REQUIRE_OK(cuda::FlashAttentionInference(d_out.get(), d_operands.get(), d_qkv.get(), c.B, c.T,
                                               c.D, c.NH, c.causal, p.type, nullptr));
      const std::vector<float> got = d_out.Download();
      ExpectNear("out", got, want, {c.B, c.T, c.D}, p.atol, 0.0);
      if (c.T > 1) {
        // One key (T = 1) gives out = v exactly after rounding; past that the 16-bit
        // arithmetic must show: fp32 would be within ~1e-6.
        double worst = 0.0;
        for (size_t i = 0; i < got.size(); ++i) {
          worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
        }
        CHECK(worst > 1e-6);
      }
    }
  }
}

// The training pair: the forward's output and row statistics, then the backward from them,
// against ref::AttentionBackward. Gradients are sums over up to T keys or queries of products
// rounded to 16 bits (q, k, v, dout, the weights and their gradient); with U(-1, 1) inputs they
// reach ~0.2 at T = 512 and were seen within 6e-4 (bf16) of the reference on an H100: 5e-3
// (bf16) and 1e-3 (fp16) leave room, and are an order of magnitude below the gradients.
TEST_CASE("FlashAttentionForward and FlashAttentionBackward match the reference", "[gpu]") {
  for (const Precision& p : kPrecisions) {
    for (const Shape c : std::vector<Shape>{{1, 1, 64, 1, false},     // one query and key
                                            {2, 33, 64, 4, true},     // hs = 16
                                            {2, 65, 64, 2, true},     // hs = 32, > one block
                                            {1, 130, 128, 2, false},  // hs = 64, > two tiles
                                            {2, 200, 128, 2, true},   // causal, partial tiles
                                            {2, 512, 768, 12, false},
                                            {1, 512, 768, 12, true}}) {
      CAPTURE(p.name, c.B, c.T, c.D, c.NH, c.causal);
      const int64_t B = c.B, T = c.T, D = c.D, NH = c.NH;
      std::mt19937 rng(static_cast<unsigned>(17 + T * 5 + D + c.causal));
      const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
      const std::vector<float> dout = RandomVector(rng, B * T * D);
      std::vector<float> want_out(B * T * D), att(B * NH * T * T), want(B * T * 3 * D);
      ref::AttentionForward(want_out.data(), att.data(), qkv.data(), nullptr, B, T, D, NH,
                            c.causal);
      ref::AttentionBackward(want.data(), dout.data(), qkv.data(), att.data(), nullptr, B, T, D,
                             NH);
      DeviceArray d_qkv(qkv), d_dout(dout), d_out(NanVector(B * T * D)),
          d_out_copy(NanVector(B * T * D)), d_lse(NanVector(B * NH * T)),
          d_rowdot(NanVector(B * NH * T)), d_dqkv(NanVector(B * T * 3 * D)),
          d_operands(NanVector(OperandFloats(B, T, D))),
          d_dout16(NanVector(OperandFloats(B, T, D) / 3));
      REQUIRE_OK(cuda::FlashAttentionForward(d_out.get(), d_out_copy.get(), d_lse.get(),
                                             d_operands.get(), d_qkv.get(), B, T, D, NH, c.causal,
                                             p.type, nullptr));
      const std::vector<float> out = d_out.Download();
      ExpectNear("out", out, want_out, {B, T, D}, p.atol, 0.0);
      CHECK(d_out_copy.Download() == out);
      // The backward reads q, k and v from the operands the forward left, not from qkv.
      const std::vector<float> nans = NanVector(B * T * 3 * D);
      REQUIRE(cudaMemcpy(d_qkv.get(), nans.data(), nans.size() * sizeof(float),
                         cudaMemcpyHostToDevice) == cudaSuccess);
      REQUIRE_OK(cuda::FlashAttentionBackward(d_dqkv.get(), d_dout16.get(), d_rowdot.get(),
                                              d_dout.get(), d_operands.get(), d_out_copy.get(),
                                              d_lse.get(), B, T, D, NH, c.causal, p.type, nullptr));
      const std::vector<float> got = d_dqkv.Download();
      ExpectNear("dqkv", got, want, {B, T, 3, D}, p.grad_atol, 0.0);
      double worst = 0.0, largest = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        worst = std::max(worst, std::abs(static_cast<double>(got[i]) - want[i]));
        largest = std::max(largest, std::abs(static_cast<double>(want[i])));
      }
      INFO("max |dqkv - ref| " << worst << ", max |ref| " << largest);
      CHECK(largest > 10 * p.grad_atol);  // the gradients are far above the tolerance
    }
  }
}

TEST_CASE("FlashAttentionInference refuses what it does not take", "[gpu]") {
  DeviceArray d(std::vector<float>(3 * 4 * 96, 1.0f));
  CHECK_FALSE(cuda::FlashAttentionSupports(d.get(), d.get(), 1, 96, 1));      // hs = 96
  CHECK_FALSE(cuda::FlashAttentionSupports(d.get(), d.get(), 1, 256, 2));     // hs = 128
  CHECK_FALSE(cuda::FlashAttentionSupports(d.get(), d.get() + 1, 1, 64, 1));  // qkv misaligned
  CHECK_FALSE(cuda::FlashAttentionSupports(d.get() + 1, d.get(), 1, 64, 1));  // out misaligned
  CHECK(cuda::FlashAttentionSupports(d.get(), d.get(), 1, 64, 1));
  DeviceArray operands(std::vector<float>(OperandFloats(1, 4, 96), 0.0f));
  CHECK(cuda::FlashAttentionInference(d.get(), operands.get(), d.get(), 1, 4, 96, 1, false,
                                      cuda::Storage16::kBf16, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(cuda::FlashAttentionInference(d.get(), operands.get(), d.get(), 1, 0, 64, 1, false,
                                      cuda::Storage16::kBf16, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);
  CHECK(cuda::FlashAttentionInference(d.get(), operands.get() + 1, d.get(), 1, 4, 64, 1, false,
                                      cuda::Storage16::kBf16, nullptr)
            .code() == absl::StatusCode::kInvalidArgument);  // operands misaligned
}

}  // namespace
}  // namespace forecastd
