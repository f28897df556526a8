// Needs a GPU: the covariates' launchers (kernels/cuda/covariates.h) against
// kernels/ref/covariates on seeded random inputs: block copies of a model's body input (rows into
// a wider matrix, a broadcast over a zero stride, a fill, a column), the gather of each window's
// series row with indices held as floats, a capture into a CUDA graph, and the argument checks.
#include "kernels/cuda/covariates.h"

#include <algorithm>
#include <cstdint>
#include <random>
#include <tuple>
#include <vector>

#include "kernels/cuda/cuda_status.h"
#include "kernels/ref/covariates.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using ref::Block3;
using ref::Strides3;
using testing::DeviceArray;
using testing::ExpectNear;
using testing::RandomVector;

struct CopyCase {
  const char* what;
  Block3 n;
  Strides3 o, in;
  int64_t out_floats, in_floats;  // in_floats 0: a fill
};

// A body input of B=3 windows, T=5 rows, F=4 features, 2 static values and a flag (W=7), with
// P=2 forecast steps (T'=7).
const std::vector<CopyCase> kCopies = {
    {"window rows into wider rows", {3, 5, 4}, {49, 7, 1}, {20, 4, 1}, 3 * 49, 3 * 20},
    {"static values broadcast over every row", {3, 7, 2}, {49, 7, 1}, {2, 0, 1}, 3 * 49, 6},
    {"the forecast-step flag", {3, 2, 1}, {49, 7, 0}, {}, 3 * 49, 0},
    {"one future-known column", {3, 2, 1}, {49, 7, 0}, {6, 3, 0}, 3 * 49, 18},
    {"a large block",
     {37, 129, 17},
     {129 * 20, 20, 1},
     {129 * 17, 17, 1},
     37 * 129 * 20,
     37 * 129 * 17},
};

TEST_CASE("BlockCopyLaunch matches the reference for copies, broadcasts and fills", "[gpu]") {
  for (const CopyCase& c : kCopies) {
    CAPTURE(c.what);
    std::mt19937 rng(static_cast<unsigned>(c.out_floats + c.in_floats));
    const std::vector<float> out0 = RandomVector(rng, c.out_floats);
    const std::vector<float> in = RandomVector(rng, std::max<int64_t>(c.in_floats, 1));
    const float* src = c.in_floats > 0 ? in.data() : nullptr;
    std::vector<float> want = out0;
    ref::BlockCopy(want.data(), src, 2.5f, c.n, c.o, c.in);
    DeviceArray d_out(out0), d_in(in);
    REQUIRE_OK(cuda::BlockCopyLaunch(d_out.get(), c.in_floats > 0 ? d_in.get() : nullptr, 2.5f, c.n,
                                     c.o, c.in, nullptr));
    // A copy moves bits: exact.
    ExpectNear("out", d_out.Download(), want, {c.out_floats}, 0.0, 0.0);
  }
}

TEST_CASE("GatherSeriesLaunch picks each window's row by its float index, clamped", "[gpu]") {
  for (const auto& [B, W, S, stride] : std::vector<std::tuple<int64_t, int64_t, int64_t, int64_t>>{
           {1, 1, 1, 1}, {5, 3, 4, 9}, {130, 17, 33, 1}}) {
    CAPTURE(B, W, S, stride);
    std::mt19937 rng(static_cast<unsigned>(B * 31 + W * 7 + S));
    const std::vector<float> table = RandomVector(rng, S * W);
    std::vector<float> index(static_cast<size_t>(B * stride), -7.0f);
    for (int64_t b = 0; b < B; ++b) index[b * stride] = static_cast<float>((b * 5 + 3) % S);
    if (B > 1) index[stride] = static_cast<float>(S + 4);  // out of range: clamped to S - 1
    std::vector<float> want(static_cast<size_t>(B * W));
    ref::GatherSeries(want.data(), table.data(), index.data(), stride, B, W, S);
    if (B > 1) {
      for (int64_t w = 0; w < W; ++w) REQUIRE(want[W + w] == table[(S - 1) * W + w]);
    }
    DeviceArray d_table(table), d_index(index), d_out(std::vector<float>(want.size(), 0.0f));
    REQUIRE_OK(cuda::GatherSeriesLaunch(d_out.get(), d_table.get(), d_index.get(), stride, B, W, S,
                                        nullptr));
    ExpectNear("out", d_out.Download(), want, {B, W}, 0.0, 0.0);
  }
}

TEST_CASE("The covariates' launchers record into a CUDA graph that replays the eager results",
          "[gpu]") {
  const CopyCase& c = kCopies[0];
  std::mt19937 rng(11);
  const std::vector<float> in = RandomVector(rng, c.in_floats);
  std::vector<float> want(static_cast<size_t>(c.out_floats), 0.0f);
  ref::BlockCopy(want.data(), in.data(), 0.0f, c.n, c.o, c.in);
  DeviceArray d_in(in), d_out(std::vector<float>(want.size(), 0.0f));
  cudaStream_t stream = nullptr;
  REQUIRE(cudaStreamCreate(&stream) == cudaSuccess);
  cudaGraph_t graph = nullptr;
  REQUIRE(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal) == cudaSuccess);
  REQUIRE_OK(cuda::BlockCopyLaunch(d_out.get(), d_in.get(), 0.0f, c.n, c.o, c.in, stream));
  REQUIRE(cudaStreamEndCapture(stream, &graph) == cudaSuccess);
  cudaGraphExec_t exec = nullptr;
  REQUIRE(cudaGraphInstantiate(&exec, graph, 0) == cudaSuccess);
  REQUIRE(cudaGraphLaunch(exec, stream) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(stream) == cudaSuccess);
  ExpectNear("out", d_out.Download(), want, {c.out_floats}, 0.0, 0.0);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

TEST_CASE("The covariates' launchers launch nothing for zero sizes and reject bad arguments",
          "[gpu]") {
  REQUIRE_OK(cuda::BlockCopyLaunch(nullptr, nullptr, 0.0f, {0, 3, 3}, {}, {}, nullptr));
  REQUIRE_OK(cuda::GatherSeriesLaunch(nullptr, nullptr, nullptr, 1, 0, 4, 0, nullptr));
  REQUIRE(cuda::BlockCopyLaunch(nullptr, nullptr, 0.0f, {1, 1, 1}, {}, {}, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::BlockCopyLaunch(nullptr, nullptr, 0.0f, {-1, 1, 1}, {}, {}, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  DeviceArray d(std::vector<float>(4, 0.0f));
  REQUIRE(cuda::GatherSeriesLaunch(d.get(), d.get(), d.get(), 1, 2, 2, 0, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(cuda::GatherSeriesLaunch(d.get(), nullptr, d.get(), 1, 2, 2, 1, nullptr).code() ==
          absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace forecastd
