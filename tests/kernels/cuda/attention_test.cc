// Needs a GPU: the attention CUDA kernels (kernels/cuda/attention.h) against kernels/ref on
// seeded random inputs: T = 1, T not a multiple of 32, causal and not, with and without a
// dropout mask, head sizes below, around and above the block size (and one whose backward
// needs more than 48 KB of shared memory), and one transformer-sized case
// (B=2, NH=12, T=512, D=768) over many blocks.
#include "kernels/cuda/attention.h"

#include <cstdint>
#include <random>
#include <string>
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

// The kernels compute scores, softmax (expf) and the sums over keys and queries in float where
// the reference uses double: weights carry a relative error of a few 1e-7, and the outputs and
// gradients, sums of up to T terms that may cancel, an absolute error well below 1e-7 for
// these O(1) inputs. Relative 1e-5 plus absolute 1e-6 leaves an order of magnitude, and is
// still far below any real mistake (a missing term is as large as the values themselves).
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;
constexpr double kAttAtol = 1e-8;  // the weights themselves are relative-accurate

struct Case {
  int64_t B, T, D, NH;
  bool causal;
  bool dropout;
};

std::string Describe(const Case& c) {
  return "B=" + std::to_string(c.B) + " T=" + std::to_string(c.T) + " D=" + std::to_string(c.D) +
         " NH=" + std::to_string(c.NH) + (c.causal ? " causal" : "") +
         (c.dropout ? " dropout" : "");
}

// 0 or 1/(1-p) with p = 0.1, as the caller draws nn.MultiheadAttention's dropout.
std::vector<float> DropoutMask(std::mt19937& rng, int64_t n) {
  std::bernoulli_distribution keep(0.9);
  std::vector<float> m(static_cast<size_t>(n));
  for (float& x : m) x = keep(rng) ? 1.0f / 0.9f : 0.0f;
  return m;
}

void CheckAttention(const Case& c) {
  const std::string where = Describe(c);
  CAPTURE(where);
  const int64_t B = c.B, T = c.T, D = c.D, NH = c.NH;
  std::mt19937 rng(static_cast<unsigned>(B * 1000003 + T * 1009 + D * 7 + NH + c.causal));
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  const std::vector<float> dout = RandomVector(rng, B * T * D);
  const std::vector<float> mask =
      c.dropout ? DropoutMask(rng, B * NH * T * T) : std::vector<float>();
  const float* mask_host = c.dropout ? mask.data() : nullptr;

  std::vector<float> out(B * T * D), att(B * NH * T * T), dqkv(B * T * 3 * D);
  ref::AttentionForward(out.data(), att.data(), qkv.data(), mask_host, B, T, D, NH, c.causal);
  ref::AttentionBackward(dqkv.data(), dout.data(), qkv.data(), att.data(), mask_host, B, T, D, NH);

  DeviceArray d_qkv(qkv), d_dout(dout), d_mask(mask);
  float* d_mask_ptr = c.dropout ? d_mask.get() : nullptr;
  DeviceArray d_out(NanVector(B * T * D)), d_att(NanVector(B * NH * T * T));
  REQUIRE_OK(cuda::AttentionForward(d_out.get(), d_att.get(), d_qkv.get(), d_mask_ptr, B, T, D, NH,
                                    c.causal, nullptr));
  ExpectNear("out", d_out.Download(), out, {B, T, D}, kAtol, kRtol);
  ExpectNear("att", d_att.Download(), att, {B, NH, T, T}, kAttAtol, kRtol);

  // The backward pass from the reference's weights, so it is tested on its own.
  DeviceArray d_att_ref(att), d_dqkv(NanVector(B * T * 3 * D));
  REQUIRE_OK(cuda::AttentionBackward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att_ref.get(),
                                     d_mask_ptr, B, T, D, NH, nullptr));
  ExpectNear("dqkv", d_dqkv.Download(), dqkv, {B, T, 3, D}, kAtol, kRtol);
}

TEST_CASE("AttentionForward and AttentionBackward match the reference", "[gpu]") {
  const std::vector<Case> cases = {
      {1, 1, 4, 1, false, false},     // T = 1
      {1, 1, 8, 2, true, true},       // T = 1, causal, masked
      {2, 5, 12, 3, true, true},      // hs = 4
      {2, 37, 64, 4, false, true},    // hs = 16, T not a multiple of 32
      {3, 37, 64, 4, true, false},    // the same, causal
      {1, 19, 96, 1, true, false},    // hs = 96: key groups of uneven size
      {1, 9, 768, 2, false, true},    // hs = 384 > block size
      {1, 6, 768, 1, true, true},     // hs = 768: the key pass needs > 48 KB shared memory
      {2, 70, 192, 3, false, false},  // hs = 64
      {1, 300, 64, 2, true, true},    // more queries and keys than threads in a block
  };
  for (const Case& c : cases) CheckAttention(c);
}

TEST_CASE("Attention matches the reference at transformer size (B=2 NH=12 T=512 D=768)", "[gpu]") {
  CheckAttention({2, 512, 768, 12, true, true});
}

// Without saved weights or dropout (inference), head sizes 8-64 take the streaming kernel (keys
// and values in shared-memory chunks, online softmax); the rest the per-query one. Shapes cross
// the 64-query blocks and the key chunks (4096 / hs keys), causal and not.
TEST_CASE("AttentionForward without saved weights writes only out", "[gpu]") {
  struct Shape {
    int64_t B, T, D, NH;
    bool causal;
  };
  for (const Shape c : std::vector<Shape>{{2, 33, 48, 4, false},     // hs = 12: per-query kernel
                                          {2, 33, 32, 4, true},      // hs = 8
                                          {3, 100, 128, 8, false},   // hs = 16, the small model
                                          {1, 300, 128, 8, true},    // hs = 16, > one key chunk
                                          {2, 65, 64, 2, true},      // hs = 32
                                          {1, 1, 64, 1, false},      // hs = 64, one query
                                          {2, 130, 768, 12, false},  // hs = 64, > one chunk
                                          {1, 512, 768, 12, true}}) {
    CAPTURE(c.B, c.T, c.D, c.NH, c.causal);
    std::mt19937 rng(static_cast<unsigned>(3 + c.T + c.D));
    const std::vector<float> qkv = RandomVector(rng, c.B * c.T * 3 * c.D);
    std::vector<float> out(c.B * c.T * c.D);
    ref::AttentionForward(out.data(), nullptr, qkv.data(), nullptr, c.B, c.T, c.D, c.NH, c.causal);
    DeviceArray d_qkv(qkv), d_out(NanVector(c.B * c.T * c.D));
    REQUIRE_OK(cuda::AttentionForward(d_out.get(), nullptr, d_qkv.get(), nullptr, c.B, c.T, c.D,
                                      c.NH, c.causal, nullptr));
    ExpectNear("out", d_out.Download(), out, {c.B, c.T, c.D}, kAtol, kRtol);
  }
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
  CHECK(cuda::AttentionForward(d.get(), nullptr, d.get(), nullptr, 1, 2, 6, 4, false, nullptr)
            .code() == kInvalid);  // D % NH != 0
  CHECK(cuda::AttentionForward(d.get(), nullptr, d.get(), nullptr, 1, 0, 4, 1, false, nullptr)
            .code() == kInvalid);
  CHECK(cuda::AttentionBackward(d.get(), d.get(), d.get(), nullptr, nullptr, 1, 2, 4, 1, nullptr)
            .code() == kInvalid);  // att is required
  CHECK(cuda::AttentionLastQueryForward(nullptr, d.get(), d.get(), 1, 2, 4, 1, nullptr).code() ==
        kInvalid);
  CHECK(cuda::AttentionLastQueryBackward(d.get(), d.get(), d.get(), d.get(), d.get(), 1, 2, 4, 0,
                                         nullptr)
            .code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
