#include "kernels/cuda/recurrent_step.h"

#include <cooperative_groups.h>
#include <cuda_pipeline.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/recurrent_cell.cuh"

namespace forecastd::cuda {
namespace {

using cell::ActivateQuantity;
using cell::BiasOf;
using cell::Cell;
using cell::HalvingSum;
using cell::kQuantities;
using cell::Row;
using cell::UsesH;
using cell::UsesX;
using cell::WeightAt;
using cell::Weights;

// barrier.cluster in two halves, so that work neither needs from the other can run between.
__device__ __forceinline__ void ClusterArrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void ClusterWait() {
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}

// The top layer's last step: its h' sits in `out` and each block of a stream tile has read
// the old h from the slab. The last block of the tile to finish (counted in counters[tile])
// copies the tile's h' into the slab and zeroes the counter for the next call.
__device__ void WriteBackWhenLast(float* state, int* counters, const int64_t* rows,
                                  const float* out, int b0, int nb, int H) {
  __shared__ bool last;
  __threadfence();  // this block's h' is visible before it is counted
  __syncthreads();
  if (threadIdx.x == 0) last = atomicAdd(&counters[blockIdx.y], 1) == gridDim.x - 1;
  __syncthreads();
  if (!last) return;
  __threadfence();
  // Eight loads in flight per thread before their stores (out and state may alias as far as
  // the compiler knows, so it would not batch them itself).
  constexpr int kBatch = 8;
  for (int base = 0; base < nb * H; base += kBatch * blockDim.x) {
    float v[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = base + u * blockDim.x + threadIdx.x, r = e / H, j = e - r * H;
      v[u] = e < nb * H ? __ldcg(&out[static_cast<int64_t>(b0 + r) * H + j]) : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int e = base + u * blockDim.x + threadIdx.x, r = e / H, j = e - r * H;
      if (e < nb * H) state[rows[r] + j] = v[u];
    }
  }
  if (threadIdx.x == 0) counters[blockIdx.y] = 0;
}

// --- kernels

// kWarp. Grid (ceil(H / kWarpUnits), ceil(B / kWarpStreams)); warp w of block (x, y) owns unit
// j = x * kWarpUnits + w and streams [y * kWarpStreams, + kWarpStreams). Lane l holds columns
// l, l + 32, ... of the unit's four rows (KPL of them, K <= 32 * KPL) in registers and
// multiplies them with [x | h] of the tile's streams, staged in shared memory, four streams at
// a time: the warp then sums those 16 dot products in 16 shuffles (each step halves the values
// a lane carries), which leaves stream u's quantity q in lane 8u + 2q, and lanes 8u run the
// cell of the four streams side by side. Every global load is issued in batches, so a block
// waits for memory a few times rather than once per element.
constexpr int kWarpUnits = 4;
constexpr int kWarpThreads = kWarpUnits * 32;
constexpr int kWarpStreams = 16;
constexpr int kGroup = 4;        // streams reduced together
constexpr int kStageBatch = 16;  // loads in flight per thread while staging

template <bool kLstm, int KPL>
__global__ void __launch_bounds__(kWarpThreads)
    StepWarpKernel(float* out, float* state, float* prev_h, int* counters, const int32_t* slots,
                   const float* inp, Weights w, int B, int I, int H, int64_t S) {
  constexpr int kKp = 32 * KPL;
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ float xh[];  // (kWarpStreams, kKp): [x | h | 0]
  __shared__ int64_t rows[kWarpStreams];
  const int b0 = blockIdx.y * kWarpStreams, nb = min(kWarpStreams, B - b0);
  const int j0 = blockIdx.x * kWarpUnits, K = I + H;
  const int lane = threadIdx.x % 32, j = j0 + static_cast<int>(threadIdx.x / 32);
  // The unit's rows and biases first: their loads overlap the staging below.
  float wr[kQuantities][KPL];
  float bias[kQuantities];
#pragma unroll
  for (int q = 0; q < kQuantities; ++q) {
    bias[q] = j < H ? BiasOf<kLstm>(w, q, j, H) : 0.0f;
#pragma unroll
    for (int i = 0; i < KPL; ++i)
      wr[q][i] = j < H ? WeightAt<kLstm>(w, q, j, lane + 32 * i, I, H) : 0.0f;
  }
  if (threadIdx.x < nb) rows[threadIdx.x] = static_cast<int64_t>(slots[b0 + threadIdx.x]) * S;
  __syncthreads();
  // Lane t < nb keeps stream t's old c (LSTM) for the cell.
  const float c_mine = kLstm && j < H && lane < nb ? state[rows[lane] + H + j] : 0.0f;
  for (int base = 0; base < nb * kKp; base += kStageBatch * kWarpThreads) {
    float v[kStageBatch];
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = base + u * kWarpThreads + threadIdx.x, r = e / kKp, k = e - r * kKp;
      v[u] = 0.0f;
      if (r < nb) {
        if (k < I) {
          v[u] = inp[static_cast<int64_t>(b0 + r) * I + k];
        } else if (k < K) {
          v[u] = state[rows[r] + (k - I)];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < kStageBatch; ++u) {
      const int e = base + u * kWarpThreads + threadIdx.x, r = e / kKp, k = e - r * kKp;
      if (r < nb) {
        xh[e] = v[u];
        // The layer below's h' is this layer's input; this block writes its own units' share.
        if (prev_h != nullptr && k >= j0 && k < j0 + kWarpUnits && k < I) {
          prev_h[rows[r] + k] = v[u];
        }
      }
    }
  }
  __syncthreads();
  if (j < H) {
    for (int r0 = 0; r0 < nb; r0 += kGroup) {
      float a[kGroup * kQuantities];  // a[u * 4 + q]
#pragma unroll
      for (int n = 0; n < kGroup * kQuantities; ++n) a[n] = 0.0f;
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
#pragma unroll
        for (int u = 0; u < kGroup; ++u) {
          // Rows past nb hold stale values; their sums are never used.
          const float x = xh[min(r0 + u, kWarpStreams - 1) * kKp + lane + 32 * i];
#pragma unroll
          for (int q = 0; q < kQuantities; ++q) a[u * 4 + q] = fmaf(wr[q][i], x, a[u * 4 + q]);
        }
      }
      HalvingSum<16>(a, lane);
      float sums[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) sums[q] = __shfl_down_sync(kAll, a[0], 2 * q);
      const int u = lane / 8, r = r0 + u;
      const float c_old = __shfl_sync(kAll, c_mine, min(r, 31));
      if (lane % 8 == 0 && r < nb) {
#pragma unroll
        for (int q = 0; q < kQuantities; ++q) sums[q] += bias[q];
        float c = c_old;
        const float h_new = Cell<kLstm>(sums, kLstm ? 0.0f : xh[r * kKp + I + j], &c);
        if (kLstm) state[rows[r] + H + j] = c;
        out[static_cast<int64_t>(b0 + r) * H + j] = h_new;
      }
    }
  }
  if (counters != nullptr) WriteBackWhenLast(state, counters, rows, out, b0, nb, H);
}

// kTiled. Grid (ceil(H / kTileUnits), ceil(B / kTileStreams)), kTileThreads threads: thread
// (tx, ty) = (t % kTileUnits, t / kTileUnits) accumulates unit j0 + tx's four quantities for
// streams ty * kThreadStreams + [0, kThreadStreams) of the tile, over chunks of kTileK columns
// of [x | h] (xs, stream-contiguous, and ws, quantity-contiguous, so each is one float4 read)
// copied into shared memory asynchronously (cp.async), two chunks in flight: the next one loads
// while the current one is multiplied. Each thread copies column `lane` of the same 8 x rows
// and 8 weight rows in every chunk, so their addresses are worked out once.
constexpr int kTileUnits = 16;
constexpr int kTileStreams = 64;
constexpr int kThreadStreams = 4;
constexpr int kTileK = 32;
constexpr int kTileThreads = (kTileStreams / kThreadStreams) * kTileUnits;  // 256
constexpr int kTileWarps = kTileThreads / 32;
constexpr int kXRows = kTileStreams / kTileWarps;              // x rows a thread copies
constexpr int kWRows = kQuantities * kTileUnits / kTileWarps;  // weight rows a thread copies
constexpr int kXsPitch = kTileStreams + 4;                     // floats; keeps float4 alignment
constexpr int kWsPitch = kQuantities * kTileUnits + 4;

template <bool kLstm>
__global__ void __launch_bounds__(kTileThreads)
    StepTiledKernel(float* out, float* state, float* prev_h, int* counters, const int32_t* slots,
                    const float* inp, Weights w, int B, int I, int H, int64_t S) {
  __shared__ __align__(16) float xs[2][kTileK][kXsPitch];
  __shared__ __align__(16) float ws[2][kTileK][kWsPitch];
  __shared__ int64_t rows[kTileStreams];
  const int b0 = blockIdx.y * kTileStreams, nb = min(kTileStreams, B - b0);
  const int j0 = blockIdx.x * kTileUnits, K = I + H;
  const int tx = threadIdx.x % kTileUnits, ty = threadIdx.x / kTileUnits;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  if (threadIdx.x < nb) rows[threadIdx.x] = static_cast<int64_t>(slots[b0 + threadIdx.x]) * S;
  __syncthreads();
  // The layer below's h' is this layer's input; this block writes its own units' share.
  if (prev_h != nullptr) {
    constexpr int kPerThread = kTileStreams * kTileUnits / kTileThreads;
    float v[kPerThread];
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int e = u * kTileThreads + threadIdx.x, r = e / kTileUnits, k = j0 + e % kTileUnits;
      v[u] = r < nb && k < I ? inp[static_cast<int64_t>(b0 + r) * I + k] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < kPerThread; ++u) {
      const int e = u * kTileThreads + threadIdx.x, r = e / kTileUnits, k = j0 + e % kTileUnits;
      if (r < nb && k < I) prev_h[rows[r] + k] = v[u];
    }
  }
  // Row u of this thread's x rows is stream u * kTileWarps + warp: its x at x_src[u] + k, its
  // h at h_src[u] + k for k >= I (nullptr past nb). Weight row u is quantity row / kTileUnits
  // of unit row % kTileUnits, row = u * kTileWarps + warp.
  const float* x_src[kXRows];
  const float* h_src[kXRows];
#pragma unroll
  for (int u = 0; u < kXRows; ++u) {
    const int r = u * kTileWarps + warp;
    x_src[u] = r < nb ? inp + static_cast<int64_t>(b0 + r) * I : nullptr;
    h_src[u] = r < nb ? state + rows[r] - I : nullptr;
  }
  const float* wx_src[kWRows];
  const float* wh_src[kWRows];
#pragma unroll
  for (int u = 0; u < kWRows; ++u) {
    const int row = u * kTileWarps + warp, q = row / kTileUnits, j = j0 + row % kTileUnits;
    const int64_t g = static_cast<int64_t>(Row<kLstm>(q)) * H + j;
    wx_src[u] = j < H && UsesX<kLstm>(q) ? w.w_ih + g * I : nullptr;
    wh_src[u] = j < H && UsesH<kLstm>(q) ? w.w_hh + g * H - I : nullptr;
  }
  const auto load = [&](int k0, int buf) {
    const int k = k0 + lane;
    const bool is_x = k < I, in = k < K;
#pragma unroll
    for (int u = 0; u < kXRows; ++u) {
      const float* src = is_x ? x_src[u] : (in ? h_src[u] : nullptr);
      float* dst = &xs[buf][lane][u * kTileWarps + warp];
      if (src != nullptr) {
        __pipeline_memcpy_async(dst, src + k, sizeof(float));
      } else {
        *dst = 0.0f;
      }
    }
#pragma unroll
    for (int u = 0; u < kWRows; ++u) {
      const int row = u * kTileWarps + warp;
      const float* src = is_x ? wx_src[u] : (in ? wh_src[u] : nullptr);
      // ws holds unit-major, quantity-minor: a thread's four quantities are one float4.
      float* dst = &ws[buf][lane][(row % kTileUnits) * kQuantities + row / kTileUnits];
      if (src != nullptr) {
        __pipeline_memcpy_async(dst, src + k, sizeof(float));
      } else {
        *dst = 0.0f;
      }
    }
    __pipeline_commit();
  };
  float acc[kThreadStreams][kQuantities] = {};
  const int chunks = (K + kTileK - 1) / kTileK;
  load(0, 0);
  for (int c = 0; c < chunks; ++c) {
    if (c + 1 < chunks) {
      load((c + 1) * kTileK, (c + 1) % 2);
      __pipeline_wait_prior(1);
    } else {
      __pipeline_wait_prior(0);
    }
    __syncthreads();
    const int buf = c % 2;
#pragma unroll 8
    for (int k = 0; k < kTileK; ++k) {
      const float4 x = *reinterpret_cast<const float4*>(&xs[buf][k][ty * kThreadStreams]);
      const float4 wq = *reinterpret_cast<const float4*>(&ws[buf][k][tx * kQuantities]);
      const float xv[kThreadStreams] = {x.x, x.y, x.z, x.w};
      const float wv[kQuantities] = {wq.x, wq.y, wq.z, wq.w};
#pragma unroll
      for (int s = 0; s < kThreadStreams; ++s) {
#pragma unroll
        for (int q = 0; q < kQuantities; ++q) acc[s][q] = fmaf(wv[q], xv[s], acc[s][q]);
      }
    }
    __syncthreads();  // the buffer is free for the chunk after next
  }
  const int j = j0 + tx;
  if (j < H) {
    float bias[kQuantities];
#pragma unroll
    for (int q = 0; q < kQuantities; ++q) bias[q] = BiasOf<kLstm>(w, q, j, H);
    // Old states of the thread's streams, loaded together.
    float old[kThreadStreams];
#pragma unroll
    for (int s = 0; s < kThreadStreams; ++s) {
      const int r = ty * kThreadStreams + s;
      old[s] = r < nb ? state[rows[r] + (kLstm ? H : 0) + j] : 0.0f;
    }
#pragma unroll
    for (int s = 0; s < kThreadStreams; ++s) {
      const int r = ty * kThreadStreams + s;
      if (r >= nb) break;
      float a[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) a[q] = acc[s][q] + bias[q];
      float c = old[s];
      const float h_new = Cell<kLstm>(a, old[s], &c);
      if (kLstm) state[rows[r] + H + j] = c;
      out[static_cast<int64_t>(b0 + r) * H + j] = h_new;
    }
  }
  if (counters != nullptr) WriteBackWhenLast(state, counters, rows, out, b0, nb, H);
}

// kCluster: the whole stack in one launch, for few streams and H <= kClusterMaxUnits *
// kClusterMaxBlocks. A thread-block cluster of C blocks covers one tile of kClusterStreams
// streams: block `rank` owns units [rank * UB, + UB), a warp each, as in StepWarpKernel (its
// rows in registers, four or eight streams reduced together). Every block first stages all the
// tile's old states (each layer's h, and c of its own units) into shared memory; after one cluster
// barrier no block reads the slab's states again, so each writes its new h and c straight into
// the slab. Layer l + 1's input, layer l's new h, travels through distributed shared memory:
// each block leaves its units' share in `hbuf` (two buffers, alternating by layer) and, after
// a cluster barrier, gathers the others'. So a step costs one launch and L cluster barriers,
// with no counters and no second pass over the slab.
constexpr int kClusterStreams = 8;
constexpr int kClusterMaxBlocks = 8;  // the portable cluster size
constexpr int kClusterMinUnits = 16;  // warps per block while blocks are left
constexpr int kClusterMaxUnits = 16;
constexpr int kClusterKPL = 8;  // each layer's I + H <= 256
constexpr int kClusterKp = 32 * kClusterKPL;
constexpr int kClusterMaxLayers = 8;

// Floats of StepClusterKernel's dynamic shared memory: staged inputs and states, and hbuf.
__host__ __device__ constexpr int ClusterSmemFloats(int L, int UB) {
  return L * kClusterStreams * kClusterKp + (L + 2) * kClusterStreams * UB;
}

struct StackWeights {
  Weights layer[kClusterMaxLayers];
};

// A lane's share of the four quantities' dot products for the first kU streams of a tile:
// a[u * 4 + q] = sum over its columns lane + 32 i of wr[q][i] * x[u][lane + 32 i] (x rows of
// kClusterKp floats in shared memory).
template <int kU>
__device__ __forceinline__ void ClusterSums(float (&a)[4 * kU],
                                            const float (&wr)[kQuantities][kClusterKPL],
                                            const float* x, int lane) {
#pragma unroll
  for (int n = 0; n < 4 * kU; ++n) a[n] = 0.0f;
#pragma unroll
  for (int i = 0; i < kClusterKPL; ++i) {
#pragma unroll
    for (int u = 0; u < kU; ++u) {
      const float xv = x[u * kClusterKp + lane + 32 * i];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) a[u * 4 + q] = fmaf(wr[q][i], xv, a[u * 4 + q]);
    }
  }
}

template <bool kLstm>
__device__ __forceinline__ void LoadRows(float (&wr)[kQuantities][kClusterKPL],
                                         float (&bias)[kQuantities], const Weights& w, int j,
                                         int lane, int I, int H) {
  if (j >= H) return;
#pragma unroll
  for (int q = 0; q < kQuantities; ++q) {
    const int64_t row = static_cast<int64_t>(Row<kLstm>(q)) * H + j;
    const float* wx = UsesX<kLstm>(q) ? w.w_ih + row * I : nullptr;
    const float* wh = UsesH<kLstm>(q) ? w.w_hh + row * H - I : nullptr;
    bias[q] = (wx != nullptr ? w.b_ih[row] : 0.0f) + (wh != nullptr ? w.b_hh[row] : 0.0f);
#pragma unroll
    for (int i = 0; i < kClusterKPL; ++i) {
      const int k = lane + 32 * i;
      wr[q][i] =
          k < I ? (wx != nullptr ? wx[k] : 0.0f) : (k < I + H && wh != nullptr ? wh[k] : 0.0f);
    }
  }
}

// With kForecast (RecurrentStepForecast), `inp` is the raw ticks, standardised as they are
// staged, and the top layer's h' goes through distributed shared memory like any layer's, so
// that each block gathers all of it and its warps compute outputs of the head, de-standardised,
// into `out` (B, O) instead of h'.
//
// One step of stream tile `tile`, the body of StepClusterKernel and of each turn of
// StepResidentKernel. kResident: the kernel outlives the step, so what an earlier step of this
// SM may hold in L1 is stale: the states are read past L1 (ld.cg); the slots and ticks are
// block 0's shared memory; and the forecasts go into block 0's shared memory (`ybuf`, after
// hbuf), from where one warp writes them out, so that a single fence at system scope covers
// them before the step is posted done.
template <bool kLstm, bool kForecast, bool kResident>
__device__ __forceinline__ void ClusterStep(float* out, float* slab, const int32_t* slots,
                                            const float* inp, const StackWeights& weights, int B,
                                            int I0, int H, int L, int UB, const StepForecast& fc,
                                            int tile) {
  namespace cg = cooperative_groups;
  constexpr unsigned kAll = 0xffffffffu;
  const cg::cluster_group cluster = cg::this_cluster();
  extern __shared__ float smem[];
  float* xh = smem;                                   // (L, kClusterStreams, kClusterKp)
  float* cs = xh + L * kClusterStreams * kClusterKp;  // (L, kClusterStreams, UB)
  float* hbuf = cs + L * kClusterStreams * UB;        // (2, kClusterStreams, UB)
  __shared__ int64_t rows[kClusterStreams];
  const int64_t SL = (kLstm ? 2 : 1) * int64_t{H}, S = L * SL;
  const int b0 = tile * kClusterStreams, nb = min(kClusterStreams, B - b0);
  const int rank = static_cast<int>(cluster.block_rank()), j0 = rank * UB;
  const int lane = threadIdx.x % 32, w_local = threadIdx.x / 32, j = j0 + w_local;
  const int threads = blockDim.x;

  // The layers' weight pointers in shared memory: a dynamic index into the kernel parameter
  // would copy it to local memory, and a switch over layers would repeat LoadRows' code.
  __shared__ Weights layer_weights[kClusterMaxLayers];
  if (threadIdx.x < L) layer_weights[threadIdx.x] = weights.layer[threadIdx.x];
  // The same for the targets' features (read by output); constant indices into the parameter.
  __shared__ int target_feature[kStepForecastMaxTargets];
  if (kForecast) {
#pragma unroll
    for (int k = 0; k < kStepForecastMaxTargets; ++k) {
      if (threadIdx.x == k) target_feature[k] = fc.target_feature[k];
    }
  }
  float wr[kQuantities][kClusterKPL] = {}, bias[kQuantities] = {};
  LoadRows<kLstm>(wr, bias, weights.layer[0], j, lane, I0, H);
  // The bias of the quantity this lane ends the reduction with.
  const int q_mine = (lane >> 1) & 3;
  const auto pick_bias = [&]() {
    return q_mine == 0 ? bias[0] : q_mine == 1 ? bias[1] : q_mine == 2 ? bias[2] : bias[3];
  };
  float bias_mine = pick_bias();
  if (threadIdx.x < nb) rows[threadIdx.x] = static_cast<int64_t>(slots[b0 + threadIdx.x]) * S;
  for (int e = threadIdx.x; e < L * kClusterStreams * kClusterKp; e += threads) xh[e] = 0.0f;
  __syncthreads();
  // Asynchronous copies (cp.async): every element in flight at once, no registers held. Thread
  // t stays on column hk = t % H of the h rows (and unit cu = t % UB of the c rows) and walks
  // the (layer, stream) rows, so the only divisions are one per row.
  const int hk = threadIdx.x % H, h_first = threadIdx.x / H, h_per = threads / H;  // >= 4 rows
  if (h_first < h_per) {
    for (int lr = h_first; lr < L * nb; lr += h_per) {
      const int l = lr / nb, r = lr - l * nb;
      float* dst = xh + (l * kClusterStreams + r) * kClusterKp + (l == 0 ? I0 : H) + hk;
      const float* src = slab + rows[r] + l * SL + hk;
      if (kResident) {
        *dst = __ldcg(src);
      } else {
        __pipeline_memcpy_async(dst, src, sizeof(float));
      }
    }
  }
  if (kLstm) {
    const int cu = threadIdx.x % UB;
    if (j0 + cu < H) {
      for (int lr = threadIdx.x / UB; lr < L * nb; lr += threads / UB) {
        const int l = lr / nb, r = lr - l * nb;
        float* dst = cs + (l * kClusterStreams + r) * UB + cu;
        const float* src = slab + rows[r] + l * SL + H + j0 + cu;
        if (kResident) {
          *dst = __ldcg(src);
        } else {
          __pipeline_memcpy_async(dst, src, sizeof(float));
        }
      }
    }
  }
  for (int e = threadIdx.x; e < nb * I0; e += threads) {
    const int r = e / I0, k = e - r * I0;
    const float* src = inp + static_cast<int64_t>(b0 + r) * I0 + k;
    float* dst = xh + r * kClusterKp + k;
    if (kForecast) {
      // A tick, read (from host memory, perhaps) and standardised as Standardize does.
      float v = *src;
      if (fc.x_mean != nullptr) v = __fdiv_rn(__fsub_rn(v, fc.x_mean[k]), fc.x_std[k]);
      *dst = v;
    } else {
      __pipeline_memcpy_async(dst, src, sizeof(float));
    }
  }
  // Column hk of a layer's h' lives in block h_owner's hbuf, at h_at: gathered into rows of
  // `dst` (kClusterKp apart) from every block's share in `hb`.
  const int h_owner = hk / UB, h_at = hk - h_owner * UB;
  const auto gather_h = [=](const float* hb, float* dst) {
    if (h_first >= h_per) return;
    const float* remote = cluster.map_shared_rank(hb, h_owner);
    for (int r = h_first; r < nb; r += h_per) dst[r * kClusterKp + hk] = remote[r * UB + h_at];
  };
  __pipeline_commit();
  __pipeline_wait_prior(0);
  // Every block of the cluster holds the old states it needs: from here on they may change.
  cluster.sync();
  // A lane's new state of the layer it just ran (at most one stream per lane and layer), stored
  // into the slab after the next barrier's arrival: before it, the arrival's release would wait
  // for the stores to reach memory.
  float* pending_state = nullptr;
  float pending_h = 0.0f, pending_c = 0.0f;
  const auto flush_state = [&]() {
    if (pending_state == nullptr) return;
    pending_state[j] = pending_h;
    if (kLstm) pending_state[H + j] = pending_c;
    pending_state = nullptr;
  };

  for (int l = 0; l < L; ++l) {
    const int I = l == 0 ? I0 : H;
    const float* x_l = xh + l * kClusterStreams * kClusterKp;
    float* hb = hbuf + (l % 2) * kClusterStreams * UB;
    if (j < H) {
      // The cell of stream r from its four activated quantities g, run by one lane.
      const auto cell = [&](int r, const float(&g)[kQuantities]) {
        float h_new;
        if (kLstm) {
          const float c = g[1] * cs[(l * kClusterStreams + r) * UB + w_local] + g[0] * g[2];
          h_new = g[3] * tanhf(c);
          pending_c = c;
        } else {
          const float n = tanhf(g[2] + g[0] * g[3]);
          h_new = (1.0f - g[1]) * n + g[1] * x_l[r * kClusterKp + I + j];
        }
        pending_state = slab + rows[r] + l * SL;
        pending_h = h_new;
        if (kForecast || l + 1 < L) {
          hb[r * UB + w_local] = h_new;
        } else {
          out[static_cast<int64_t>(b0 + r) * H + j] = h_new;
        }
      };
      if (nb > 4) {
        // Five to eight streams in one pass: 32 sums, one reduction (lane l ends with quantity
        // l & 3 of stream l >> 2), instead of two passes of four one after the other.
        float a[32];
        ClusterSums<kClusterStreams>(a, wr, x_l, lane);
        HalvingSum<32>(a, lane);
        const int q = lane & 3;
        const float b = q == 0 ? bias[0] : q == 1 ? bias[1] : q == 2 ? bias[2] : bias[3];
        const float act = ActivateQuantity<kLstm>(a[0] + b, q);
        float g[kQuantities];
        g[0] = act;
#pragma unroll
        for (int k = 1; k < kQuantities; ++k) g[k] = __shfl_down_sync(kAll, act, k);
        const int r = lane / 4;
        if (q == 0 && r < nb) cell(r, g);
      } else {
        float a[16];
        ClusterSums<4>(a, wr, x_l, lane);
        HalvingSum<16>(a, lane);
        // Each lane activates its own sum (quantity q = (lane >> 1) & 3 of stream lane >> 3),
        // so the warp runs one activation per lane instead of four per stream; lane 8u then
        // gathers stream u's four and runs the rest of the cell.
        const float act = ActivateQuantity<kLstm>(a[0] + bias_mine, (lane >> 1) & 3);
        float g[kQuantities];
        g[0] = act;
#pragma unroll
        for (int q = 1; q < kQuantities; ++q) g[q] = __shfl_down_sync(kAll, act, 2 * q);
        const int r = lane / 8;
        if (lane % 8 == 0 && r < nb) cell(r, g);
      }
    }
    if (l + 1 == L) break;
    // The layer's states go out and the next layer's rows load while the cluster meets.
    ClusterArrive();
    flush_state();
    LoadRows<kLstm>(wr, bias, layer_weights[l + 1], j, lane, H, H);
    bias_mine = pick_bias();
    ClusterWait();
    gather_h(hb, xh + (l + 1) * kClusterStreams * kClusterKp);
    // The last gather: no block reads another's hbuf after it, which the final barrier (its
    // wait at the end) ensures before any block leaves.
    if (!kForecast && l + 2 == L) ClusterArrive();
    __syncthreads();
  }
  if (kForecast) {
    // The head: warp w of the cluster computes outputs w, w + C * UB, ... of the tile's streams
    // from the whole top h', gathered into layer 0's staging rows (no longer read by anyone).
    const int warps = static_cast<int>(cluster.num_blocks()) * UB;
    const int w_global = rank * UB + w_local;
    float hw[kClusterKPL];  // the first output's head row, loaded while the cluster meets
    ClusterArrive();
    flush_state();
#pragma unroll
    for (int i = 0; i < kClusterKPL; ++i) {
      const int k = lane + 32 * i;
      hw[i] = w_global < fc.outputs && k < H ? fc.head_weight[int64_t{w_global} * H + k] : 0.0f;
    }
    const float* hb = hbuf + ((L - 1) % 2) * kClusterStreams * UB;
    ClusterWait();
    gather_h(hb, xh);
    ClusterArrive();  // the last remote read; the wait at the end keeps every block till all are
    __syncthreads();
    const int KQ = fc.targets * fc.quantiles;
    for (int o = w_global; o < fc.outputs; o += warps) {
      if (o != w_global) {
#pragma unroll
        for (int i = 0; i < kClusterKPL; ++i) {
          const int k = lane + 32 * i;
          hw[i] = k < H ? fc.head_weight[int64_t{o} * H + k] : 0.0f;
        }
      }
      float m = 0.0f, s = 1.0f;
      if (fc.y_mean != nullptr) {
        const int f = target_feature[(o % KQ) / fc.quantiles];
        m = fc.y_mean[f];
        s = fc.y_std[f];
      }
      const float b = fc.head_bias[o];
      for (int r = 0; r < nb; ++r) {
        float a = 0.0f;
#pragma unroll
        for (int i = 0; i < kClusterKPL; ++i)
          a = fmaf(hw[i], xh[r * kClusterKp + lane + 32 * i], a);
#pragma unroll
        for (int offset = 16; offset > 0; offset /= 2) a += __shfl_xor_sync(kAll, a, offset);
        if (lane == 0) {
          const float v = a + b;
          const float y = fc.y_mean != nullptr ? __fadd_rn(__fmul_rn(v, s), m) : v;
          if (kResident) {
            // Into block 0's (kClusterStreams, outputs) forecasts, after hbuf.
            cluster.map_shared_rank(hbuf + 2 * kClusterStreams * UB, 0)[r * fc.outputs + o] = y;
          } else {
            out[static_cast<int64_t>(b0 + r) * fc.outputs + o] = y;
          }
        }
      }
    }
  }
  flush_state();
  // No block leaves while another may still read its hbuf.
  if (kForecast || L > 1) ClusterWait();
}

template <bool kLstm, bool kForecast>
__global__ void __launch_bounds__(kClusterMaxUnits * 32, 1)
    StepClusterKernel(float* out, float* slab, const int32_t* slots, const float* inp,
                      StackWeights weights, int B, int I0, int H, int L, int UB, StepForecast fc) {
  ClusterStep<kLstm, kForecast, false>(out, slab, slots, inp, weights, B, I0, H, L, UB, fc,
                                       static_cast<int>(blockIdx.y));
}

__device__ __forceinline__ long long GlobalNanoseconds() {
  long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// Reads past every cache, as a relaxed load at system scope (the host writes the mailbox):
// one 16-byte access, or one word.
__device__ __forceinline__ uint4 LoadChunk(const uint32_t* p) {
  uint4 v;
  asm volatile("ld.relaxed.sys.global.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p)
               : "memory");
  return v;
}
__device__ __forceinline__ unsigned LoadWord(const uint32_t* p) {
  unsigned v;
  asm volatile("ld.relaxed.sys.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

// The resident step: one cluster (one tile of up to kClusterStreams streams) that waits for
// steps posted in `box` and runs each as StepClusterKernel would. Block 0's first warp polls
// chunk 0 of the mailbox (each read crosses the bus: about a microsecond); once its tag changes
// it reads the step's chunks, and again until every tag is the request, unpacks the slots and
// ticks into block 0's shared memory (`payload`, after ybuf), and hands the request to the
// cluster; every block reads the slots and ticks from there. After the step the same warp
// writes the forecasts into the mailbox, fences them at system scope and sets box->done. The
// kernel leaves when box->stop is set, after idle_ns without a step, or once run_ns have passed
// since it started (so that a device-wide synchronisation elsewhere waits at most that long).
template <bool kLstm>
__global__ void __launch_bounds__(kClusterMaxUnits * 32, 1)
    StepResidentKernel(ResidentStepMailbox* box, float* slab, StackWeights weights, int I0, int H,
                       int L, int UB, StepForecast fc, unsigned seen, long long idle_ns,
                       long long run_ns) {
  namespace cg = cooperative_groups;
  constexpr unsigned kAll = 0xffffffffu;
  constexpr int kPayloadWords = kResidentChunkWords - 1;
  const cg::cluster_group cluster = cg::this_cluster();
  // What lives across steps stays in shared memory, not in registers: the step's code needs
  // all 128 a thread has (any more would spill inside its loops).
  __shared__ unsigned command;  // block 0's: the request taken, or 0 to leave
  __shared__ unsigned seen_request;
  __shared__ long long start, last, seen_at;
  extern __shared__ float smem[];
  float* const ybuf = smem + ClusterSmemFloats(L, UB);  // (kClusterStreams, outputs)
  uint32_t* const payload =
      reinterpret_cast<uint32_t*>(ybuf + kClusterStreams * fc.outputs);  // slots | ticks
  const bool poller = cluster.block_rank() == 0 && threadIdx.x < 32;     // block 0's warp 0
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (threadIdx.x == 0) {
    seen_request = seen;
    start = last = GlobalNanoseconds();
  }
  __syncthreads();
  const uint32_t* const chunks = &box->chunks[0][0];
  for (;;) {
    if (poller) {
      unsigned taken = 0;
      for (unsigned turn = 1;; ++turn) {
        const unsigned tag = LoadWord(chunks);
        if (tag != seen_request) {
          // The step's chunks, a chunk a lane and up to eight in flight at once, until every
          // tag is `tag` (the host may still be writing the later ones).
          const int rows = static_cast<int>(tag % kResidentRequestRows);
          const int words = rows * (1 + I0);
          const int count = (words + kPayloadWords - 1) / kPayloadWords;
          bool complete = true;
          for (int base = 0; base < count; base += 8 * 32) {
            uint4 v[8];
#pragma unroll
            for (int u = 0; u < 8; ++u) {
              const int c = base + u * 32 + lane;
              v[u] = c < count ? LoadChunk(chunks + c * kResidentChunkWords)
                               : make_uint4(tag, 0, 0, 0);
            }
#pragma unroll
            for (int u = 0; u < 8; ++u) {
              const int c = base + u * 32 + lane, p = c * kPayloadWords;
              complete = complete && v[u].x == tag;
              if (p < words) payload[p] = v[u].y;
              if (p + 1 < words) payload[p + 1] = v[u].z;
              if (p + 2 < words) payload[p + 2] = v[u].w;
            }
          }
          if (__all_sync(kAll, complete)) {
            if (lane == 0) seen_at = GlobalNanoseconds();
            taken = tag;
            break;
          }
          continue;
        }
        // The stop flag and the clock on every 32nd turn only.
        if (turn % 32 != 0) continue;
        if (LoadWord(&box->stop) != 0) break;
        const long long now = GlobalNanoseconds();
        if (now - last > idle_ns || now - start > run_ns) break;
      }
      if (lane == 0) command = taken;
    }
    cluster.sync();
    const unsigned request = *cluster.map_shared_rank(&command, 0);
    const int rows = static_cast<int>(request % kResidentRequestRows);
    if (request == 0 || rows < 1 || rows > kClusterStreams) {
      cluster.sync();  // block 0's shared memory stays until every block has read it
      return;
    }
    if (threadIdx.x == 0) seen_request = request;
    const uint32_t* const data = cluster.map_shared_rank(payload, 0);
    ClusterStep<kLstm, true, true>(nullptr, slab, reinterpret_cast<const int32_t*>(data),
                                   reinterpret_cast<const float*>(data + rows), weights, rows, I0,
                                   H, L, UB, fc, 0);
    if (cluster.block_rank() == 0 && threadIdx.x == 0) {
      box->step_ns = GlobalNanoseconds() - seen_at;
    }
    // Every block's forecasts are in block 0's ybuf and its states in the slab; no block reads
    // block 0's payload any more.
    cluster.sync();
    if (poller) {
      // The request and its rows again from shared memory (fewer registers held over the step).
      const unsigned done = seen_request;
      const int n = static_cast<int>(done % kResidentRequestRows) * fc.outputs;
      for (int i = lane; i < n; i += 32) box->y[i] = ybuf[i];
      if (lane == 0) {
        last = GlobalNanoseconds();
        box->kernel_ns = last - seen_at;
      }
      // The warp's stores reach host memory before `done` does.
      __threadfence_system();
      if (lane == 0) *static_cast<volatile unsigned*>(&box->done) = done;
    }
  }
}

// --- launchers

template <bool kLstm, int KPL>
absl::Status LaunchWarp(float* out, float* state, float* prev_h, int* counters,
                        const int32_t* slots, const float* inp, const Weights& w, int B, int I,
                        int H, int64_t S, cudaStream_t stream) {
  const dim3 grid((H + kWarpUnits - 1) / kWarpUnits, (B + kWarpStreams - 1) / kWarpStreams);
  const size_t smem = sizeof(float) * kWarpStreams * 32 * KPL;
  StepWarpKernel<kLstm, KPL><<<grid, kWarpThreads, smem, stream>>>(out, state, prev_h, counters,
                                                                   slots, inp, w, B, I, H, S);
  return absl::OkStatus();
}

template <bool kLstm>
absl::Status LaunchLayer(float* out, float* state, float* prev_h, int* counters,
                         const int32_t* slots, const float* inp, const Weights& w,
                         StepKernel kernel, int B, int I, int H, int64_t S, cudaStream_t stream) {
  const int K = I + H;
  if (kernel == StepKernel::kWarp) {
    if (K <= 32)
      return LaunchWarp<kLstm, 1>(out, state, prev_h, counters, slots, inp, w, B, I, H, S, stream);
    if (K <= 64)
      return LaunchWarp<kLstm, 2>(out, state, prev_h, counters, slots, inp, w, B, I, H, S, stream);
    if (K <= 128)
      return LaunchWarp<kLstm, 4>(out, state, prev_h, counters, slots, inp, w, B, I, H, S, stream);
    if (K <= 256)
      return LaunchWarp<kLstm, 8>(out, state, prev_h, counters, slots, inp, w, B, I, H, S, stream);
    return LaunchWarp<kLstm, 16>(out, state, prev_h, counters, slots, inp, w, B, I, H, S, stream);
  }
  const dim3 grid((H + kTileUnits - 1) / kTileUnits, (B + kTileStreams - 1) / kTileStreams);
  StepTiledKernel<kLstm>
      <<<grid, kTileThreads, 0, stream>>>(out, state, prev_h, counters, slots, inp, w, B, I, H, S);
  return absl::OkStatus();
}

// The cluster layout for hidden size H: C blocks of UB units; C = 0 when H is too large.
struct ClusterShape {
  int C = 0, UB = 0;
};
ClusterShape ClusterShapeOf(int64_t H) {
  // As many blocks as there are groups of kClusterMinUnits units (more SMs share the weights'
  // loads and the work), up to kClusterMaxBlocks.
  const int64_t C =
      std::min<int64_t>((H + kClusterMinUnits - 1) / kClusterMinUnits, kClusterMaxBlocks);
  const int64_t UB = (H + C - 1) / C;
  if (UB > kClusterMaxUnits) return {};
  return {static_cast<int>(C), static_cast<int>(UB)};
}

size_t ClusterSmemBytes(int L, int UB) {
  return sizeof(float) * static_cast<size_t>(ClusterSmemFloats(L, UB));
}

// The resident kernel's: ClusterSmemBytes, block 0's forecasts of a tile and its slots and ticks.
size_t ResidentSmemBytes(int L, int UB, int outputs, int I) {
  return ClusterSmemBytes(L, UB) +
         sizeof(float) * kClusterStreams * (static_cast<size_t>(outputs) + 1 + I);
}

// Whether the whole stack fits StepClusterKernel: H within a cluster, every layer's I + H within
// kClusterKp, its staged states within the default 48 KiB of shared memory.
bool ClusterFits(int64_t I, int64_t H, int L) {
  const ClusterShape shape = ClusterShapeOf(H);
  return shape.C > 0 && L <= kClusterMaxLayers && I + H <= kClusterKp && 2 * H <= kClusterKp &&
         ClusterSmemBytes(L, shape.UB) <= 48 * 1024;
}

StackWeights StackOf(const ref::RecurrentDirectionWeights* weights, int L) {
  StackWeights stack{};
  for (int l = 0; l < L; ++l) {
    stack.layer[l] = {weights[l].w_ih, weights[l].w_hh, weights[l].b_ih, weights[l].b_hh};
  }
  return stack;
}

// Launches `kernel` as `tiles` clusters (grid y) of shape.C blocks of shape.UB warps each.
template <typename... Params, typename... Args>
absl::Status LaunchClusters(void (*kernel)(Params...), ClusterShape shape, int tiles,
                            size_t smem_bytes, cudaStream_t stream, Args&&... args) {
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(shape.C), static_cast<unsigned>(tiles));
  config.blockDim = dim3(static_cast<unsigned>(shape.UB * 32));
  config.dynamicSmemBytes = smem_bytes;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(shape.C);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, std::forward<Args>(args)...));
  return absl::OkStatus();
}

template <bool kLstm, bool kForecast>
absl::Status LaunchCluster(float* out, float* slab, const int32_t* slots, const float* inp,
                           const ref::RecurrentDirectionWeights* weights, int B, int I, int H,
                           int L, const StepForecast& forecast, cudaStream_t stream) {
  const ClusterShape shape = ClusterShapeOf(H);
  return LaunchClusters(StepClusterKernel<kLstm, kForecast>, shape,
                        (B + kClusterStreams - 1) / kClusterStreams, ClusterSmemBytes(L, shape.UB),
                        stream, out, slab, slots, inp, StackOf(weights, L), B, I, H, L, shape.UB,
                        forecast);
}

template <bool kLstm>
absl::Status LaunchResident(ResidentStepMailbox* box, float* slab,
                            const ref::RecurrentDirectionWeights* weights, int I, int H, int L,
                            const StepForecast& forecast, unsigned seen, long long idle_ns,
                            long long run_ns, cudaStream_t stream) {
  const ClusterShape shape = ClusterShapeOf(H);
  return LaunchClusters(StepResidentKernel<kLstm>, shape, 1,
                        ResidentSmemBytes(L, shape.UB, forecast.outputs, I), stream, box, slab,
                        StackOf(weights, L), I, H, L, shape.UB, forecast, seen, idle_ns, run_ns);
}

// A forecast step's weights: every layer's, the head's, and the standardisation's in pairs.
absl::Status CheckForecastWeights(const char* who, const ref::RecurrentDirectionWeights* weights,
                                  int L, const StepForecast& forecast) {
  if (weights == nullptr || forecast.head_weight == nullptr || forecast.head_bias == nullptr ||
      (forecast.x_mean == nullptr) != (forecast.x_std == nullptr) ||
      (forecast.y_mean == nullptr) != (forecast.y_std == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": null pointer"));
  }
  for (int l = 0; l < L; ++l) {
    const ref::RecurrentDirectionWeights& lw = weights[l];
    if (lw.w_ih == nullptr || lw.w_hh == nullptr || lw.b_ih == nullptr || lw.b_hh == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(who, ": layer ", l, " has a null weight"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

static_assert(kResidentStepMaxStreams == kClusterStreams, "the resident step is one tile");
static_assert(kResidentStepMaxLayers == kClusterMaxLayers, "the resident step is one cluster");

bool ResidentStepFits(int64_t I, int64_t H, int L, const StepForecast& forecast) {
  return I <= kResidentStepMaxFeatures && forecast.outputs <= kResidentStepMaxOutputs &&
         RecurrentStepForecastFits(kResidentStepMaxStreams, I, H, L, forecast) &&
         ResidentSmemBytes(L, ClusterShapeOf(H).UB, forecast.outputs, static_cast<int>(I)) <=
             48 * 1024;
}

int64_t RecurrentStepCounterInts(int64_t B) {
  // One per stream tile of the smaller tile size (kWarp's).
  return std::max<int64_t>(1, (B + kWarpStreams - 1) / kWarpStreams);
}

absl::Status RecurrentStepForward(float* out, float* scratch, float* slab, int* counters,
                                  const int32_t* slots, const float* inp,
                                  const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                  StepKernel kernel, int64_t B, int64_t I, int64_t H, int L,
                                  cudaStream_t stream) {
  if (B < 0 || I < 1 || H < 1 || L < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStepForward: bad sizes B=", B, " I=", I, " H=", H, " L=", L));
  }
  constexpr int64_t kMaxInt = (int64_t{1} << 31) - 1;
  if (B * std::max(I, H) > kMaxInt || I + H > kMaxInt / 4) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStepForward: B=", B, " I=", I, " H=", H, " too large"));
  }
  if (B == 0) return absl::OkStatus();
  if (out == nullptr || slab == nullptr || counters == nullptr || slots == nullptr ||
      inp == nullptr || weights == nullptr || (L > 1 && scratch == nullptr)) {
    return absl::InvalidArgumentError("RecurrentStepForward: null pointer");
  }
  const bool lstm = cell == StepCell::kLstm;
  for (int l = 0; l < L; ++l) {
    const ref::RecurrentDirectionWeights& lw = weights[l];
    if (lw.w_ih == nullptr || lw.w_hh == nullptr || lw.b_ih == nullptr || lw.b_hh == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("RecurrentStepForward: layer ", l, " has a null weight"));
    }
  }
  const bool few = kernel == StepKernel::kCluster ||
                   (kernel == StepKernel::kAuto && B <= kStepClusterMaxStreams);
  if (few && ClusterFits(I, H, L)) {
    const int b = static_cast<int>(B), i = static_cast<int>(I), h = static_cast<int>(H);
    const StepForecast none;
    const absl::Status launched =
        lstm
            ? LaunchCluster<true, false>(out, slab, slots, inp, weights, b, i, h, L, none, stream)
            : LaunchCluster<false, false>(out, slab, slots, inp, weights, b, i, h, L, none, stream);
    RETURN_IF_ERROR(launched);
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    return absl::OkStatus();
  }
  const int64_t SL = (lstm ? 2 : 1) * H, S = L * SL;
  const float* layer_in = inp;
  for (int l = 0; l < L; ++l) {
    const ref::RecurrentDirectionWeights& lw = weights[l];
    const int width = static_cast<int>(l == 0 ? I : H);
    StepKernel k = kernel;
    if (k == StepKernel::kAuto || k == StepKernel::kCluster || width + H > 32 * 16) {
      k = B <= kStepWarpMaxStreams && width + H <= 32 * 16 ? StepKernel::kWarp : StepKernel::kTiled;
    }
    // Layers alternate between out and scratch so that the top one writes out.
    float* layer_out = (L - 1 - l) % 2 == 0 ? out : scratch;
    float* prev_h = l > 0 ? slab + (l - 1) * SL : nullptr;
    int* top_counters = l == L - 1 ? counters : nullptr;
    const Weights w{lw.w_ih, lw.w_hh, lw.b_ih, lw.b_hh};
    const int b = static_cast<int>(B), h = static_cast<int>(H);
    RETURN_IF_ERROR(lstm ? LaunchLayer<true>(layer_out, slab + l * SL, prev_h, top_counters, slots,
                                             layer_in, w, k, b, width, h, S, stream)
                         : LaunchLayer<false>(layer_out, slab + l * SL, prev_h, top_counters, slots,
                                              layer_in, w, k, b, width, h, S, stream));
    CUDA_RETURN_IF_ERROR(cudaGetLastError());
    layer_in = layer_out;
  }
  return absl::OkStatus();
}

bool RecurrentStepForecastFits(int64_t B, int64_t I, int64_t H, int L, const StepForecast& f) {
  return B >= 1 && B <= kStepClusterMaxStreams && I >= 1 && H >= 1 && L >= 1 &&
         ClusterFits(I, H, L) && f.outputs >= 1 && f.targets >= 1 &&
         f.targets <= kStepForecastMaxTargets && f.quantiles >= 1 &&
         f.outputs % (f.targets * f.quantiles) == 0;
}

absl::Status RecurrentStepForecast(float* y, float* slab, const int32_t* slots, const float* x,
                                   const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                   int64_t B, int64_t I, int64_t H, int L,
                                   const StepForecast& forecast, cudaStream_t stream) {
  if (!RecurrentStepForecastFits(B, I, H, L, forecast)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RecurrentStepForecast: B=", B, " I=", I, " H=", H, " L=", L, " outputs=", forecast.outputs,
        " targets=", forecast.targets, " quantiles=", forecast.quantiles,
        " do not fit one cluster (RecurrentStepForecastFits)"));
  }
  if (y == nullptr || slab == nullptr || slots == nullptr || x == nullptr) {
    return absl::InvalidArgumentError("RecurrentStepForecast: null pointer");
  }
  RETURN_IF_ERROR(CheckForecastWeights("RecurrentStepForecast", weights, L, forecast));
  const int b = static_cast<int>(B), i = static_cast<int>(I), h = static_cast<int>(H);
  const absl::Status launched =
      cell == StepCell::kLstm
          ? LaunchCluster<true, true>(y, slab, slots, x, weights, b, i, h, L, forecast, stream)
          : LaunchCluster<false, true>(y, slab, slots, x, weights, b, i, h, L, forecast, stream);
  RETURN_IF_ERROR(launched);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

absl::Status LaunchResidentStep(ResidentStepMailbox* box, float* slab,
                                const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                int64_t I, int64_t H, int L, const StepForecast& forecast,
                                uint32_t seen, int64_t idle_us, int64_t max_run_us,
                                cudaStream_t stream) {
  if (!ResidentStepFits(I, H, L, forecast)) {
    return absl::InvalidArgumentError(absl::StrCat("LaunchResidentStep: I=", I, " H=", H, " L=", L,
                                                   " outputs=", forecast.outputs,
                                                   " do not fit one cluster (ResidentStepFits)"));
  }
  if (box == nullptr || slab == nullptr) {
    return absl::InvalidArgumentError("LaunchResidentStep: null pointer");
  }
  if (idle_us < 1 || max_run_us < 1) {
    return absl::InvalidArgumentError("LaunchResidentStep: idle_us and max_run_us must be >= 1");
  }
  RETURN_IF_ERROR(CheckForecastWeights("LaunchResidentStep", weights, L, forecast));
  const int i = static_cast<int>(I), h = static_cast<int>(H);
  const long long idle_ns = idle_us * 1000, run_ns = max_run_us * 1000;
  const absl::Status launched = cell == StepCell::kLstm
                                    ? LaunchResident<true>(box, slab, weights, i, h, L, forecast,
                                                           seen, idle_ns, run_ns, stream)
                                    : LaunchResident<false>(box, slab, weights, i, h, L, forecast,
                                                            seen, idle_ns, run_ns, stream);
  RETURN_IF_ERROR(launched);
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

}  // namespace forecastd::cuda
