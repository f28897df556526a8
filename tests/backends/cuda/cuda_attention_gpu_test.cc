// Needs a GPU: CudaBackend's attention as batched GEMMs (backends/cuda/cuda_attention.cc),
// forward with saved weights and backward, against kernels/ref on seeded random inputs: T = 1,
// T not a multiple of 32, causal and not, with and without a dropout mask, head sizes from 4 to
// 768, batch rows chunked through a scratch of one row and of several, and a transformer-sized
// case (B=2, NH=12, T=512, D=768); plus inference (no saved weights) on both of the backend's
// paths, the streaming kernel and the GEMMs.
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backends/cuda/cuda_backend.h"
#include "kernels/ref/attention.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::DropoutMask;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

// cuBLAS sums the products in its own order in float where the reference uses double: weights
// carry a relative error of a few 1e-7, outputs and gradients (sums of up to T terms that may
// cancel) an absolute error well below 1e-6 for these O(1) inputs. A missing or misplaced term
// is as large as the values themselves.
constexpr double kAtol = 1e-6;
constexpr double kRtol = 1e-5;
constexpr double kAttAtol = 1e-8;

std::unique_ptr<CudaBackend> RequireBackend(const CudaBackend::Options& options) {
  testing::GpuEnv& env = testing::SharedGpuEnv();
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
      CudaBackend::Create(env.streams->Lease(), env.allocator.get(), options);
  INFO(backend.status().ToString());
  REQUIRE(backend.ok());
  return std::move(*backend);
}

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

void CheckTrainingAttention(CudaBackend& backend, const Case& c) {
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
  REQUIRE_OK(
      backend.Attention(d_out.get(), d_att.get(), d_qkv.get(), d_mask_ptr, B, T, D, NH, c.causal));
  ExpectNear("out", d_out.Download(), out, {B, T, D}, kAtol, kRtol);
  ExpectNear("att", d_att.Download(), att, {B, NH, T, T}, kAttAtol, kRtol);

  // The backward pass from the reference's weights, so it is tested on its own.
  DeviceArray d_att_ref(att), d_dqkv(NanVector(B * T * 3 * D));
  REQUIRE_OK(backend.AttentionBackward(d_dqkv.get(), d_dout.get(), d_qkv.get(), d_att_ref.get(),
                                       d_mask_ptr, B, T, D, NH, c.causal));
  ExpectNear("dqkv", d_dqkv.Download(), dqkv, {B, T, 3, D}, kAtol, kRtol);
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {1, 1, 4, 1, false, false},     // T = 1
      {1, 1, 8, 2, true, true},       // T = 1, causal, masked
      {2, 5, 12, 3, true, true},      // hs = 4
      {2, 37, 64, 4, false, true},    // hs = 16, T not a multiple of 32
      {3, 37, 64, 4, true, false},    // the same, causal
      {1, 19, 96, 1, true, false},    // hs = 96
      {1, 9, 768, 2, false, true},    // hs = 384
      {1, 6, 768, 1, true, true},     // hs = 768
      {2, 70, 192, 3, false, false},  // hs = 64
      {5, 300, 64, 2, true, true},    // more batch rows than heads: batches over rows
  };
  return cases;
}

TEST_CASE("CudaBackend attention with saved weights, and its backward, match the reference",
          "[gpu]") {
  std::unique_ptr<CudaBackend> backend = RequireBackend({});
  for (const Case& c : Cases()) CheckTrainingAttention(*backend, c);
}

TEST_CASE("CudaBackend attention is the same in chunks of batch rows", "[gpu]") {
  // One row per chunk (the scratch holds less than one row's scores), then two rows.
  for (const int64_t scratch_bytes : {int64_t{1}, int64_t{2} * 2 * 300 * 300 * 4}) {
    CAPTURE(scratch_bytes);
    CudaBackend::Options options;
    options.attention_scratch_bytes = scratch_bytes;
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    CheckTrainingAttention(*backend, {5, 300, 64, 2, true, true});
    CheckTrainingAttention(*backend, {3, 37, 64, 4, false, false});
  }
}

TEST_CASE("CudaBackend attention matches the reference at transformer size", "[gpu]") {
  std::unique_ptr<CudaBackend> backend = RequireBackend({});
  CheckTrainingAttention(*backend, {2, 512, 768, 12, true, true});
}

// Inference: the streaming kernel below attention_gemm_min_keys keys where the head size
// allows, the GEMMs otherwise; both write out only.
TEST_CASE("CudaBackend attention without saved weights takes either path and matches", "[gpu]") {
  struct Shape {
    int64_t B, T, D, NH;
    bool causal;
  };
  for (const int64_t min_keys : {int64_t{1}, int64_t{256}, int64_t{1} << 20}) {
    CudaBackend::Options options;
    options.attention_gemm_min_keys = min_keys;
    options.attention_scratch_bytes = int64_t{4} << 20;  // chunks at the larger shapes
    std::unique_ptr<CudaBackend> backend = RequireBackend(options);
    for (const Shape c : std::vector<Shape>{{2, 33, 48, 4, false},     // hs = 12: GEMMs always
                                            {3, 100, 128, 8, false},   // the small model
                                            {2, 65, 64, 2, true},      // hs = 32
                                            {1, 1, 64, 1, false},      // one query
                                            {4, 300, 768, 12, false},  // the large model's heads
                                            {1, 512, 768, 12, true}}) {
      CAPTURE(min_keys, c.B, c.T, c.D, c.NH, c.causal);
      std::mt19937 rng(static_cast<unsigned>(3 + c.T + c.D));
      const std::vector<float> qkv = RandomVector(rng, c.B * c.T * 3 * c.D);
      std::vector<float> out(c.B * c.T * c.D);
      ref::AttentionForward(out.data(), nullptr, qkv.data(), nullptr, c.B, c.T, c.D, c.NH,
                            c.causal);
      DeviceArray d_qkv(qkv), d_out(NanVector(c.B * c.T * c.D));
      REQUIRE_OK(backend->Attention(d_out.get(), nullptr, d_qkv.get(), nullptr, c.B, c.T, c.D, c.NH,
                                    c.causal));
      ExpectNear("out", d_out.Download(), out, {c.B, c.T, c.D}, kAtol, kRtol);
    }
  }
}

TEST_CASE("CudaBackend attention refuses bad shapes and options", "[gpu]") {
  std::unique_ptr<CudaBackend> backend = RequireBackend({});
  DeviceArray d(std::vector<float>(64, 1.0f));
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  CHECK(backend->Attention(d.get(), nullptr, d.get(), nullptr, 1, 2, 6, 4, false).code() ==
        kInvalid);  // D % NH != 0
  CHECK(backend->AttentionBackward(d.get(), d.get(), d.get(), nullptr, nullptr, 1, 2, 4, 1, false)
            .code() == kInvalid);  // att is required
  CudaBackend::Options options;
  options.attention_scratch_bytes = 0;
  testing::GpuEnv& env = testing::SharedGpuEnv();
  CHECK(CudaBackend::Create(env.streams->Lease(), env.allocator.get(), options).status().code() ==
        kInvalid);
}

}  // namespace
}  // namespace forecastd
