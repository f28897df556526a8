#include "backends/cpu/recurrent_avx2.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "backends/cpu/cpu_helpers.h"
#include "kernels/base/status.h"
#include "oneapi/dnnl/dnnl.hpp"

// Only the functions marked FD_AVX2 use AVX2 / FMA; the rest of the file (and every inline
// function of the headers it includes) is built for the baseline CPU, so nothing here can
// leak AVX2 code into a caller on a CPU without it.
#define FD_AVX2 __attribute__((target("avx2,fma")))

namespace forecastd::cpu {
namespace {

// ---- Vector math. exp is Cephes' expf scheme: 2^n * p(r) with r = x - n ln2 split in two
// parts, a degree-6 polynomial; relative error about 2e-7 over the clamped range.

FD_AVX2 inline __m256 Exp(__m256 x) {
  x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(-87.3f)), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  x = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), x);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, x, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(x, x), x);
  p = _mm256_add_ps(p, _mm256_set1_ps(1.0f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

// 1 / d by the 12-bit reciprocal estimate and one Newton step (relative error ~1e-7),
// several times the throughput of a division.
FD_AVX2 inline __m256 Reciprocal(__m256 d) {
  const __m256 r = _mm256_rcp_ps(d);
  return _mm256_mul_ps(r, _mm256_fnmadd_ps(d, r, _mm256_set1_ps(2.0f)));
}

FD_AVX2 inline __m256 Sigmoid(__m256 x) {
  return Reciprocal(
      _mm256_add_ps(_mm256_set1_ps(1.0f), Exp(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}

// tanh(x) = 2 sigmoid(2x) - 1: absolute error a few 1e-8, which is what the state carries.
FD_AVX2 inline __m256 Tanh(__m256 x) {
  const __m256 s = Sigmoid(_mm256_add_ps(x, x));
  return _mm256_sub_ps(_mm256_add_ps(s, s), _mm256_set1_ps(1.0f));
}

FD_AVX2 inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The eight sums of a[0..7], as one vector.
FD_AVX2 inline __m256 HorizontalSums8(const __m256* a) {
  const __m256 s01 = _mm256_hadd_ps(a[0], a[1]), s23 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 s45 = _mm256_hadd_ps(a[4], a[5]), s67 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 s0123 = _mm256_hadd_ps(s01, s23), s4567 = _mm256_hadd_ps(s45, s67);
  return _mm256_add_ps(_mm256_permute2f128_ps(s0123, s4567, 0x20),
                       _mm256_permute2f128_ps(s0123, s4567, 0x31));
}

// Lanes [0, n) on, for the tail of a row of length n mod 8.
FD_AVX2 inline __m256i TailMask(int64_t n) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(static_cast<int>(n)), lanes);
}

// ---- y[b][j] = W[j, :] . h[b] for NR rows j starting at j0 and NB batch rows b: dot products
// along the contiguous rows of PyTorch's W_hh, NB*NR accumulators, reduced at the end.
template <int NB, int NR>
FD_AVX2 inline void DotTile(const float* w, int64_t K, const float* const* h, float* const* y,
                            int64_t j0) {
  __m256 acc[NB][NR];
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) acc[b][r] = _mm256_setzero_ps();
  }
  const float* row = w + j0 * K;
  int64_t k = 0;
  for (; k + 8 <= K; k += 8) {
    __m256 wv[NR];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_loadu_ps(row + r * K + k);
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const __m256 hv = _mm256_loadu_ps(h[b] + k);
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) acc[b][r] = _mm256_fmadd_ps(wv[r], hv, acc[b][r]);
    }
  }
  if (k < K) {
    const __m256i mask = TailMask(K - k);
    __m256 wv[NR];
#pragma GCC unroll 16
    for (int r = 0; r < NR; ++r) wv[r] = _mm256_maskload_ps(row + r * K + k, mask);
#pragma GCC unroll 16
    for (int b = 0; b < NB; ++b) {
      const __m256 hv = _mm256_maskload_ps(h[b] + k, mask);
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) acc[b][r] = _mm256_fmadd_ps(wv[r], hv, acc[b][r]);
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < NB; ++b) {
    if constexpr (NR == 8) {
      _mm256_storeu_ps(y[b] + j0, HorizontalSums8(acc[b]));
    } else {
#pragma GCC unroll 16
      for (int r = 0; r < NR; ++r) y[b][j0 + r] = HorizontalSum(acc[b][r]);
    }
  }
}

// Rows [0, rows) for NB batch rows: tiles of NR, then single rows.
template <int NB, int NR>
FD_AVX2 void MatVecRows(const float* w, int64_t rows, int64_t K, const float* const* h,
                        float* const* y) {
  int64_t j = 0;
  for (; j + NR <= rows; j += NR) DotTile<NB, NR>(w, K, h, y, j);
  for (; j < rows; ++j) DotTile<NB, 1>(w, K, h, y, j);
}

// y[b] = W h[b] for nb batch rows, four at a time.
FD_AVX2 void MatVec(const float* w, int64_t rows, int64_t K, const float* const* h, float* const* y,
                    int64_t nb) {
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) MatVecRows<4, 3>(w, rows, K, h + b, y + b);
  switch (nb - b) {
    case 3:
      MatVecRows<3, 3>(w, rows, K, h + b, y + b);
      break;
    case 2:
      MatVecRows<2, 4>(w, rows, K, h + b, y + b);
      break;
    case 1:
      MatVecRows<1, 8>(w, rows, K, h + b, y + b);
      break;
    default:
      break;
  }
}

// ---- The batched path: W_hh^T packed into panels of 8 columns, Wp[p][k][c] = W[8p + c][k]
// (zero past the G*H rows), so that y[b][8p..8p+7] is a sum over k of h[b][k] times one
// contiguous vector: broadcasts and FMAs into MB x NJ accumulators, no horizontal sums.

constexpr int64_t kPanel = 8;

int64_t NumPanels(int64_t rows) { return (rows + kPanel - 1) / kPanel; }

// Packs `rows` x K row-major W into NumPanels(rows) panels of K x 8 at `wp`.
void PackPanels(const float* w, int64_t rows, int64_t K, float* wp) {
  for (int64_t p = 0; p < NumPanels(rows); ++p) {
    float* panel = wp + p * K * kPanel;
    for (int64_t c = 0; c < kPanel; ++c) {
      const int64_t j = p * kPanel + c;
      for (int64_t k = 0; k < K; ++k) panel[k * kPanel + c] = j < rows ? w[j * K + k] : 0.0f;
    }
  }
}

// y[b][8p0 .. 8(p0 + NJ)) for MB batch rows.
template <int MB, int NJ>
FD_AVX2 inline void PanelTile(const float* wp, int64_t K, const float* const* h, float* const* y,
                              int64_t p0) {
  // The unroll pragmas keep every accumulator in a register: without them GCC 12 writes the
  // array back to the stack on every k.
  __m256 acc[MB][NJ];
#pragma GCC unroll 16
  for (int b = 0; b < MB; ++b) {
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) acc[b][j] = _mm256_setzero_ps();
  }
  const float* panel = wp + p0 * K * kPanel;
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[NJ];
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) wv[j] = _mm256_loadu_ps(panel + (j * K + k) * kPanel);
#pragma GCC unroll 16
    for (int b = 0; b < MB; ++b) {
      const __m256 hv = _mm256_broadcast_ss(h[b] + k);
#pragma GCC unroll 16
      for (int j = 0; j < NJ; ++j) acc[b][j] = _mm256_fmadd_ps(wv[j], hv, acc[b][j]);
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < MB; ++b) {
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) _mm256_storeu_ps(y[b] + (p0 + j) * kPanel, acc[b][j]);
  }
}

// All panels for MB batch rows: NJ at a time, then one at a time.
template <int MB, int NJ>
FD_AVX2 void PanelRows(const float* wp, int64_t panels, int64_t K, const float* const* h,
                       float* const* y) {
  int64_t p = 0;
  for (; p + NJ <= panels; p += NJ) PanelTile<MB, NJ>(wp, K, h, y, p);
  for (; p < panels; ++p) PanelTile<MB, 1>(wp, K, h, y, p);
}

// y[b] = W h[b] (8 * panels values, the padding included) for nb batch rows, four at a time;
// 12 accumulators per tile whatever the rows, so that a few rows still keep the FMA units busy.
FD_AVX2 void PanelMatVec(const float* wp, int64_t panels, int64_t K, const float* const* h,
                         float* const* y, int64_t nb) {
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) PanelRows<4, 3>(wp, panels, K, h + b, y + b);
  switch (nb - b) {
    case 3:
      PanelRows<3, 4>(wp, panels, K, h + b, y + b);
      break;
    case 2:
      PanelRows<2, 6>(wp, panels, K, h + b, y + b);
      break;
    case 1:
      PanelRows<1, 12>(wp, panels, K, h + b, y + b);
      break;
    default:
      break;
  }
}

// ---- The same on AVX-512 (where the CPU has it): panels of 16 columns, 16-float vectors, so
// half the FMAs for the same products and twice the accumulators in registers.
#define FD_AVX512 __attribute__((target("avx512f,avx512vl,avx2,fma")))

constexpr int64_t kPanel16 = 16;

int64_t NumPanels16(int64_t rows) { return (rows + kPanel16 - 1) / kPanel16; }

void PackPanels16(const float* w, int64_t rows, int64_t K, float* wp) {
  for (int64_t p = 0; p < NumPanels16(rows); ++p) {
    float* panel = wp + p * K * kPanel16;
    for (int64_t c = 0; c < kPanel16; ++c) {
      const int64_t j = p * kPanel16 + c;
      for (int64_t k = 0; k < K; ++k) panel[k * kPanel16 + c] = j < rows ? w[j * K + k] : 0.0f;
    }
  }
}

template <int MB, int NJ>
FD_AVX512 inline void PanelTile16(const float* wp, int64_t K, const float* const* h,
                                  float* const* y, int64_t p0) {
  __m512 acc[MB][NJ];
#pragma GCC unroll 16
  for (int b = 0; b < MB; ++b) {
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) acc[b][j] = _mm512_setzero_ps();
  }
  const float* panel = wp + p0 * K * kPanel16;
  for (int64_t k = 0; k < K; ++k) {
    __m512 wv[NJ];
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) wv[j] = _mm512_loadu_ps(panel + (j * K + k) * kPanel16);
#pragma GCC unroll 16
    for (int b = 0; b < MB; ++b) {
      const __m512 hv = _mm512_set1_ps(h[b][k]);
#pragma GCC unroll 16
      for (int j = 0; j < NJ; ++j) acc[b][j] = _mm512_fmadd_ps(wv[j], hv, acc[b][j]);
    }
  }
#pragma GCC unroll 16
  for (int b = 0; b < MB; ++b) {
#pragma GCC unroll 16
    for (int j = 0; j < NJ; ++j) _mm512_storeu_ps(y[b] + (p0 + j) * kPanel16, acc[b][j]);
  }
}

template <int MB, int NJ>
FD_AVX512 void PanelRows16(const float* wp, int64_t panels, int64_t K, const float* const* h,
                           float* const* y) {
  int64_t p = 0;
  for (; p + NJ <= panels; p += NJ) PanelTile16<MB, NJ>(wp, K, h, y, p);
  for (; p < panels; ++p) PanelTile16<MB, 1>(wp, K, h, y, p);
}

// PanelMatVec on panels of 16: 16 (or 12) accumulators per tile.
FD_AVX512 __attribute__((noinline)) void PanelMatVec16(const float* wp, int64_t panels, int64_t K,
                                                       const float* const* h, float* const* y,
                                                       int64_t nb) {
  int64_t b = 0;
  for (; b + 4 <= nb; b += 4) PanelRows16<4, 4>(wp, panels, K, h + b, y + b);
  switch (nb - b) {
    case 3:
      PanelRows16<3, 4>(wp, panels, K, h + b, y + b);
      break;
    case 2:
      PanelRows16<2, 6>(wp, panels, K, h + b, y + b);
      break;
    case 1:
      PanelRows16<1, 12>(wp, panels, K, h + b, y + b);
      break;
    default:
      break;
  }
}

bool HasAvx512() {
  // The CPU has it, and oneDNN may use it: ONEDNN_MAX_CPU_ISA=AVX2 caps these loops as it caps
  // oneDNN's own kernels. (oneDNN's ISA values are sets of feature bits.)
  static const bool has = [] {
    const auto bits = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
    const auto avx512 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core);
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl") &&
           (bits & avx512) == avx512;
  }();
  return has;
}

// ---- Gates of one batch row for hidden units [0, n), 8 at a time with the tail masked.
// gx holds gate g of unit j at gx[g * gx_stride + j], gh at gh[g * gh_stride + j].

struct Lanes {
  __m256i mask;
  bool full;
};

FD_AVX2 inline __m256 Load(const float* p, const Lanes& l) {
  return l.full ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, l.mask);
}
FD_AVX2 inline void Store(float* p, __m256 v, const Lanes& l) {
  if (l.full) {
    _mm256_storeu_ps(p, v);
  } else {
    _mm256_maskstore_ps(p, l.mask, v);
  }
}

// LSTM gates i, f, g, o; c' from c_in into c_out (the same memory: in place); h written. With
// kKeep, the activated gates also go to act (4 rows of n, n apart), for a training backward.
template <bool kKeep = false>
FD_AVX2 void LstmCell(const float* gx, int64_t gx_stride, const float* gh, int64_t gh_stride,
                      const float* c_in, float* c_out, float* h, int64_t n, float* act = nullptr) {
  for (int64_t j = 0; j < n; j += 8) {
    const Lanes l{TailMask(n - j), j + 8 <= n};
    const __m256 i = Sigmoid(_mm256_add_ps(Load(gx + j, l), Load(gh + j, l)));
    const __m256 f =
        Sigmoid(_mm256_add_ps(Load(gx + gx_stride + j, l), Load(gh + gh_stride + j, l)));
    const __m256 g =
        Tanh(_mm256_add_ps(Load(gx + 2 * gx_stride + j, l), Load(gh + 2 * gh_stride + j, l)));
    const __m256 o =
        Sigmoid(_mm256_add_ps(Load(gx + 3 * gx_stride + j, l), Load(gh + 3 * gh_stride + j, l)));
    const __m256 c_new = _mm256_fmadd_ps(f, Load(c_in + j, l), _mm256_mul_ps(i, g));
    Store(c_out + j, c_new, l);
    Store(h + j, _mm256_mul_ps(o, Tanh(c_new)), l);
    if constexpr (kKeep) {
      Store(act + j, i, l);
      Store(act + n + j, f, l);
      Store(act + 2 * n + j, g, l);
      Store(act + 3 * n + j, o, l);
    }
  }
}

// GRU gates r, z, n (gx's n rows without b_hn, gh's without any bias).
FD_AVX2 void GruCell(const float* gx, int64_t gx_stride, const float* gh, int64_t gh_stride,
                     const float* b_hn, const float* h_prev, float* h, int64_t n) {
  for (int64_t j = 0; j < n; j += 8) {
    const Lanes l{TailMask(n - j), j + 8 <= n};
    const __m256 r = Sigmoid(_mm256_add_ps(Load(gx + j, l), Load(gh + j, l)));
    const __m256 z =
        Sigmoid(_mm256_add_ps(Load(gx + gx_stride + j, l), Load(gh + gh_stride + j, l)));
    const __m256 hn = _mm256_add_ps(Load(gh + 2 * gh_stride + j, l), Load(b_hn + j, l));
    const __m256 nn = Tanh(_mm256_fmadd_ps(r, hn, Load(gx + 2 * gx_stride + j, l)));
    // h' = (1 - z) n + z h = n + z (h - n)
    Store(h + j, _mm256_fmadd_ps(z, _mm256_sub_ps(Load(h_prev + j, l), nn), nn), l);
  }
}

// One thread's share of one direction: batch rows [b0, b1) and hidden units [j0, j1).
// With `w_panels` (W_hh packed by PackPanels, or PackPanels16 when `panel` is 16), the task
// owns every unit of its rows.
struct Task {
  int direction;
  int64_t b0, b1, j0, j1;
  const float* w_panels = nullptr;
  int64_t panel = kPanel;
};

// The floats of one row of packed gates: whole panels of `panel` columns.
int64_t PackedRowFloats(int64_t rows, int64_t panel) { return (rows + panel - 1) / panel * panel; }

// Scratch of one task, allocated by the caller (outside any AVX2 code).
struct TaskScratch {
  float* gates_h;        // (nb, G, units); packed over every unit: (nb, panel * NumPanels(G * H))
  float* c;              // (nb, units), LSTM
  const float** h_prev;  // (nb)
  float** gates_h_rows;  // (nb)
  const float* zeros;    // (H)
};

// The barrier that the threads sharing one direction's units wait at after every time step: a
// count of arrivals, and a generation that the last to arrive advances and the others spin on
// (two atomic operations a thread a step), yielding the core after a while so that a thread
// whose core was taken is not waited for by threads spinning on the others.
class StepBarrier {
 public:
  // Before any Wait: the threads that will wait, >= 1.
  void set_threads(int threads) { threads_ = threads; }

  void Wait() {
    const uint32_t generation = generation_.load(std::memory_order_acquire);
    if (arrived_.fetch_add(1, std::memory_order_acq_rel) == threads_ - 1) {
      // The last to arrive: the count starts over before the others are let go.
      arrived_.store(0, std::memory_order_relaxed);
      generation_.store(generation + 1, std::memory_order_release);
      return;
    }
    for (int spins = 0; generation_.load(std::memory_order_acquire) == generation; ++spins) {
      if (spins < kSpinsBeforeYield) {
        _mm_pause();
      } else {
        std::this_thread::yield();
      }
    }
  }

 private:
  static constexpr int kSpinsBeforeYield = 1 << 14;
  int threads_ = 1;
  alignas(64) std::atomic<int> arrived_{0};
  alignas(64) std::atomic<uint32_t> generation_{0};
};

// All T steps of one task. With `barrier`, the task shares its batch rows with the other
// threads waiting at it (each owning other units), and every step ends there, after which the
// whole h_t is written.
FD_AVX2 void RunTask(const RecurrenceArgs& a, const Task& task, const TaskScratch& s,
                     StepBarrier* barrier) {
  const int64_t H = a.H, G = a.cell == Cell::kLstm ? 4 : 3, GH = G * H;
  const int64_t b0 = task.b0, nb = task.b1 - task.b0, j0 = task.j0, units = task.j1 - task.j0;
  for (int64_t i = 0; i < nb; ++i) {
    if (a.cell == Cell::kLstm) {
      const float* c0 = a.c_0 != nullptr ? a.c_0 + (b0 + i) * H : s.zeros;
      std::copy(c0 + j0, c0 + j0 + units, s.c + i * units);
    }
  }
  int64_t t_prev = -1;
  for (int64_t step = 0; step < a.T; ++step) {
    const int64_t t = a.reverse ? a.T - 1 - step : step;
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      s.h_prev[i] = t_prev >= 0        ? a.out + (b * a.T + t_prev) * a.out_stride
                    : a.h_0 != nullptr ? a.h_0 + b * H
                                       : s.zeros;
    }
    if (task.w_panels != nullptr && units == H) {
      const int64_t row_floats = PackedRowFloats(GH, task.panel), panels = row_floats / task.panel;
      for (int64_t i = 0; i < nb; ++i) s.gates_h_rows[i] = s.gates_h + i * row_floats;
      if (task.panel == kPanel16) {
        PanelMatVec16(task.w_panels, panels, H, s.h_prev, s.gates_h_rows, nb);
      } else {
        PanelMatVec(task.w_panels, panels, H, s.h_prev, s.gates_h_rows, nb);
      }
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i;
        const float* gx = a.gates_x + (b * a.T + t) * GH;
        const float* gh = s.gates_h + i * row_floats;
        float* h = a.out + (b * a.T + t) * a.out_stride;
        if (a.cell == Cell::kLstm) {
          LstmCell(gx, H, gh, H, s.c + i * H, s.c + i * H, h, H);
        } else {
          GruCell(gx, H, gh, H, a.b_hn, s.h_prev[i], h, H);
        }
      }
    } else if (units > 0) {
      // Units [j0, j1) of each gate, into gates laid out as (nb, G, units): from packed panels
      // (H, j0 and the units then whole panels), or from W_hh's rows as they are.
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t i = 0; i < nb; ++i) s.gates_h_rows[i] = s.gates_h + (i * G + g) * units;
        if (task.w_panels == nullptr) {
          MatVec(a.w_hh + (g * H + j0) * H, units, H, s.h_prev, s.gates_h_rows, nb);
        } else if (task.panel == kPanel16) {  // panel (g*H + j0) / 16 on
          PanelMatVec16(task.w_panels + (g * H + j0) * H, units / kPanel16, H, s.h_prev,
                        s.gates_h_rows, nb);
        } else {
          PanelMatVec(task.w_panels + (g * H + j0) * H, units / kPanel, H, s.h_prev, s.gates_h_rows,
                      nb);
        }
      }
      for (int64_t i = 0; i < nb; ++i) {
        const int64_t b = b0 + i;
        const float* gx = a.gates_x + (b * a.T + t) * GH + j0;
        const float* gh = s.gates_h + i * G * units;
        float* h = a.out + (b * a.T + t) * a.out_stride + j0;
        if (a.cell == Cell::kLstm) {
          LstmCell(gx, H, gh, units, s.c + i * units, s.c + i * units, h, units);
        } else {
          GruCell(gx, H, gh, units, a.b_hn + j0, s.h_prev[i] + j0, h, units);
        }
      }
    }
    if (barrier != nullptr) barrier->Wait();
    t_prev = t;
  }
  for (int64_t i = 0; i < nb; ++i) {
    const int64_t b = b0 + i;
    const float* h_last = a.out + (b * a.T + t_prev) * a.out_stride;
    if (a.h_n != nullptr) std::copy(h_last + j0, h_last + j0 + units, a.h_n + b * H + j0);
    if (a.c_n != nullptr && a.cell == Cell::kLstm) {
      std::copy(s.c + i * units, s.c + (i + 1) * units, a.c_n + b * H + j0);
    }
  }
}

// Runs `task` with scratch of its own.
void RunTaskWithScratch(const RecurrenceArgs& a, const Task& task, StepBarrier* barrier) {
  const int64_t nb = task.b1 - task.b0, units = task.j1 - task.j0;
  const int64_t G = a.cell == Cell::kLstm ? 4 : 3;
  const int64_t row_floats =
      task.w_panels != nullptr ? PackedRowFloats(G * a.H, task.panel) : G * units;
  std::vector<float> gates_h(nb * row_floats), c(nb * units), zeros(a.H, 0.0f);
  std::vector<const float*> h_prev(nb);
  std::vector<float*> gates_h_rows(nb);
  RunTask(a, task,
          TaskScratch{gates_h.data(), c.data(), h_prev.data(), gates_h_rows.data(), zeros.data()},
          barrier);
}

// ---- Backpropagation through time of one LSTM direction (LstmBackwardThroughTime), rows
// [b0, b1) of it. wp: W_hh packed (PackPanels), wtp: W_hh^T (H x 4H) packed; scratch: gh
// (nb x GHp), dh_next (nb x Hp), dc_next (nb x H) and the row pointers.
struct BpttScratch {
  float* gh;       // (nb, GHp)
  float* dh_next;  // (nb, Hp)
  float* dc_next;  // (nb, H)
  const float** in_rows;
  float** out_rows;
  const float* zeros;  // (H)
  float* h_last;       // (H): the last step's h when no out takes it
};

FD_AVX2 void LstmBpttRows(const LstmBackwardArgs& a, LstmPass pass, const float* wp,
                          const float* wtp, int64_t b0, int64_t b1, const BpttScratch& s) {
  const int64_t H = a.H, T = a.T, GH = 4 * H, GHp = NumPanels(GH) * kPanel,
                Hp = NumPanels(H) * kPanel;
  const int64_t nb = b1 - b0;
  const auto step_t = [&](int64_t step) { return a.reverse ? T - 1 - step : step; };
  const auto at = [&](int64_t b, int64_t t) { return b * T + t; };
  // Forward: each step's input state into h_prev, its activated gates into dgates, c_t into c.
  for (int64_t i = 0; pass != LstmPass::kBackward && i < nb; ++i) {
    const int64_t b = b0 + i;
    const float* h0 = a.h_0 != nullptr ? a.h_0 + b * H : s.zeros;
    std::copy(h0, h0 + H, a.h_prev + at(b, step_t(0)) * H);
  }
  for (int64_t step = 0; pass != LstmPass::kBackward && step < T; ++step) {
    const int64_t t = step_t(step);
    for (int64_t i = 0; i < nb; ++i) {
      s.in_rows[i] = a.h_prev + at(b0 + i, t) * H;
      s.out_rows[i] = s.gh + i * GHp;
    }
    PanelMatVec(wp, NumPanels(GH), H, s.in_rows, s.out_rows, nb);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      const float* gx = a.gates_x + at(b, t) * GH;
      const float* gh = s.gh + i * GHp;
      float* act = a.dgates + at(b, t) * GH;
      const float* c_prev = step > 0           ? a.c + at(b, step_t(step - 1)) * H
                            : a.c_0 != nullptr ? a.c_0 + b * H
                                               : s.zeros;
      float* h_next = step + 1 < T ? a.h_prev + at(b, step_t(step + 1)) * H : nullptr;
      float* out = a.out != nullptr ? a.out + at(b, t) * a.out_stride : nullptr;
      // h_t goes to the next step's input state, and to out (copied) when asked; the last
      // step's only to out.
      float* h = h_next != nullptr ? h_next : out;
      if (h == nullptr) h = s.h_last;
      LstmCell<true>(gx, H, gh, H, c_prev, a.c + at(b, t) * H, h, H, act);
      if (out != nullptr && h != out) std::copy(h, h + H, out);
    }
  }
  if (pass == LstmPass::kForward) return;
  // Backward, from the last step: dG_t in place of the gates, dh_next = W_hh^T dG_t.
  std::fill(s.dh_next, s.dh_next + nb * Hp, 0.0f);
  std::fill(s.dc_next, s.dc_next + nb * H, 0.0f);
  const __m256 one = _mm256_set1_ps(1.0f);
  for (int64_t step = T - 1; step >= 0; --step) {
    const int64_t t = step_t(step);
    for (int64_t i = 0; i < nb; ++i) {
      const int64_t b = b0 + i;
      const float* dout = a.dout + at(b, t) * a.dout_stride;
      float* g = a.dgates + at(b, t) * GH;
      const float* c = a.c + at(b, t) * H;
      const float* c_prev = step > 0           ? a.c + at(b, step_t(step - 1)) * H
                            : a.c_0 != nullptr ? a.c_0 + b * H
                                               : s.zeros;
      float* dh_next = s.dh_next + i * Hp;
      float* dc_next = s.dc_next + i * H;
      for (int64_t j = 0; j < H; j += 8) {
        const Lanes l{TailMask(H - j), j + 8 <= H};
        const __m256 ig = Load(g + j, l), fg = Load(g + H + j, l), gg = Load(g + 2 * H + j, l),
                     og = Load(g + 3 * H + j, l);
        const __m256 dh = _mm256_add_ps(Load(dout + j, l), Load(dh_next + j, l));
        const __m256 tc = Tanh(Load(c + j, l));
        const __m256 d_o = _mm256_mul_ps(dh, tc);
        const __m256 dc = _mm256_fmadd_ps(_mm256_mul_ps(dh, og), _mm256_fnmadd_ps(tc, tc, one),
                                          Load(dc_next + j, l));
        const __m256 di = _mm256_mul_ps(dc, gg), df = _mm256_mul_ps(dc, Load(c_prev + j, l)),
                     dg = _mm256_mul_ps(dc, ig);
        Store(dc_next + j, _mm256_mul_ps(dc, fg), l);
        // x (1 - x) for the sigmoids, 1 - x^2 for tanh.
        Store(g + j, _mm256_mul_ps(di, _mm256_mul_ps(ig, _mm256_sub_ps(one, ig))), l);
        Store(g + H + j, _mm256_mul_ps(df, _mm256_mul_ps(fg, _mm256_sub_ps(one, fg))), l);
        Store(g + 2 * H + j, _mm256_mul_ps(dg, _mm256_fnmadd_ps(gg, gg, one)), l);
        Store(g + 3 * H + j, _mm256_mul_ps(d_o, _mm256_mul_ps(og, _mm256_sub_ps(one, og))), l);
      }
      s.in_rows[i] = g;
      s.out_rows[i] = dh_next;
    }
    if (step > 0) PanelMatVec(wtp, NumPanels(H), GH, s.in_rows, s.out_rows, nb);
  }
}

// ---- One step of a slab's streams: rows [b0, b1), at most kStepTile of them.
constexpr int64_t kStepTile = 4;
// From this many streams a step packs each layer's weights into panels first (G*H*(I+H) floats
// copied once per step) for PanelMatVec, which needs no horizontal sums.
constexpr int64_t kPackedStepRows = 32;

// A step's weights packed for PanelMatVec: layer l's W_ih at w_ih[l], W_hh at w_hh[l]; both
// nullptr when the step runs on the weights as they are.
struct StepPanels {
  const float* const* w_ih = nullptr;
  const float* const* w_hh = nullptr;
};

FD_AVX2 void StepRows(const StepArgs& a, const StepPanels& panels, int64_t b0, int64_t b1,
                      float* gx, float* gh, float* xs) {
  const bool lstm = a.cell == Cell::kLstm;
  const int64_t H = a.H, G = lstm ? 4 : 3, GH = G * H, SL = (lstm ? 2 : 1) * H, S = a.L * SL;
  // The gates' rows padded to whole panels (PanelMatVec writes the padding too).
  const int64_t GHp = NumPanels(GH) * kPanel;
  const int64_t nb = b1 - b0;
  const RecurrentStepForecastSpec* fc = a.forecast;
  const float* inp[kStepTile];
  float* state[kStepTile];
  float* gx_rows[kStepTile];
  float* gh_rows[kStepTile];
  for (int64_t i = 0; i < nb; ++i) {
    inp[i] = a.x + (b0 + i) * a.I;
    if (fc != nullptr && fc->x_mean != nullptr) {
      float* row = xs + i * a.I;
      for (int64_t f = 0; f < a.I; ++f) row[f] = (inp[i][f] - fc->x_mean[f]) / fc->x_std[f];
      inp[i] = row;
    }
    state[i] = a.slab + int64_t{a.slots[b0 + i]} * S;
    gx_rows[i] = gx + i * GHp;
    gh_rows[i] = gh + i * GHp;
  }
  for (int64_t l = 0; l < a.L; ++l) {
    const ref::RecurrentDirectionWeights& w = a.layers[l];
    const int64_t K = l == 0 ? a.I : H;
    const float* h_prev[kStepTile];
    for (int64_t i = 0; i < nb; ++i) h_prev[i] = state[i] + l * SL;
    if (panels.w_ih != nullptr) {
      PanelMatVec(panels.w_ih[l], NumPanels(GH), K, inp, gx_rows, nb);
      PanelMatVec(panels.w_hh[l], NumPanels(GH), H, h_prev, gh_rows, nb);
    } else {
      MatVec(w.w_ih, GH, K, inp, gx_rows, nb);
      MatVec(w.w_hh, GH, H, h_prev, gh_rows, nb);
    }
    for (int64_t i = 0; i < nb; ++i) {
      float* gxi = gx_rows[i];
      float* ghi = gh_rows[i];
      // LSTM: both biases into gx. GRU: b_ih into gx, b_hh's r and z rows into gh; its n rows
      // (b_hn) go to the cell, which scales them by r.
      for (int64_t j = 0; j < GH; ++j) gxi[j] += w.b_ih[j];
      if (lstm) {
        for (int64_t j = 0; j < GH; ++j) ghi[j] += w.b_hh[j];
      } else {
        for (int64_t j = 0; j < 2 * H; ++j) ghi[j] += w.b_hh[j];
      }
      float* h = state[i] + l * SL;
      if (lstm) {
        LstmCell(gxi, H, ghi, H, h + H, h + H, h, H);
      } else {
        GruCell(gxi, H, ghi, H, w.b_hh + 2 * H, h, h, H);
      }
    }
    for (int64_t i = 0; i < nb; ++i) inp[i] = state[i] + l * SL;
  }
  if (a.top != nullptr) {
    for (int64_t i = 0; i < nb; ++i) std::copy(inp[i], inp[i] + H, a.top + (b0 + i) * H);
  }
  if (fc == nullptr) return;
  const int64_t O = fc->outputs;
  float* y_rows[kStepTile] = {};
  for (int64_t i = 0; i < nb; ++i) y_rows[i] = a.y + (b0 + i) * O;
  MatVec(fc->head_weight, O, H, inp, y_rows, nb);
  // Output o forecasts feature target_features[(o % (K * Q)) / Q] (outputs laid out (P, K, Q)).
  const int64_t Q = fc->quantiles, KQ = static_cast<int64_t>(fc->target_features.size()) * Q;
  for (int64_t i = 0; i < nb; ++i) {
    float* y = y_rows[i];
    for (int64_t o = 0; o < O; ++o) y[o] += fc->head_bias[o];
    if (fc->y_mean == nullptr) continue;
    for (int64_t o = 0; o < O; ++o) {
      const int f = fc->target_features[static_cast<size_t>((o % KQ) / Q)];
      y[o] = y[o] * fc->y_std[f] + fc->y_mean[f];
    }
  }
}

}  // namespace

void RunStep(const StepArgs& a) {
  const int64_t GH = (a.cell == Cell::kLstm ? 4 : 3) * a.H, GHp = NumPanels(GH) * kPanel;
  const int64_t tiles = (a.B + kStepTile - 1) / kStepTile;
  // Many streams: every layer's weights packed once, here, for all tiles.
  StepPanels panels;
  thread_local std::vector<float> packed;
  thread_local std::vector<const float*> packed_at;
  if (a.B >= kPackedStepRows) {
    int64_t floats = 0;
    for (int64_t l = 0; l < a.L; ++l) floats += GHp * ((l == 0 ? a.I : a.H) + a.H);
    if (packed.size() < static_cast<size_t>(floats)) packed.resize(static_cast<size_t>(floats));
    packed_at.assign(static_cast<size_t>(2 * a.L), nullptr);
    float* next = packed.data();
    for (int64_t l = 0; l < a.L; ++l) {
      const int64_t K = l == 0 ? a.I : a.H;
      PackPanels(a.layers[l].w_ih, GH, K, next);
      packed_at[static_cast<size_t>(l)] = next;
      next += GHp * K;
      PackPanels(a.layers[l].w_hh, GH, a.H, next);
      packed_at[static_cast<size_t>(a.L + l)] = next;
      next += GHp * a.H;
    }
    panels.w_ih = packed_at.data();
    panels.w_hh = packed_at.data() + a.L;
  }
  const auto run_tiles = [&](int64_t first, int64_t step) {
    thread_local std::vector<float> scratch;
    const size_t floats = static_cast<size_t>(kStepTile * (2 * GHp + a.I));
    if (scratch.size() < floats) scratch.resize(floats);
    for (int64_t t = first; t < tiles; t += step) {
      StepRows(a, panels, t * kStepTile, std::min(a.B, (t + 1) * kStepTile), scratch.data(),
               scratch.data() + kStepTile * GHp, scratch.data() + 2 * kStepTile * GHp);
    }
  };
  const int threads =
      static_cast<int>(std::min<int64_t>(std::max(1, omp_get_max_threads()), tiles));
  // One tile (a tick at a time): no parallel region at all, whose set-up would cost about as
  // much as the step.
  if (threads == 1) return run_tiles(0, 1);
#pragma omp parallel num_threads(threads)
  run_tiles(omp_get_thread_num(), omp_get_num_threads());
}

FD_AVX2 void SmallLinear(float* out, const float* inp, const float* weight, const float* bias,
                         int64_t N, int64_t IN, int64_t OUT) {
  for (int64_t b0 = 0; b0 < N; b0 += kStepTile) {
    const int64_t nb = std::min(kStepTile, N - b0);
    const float* rows[kStepTile] = {};
    float* outs[kStepTile] = {};
    for (int64_t i = 0; i < nb; ++i) {
      rows[i] = inp + (b0 + i) * IN;
      outs[i] = out + (b0 + i) * OUT;
    }
    MatVec(weight, OUT, IN, rows, outs, nb);
    if (bias == nullptr) continue;
    for (int64_t i = 0; i < nb; ++i) {
      for (int64_t o = 0; o < OUT; ++o) outs[i][o] += bias[o];
    }
  }
}

// Rows [b0, b1) of PanelLinear, four at a time, through a scratch tile where OUT is not a
// whole number of panels (PanelMatVec writes the padding too).
FD_AVX2 void PanelLinearRows(float* out, const float* inp, const float* wp, const float* bias,
                             int64_t b0, int64_t b1, int64_t IN, int64_t OUT) {
  const int64_t panels = NumPanels(OUT), OUTp = panels * kPanel;
  const bool direct = OUTp == OUT;
  thread_local std::vector<float> scratch;
  if (!direct && scratch.size() < static_cast<size_t>(kStepTile * OUTp)) {
    scratch.resize(static_cast<size_t>(kStepTile * OUTp));
  }
  for (int64_t r = b0; r < b1; r += kStepTile) {
    const int64_t nb = std::min(kStepTile, b1 - r);
    const float* rows[kStepTile] = {};
    float* outs[kStepTile] = {};
    for (int64_t i = 0; i < nb; ++i) {
      rows[i] = inp + (r + i) * IN;
      outs[i] = direct ? out + (r + i) * OUT : scratch.data() + i * OUTp;
    }
    PanelMatVec(wp, panels, IN, rows, outs, nb);
    for (int64_t i = 0; i < nb; ++i) {
      float* y = out + (r + i) * OUT;
      if (!direct) std::copy(outs[i], outs[i] + OUT, y);
      if (bias != nullptr) {
        for (int64_t o = 0; o < OUT; ++o) y[o] += bias[o];
      }
    }
  }
}

void PanelLinear(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                 int64_t IN, int64_t OUT) {
  const int64_t OUTp = NumPanels(OUT) * kPanel;
  thread_local std::vector<float> packed;
  if (packed.size() < static_cast<size_t>(OUTp * IN)) packed.resize(static_cast<size_t>(OUTp * IN));
  PackPanels(weight, OUT, IN, packed.data());
  const float* wp = packed.data();
  // A thread's share is at least 64 rows: below that the parallel region costs more than it
  // saves.
  constexpr int64_t kMinRowsPerThread = 64;
  const int threads = static_cast<int>(
      std::min<int64_t>(std::max(1, omp_get_max_threads()), N / kMinRowsPerThread));
  if (threads <= 1) return PanelLinearRows(out, inp, wp, bias, 0, N, IN, OUT);
#pragma omp parallel num_threads(threads)
  {
    const int64_t q = omp_get_thread_num(), m = omp_get_num_threads();
    // Whole tiles per thread, so that no two threads share an output row.
    const int64_t tiles = (N + kStepTile - 1) / kStepTile;
    const int64_t b0 = std::min(N, tiles * q / m * kStepTile);
    const int64_t b1 = std::min(N, tiles * (q + 1) / m * kStepTile);
    PanelLinearRows(out, inp, wp, bias, b0, b1, IN, OUT);
  }
}

// Into how many pieces of batch rows each of n directions is shared out over `threads`: as
// many as give each thread a piece of its own, each with at least one 4-row tile.
int64_t RowSplits(int threads, int n, int64_t B) {
  return std::max<int64_t>(1, std::min<int64_t>((threads + n - 1) / n, (B + 3) / 4));
}

bool HasAvx2Fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return has;
}

// Runs each of `tasks` on `groups` threads that share its hidden units, in blocks of whole
// multiples of `align` units (the last block takes the rest), with a StepBarrier a task: on
// `team` when there is one (it has at least tasks * groups members), else on OpenMP's threads.
// With fewer OpenMP threads than asked for (a nested region, a thread limit), each task whole
// on one.
void RunTasksSharedByUnits(const RecurrenceArgs* args, const std::vector<Task>& tasks, int groups,
                           int64_t align, CpuTeam* team) {
  const int num_tasks = static_cast<int>(tasks.size()), size = num_tasks * groups;
  std::vector<StepBarrier> barriers(static_cast<size_t>(num_tasks));
  for (StepBarrier& barrier : barriers) barrier.set_threads(groups);
  const auto run_share = [&](int q) {
    const int i = q / groups, k = q % groups;
    Task task = tasks[static_cast<size_t>(i)];
    const int64_t H = args[task.direction].H;
    const auto split = [&](int64_t p) {
      return p == groups ? H : (H * p / groups) / align * align;
    };
    task.j0 = split(k);
    task.j1 = split(k + 1);
    RunTaskWithScratch(args[task.direction], task, &barriers[static_cast<size_t>(i)]);
  };
  if (team != nullptr) {
    team->Run([&](int q) {
      if (q < size) run_share(q);
    });
    return;
  }
#pragma omp parallel num_threads(size)
  {
    if (omp_get_num_threads() == size) {
      run_share(omp_get_thread_num());
    } else {
#pragma omp for schedule(static)
      for (int i = 0; i < num_tasks; ++i) {
        RunTaskWithScratch(args[tasks[i].direction], tasks[i], /*barrier=*/nullptr);
      }
    }
  }
}

// How RunRecurrences shares n directions of B rows (H units each) over `threads` threads.
// Directions whose rows, in 4-row tiles, would keep fewer of a direction's share of the
// threads busy than blocks of 32 of its hidden units could are shared out by hidden units
// instead (by_units), each direction on threads of its own, in blocks of whole 16-float cache
// lines (16 units at least), with a StepBarrier per direction and step. (lstm_h128_l2 at B=1
// on 16 threads of a 16-core Xeon: 784 and 679 us in blocks of 16 on 8 threads, against 972
// and 996 in blocks of 32 on 4 threads with OpenMP's barrier, two rounds. Sharing by units
// whenever some thread would go without a tile made 32 rows slower on 16 threads than on 4,
// 8.3-9.4 ms against 5.3-6.2 there: 4 unit blocks with a barrier per step instead of 8 row
// tiles without.) Otherwise directions first, then batch rows (splits pieces a direction), so
// that each thread gets one piece of its own and never waits for another; a piece has at least
// one full 4-row tile. From kMinPackedBatch rows on, W_hh is packed into panels first (G*H*H
// floats, a fraction 1/(B*T) of the work that follows), for the broadcast kernel that needs no
// horizontal sums; panels of 16 columns for AVX-512's vectors where the CPU has it and a task
// has whole tiles of 4 rows, else of 8: the 16-column tiles of 2 and 3 rows ran slower. (One
// thread of a 16-core Xeon, lstm_h128_l2, us a row, panels of 16 / of 8, three rounds taking
// turns: B=3 738 / 663, 1,091 / 846, 913 / 660; B=2 1,078 / 1,093, 1,252 / 1,258, 1,282 /
// 961.) Threads left over once every piece of rows has one share each piece's hidden units
// (groups), in blocks of 32 or more whole panels, with a StepBarrier a piece (32 rows of
// lstm_h128_l2 on 16 threads: 8 pieces of 4 rows, each on 2 threads of 64 units).
namespace {

struct RecurrencePlan {
  bool by_units = false;
  int64_t splits = 1;
  bool packed = false;
  int64_t panel = kPanel;
  int groups = 1;   // threads sharing each task's units (by_units: each direction's)
  int threads = 1;  // the threads the plan keeps busy
};

RecurrencePlan PlanRecurrences(int n, int64_t B, int64_t H, int threads) {
  constexpr int64_t kMinPackedBatch = 2;
  RecurrencePlan plan;
  const int per_direction = std::max(1, threads / n);
  const int64_t blocks_of_32 = std::min<int64_t>(per_direction, H / 32);
  if (blocks_of_32 > 1 && (B + 3) / 4 < blocks_of_32) {
    plan.by_units = true;
    plan.groups = static_cast<int>(std::min<int64_t>(per_direction, H / 16));
    plan.threads = n * plan.groups;
    return plan;
  }
  plan.splits = RowSplits(threads, n, B);
  plan.panel = HasAvx512() && B >= 4 ? kPanel16 : kPanel;
  plan.packed = B >= kMinPackedBatch;
  const int num_tasks = static_cast<int>(n * plan.splits);
  plan.groups = plan.packed && H % plan.panel == 0
                    ? static_cast<int>(std::min<int64_t>(threads / num_tasks, H / 32))
                    : 1;
  plan.threads = std::min(threads, num_tasks * std::max(1, plan.groups));
  return plan;
}

}  // namespace

void RunRecurrences(const RecurrenceArgs* args, int n) {
  if (n <= 0) return;
  int threads = std::max(1, omp_get_max_threads());
  const int64_t B = args[0].B, H = args[0].H;
  // On one OpenMP thread, the threads of idle workers where the server lends them
  // (cpu_helpers.h), as many as the plan can keep busy.
  std::unique_ptr<CpuTeam> team;
  if (threads == 1) {
    constexpr int kMostThreads = 64;
    team = BorrowCpuTeam(PlanRecurrences(n, B, H, kMostThreads).threads);
    if (team != nullptr) threads = team->size();
  }
  const RecurrencePlan plan = PlanRecurrences(n, B, H, threads);
  if (plan.by_units) {
    std::vector<Task> whole;
    for (int d = 0; d < n; ++d) whole.push_back(Task{d, 0, B, 0, H});
    RunTasksSharedByUnits(args, whole, plan.groups, /*align=*/16, team.get());
    return;
  }
  const int64_t splits = plan.splits, panel = plan.panel;
  const bool packed = plan.packed;
  const int64_t G = args[0].cell == Cell::kLstm ? 4 : 3,
                panel_floats = PackedRowFloats(G * H, panel) * H;
  thread_local std::vector<float> panels;
  if (packed) {
    if (panels.size() < static_cast<size_t>(n * panel_floats)) panels.resize(n * panel_floats);
    for (int d = 0; d < n; ++d) {
      float* wp = panels.data() + d * panel_floats;
      if (panel == kPanel16) {
        PackPanels16(args[d].w_hh, G * H, H, wp);
      } else {
        PackPanels(args[d].w_hh, G * H, H, wp);
      }
    }
  }
  std::vector<Task> tasks;
  for (int d = 0; d < n; ++d) {
    for (int64_t p = 0; p < splits; ++p) {
      const int64_t b0 = B * p / splits, b1 = B * (p + 1) / splits;
      if (b1 > b0) {
        tasks.push_back(
            {d, b0, b1, 0, args[d].H, packed ? panels.data() + d * panel_floats : nullptr, panel});
      }
    }
  }
  const int num_tasks = static_cast<int>(tasks.size());
  if (plan.groups > 1) {
    RunTasksSharedByUnits(args, tasks, plan.groups, panel, team.get());
    return;
  }
  if (team != nullptr) {
    const int size = team->size();
    team->Run([&](int q) {
      for (int i = q; i < num_tasks; i += size) {
        RunTaskWithScratch(args[tasks[i].direction], tasks[i], /*barrier=*/nullptr);
      }
    });
    return;
  }
#pragma omp parallel for schedule(static) \
    num_threads(std::min(threads, num_tasks)) if (num_tasks > 1)
  for (int i = 0; i < num_tasks; ++i) {
    RunTaskWithScratch(args[tasks[i].direction], tasks[i], /*barrier=*/nullptr);
  }
}

namespace {

// One thread's share of a stack wavefront: units [j0, j1) of layer `layer`.
struct WavefrontShare {
  int64_t layer, j0, j1;
};

// Threads per layer of a wavefront over at most `threads`: each layer one at least and at most
// one per block of 16 units; the rest, one by one, to the layer with the most work a thread
// (a step of the first layer is one product, of the others two).
std::vector<int> WavefrontThreads(int threads, int64_t L, int64_t H) {
  const int most = static_cast<int>(std::max<int64_t>(1, H / 16));
  std::vector<int> n(static_cast<size_t>(L), 1);
  for (int left = threads - static_cast<int>(L); left > 0; --left) {
    int best = -1;
    double best_work = 0.0;
    for (int64_t l = 0; l < L; ++l) {
      const int have = n[static_cast<size_t>(l)];
      const double work = (l == 0 ? 1.0 : 2.0) / have;
      if (have < most && work > best_work) {
        best = static_cast<int>(l);
        best_work = work;
      }
    }
    if (best < 0) break;
    ++n[static_cast<size_t>(best)];
  }
  return n;
}

// A share's T + L - 1 intervals. hbuf[l][p]: layer l's h of the steps of parity p (B, H), for
// the layers below the top (the top writes out, which it also reads its own last h from).
FD_AVX2 void RunWavefrontShare(const StackArgs& a, const WavefrontShare& share,
                               const std::vector<std::array<float*, 2>>& hbuf,
                               StepBarrier* barrier) {
  const bool lstm = a.cell == Cell::kLstm;
  const int64_t H = a.H, G = lstm ? 4 : 3, GH = G * H, B = a.B, T = a.T, L = a.L;
  const int64_t l = share.layer, j0 = share.j0, units = share.j1 - share.j0;
  const StackLayer& w = a.layers[l];
  std::vector<float> gx(B * G * units), gh(B * G * units), c(B * units, 0.0f), zeros(H, 0.0f);
  std::array<const float*, 4> in{}, prev{};
  std::array<float*, 4> rows{};
  for (int64_t k = 0; k < T + L - 1; ++k) {
    const int64_t t = k - l;
    if (t >= 0 && t < T) {
      for (int64_t b = 0; b < B; ++b) {
        prev[b] = t == 0       ? zeros.data()
                  : l == L - 1 ? a.out + (b * T + t - 1) * H
                               : hbuf[l][(t - 1) % 2] + b * H;
      }
      if (l > 0) {
        // This layer's input projection for its units: W_ih h_{l-1,t} + bias.
        for (int64_t b = 0; b < B; ++b) in[b] = hbuf[l - 1][t % 2] + b * H;
        for (int64_t g = 0; g < G; ++g) {
          for (int64_t b = 0; b < B; ++b) rows[b] = gx.data() + (b * G + g) * units;
          MatVec(w.w_ih + (g * H + j0) * H, units, H, in.data(), rows.data(), B);
          for (int64_t b = 0; b < B; ++b) {
            for (int64_t j = 0; j < units; ++j) rows[b][j] += w.bias[g * H + j0 + j];
          }
        }
      }
      for (int64_t g = 0; g < G; ++g) {
        for (int64_t b = 0; b < B; ++b) rows[b] = gh.data() + (b * G + g) * units;
        MatVec(w.w_hh + (g * H + j0) * H, units, H, prev.data(), rows.data(), B);
      }
      for (int64_t b = 0; b < B; ++b) {
        const float* gxb = l == 0 ? a.gates_x + (b * T + t) * GH + j0 : gx.data() + b * G * units;
        const int64_t gx_stride = l == 0 ? H : units;
        const float* ghb = gh.data() + b * G * units;
        float* h = (l == L - 1 ? a.out + (b * T + t) * H : hbuf[l][t % 2] + b * H) + j0;
        if (lstm) {
          LstmCell(gxb, gx_stride, ghb, units, c.data() + b * units, c.data() + b * units, h,
                   units);
        } else {
          GruCell(gxb, gx_stride, ghb, units, w.b_hn + j0, prev[b] + j0, h, units);
        }
      }
    }
    barrier->Wait();
  }
}

}  // namespace

absl::StatusOr<bool> RunStackWavefront(const StackArgs& a,
                                       absl::FunctionRef<absl::Status()> project) {
  // One row: with two, the longer steps ran no faster on 8 and 16 threads of a 16-core Xeon
  // (lstm_h128_l2 B=2: 853 and 1,101 us against 912 and 1,019; 2,743 and 1,244 against 1,287
  // and 1,400).
  constexpr int64_t kMostRows = 1, kMostUnits = 32;
  if (a.L < 2 || a.B < 1 || a.B > kMostRows || a.T < 1 || a.H < 1) return false;
  // Inside a parallel region a nested one gets one thread; the thread limit caps the rest.
  int threads =
      omp_in_parallel() ? 1 : std::max(1, std::min(omp_get_max_threads(), omp_get_thread_limit()));
  std::unique_ptr<CpuTeam> team;
  if (threads == 1) {
    team = BorrowCpuTeam(
        static_cast<int>(std::min<int64_t>(64, a.L * std::max<int64_t>(1, a.H / 16))));
    if (team != nullptr) threads = team->size();
  }
  if (threads < 2 * a.L) return false;
  const std::vector<int> per_layer = WavefrontThreads(threads, a.L, a.H);
  // Only where every layer above the first gets a thread per 32 units or more: with wider
  // shares the two products of a step, on matrix-vector kernels, cost more than the barriers
  // saved (16-core Xeon, lstm_h256_l2 at B=1 on 8 threads, 64 units a thread: 1,121 and 1,345
  // us against 1,074 and 1,077 layer by layer; on 4 threads 2,038 and 1,867 against 1,403 and
  // 1,524; at 16 threads, 23 units a thread, 841 and 937 against 975 and 983).
  for (int64_t l = 1; l < a.L; ++l) {
    if (a.H > kMostUnits * per_layer[static_cast<size_t>(l)]) return false;
  }
  std::vector<WavefrontShare> shares;
  for (int64_t l = 0; l < a.L; ++l) {
    const int n = per_layer[static_cast<size_t>(l)];
    const auto split = [&](int64_t p) { return p == n ? a.H : (a.H * p / n) / 16 * 16; };
    for (int k = 0; k < n; ++k) shares.push_back({l, split(k), split(k + 1)});
  }
  RETURN_IF_ERROR(project());
  const int size = static_cast<int>(shares.size());
  std::vector<float> buffers((a.L - 1) * 2 * a.B * a.H);
  std::vector<std::array<float*, 2>> hbuf(static_cast<size_t>(a.L - 1));
  for (int64_t l = 0; l + 1 < a.L; ++l) {
    hbuf[l] = {buffers.data() + (2 * l) * a.B * a.H, buffers.data() + (2 * l + 1) * a.B * a.H};
  }
  StepBarrier barrier;
  barrier.set_threads(size);
  const auto run = [&](int q) {
    if (q < size) RunWavefrontShare(a, shares[static_cast<size_t>(q)], hbuf, &barrier);
  };
  if (team != nullptr) {
    team->Run(run);
    return true;
  }
  bool ran = true;
#pragma omp parallel num_threads(size)
  {
    if (omp_get_num_threads() == size) {
      run(omp_get_thread_num());
    } else {
#pragma omp single
      ran = false;
    }
  }
  if (!ran) {
    // Ruled out above (a nested region, the thread limit); nothing was computed.
    return absl::InternalError("the stack wavefront got fewer OpenMP threads than it planned");
  }
  return true;
}

void LstmBackwardThroughTime(const LstmBackwardArgs* args, int n, LstmPass pass) {
  if (n <= 0) return;
  const int64_t B = args[0].B, H = args[0].H, GH = 4 * H;
  const int64_t GHp = NumPanels(GH) * kPanel, Hp = NumPanels(H) * kPanel;
  // Each direction's W_hh packed (the forward half's), and its transpose (H x 4H) packed (the
  // backward half's), once per call.
  const int64_t wp_floats = GHp * H, wtp_floats = Hp * GH;
  thread_local std::vector<float> packed, transposed;
  if (packed.size() < static_cast<size_t>(n * (wp_floats + wtp_floats))) {
    packed.resize(static_cast<size_t>(n * (wp_floats + wtp_floats)));
  }
  if (transposed.size() < static_cast<size_t>(GH * H)) {
    transposed.resize(static_cast<size_t>(GH * H));
  }
  for (int d = 0; d < n; ++d) {
    float* wp = packed.data() + d * (wp_floats + wtp_floats);
    if (pass != LstmPass::kBackward) PackPanels(args[d].w_hh, GH, H, wp);
    if (pass == LstmPass::kForward) continue;
    for (int64_t r = 0; r < GH; ++r) {
      for (int64_t k = 0; k < H; ++k) transposed[k * GH + r] = args[d].w_hh[r * H + k];
    }
    PackPanels(transposed.data(), H, GH, wp + wp_floats);
  }
  // Directions first, then batch rows in pieces of at least one 4-row tile, a piece per task.
  const int threads = std::max(1, omp_get_max_threads());
  const int64_t splits = RowSplits(threads, n, B);
  struct Piece {
    int d;
    int64_t b0, b1;
  };
  std::vector<Piece> pieces;
  for (int d = 0; d < n; ++d) {
    for (int64_t p = 0; p < splits; ++p) {
      const int64_t b0 = B * p / splits, b1 = B * (p + 1) / splits;
      if (b1 > b0) pieces.push_back({d, b0, b1});
    }
  }
  const int num = static_cast<int>(pieces.size());
  const float* const all_packed = packed.data();  // thread_local: this thread's, for every task
#pragma omp parallel for schedule(static) num_threads(std::min(threads, num)) if (num > 1)
  for (int i = 0; i < num; ++i) {
    const Piece& piece = pieces[static_cast<size_t>(i)];
    const int64_t nb = piece.b1 - piece.b0;
    std::vector<float> scratch(static_cast<size_t>(nb * (GHp + Hp + H) + 2 * H), 0.0f);
    std::vector<const float*> in_rows(static_cast<size_t>(nb));
    std::vector<float*> out_rows(static_cast<size_t>(nb));
    float* base = scratch.data();
    const BpttScratch s{base,
                        base + nb * GHp,
                        base + nb * (GHp + Hp),
                        in_rows.data(),
                        out_rows.data(),
                        base + nb * (GHp + Hp + H),
                        base + nb * (GHp + Hp + H) + H};
    const float* wp = all_packed + piece.d * (wp_floats + wtp_floats);
    LstmBpttRows(args[piece.d], pass, wp, wp + wp_floats, piece.b0, piece.b1, s);
  }
}

}  // namespace forecastd::cpu
