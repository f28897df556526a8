// Needs a GPU. Where does the CUDA transformer's error against PyTorch come from? Three parts,
// each printing what it measures (also on success) and a summary table at the end:
//
//  1. ops: every op the transformer forecaster runs, at the bench models' real shapes
//     (transformer_small D=128 NH=8 T=100 d_ff=512, transformer_large D=768 NH=12 T=512
//     d_ff=3072), CudaBackend against ReferenceBackend on random O(1) inputs (LayerNorm inputs
//     with mean offsets, to expose single-pass variance cancellation); LayerNorm and attention
//     also against a float64 host computation, to show which side is closer to the truth.
//  2. chain: a whole transformer encoder run op by op on both backends with the same weights.
//     After every op it prints the op's LOCAL error (the CUDA op against the reference op on
//     the very same inputs, downloaded from the GPU) and the ACCUMULATED error (the CUDA chain
//     against the reference chain), so the op that introduces the error, and how the layers
//     amplify it, show directly. Post-LN/pre-LN and GELU/ReLU variants are run.
//  3. forecaster: Forecaster::Forward end to end (device weights through ForwardPlacement, a
//     device Workspace, CUDA data ops) against the reference backend on the host: the
//     transformer_small shape with L = 1, 2, 3 sharing their first layers' weights, post-/pre-LN,
//     GELU/ReLU, B = 1 and 4; transformer_large with L = 2, B = 1; the LSTM lstm_h128_l2 as a
//     control (expected ~1e-6).
//
// Error measures, all against the reference: abs = max |cuda - ref|; rel = max |cuda - ref| /
// max(|ref|, 1e-3) (element-wise); nrel = max |cuda - ref| / max |ref| (normwise). Checks are
// CHECK (not REQUIRE), so one failing op does not hide the rest of the table.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "backends/cuda/cuda_allocator.h"
#include "backends/cuda/cuda_backend.h"
#include "backends/cuda/instance_streams.h"
#include "backends/reference_backend.h"
#include "engine/models/cuda_data_ops.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "engine/train/initializer.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "tests/testing/catch.h"
#include "tests/testing/gpu_env.h"

namespace forecastd {
namespace {

// ------------------------------------------------------------------------------------------
// Error measures and the summary table.

struct Err {
  double abs = 0.0;       // max |got - want|
  double rel = 0.0;       // max |got - want| / max(|want|, 1e-3)
  double nrel = 0.0;      // max |got - want| / max |want|
  int64_t bad = 0;        // elements outside atol + rtol |want|
  int64_t nonfinite = 0;  // NaN or Inf in got where want is finite
  int64_t worst = -1;     // index of the largest abs error
};

Err Compare(const std::vector<float>& got, const std::vector<double>& want, double atol,
            double rtol) {
  Err e;
  double max_want = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double g = got[i], w = want[i];
    max_want = std::max(max_want, std::abs(w));
    if (!std::isfinite(g)) {
      ++e.nonfinite;
      ++e.bad;
      continue;
    }
    const double d = std::abs(g - w);
    if (d > e.abs) {
      e.abs = d;
      e.worst = static_cast<int64_t>(i);
    }
    e.rel = std::max(e.rel, d / std::max(std::abs(w), 1e-3));
    if (d > atol + rtol * std::abs(w)) ++e.bad;
  }
  e.nrel = max_want > 0.0 ? e.abs / max_want : e.abs;
  return e;
}

Err Compare(const std::vector<float>& got, const std::vector<float>& want, double atol,
            double rtol) {
  return Compare(got, std::vector<double>(want.begin(), want.end()), atol, rtol);
}

struct Row {
  std::string what;
  Err err;
};

// Printed when the binary exits, whatever happened before.
struct Summary {
  std::vector<Row> rows;
  ~Summary() {
    std::printf("\n==================== forecaster_gpu_test summary ====================\n");
    std::printf("%-72s %11s %11s %11s %8s\n", "op / shape (against)", "max abs", "max rel",
                "norm rel", "bad");
    for (const Row& r : rows) {
      std::printf("%-72s %11.3e %11.3e %11.3e %8lld%s\n", r.what.c_str(), r.err.abs, r.err.rel,
                  r.err.nrel, static_cast<long long>(r.err.bad),
                  r.err.nonfinite > 0 ? " NONFINITE" : "");
    }
    std::printf("======================================================================\n");
    std::fflush(stdout);
  }
};

Summary& Table() {
  static Summary summary;
  return summary;
}

void Record(const std::string& what, const Err& e) {
  std::printf("[forecaster_gpu_test] %-70s abs %.3e  rel %.3e  nrel %.3e  bad %lld%s\n",
              what.c_str(), e.abs, e.rel, e.nrel, static_cast<long long>(e.bad),
              e.nonfinite > 0 ? "  NONFINITE" : "");
  std::fflush(stdout);
  Table().rows.push_back({what, e});
}

// ------------------------------------------------------------------------------------------
// The GPU: one allocator and InstanceStreams for the binary (never destroyed), device buffers.

using testing::GpuEnv;

// The binary's shared GPU state; the first call also prints which device the results are from.
GpuEnv& Env() {
  static GpuEnv& env = []() -> GpuEnv& {
    GpuEnv& e = testing::SharedGpuEnv();
    cudaDeviceProp prop{};
    if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess) {
      std::printf("[forecaster_gpu_test] device: %s (sm_%d%d)\n", prop.name, prop.major,
                  prop.minor);
    }
    return e;
  }();
  return env;
}

std::unique_ptr<CudaBackend> MakeCuda() {
  CudaBackend::Options options;  // math = kFp32: pedantic fp32
  absl::StatusOr<std::unique_ptr<CudaBackend>> backend =
      CudaBackend::Create(Env().streams->Lease(), Env().allocator.get(), options);
  if (!backend.ok()) FAIL("CudaBackend::Create: " << backend.status().ToString());
  return std::move(*backend);
}

void Cuda(cudaError_t error, const char* what) {
  INFO(what << ": " << cudaGetErrorString(error));
  REQUIRE(error == cudaSuccess);
}

void Ok(const absl::Status& status, const std::string& what) {
  INFO(what << ": " << status.ToString());
  REQUIRE(status.ok());
}

// Device buffers, freed (after the device is idle) with the object. Uploads and downloads are
// synchronous with the whole device, so they are ordered with the backend's non-blocking
// stream.
class DeviceMemory {
 public:
  ~DeviceMemory() { cudaDeviceSynchronize(); }
  float* Alloc(int64_t n) {
    absl::StatusOr<DeviceBuffer> buffer =
        Env().allocator->Allocate(std::max<int64_t>(n, 1) * sizeof(float));
    if (!buffer.ok()) FAIL("Allocate: " << buffer.status().ToString());
    float* p = buffer->as<float>();
    buffers_.push_back(std::move(*buffer));
    Cuda(cudaMemset(p, 0xff, std::max<int64_t>(n, 1) * sizeof(float)), "cudaMemset");  // NaN
    return p;
  }
  float* Upload(const std::vector<float>& host) {
    float* p = Alloc(static_cast<int64_t>(host.size()));
    Put(p, host);
    return p;
  }
  static void Put(float* dev, const std::vector<float>& host) {
    Cuda(cudaDeviceSynchronize(), "before upload");
    Cuda(cudaMemcpy(dev, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
         "upload");
    Cuda(cudaDeviceSynchronize(), "after upload");
  }
  static std::vector<float> Get(const float* dev, int64_t n) {
    Cuda(cudaDeviceSynchronize(), "before download (a kernel fault shows here)");
    std::vector<float> host(static_cast<size_t>(n));
    Cuda(cudaMemcpy(host.data(), dev, n * sizeof(float), cudaMemcpyDeviceToHost), "download");
    return host;
  }

 private:
  std::vector<DeviceBuffer> buffers_;
};

// ------------------------------------------------------------------------------------------
// Host helpers: random data, threads, float64 oracles.

std::vector<float> Normal(int64_t n, uint64_t seed, float mean = 0.0f, float stddev = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> Uniform(int64_t n, uint64_t seed, float lo, float hi) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// body(begin, end) over [0, n) split across the host's cores.
void ParallelFor(int64_t n, const std::function<void(int64_t, int64_t)>& body) {
  const int64_t threads =
      std::max<int64_t>(1, std::min<int64_t>(n, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  const int64_t chunk = (n + threads - 1) / threads;
  for (int64_t t = 0; t < threads; ++t) {
    const int64_t begin = t * chunk, end = std::min(n, begin + chunk);
    if (begin < end) pool.emplace_back(body, begin, end);
  }
  for (std::thread& th : pool) th.join();
}

// The reference backend's Linear split over rows (it is stateless and row-independent).
absl::Status RefLinear(float* out, const float* inp, const float* w, const float* b, int64_t N,
                       int64_t IN, int64_t OUT) {
  std::vector<absl::Status> status(static_cast<size_t>(N));
  ParallelFor(N, [&](int64_t begin, int64_t end) {
    ReferenceBackend local;
    status[static_cast<size_t>(begin)] =
        local.Linear(out + begin * OUT, inp + begin * IN, w, b, end - begin, IN, OUT);
  });
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

// The reference attention split over the batch.
absl::Status RefAttention(float* out, const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH,
                          bool causal) {
  std::vector<absl::Status> status(static_cast<size_t>(B));
  ParallelFor(B, [&](int64_t begin, int64_t end) {
    ReferenceBackend local;
    status[static_cast<size_t>(begin)] =
        local.Attention(out + begin * T * D, nullptr, qkv + begin * T * 3 * D, nullptr, end - begin,
                        T, D, NH, causal);
  });
  for (const absl::Status& s : status) RETURN_IF_ERROR(s);
  return absl::OkStatus();
}

std::vector<double> LayerNorm64(const std::vector<float>& x, const std::vector<float>& g,
                                const std::vector<float>& b, int64_t N, int64_t C, double eps) {
  std::vector<double> y(x.size());
  for (int64_t n = 0; n < N; ++n) {
    const float* row = x.data() + n * C;
    double mean = 0.0;
    for (int64_t c = 0; c < C; ++c) mean += row[c];
    mean /= static_cast<double>(C);
    double var = 0.0;
    for (int64_t c = 0; c < C; ++c) var += (row[c] - mean) * (row[c] - mean);
    var /= static_cast<double>(C);
    const double rstd = 1.0 / std::sqrt(var + eps);
    for (int64_t c = 0; c < C; ++c) y[n * C + c] = (row[c] - mean) * rstd * g[c] + b[c];
  }
  return y;
}

// softmax(q k^T / sqrt(hs)) v for one query row q (hs) against keys/values at k, v with
// `stride` floats between positions; S keys.
void AttendRow64(double* out, const float* q, const float* k, const float* v, int64_t stride,
                 int64_t S, int64_t hs) {
  std::vector<double> p(static_cast<size_t>(S));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  double max = -INFINITY;
  for (int64_t s = 0; s < S; ++s) {
    double dot = 0.0;
    for (int64_t i = 0; i < hs; ++i) dot += static_cast<double>(q[i]) * k[s * stride + i];
    p[s] = dot * scale;
    max = std::max(max, p[s]);
  }
  double sum = 0.0;
  for (int64_t s = 0; s < S; ++s) sum += (p[s] = std::exp(p[s] - max));
  for (int64_t i = 0; i < hs; ++i) out[i] = 0.0;
  for (int64_t s = 0; s < S; ++s) {
    const double w = p[s] / sum;
    for (int64_t i = 0; i < hs; ++i) out[i] += w * v[s * stride + i];
  }
}

std::vector<double> Attention64(const std::vector<float>& qkv, int64_t B, int64_t T, int64_t D,
                                int64_t NH) {
  const int64_t hs = D / NH, D3 = 3 * D;
  std::vector<double> out(static_cast<size_t>(B * T * D));
  ParallelFor(B * NH * T, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const int64_t t = r % T, h = (r / T) % NH, b = r / (T * NH);
      const float* base = qkv.data() + b * T * D3;
      AttendRow64(out.data() + (b * T + t) * D + h * hs, base + t * D3 + h * hs, base + D + h * hs,
                  base + 2 * D + h * hs, D3, T, hs);
    }
  });
  return out;
}

std::vector<double> AttentionLastQuery64(const std::vector<float>& q, const std::vector<float>& kv,
                                         int64_t B, int64_t T, int64_t D, int64_t NH) {
  const int64_t hs = D / NH, D2 = 2 * D;
  std::vector<double> out(static_cast<size_t>(B * D));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      const float* base = kv.data() + b * T * D2;
      AttendRow64(out.data() + b * D + h * hs, q.data() + b * D + h * hs, base + h * hs,
                  base + D + h * hs, D2, T, hs);
    }
  }
  return out;
}

// Op tolerance: |cuda - ref| <= kAtol + kRtol |ref|.
constexpr double kAtol = 2e-5;
constexpr double kRtol = 2e-5;

// ------------------------------------------------------------------------------------------
// 1. Ops at the models' shapes.

TEST_CASE("ops at the transformer models' shapes: CUDA vs reference (and float64)") {
  std::unique_ptr<CudaBackend> cuda = MakeCuda();
  ReferenceBackend ref;
  DeviceMemory mem;
  uint64_t seed = 100;

  // Linear with bias, (N, IN, OUT) of every projection of both models (B = 1 and 32).
  struct LinearShape {
    int64_t N, IN, OUT;
  };
  for (const LinearShape s :
       {LinearShape{100, 10, 128}, LinearShape{100, 128, 384}, LinearShape{100, 128, 256},
        LinearShape{1, 128, 128}, LinearShape{100, 128, 128}, LinearShape{100, 128, 512},
        LinearShape{100, 512, 128}, LinearShape{1, 128, 10}, LinearShape{3200, 128, 384},
        LinearShape{3200, 512, 128}, LinearShape{512, 10, 768}, LinearShape{512, 768, 2304},
        LinearShape{512, 768, 3072}, LinearShape{512, 3072, 768}, LinearShape{1, 768, 768},
        LinearShape{1, 3072, 768}}) {
    const float bound = 1.0f / std::sqrt(static_cast<float>(s.IN));
    const std::vector<float> x = Normal(s.N * s.IN, ++seed);
    const std::vector<float> w = Uniform(s.OUT * s.IN, ++seed, -bound, bound);
    const std::vector<float> b = Uniform(s.OUT, ++seed, -bound, bound);
    std::vector<float> want(static_cast<size_t>(s.N * s.OUT));
    Ok(RefLinear(want.data(), x.data(), w.data(), b.data(), s.N, s.IN, s.OUT), "ref Linear");
    float* out = mem.Alloc(s.N * s.OUT);
    Ok(cuda->Linear(out, mem.Upload(x), mem.Upload(w), mem.Upload(b), s.N, s.IN, s.OUT),
       "cuda Linear");
    const Err e = Compare(DeviceMemory::Get(out, s.N * s.OUT), want, kAtol, kRtol);
    Record(absl::StrFormat("op Linear N=%d IN=%d OUT=%d (ref, f64 acc)", s.N, s.IN, s.OUT), e);
    CHECK(e.bad == 0);
  }

  // LayerNorm: post-LN inputs are x + sublayer(x), O(1) per element with a per-row offset.
  struct LnShape {
    int64_t N, C;
    float offset, stddev;
  };
  for (const LnShape s :
       {LnShape{100, 128, 0.0f, 1.0f}, LnShape{3200, 128, 3.0f, 1.0f},
        LnShape{3200, 128, 30.0f, 0.5f}, LnShape{1, 128, 3.0f, 1.0f}, LnShape{512, 768, 3.0f, 1.0f},
        LnShape{3200, 768, 3.0f, 1.0f}, LnShape{512, 768, 30.0f, 0.5f}}) {
    std::vector<float> x = Normal(s.N * s.C, ++seed, 0.0f, s.stddev);
    const std::vector<float> row_offset = Normal(s.N, ++seed, s.offset, 0.5f);
    for (int64_t n = 0; n < s.N; ++n) {
      for (int64_t c = 0; c < s.C; ++c) x[n * s.C + c] += row_offset[n];
    }
    const std::vector<float> g = Normal(s.C, ++seed, 1.0f, 0.2f);
    const std::vector<float> b = Normal(s.C, ++seed, 0.0f, 0.2f);
    const float eps = 1e-5f;
    std::vector<float> want(x.size());
    Ok(ref.LayerNorm(want.data(), nullptr, nullptr, x.data(), g.data(), b.data(), s.N, s.C, eps),
       "ref LayerNorm");
    float* out = mem.Alloc(s.N * s.C);
    Ok(cuda->LayerNorm(out, nullptr, nullptr, mem.Upload(x), mem.Upload(g), mem.Upload(b), s.N, s.C,
                       eps),
       "cuda LayerNorm");
    const std::vector<float> got = DeviceMemory::Get(out, s.N * s.C);
    const std::vector<double> truth = LayerNorm64(x, g, b, s.N, s.C, eps);
    const std::string shape =
        absl::StrFormat("N=%d C=%d mean~%.0f std %.1f", s.N, s.C, s.offset, s.stddev);
    const Err e = Compare(got, want, kAtol, kRtol);
    Record("op LayerNorm " + shape + " (ref)", e);
    Record("op LayerNorm " + shape + " cuda vs f64", Compare(got, truth, kAtol, kRtol));
    Record("op LayerNorm " + shape + " ref  vs f64", Compare(want, truth, kAtol, kRtol));
    CHECK(e.bad == 0);
  }

  // GELU (erf and tanh) and ReLU on 100k+ elements: the FF activations, (1..32)*T x d_ff.
  for (const int64_t n : {int64_t{51200}, int64_t{100 * 3072 + 3}, int64_t{512 * 3072}}) {
    const std::vector<float> x = Normal(n, ++seed, 0.0f, 2.0f);
    float* in = mem.Upload(x);
    for (const GeluForm form : {GeluForm::kErf, GeluForm::kTanh}) {
      std::vector<float> want(x.size());
      Ok(ref.Gelu(want.data(), x.data(), n, form), "ref Gelu");
      float* out = mem.Alloc(n);
      Ok(cuda->Gelu(out, in, n, form), "cuda Gelu");
      const Err e = Compare(DeviceMemory::Get(out, n), want, kAtol, kRtol);
      Record(absl::StrFormat("op Gelu %s n=%d (ref)", form == GeluForm::kErf ? "erf" : "tanh", n),
             e);
      CHECK(e.bad == 0);
    }
    std::vector<float> want(x.size());
    Ok(ref.Relu(want.data(), x.data(), n), "ref Relu");
    float* out = mem.Alloc(n);
    Ok(cuda->Relu(out, in, n), "cuda Relu");
    const Err e = Compare(DeviceMemory::Get(out, n), want, 0.0, 0.0);
    Record(absl::StrFormat("op Relu n=%d (ref)", n), e);
    CHECK(e.bad == 0);
    // In place, as the forecaster runs it.
    Ok(cuda->Gelu(in, in, n, GeluForm::kErf), "cuda Gelu in place");
    std::vector<float> want_erf(x.size());
    Ok(ref.Gelu(want_erf.data(), x.data(), n, GeluForm::kErf), "ref Gelu");
    const Err inplace = Compare(DeviceMemory::Get(in, n), want_erf, kAtol, kRtol);
    Record(absl::StrFormat("op Gelu erf in place n=%d (ref)", n), inplace);
    CHECK(inplace.bad == 0);
  }

  // Attention (full, non-causal) and AttentionLastQuery.
  struct AttShape {
    int64_t B, T, D, NH;
    float scale;  // of the q/k/v values: larger gives sharper softmaxes
  };
  for (const AttShape s : {AttShape{1, 100, 128, 8, 1.0f}, AttShape{4, 100, 128, 8, 1.0f},
                           AttShape{1, 100, 128, 8, 3.0f}, AttShape{32, 100, 128, 8, 1.0f},
                           AttShape{1, 512, 768, 12, 1.0f}, AttShape{4, 512, 768, 12, 1.0f},
                           AttShape{1, 512, 768, 12, 2.0f}}) {
    const std::string shape = absl::StrFormat("B=%d T=%d D=%d NH=%d x%.0f", s.B, s.T, s.D, s.NH,
                                              static_cast<double>(s.scale));
    const std::vector<float> qkv = Normal(s.B * s.T * 3 * s.D, ++seed, 0.0f, s.scale);
    std::vector<float> want(static_cast<size_t>(s.B * s.T * s.D));
    Ok(RefAttention(want.data(), qkv.data(), s.B, s.T, s.D, s.NH, false), "ref Attention");
    float* out = mem.Alloc(s.B * s.T * s.D);
    Ok(cuda->Attention(out, nullptr, mem.Upload(qkv), nullptr, s.B, s.T, s.D, s.NH, false),
       "cuda Attention");
    const std::vector<float> got = DeviceMemory::Get(out, s.B * s.T * s.D);
    const std::vector<double> truth = Attention64(qkv, s.B, s.T, s.D, s.NH);
    const Err e = Compare(got, want, kAtol, kRtol);
    Record("op Attention " + shape + " (ref)", e);
    Record("op Attention " + shape + " cuda vs f64", Compare(got, truth, kAtol, kRtol));
    Record("op Attention " + shape + " ref  vs f64", Compare(want, truth, kAtol, kRtol));
    CHECK(e.bad == 0);

    // The last query against the same keys and values.
    std::vector<float> q(static_cast<size_t>(s.B * s.D));
    std::vector<float> kv(static_cast<size_t>(s.B * s.T * 2 * s.D));
    for (int64_t b = 0; b < s.B; ++b) {
      for (int64_t c = 0; c < s.D; ++c) {
        q[b * s.D + c] = qkv[(b * s.T + s.T - 1) * 3 * s.D + c];
      }
      for (int64_t t = 0; t < s.T; ++t) {
        for (int64_t c = 0; c < 2 * s.D; ++c) {
          kv[(b * s.T + t) * 2 * s.D + c] = qkv[(b * s.T + t) * 3 * s.D + s.D + c];
        }
      }
    }
    std::vector<float> want_last(static_cast<size_t>(s.B * s.D));
    Ok(ref.AttentionLastQuery(want_last.data(), q.data(), kv.data(), s.B, s.T, s.D, s.NH),
       "ref AttentionLastQuery");
    float* out_last = mem.Alloc(s.B * s.D);
    Ok(cuda->AttentionLastQuery(out_last, mem.Upload(q), mem.Upload(kv), s.B, s.T, s.D, s.NH),
       "cuda AttentionLastQuery");
    const std::vector<float> got_last = DeviceMemory::Get(out_last, s.B * s.D);
    const std::vector<double> truth_last = AttentionLastQuery64(q, kv, s.B, s.T, s.D, s.NH);
    const Err el = Compare(got_last, want_last, kAtol, kRtol);
    Record("op AttentionLastQuery " + shape + " (ref)", el);
    Record("op AttentionLastQuery " + shape + " cuda vs f64",
           Compare(got_last, truth_last, kAtol, kRtol));
    // The last query must also agree with the full attention's last row (both on the GPU).
    std::vector<float> full_last(static_cast<size_t>(s.B * s.D));
    for (int64_t b = 0; b < s.B; ++b) {
      std::copy(got.begin() + (b * s.T + s.T - 1) * s.D, got.begin() + (b * s.T + s.T) * s.D,
                full_last.begin() + b * s.D);
    }
    Record("op AttentionLastQuery " + shape + " vs cuda full last row",
           Compare(got_last, full_last, kAtol, kRtol));
    CHECK(el.bad == 0);
  }

  // Residual.
  for (const int64_t n : {int64_t{12800}, int64_t{393216 + 1}}) {
    const std::vector<float> a = Normal(n, ++seed), b = Normal(n, ++seed);
    std::vector<float> want(a.size());
    Ok(ref.Residual(want.data(), a.data(), b.data(), n), "ref Residual");
    float* out = mem.Alloc(n);
    Ok(cuda->Residual(out, mem.Upload(a), mem.Upload(b), n), "cuda Residual");
    const Err e = Compare(DeviceMemory::Get(out, n), want, 0.0, 0.0);
    Record(absl::StrFormat("op Residual n=%d (ref, exact)", n), e);
    CHECK(e.bad == 0);
  }

  // Positional encoding, in place as the forecaster runs it.
  struct PeShape {
    int64_t B, T, D;
  };
  for (const PeShape s : {PeShape{1, 100, 128}, PeShape{4, 100, 128}, PeShape{1, 512, 768},
                          PeShape{4, 512, 768}, PeShape{1, 512, 128}, PeShape{1, 100, 768}}) {
    const std::vector<float> x = Normal(s.B * s.T * s.D, ++seed);
    std::vector<float> want(x.size());
    Ok(ref.PositionalEncoding(want.data(), x.data(), s.B, s.T, s.D), "ref PositionalEncoding");
    float* io = mem.Upload(x);
    Ok(cuda->PositionalEncoding(io, io, s.B, s.T, s.D), "cuda PositionalEncoding");
    const Err e = Compare(DeviceMemory::Get(io, s.B * s.T * s.D), want, 1e-6, 1e-6);
    Record(absl::StrFormat("op PositionalEncoding B=%d T=%d D=%d (ref)", s.B, s.T, s.D), e);
    CHECK(e.bad == 0);
  }
}

// ------------------------------------------------------------------------------------------
// 2. The encoder op by op on both backends.

// A tensor held three ways: the reference chain's value, the CUDA chain's device buffer, and
// (for one step) a host copy of the CUDA value, which the reference op runs on to measure that
// op's own error.
struct Dual {
  std::string name;
  int64_t n = 0;
  bool weight = false;
  std::vector<float> ref;
  std::vector<float> local;
  float* dev = nullptr;
};

struct Ctx {
  Backend& backend;
  bool is_ref;
  std::function<float*(Dual*)> p;
};

class Chain {
 public:
  Chain(CudaBackend& cuda, std::string label) : cuda_(cuda), label_(std::move(label)) {}

  Dual* Weight(const std::string& name, const float* host, int64_t n) {
    Dual* d = New(name, n);
    d->weight = true;
    d->ref.assign(host, host + n);
    d->dev = mem_.Upload(d->ref);
    return d;
  }
  Dual* Input(const std::string& name, std::vector<float> host) {
    Dual* d = New(name, static_cast<int64_t>(host.size()));
    d->ref = std::move(host);
    d->dev = mem_.Upload(d->ref);
    return d;
  }
  Dual* Buffer(const std::string& name, int64_t n) {
    Dual* d = New(name, n);
    d->ref.assign(static_cast<size_t>(n), 0.0f);
    d->dev = mem_.Upload(d->ref);
    return d;
  }

  // Runs `op` on the CUDA chain, on the reference chain, and on the reference backend with
  // the CUDA chain's current values of `touched` (every non-weight tensor the op reads or
  // writes); records `out`'s local and accumulated errors.
  Err Step(const std::string& step, Dual* out, std::initializer_list<Dual*> touched,
           const std::function<absl::Status(const Ctx&)>& op) {
    for (Dual* t : touched) {
      if (!t->weight) t->local = DeviceMemory::Get(t->dev, t->n);
    }
    Ok(op(Ctx{cuda_, false, [](Dual* t) { return t->dev; }}), label_ + " cuda " + step);
    Ok(cuda_.Synchronize(), label_ + " cuda sync " + step);
    Ok(op(Ctx{ref_, true, [](Dual* t) { return t->weight ? t->ref.data() : t->local.data(); }}),
       label_ + " ref(local) " + step);
    Ok(op(Ctx{ref_, true, [](Dual* t) { return t->ref.data(); }}), label_ + " ref " + step);
    const std::vector<float> got = DeviceMemory::Get(out->dev, out->n);
    const Err local = Compare(got, out->local, kAtol, kRtol);
    const Err acc = Compare(got, out->ref, kAtol, kRtol);
    Record(absl::StrCat("chain ", label_, " ", step, " LOCAL"), local);
    Record(absl::StrCat("chain ", label_, " ", step, " ACCUM"), acc);
    for (Dual* t : touched) {
      if (!t->weight) std::vector<float>().swap(t->local);
    }
    return acc;
  }

 private:
  Dual* New(const std::string& name, int64_t n) {
    tensors_.push_back(std::make_unique<Dual>());
    Dual* d = tensors_.back().get();
    d->name = name;
    d->n = n;
    return d;
  }

  CudaBackend& cuda_;
  ReferenceBackend ref_;
  std::string label_;
  DeviceMemory mem_;
  std::vector<std::unique_ptr<Dual>> tensors_;
};

absl::Status ChainLinear(const Ctx& c, Dual* out, Dual* in, Dual* w, Dual* b, int64_t N, int64_t IN,
                         int64_t OUT) {
  if (c.is_ref) return RefLinear(c.p(out), c.p(in), c.p(w), c.p(b), N, IN, OUT);
  return c.backend.Linear(c.p(out), c.p(in), c.p(w), c.p(b), N, IN, OUT);
}

struct TfShape {
  std::string name;
  int T, D, NH, L, FF;
  bool norm_first;
  bool relu;
};

std::string TransformerJson(const TfShape& s) {
  std::string features;
  for (int f = 0; f < 10; ++f) absl::StrAppend(&features, f == 0 ? "" : ",", "\"f", f, "\"");
  return absl::StrCat(
      R"({"name":")", s.name, R"(","lookback":)", s.T, R"(,"horizon":10,"featureNames":[)",
      features, R"(],"targetNames":["f0"],"transformer":{"dModel":)", s.D, R"(,"numHeads":)", s.NH,
      R"(,"numLayers":)", s.L, R"(,"dimFeedforward":)", s.FF, R"(,"activation":")",
      s.relu ? "ACTIVATION_RELU" : "ACTIVATION_GELU", R"(","normFirst":)",
      s.norm_first ? "true" : "false",
      R"(,"dropout":0.0,"causal":false},"normalization":"NORMALIZATION_STANDARD"})");
}

std::unique_ptr<Forecaster> MakeModel(const std::string& json, uint64_t seed) {
  absl::StatusOr<ModelConfig> config = ParseModelConfigJson(json);
  INFO(json);
  Ok(config.status(), "ParseModelConfigJson");
  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(*config);
  Ok(model.status(), "Forecaster::Create");
  InitializeParameters(**model, seed);
  // Non-trivial normaliser statistics, so standardising is exercised too.
  ParameterArena& p = (*model)->parameters();
  if (p.Find("normalizer.mean").ok()) {
    const int F = (*model)->num_features();
    const std::vector<float> mean = Normal(F, seed + 1, 0.0f, 2.0f);
    const std::vector<float> sd = Uniform(F, seed + 2, 0.5f, 2.0f);
    std::copy(mean.begin(), mean.end(), p.at("normalizer.mean"));
    std::copy(sd.begin(), sd.end(), p.at("normalizer.std"));
  }
  return std::move(*model);
}

// The encoder of `model` over all T positions for every layer (the forecaster's last-layer
// shortcut is left out: part 3 covers it), then the head on every position.
void RunChain(const TfShape& s, const Forecaster& model, int64_t B, uint64_t seed) {
  std::unique_ptr<CudaBackend> cuda = MakeCuda();
  const std::string label = absl::StrFormat("%s B=%d", s.name, B);
  std::printf("\n[forecaster_gpu_test] ---- chain %s: T=%d D=%d NH=%d L=%d FF=%d %s %s ----\n",
              label.c_str(), s.T, s.D, s.NH, s.L, s.FF, s.norm_first ? "pre-LN" : "post-LN",
              s.relu ? "ReLU" : "GELU-erf");
  Chain chain(*cuda, label);
  const ParameterArena& arena = model.parameters();
  const auto W = [&](const std::string& name) {
    absl::StatusOr<const ParameterSpec*> spec = arena.Find(name);
    Ok(spec.status(), name);
    return chain.Weight(name, arena.at(name), (*spec)->numel);
  };
  const auto L = [](int k, const char* rest) {
    return absl::StrCat("encoder.layers.", k, ".", rest);
  };
  const int64_t T = s.T, D = s.D, NH = s.NH, FF = s.FF, F = 10, BT = B * T;
  const float eps = LayerNormEps(model.config().transformer());

  Dual* xin = chain.Input("xn", Normal(BT * F, seed));
  Dual* x = chain.Buffer("x", BT * D);
  Dual* h = chain.Buffer("h", BT * D);
  Dual* tmp = chain.Buffer("tmp", BT * D);
  Dual* qkv = chain.Buffer("qkv", BT * 3 * D);
  Dual* att = chain.Buffer("att", BT * D);
  Dual* sa = chain.Buffer("sa", BT * D);
  Dual* ff = chain.Buffer("ff", BT * FF);
  Dual* ipw = W("input_proj.weight");
  Dual* ipb = W("input_proj.bias");
  chain.Step("input_proj", x, {x, xin},
             [&](const Ctx& c) { return ChainLinear(c, x, xin, ipw, ipb, BT, F, D); });
  chain.Step("pos_enc", x, {x},
             [&](const Ctx& c) { return c.backend.PositionalEncoding(c.p(x), c.p(x), B, T, D); });
  const auto layer_norm = [&](const std::string& step, Dual* out, Dual* in, Dual* g, Dual* b) {
    chain.Step(step, out, {out, in}, [&](const Ctx& c) {
      return c.backend.LayerNorm(c.p(out), nullptr, nullptr, c.p(in), c.p(g), c.p(b), BT, D, eps);
    });
  };
  const auto residual = [&](const std::string& step, Dual* out, Dual* a, Dual* b) {
    chain.Step(step, out, {out, a, b},
               [&](const Ctx& c) { return c.backend.Residual(c.p(out), c.p(a), c.p(b), BT * D); });
  };
  for (int k = 0; k < s.L; ++k) {
    const std::string p = absl::StrCat("L", k, ".");
    Dual* n1w = W(L(k, "norm1.weight"));
    Dual* n1b = W(L(k, "norm1.bias"));
    Dual* n2w = W(L(k, "norm2.weight"));
    Dual* n2b = W(L(k, "norm2.bias"));
    Dual* in_w = W(L(k, "self_attn.in_proj_weight"));
    Dual* in_b = W(L(k, "self_attn.in_proj_bias"));
    Dual* out_w = W(L(k, "self_attn.out_proj.weight"));
    Dual* out_b = W(L(k, "self_attn.out_proj.bias"));
    Dual* l1w = W(L(k, "linear1.weight"));
    Dual* l1b = W(L(k, "linear1.bias"));
    Dual* l2w = W(L(k, "linear2.weight"));
    Dual* l2b = W(L(k, "linear2.bias"));
    Dual* sa_in = x;
    if (s.norm_first) {
      layer_norm(p + "norm1(pre)", h, x, n1w, n1b);
      sa_in = h;
    }
    chain.Step(p + "in_proj(qkv)", qkv, {qkv, sa_in},
               [&](const Ctx& c) { return ChainLinear(c, qkv, sa_in, in_w, in_b, BT, D, 3 * D); });
    chain.Step(p + "attention", att, {att, qkv}, [&](const Ctx& c) {
      if (c.is_ref) return RefAttention(c.p(att), c.p(qkv), B, T, D, NH, false);
      return c.backend.Attention(c.p(att), nullptr, c.p(qkv), nullptr, B, T, D, NH, false);
    });
    chain.Step(p + "out_proj", sa, {sa, att},
               [&](const Ctx& c) { return ChainLinear(c, sa, att, out_w, out_b, BT, D, D); });
    if (s.norm_first) {
      residual(p + "residual1", x, x, sa);
      layer_norm(p + "norm2(pre)", h, x, n2w, n2b);
    } else {
      residual(p + "residual1", tmp, x, sa);
      layer_norm(p + "norm1(post)", x, tmp, n1w, n1b);
    }
    Dual* ff_in = s.norm_first ? h : x;
    chain.Step(p + "linear1", ff, {ff, ff_in},
               [&](const Ctx& c) { return ChainLinear(c, ff, ff_in, l1w, l1b, BT, D, FF); });
    chain.Step(p + (s.relu ? "relu" : "gelu_erf"), ff, {ff}, [&](const Ctx& c) {
      return s.relu ? c.backend.Relu(c.p(ff), c.p(ff), BT * FF)
                    : c.backend.Gelu(c.p(ff), c.p(ff), BT * FF, GeluForm::kErf);
    });
    chain.Step(p + "linear2", sa, {sa, ff},
               [&](const Ctx& c) { return ChainLinear(c, sa, ff, l2w, l2b, BT, FF, D); });
    if (s.norm_first) {
      residual(p + "residual2", x, x, sa);
    } else {
      residual(p + "residual2", tmp, x, sa);
      layer_norm(p + "norm2(post)", x, tmp, n2w, n2b);
    }
  }
  Dual* head_in = x;
  if (s.norm_first) {
    layer_norm("final_norm", h, x, W("encoder.norm.weight"), W("encoder.norm.bias"));
    head_in = h;
  }
  Dual* hw = W("head.weight");
  Dual* hb = W("head.bias");
  const int64_t P = model.num_outputs();
  Dual* y = chain.Buffer("y", BT * P);
  const Err e = chain.Step("head(all positions)", y, {y, head_in}, [&](const Ctx& c) {
    return ChainLinear(c, y, head_in, hw, hb, BT, D, P);
  });
  CHECK(e.nrel < 1e-4);
}

// ------------------------------------------------------------------------------------------
// 3. Forecaster::Forward end to end.

// The forecast of `model` for `input` (B, T, F) on a CudaBackend (device weights, workspace and
// data ops) and on the reference backend; records and returns the CUDA forecast's error.
Err CompareForecaster(const std::string& label, const Forecaster& model, int64_t B, uint64_t seed) {
  const int64_t T = model.lookback(), F = model.num_features();
  const int64_t outs = B * model.num_outputs();
  std::vector<float> input = Normal(B * T * F, seed);
  // Raw windows around the normaliser's statistics.
  const ParameterArena& arena = model.parameters();
  if (arena.Find("normalizer.mean").ok()) {
    const float* mean = arena.at("normalizer.mean");
    const float* sd = arena.at("normalizer.std");
    for (int64_t i = 0; i < B * T; ++i) {
      for (int64_t f = 0; f < F; ++f) input[i * F + f] = input[i * F + f] * sd[f] + mean[f];
    }
  }

  ReferenceBackend ref;
  std::vector<float> want(static_cast<size_t>(outs));
  Workspace host_workspace;
  Ok(host_workspace.Reserve(model.WorkspaceFloats(B)), "Reserve");
  Ok(model.Forward(ref, want.data(), input.data(), B, host_workspace), label + " ref Forward");

  std::unique_ptr<CudaBackend> cuda = MakeCuda();
  DeviceMemory mem;
  std::vector<float> weights_host(arena.data(), arena.data() + arena.size());
  float* weights = mem.Upload(weights_host);
  float* inp = mem.Upload(input);
  float* out = mem.Alloc(outs);
  const int64_t ws_floats = model.WorkspaceFloats(B);
  Workspace workspace(mem.Alloc(ws_floats), ws_floats);
  CudaDataOps data(cuda->stream());
  const ForwardPlacement placement{weights, &data};
  Ok(model.Forward(*cuda, out, inp, B, workspace, placement), label + " cuda Forward");
  Ok(cuda->Synchronize(), label + " cuda Synchronize");
  const std::vector<float> got = DeviceMemory::Get(out, outs);
  // Run twice: the GPU result must be deterministic.
  workspace.Reset();
  Ok(model.Forward(*cuda, out, inp, B, workspace, placement), label + " cuda Forward again");
  Ok(cuda->Synchronize(), label + " cuda Synchronize");
  const Err again = Compare(DeviceMemory::Get(out, outs), got, 0.0, 0.0);
  if (again.abs != 0.0)
    Record("forecaster " + label + " cuda run-to-run (NONDETERMINISTIC)", again);

  const Err e = Compare(got, want, 1e-5, 1e-4);
  double max_ref = 0.0;
  for (const float v : want) max_ref = std::max(max_ref, static_cast<double>(std::abs(v)));
  std::printf(
      "[forecaster_gpu_test] forecaster %s: max |ref| %.4g, worst at %lld: cuda %.8g ref %.8g\n",
      label.c_str(), max_ref, static_cast<long long>(e.worst),
      e.worst >= 0 ? static_cast<double>(got[static_cast<size_t>(e.worst)]) : 0.0,
      e.worst >= 0 ? static_cast<double>(want[static_cast<size_t>(e.worst)]) : 0.0);
  Record("forecaster " + label, e);
  return e;
}

// Copies every parameter of `from` that `to` declares too (same name and size).
void ShareWeights(const Forecaster& from, Forecaster& to) {
  for (const ParameterSpec& spec : to.parameters().specs()) {
    absl::StatusOr<const ParameterSpec*> src = from.parameters().Find(spec.name);
    if (!src.ok() || (*src)->numel != spec.numel) continue;
    const float* s = from.parameters().at(spec.name);
    std::copy(s, s + spec.numel, to.parameters().at(spec.name));
  }
}

TEST_CASE("transformer_small, op by op: where the error enters") {
  // The bench model (post-LN, GELU), then pre-LN and ReLU variants with the same weights.
  for (const TfShape& s : {TfShape{"small_postLN_gelu", 100, 128, 8, 3, 512, false, false},
                           TfShape{"small_preLN_gelu", 100, 128, 8, 3, 512, true, false},
                           TfShape{"small_postLN_relu", 100, 128, 8, 3, 512, false, true}}) {
    std::unique_ptr<Forecaster> model = MakeModel(TransformerJson(s), 7);
    RunChain(s, *model, 1, 11);
  }
  const TfShape s4{"small_postLN_gelu", 100, 128, 8, 3, 512, false, false};
  RunChain(s4, *MakeModel(TransformerJson(s4), 7), 4, 12);
}

TEST_CASE("transformer_large (L=2), op by op") {
  const TfShape s{"large_L2_postLN_gelu", 512, 768, 12, 2, 3072, false, false};
  RunChain(s, *MakeModel(TransformerJson(s), 8), 1, 13);
}

TEST_CASE("transformer forecasters end to end: CUDA vs reference") {
  std::printf("\n[forecaster_gpu_test] ---- forecasters end to end ----\n");
  // transformer_small with L = 1, 2, 3 sharing the first layers' weights: the error per layer.
  const TfShape s3{"small", 100, 128, 8, 3, 512, false, false};
  std::unique_ptr<Forecaster> small3 = MakeModel(TransformerJson(s3), 21);
  for (int L = 1; L <= 3; ++L) {
    TfShape s = s3;
    s.L = L;
    std::unique_ptr<Forecaster> model = MakeModel(TransformerJson(s), 21);
    ShareWeights(*small3, *model);
    for (const int64_t B : {int64_t{1}, int64_t{4}}) {
      const Err e =
          CompareForecaster(absl::StrFormat("small postLN gelu L=%d B=%d", L, B), *model, B, 31);
      CHECK(e.bad == 0);
    }
  }
  // Variants at L = 3: pre-LN, ReLU, both.
  for (const auto& [norm_first, relu] :
       {std::pair{true, false}, std::pair{false, true}, std::pair{true, true}}) {
    TfShape s = s3;
    s.norm_first = norm_first;
    s.relu = relu;
    std::unique_ptr<Forecaster> model = MakeModel(TransformerJson(s), 21);
    ShareWeights(*small3, *model);
    const Err e =
        CompareForecaster(absl::StrFormat("small %s %s L=3 B=1", norm_first ? "preLN" : "postLN",
                                          relu ? "relu" : "gelu"),
                          *model, 1, 31);
    CHECK(e.bad == 0);
  }
  // transformer_large's layer shape, L = 2 to keep the reference quick.
  const TfShape large{"large", 512, 768, 12, 2, 3072, false, false};
  const Err e =
      CompareForecaster("large postLN gelu L=2 B=1", *MakeModel(TransformerJson(large), 22), 1, 32);
  CHECK(e.bad == 0);
}

TEST_CASE("LSTM control: lstm_h128_l2 end to end") {
  std::string features;
  for (int f = 0; f < 10; ++f) absl::StrAppend(&features, f == 0 ? "" : ",", "\"f", f, "\"");
  const std::string json = absl::StrCat(
      R"({"name":"lstm_h128_l2","lookback":100,"horizon":10,"featureNames":[)", features,
      R"(],"targetNames":["f0"],"lstm":{"hiddenSize":128,"numLayers":2,"bidirectional":false,)",
      R"("dropout":0.0},"normalization":"NORMALIZATION_STANDARD"})");
  std::unique_ptr<Forecaster> model = MakeModel(json, 41);
  for (const int64_t B : {int64_t{1}, int64_t{4}}) {
    const Err e =
        CompareForecaster(absl::StrFormat("lstm_h128_l2 B=%d (control)", B), *model, B, 51);
    CHECK(e.bad == 0);
  }
}

}  // namespace
}  // namespace forecastd
