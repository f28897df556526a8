// What the backend op tests share (backend_ops_test.cc, which the CUDA backend's GPU test
// includes, and dnnl_bf16_test.cc): a backend's memory as a test sees it, random inputs from
// fixed-seed generators, recurrent weights, and the element-wise comparison. Test-only.
#ifndef FORECASTD_TESTS_BACKENDS_OP_TEST_UTIL_H_
#define FORECASTD_TESTS_BACKENDS_OP_TEST_UTIL_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "backends/backend.h"
#include "kernels/ref/recurrent.h"
#include "tests/testing/catch.h"

namespace forecastd::op_test {

// A backend's memory as the tests see it. Not thread-safe: allocate before starting threads.
class TestMemory {
 public:
  virtual ~TestMemory() = default;
  // A device copy of `host`, alive as long as this object.
  virtual float* Upload(const std::vector<float>& host) = 0;
  // n floats on the device, all NaN, so an element the op fails to write cannot pass.
  virtual float* Output(int64_t n) = 0;
  virtual std::vector<float> Download(const float* device, int64_t n) = 0;
};

class HostMemory final : public TestMemory {
 public:
  float* Upload(const std::vector<float>& host) override {
    return buffers_.emplace_back(host).data();
  }
  float* Output(int64_t n) override {
    return buffers_.emplace_back(n, std::numeric_limits<float>::quiet_NaN()).data();
  }
  std::vector<float> Download(const float* device, int64_t n) override {
    return std::vector<float>(device, device + n);
  }

 private:
  std::deque<std::vector<float>> buffers_;  // a deque never moves what it holds
};

inline std::vector<float> Uniform(std::mt19937& rng, int64_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// REQUIREs |got - want| <= atol + rtol * |want| everywhere (NaN never passes) and on failure
// prints how many elements differ and the first few, with their flat indices.
inline void ExpectAllClose(const std::string& what, const std::vector<float>& got,
                           const std::vector<float>& want, double atol, double rtol) {
  INFO(what);
  REQUIRE(got.size() == want.size());
  constexpr int kShown = 5;
  int64_t mismatches = 0;
  double max_diff = 0.0;
  std::ostringstream first;
  first.precision(9);
  for (size_t i = 0; i < got.size(); ++i) {
    const double diff = std::abs(static_cast<double>(got[i]) - want[i]);
    const double tol = atol + rtol * std::abs(static_cast<double>(want[i]));
    if (!(diff <= tol)) {
      if (mismatches < kShown) {
        first << "\n  [" << i << "] got " << got[i] << ", ref " << want[i] << ", |diff| " << diff
              << " > " << tol;
      }
      ++mismatches;
    }
    if (!(diff <= max_diff)) max_diff = diff;
  }
  INFO(mismatches << " of " << got.size() << " elements differ by more than atol " << atol
                  << " + rtol " << rtol << " * |ref| (max |diff| " << max_diff
                  << "); first:" << first.str());
  REQUIRE(mismatches == 0);
}

enum class Cell { kLstm, kGru };

struct RecurrentWeightsHost {
  RecurrentWeightsHost(std::mt19937& rng, Cell cell, const RecurrentDims& dims) {
    const int64_t GH = (cell == Cell::kLstm ? 4 : 3) * dims.H;
    const float k = 1.0f / std::sqrt(static_cast<float>(dims.H));
    for (int64_t d = 0; d < dims.ND; ++d) {
      w_ih.push_back(Uniform(rng, GH * dims.I, -k, k));
      w_hh.push_back(Uniform(rng, GH * dims.H, -k, k));
      b_ih.push_back(Uniform(rng, GH, -k, k));
      b_hh.push_back(Uniform(rng, GH, -k, k));
    }
  }
  std::vector<RecurrentDirectionWeights> Host() const {
    std::vector<RecurrentDirectionWeights> views;
    for (size_t d = 0; d < w_ih.size(); ++d) {
      views.push_back({w_ih[d].data(), w_hh[d].data(), b_ih[d].data(), b_hh[d].data()});
    }
    return views;
  }
  std::vector<RecurrentDirectionWeights> Upload(TestMemory& mem) const {
    std::vector<RecurrentDirectionWeights> views;
    for (size_t d = 0; d < w_ih.size(); ++d) {
      views.push_back(
          {mem.Upload(w_ih[d]), mem.Upload(w_hh[d]), mem.Upload(b_ih[d]), mem.Upload(b_hh[d])});
    }
    return views;
  }
  std::vector<std::vector<float>> w_ih, w_hh, b_ih, b_hh;
};

// A stack of L recurrent layers with random weights (uploaded to `mem`) and its reference
// output (B, T, ND*H), layer by layer; layer l > 0 reads layer l - 1's output.
struct StackCase {
  std::vector<float> inp, want;
  std::vector<RecurrentDirectionWeights> dev_weights;
};
inline StackCase MakeStack(std::mt19937& rng, Cell cell, const RecurrentDims& dims, int64_t L,
                           TestMemory& mem) {
  StackCase s;
  s.inp = Uniform(rng, dims.B * dims.T * dims.I);
  s.want = s.inp;
  for (int64_t l = 0; l < L; ++l) {
    RecurrentDims layer = dims;
    layer.I = l == 0 ? dims.I : dims.ND * dims.H;
    const RecurrentWeightsHost weights(rng, cell, layer);
    std::vector<float> next(dims.B * dims.T * dims.ND * dims.H);
    if (cell == Cell::kLstm) {
      ref::LstmLayerForward(next.data(), nullptr, nullptr, s.want.data(), nullptr, nullptr,
                            weights.Host().data(), layer);
    } else {
      ref::GruLayerForward(next.data(), nullptr, s.want.data(), nullptr, weights.Host().data(),
                           layer);
    }
    s.want = next;
    for (const RecurrentDirectionWeights& w : weights.Upload(mem)) s.dev_weights.push_back(w);
  }
  return s;
}

inline std::string DimsString(const RecurrentDims& d) {
  return "B=" + std::to_string(d.B) + " T=" + std::to_string(d.T) + " I=" + std::to_string(d.I) +
         " H=" + std::to_string(d.H) + " ND=" + std::to_string(d.ND);
}

// A dropout mask on attention weights (B, NH, T, T): each 0 with probability p, else 1/(1-p).
inline std::vector<float> DropoutMask(std::mt19937& rng, int64_t n, float p) {
  std::bernoulli_distribution drop(p);
  std::vector<float> mask(n);
  for (float& m : mask) m = drop(rng) ? 0.0f : 1.0f / (1.0f - p);
  return mask;
}

// The largest |a - b| over the elements.
inline double MaxAbsDiff(const std::vector<float>& a, const std::vector<float>& b) {
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::abs(static_cast<double>(a[i]) - b[i]));
  }
  return worst;
}

}  // namespace forecastd::op_test

#endif  // FORECASTD_TESTS_BACKENDS_OP_TEST_UTIL_H_
