#include "kernels/cuda/recurrent_sequence.h"

#include <cooperative_groups.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/recurrent_cell.cuh"

namespace forecastd::cuda {
namespace {

namespace cg = cooperative_groups;
using cell::BiasOf;
using cell::Cell;
using cell::HalvingSum;
using cell::kQuantities;
using cell::Row;
using cell::UsesX;
using cell::WeightAt;
using cell::Weights;

// One layer (wavefront) or one direction (sweep) as a cluster's blocks see it.
struct Slot {
  Weights w;
  const float* proj;  // (B, T, G*H) W_ih x + b_ih, or nullptr: the x part is in [x | h]
  int x_width;        // columns of [x | h] before h: I (layer 0's input), H (the layer below), 0
  int steps;          // time steps it runs
  int reverse;        // 1: time runs T-1 down
  int out_offset;     // column of its h in out_seq / out_last rows (d * H)
};

struct Params {
  // Cluster (tile, y) runs slots [y * layers, + layers): the wavefront's layers (y = 0), or the
  // sweep's direction y (layers = 1).
  Slot slot[kSequenceMaxLayers];
  const float* x;   // (B, T, I): the input of a slot whose x_width is I and which has no proj
  float* out_seq;   // (B, T, out_width) or nullptr
  float* out_last;  // (B, out_width) or nullptr
  int B, T, I, H;
  int layers;     // layers a cluster runs
  int P;          // blocks per layer
  int UB;         // units per block (warps * kUnits)
  int out_width;  // ND * H
  int round16;    // the products' operands (weights, inputs, h) rounded: 0 no, 1 bf16, 2 fp16
};

// The most values of layer 0's input a thread stages per step.
constexpr int kXPerThread = 4;
constexpr int kMaxWarps = 8;

// v rounded to the 16-bit type of `mode` (Params::round16) and back; fp16 saturates at its
// largest finite value. Without kRound16 (fp32 operands) v itself, with no test of `mode` on the
// recurrence's critical path.
template <bool kRound16>
__device__ __forceinline__ float Round16(float v, int mode) {
  if constexpr (kRound16) {
    if (mode == 1) return __bfloat162float(__float2bfloat16_rn(v));
    if (mode == 2) return __half2float(__float2half_rn(fminf(fmaxf(v, -65504.0f), 65504.0f)));
  }
  return v;
}

// The shared-memory address `local` has in the block of cluster rank `rank`.
__device__ __forceinline__ uint32_t MapToRank(uint32_t local, uint32_t rank) {
  uint32_t remote;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;\n" : "=r"(remote) : "r"(local), "r"(rank));
  return remote;
}
// Writes v at `address` (another block's shared memory) and counts its 4 bytes on that block's
// mbarrier at `barrier`: the data and its arrival travel together, with no fence.
__device__ __forceinline__ void SendToCluster(uint32_t address, float v, uint32_t barrier) {
  asm volatile(
      "st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];\n" ::"r"(address),
      "r"(__float_as_uint(v)), "r"(barrier)
      : "memory");
}
__device__ __forceinline__ void InitBarrier(uint32_t barrier) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;\n" ::"r"(barrier) : "memory");
}
// The block's own arrival on `barrier`, with the bytes its current phase is to receive.
__device__ __forceinline__ void ExpectBytes(uint32_t barrier, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(barrier), "r"(bytes)
               : "memory");
}
// Waits until the phase of `barrier` with this parity has completed.
__device__ __forceinline__ void WaitBarrier(uint32_t barrier, uint32_t parity) {
  uint32_t done = 0;
  while (!done) {
    asm volatile(
        "{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        " selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(done)
        : "r"(barrier), "r"(parity)
        : "memory");
  }
}

// --- kernels

// Grid (C * tiles, ND), clusters of C = layers * P blocks: cluster (tile, y) runs sequences
// [tile * kStreams, + kStreams). Block `rank` serves layer rank / P, units [part * UB, + UB) of
// it (part = rank % P); warp w owns units part * UB + w * kUnits + [0, kUnits). Lane l holds
// columns l, l + 32, ... (kKpl of them) of each owned unit's four rows over [x | h] in registers
// for the whole launch.
//
// Each block keeps [x | h] of its layer's current step for the tile's sequences in shared
// memory, twice (`buf`, by step parity). At step s a layer-l block reads parity s % 2 (its own
// layer's h at t - 1 and the layer below's h at t, t = s - l) and each warp sums the
// 4 * kUnits * kStreams dot products of its units in registers (HalvingSum). Lane l then runs
// the cell of one (unit, sequence) pair, pair l % (kUnits * kStreams) (c stays in its
// registers; the other copies of the pair compute the same), and the lanes send h' into parity
// (s + 1) % 2 of every block of its layer (their h part) and of the layer above (their x part)
// with st.async, each value counted on the receiver's mbarrier of that parity. Phase s + 1 of a
// block is complete when every value it is owed for step s + 1 has landed, and when each block
// of the layer above has sent a token saying it has finished reading its own step s: that
// token is what keeps a layer from running more than a step ahead of the one above, whose
// buffers it writes. So no block waits for the whole cluster, and no fence is needed: a step
// costs the compute and one hop of distributed shared memory. Layer 0's input rows, or the
// projection rows, load from global memory a step ahead of their use, into registers that
// alternate by step parity, so no step waits for memory.
template <bool kLstm, int kUnits, int kKpl, int kStreams, bool kRound16>
__global__ void __launch_bounds__(kMaxWarps * 32, 1)
    SequenceKernel(const __grid_constant__ Params p) {
  constexpr int kKp = 32 * kKpl;
  constexpr int kPairs = kUnits * kStreams;  // (unit, sequence) pairs a warp computes
  // Units whose sums one HalvingSum takes (at most 32 values), and how many sums a warp makes.
  constexpr int kGroupUnits = kUnits * 4 * kStreams <= 32 ? kUnits : 1;
  constexpr int kGroups = kUnits / kGroupUnits;
  constexpr int kSums = kQuantities * kStreams * kGroupUnits;
  constexpr int kLanesPerSum = 32 / kSums;  // HalvingSum leaves sum n in lanes n * this
  constexpr int kDestStride = 32 / kPairs;  // lanes holding the same pair's h'
  constexpr unsigned kAll = 0xffffffffu;
  extern __shared__ float buf[];                 // (2, kStreams, kKp)
  __shared__ __align__(8) uint64_t barriers[2];  // by step parity
  __shared__ float token_sink;                   // where the layer above's tokens land
  const cg::cluster_group cluster = cg::this_cluster();
  const int rank = static_cast<int>(cluster.block_rank());
  const int C = p.layers * p.P, layer = rank / p.P, part = rank % p.P;
  const Slot& slot = p.slot[blockIdx.y * p.layers + layer];
  const int b0 = static_cast<int>(blockIdx.x / C) * kStreams, nb = min(kStreams, p.B - b0);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  const int H = p.H, T = p.T, xw = slot.x_width, GH = (kLstm ? 4 : 3) * H;
  const int steps_here = slot.steps;
  const bool has_proj = slot.proj != nullptr, x_from_input = !has_proj && layer == 0 && xw > 0;
  const bool top = layer == p.layers - 1, reverse = slot.reverse != 0;
  const int j0 = part * p.UB + warp * kUnits;  // the warp's first unit
  // This lane's pair: unit j0 + pu, sequence st.
  const int pu = (lane / kStreams) % kUnits, st = lane % kStreams, jp = j0 + pu;
  const bool pair_valid = jp < H && st < nb;

  float wr[kUnits][kQuantities][kKpl];
#pragma unroll
  for (int u = 0; u < kUnits; ++u) {
    const int j = j0 + u;
#pragma unroll
    for (int q = 0; q < kQuantities; ++q) {
#pragma unroll
      for (int i = 0; i < kKpl; ++i)
        wr[u][q][i] = j < H ? Round16<kRound16>(WeightAt<kLstm>(slot.w, q, j, lane + 32 * i, xw, H),
                                                p.round16)
                            : 0.0f;
    }
  }
  float bias[kQuantities];
#pragma unroll
  for (int q = 0; q < kQuantities; ++q) {
    bias[q] = jp < H ? BiasOf<kLstm>(slot.w, q, jp, H, /*with_ih=*/!has_proj) : 0.0f;
  }
  for (int e = static_cast<int>(threadIdx.x); e < 2 * kStreams * kKp;
       e += static_cast<int>(blockDim.x)) {
    buf[e] = 0.0f;
  }

  // Layer 0's input: thread element n is row x_row[n] (< 0: none), column x_col[n].
  int x_row[kXPerThread], x_col[kXPerThread];
#pragma unroll
  for (int n = 0; n < kXPerThread; ++n) {
    const int e = static_cast<int>(threadIdx.x + n * blockDim.x), r = e / p.I;
    x_row[n] = x_from_input && r < nb ? r : -1;
    x_col[n] = e - r * p.I;
  }
  const auto time_of = [&](int t) { return reverse ? T - 1 - t : t; };
  const auto load_x = [&](int t, float(&regs)[kXPerThread]) {
    const int64_t tt = time_of(t);
#pragma unroll
    for (int n = 0; n < kXPerThread; ++n) {
      regs[n] = x_row[n] >= 0 && t < steps_here
                    ? p.x[((b0 + x_row[n]) * static_cast<int64_t>(T) + tt) * p.I + x_col[n]]
                    : 0.0f;
    }
  };
  const auto store_x = [&](int par, const float(&regs)[kXPerThread]) {
#pragma unroll
    for (int n = 0; n < kXPerThread; ++n) {
      if (x_row[n] >= 0) {
        buf[(par * kStreams + x_row[n]) * kKp + x_col[n]] = Round16<kRound16>(regs[n], p.round16);
      }
    }
  };
  // The projection of this lane's pair at step t, for the quantities with an x part.
  const float* proj_row =
      has_proj && pair_valid ? slot.proj + static_cast<int64_t>(b0 + st) * T * GH + jp : nullptr;
  const auto load_proj = [&](int t, float(&regs)[kQuantities]) {
    const float* at = proj_row != nullptr && t < steps_here
                          ? proj_row + static_cast<int64_t>(time_of(t)) * GH
                          : nullptr;
#pragma unroll
    for (int q = 0; q < kQuantities; ++q) {
      regs[q] = at != nullptr && UsesX<kLstm>(q) ? at[Row<kLstm>(q) * H] : 0.0f;
    }
  };

  // What a block is owed for step k (phase k): its layer's h' and the layer below's when they
  // ran step k - 1, and a token from each block of the layer above.
  const int steps = steps_here + p.layers - 1;
  const auto ran = [&](int l, int s) { return s - l >= 0 && s - l < steps_here; };
  const uint32_t layer_bytes = static_cast<uint32_t>(sizeof(float) * kStreams * H);
  const auto owed = [&](int k) {
    uint32_t bytes = 0;
    if (ran(layer, k - 1)) bytes += layer_bytes;
    if (layer > 0 && ran(layer - 1, k - 1)) bytes += layer_bytes;
    if (!top) bytes += static_cast<uint32_t>(sizeof(float) * p.P);
    return bytes;
  };
  const uint32_t buf_address = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
  const uint32_t barrier_address = static_cast<uint32_t>(__cvta_generic_to_shared(barriers));
  const uint32_t sink_address = static_cast<uint32_t>(__cvta_generic_to_shared(&token_sink));
  if (threadIdx.x == 0) {
    InitBarrier(barrier_address);
    InitBarrier(barrier_address + 8);
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    ExpectBytes(barrier_address, 0);  // phase 0 (zero states) is complete from the start
    ExpectBytes(barrier_address + 8, owed(1));
  }

  float x_even[kXPerThread] = {}, x_odd[kXPerThread] = {};
  float pre_even[kQuantities] = {}, pre_odd[kQuantities] = {};
  __syncthreads();  // buf zeroed before layer 0's first input lands in it
  if (x_from_input) {
    load_x(0, x_odd);
    store_x(0, x_odd);
    load_x(1, x_even);  // stored into parity 1 during step 0
  }
  if (has_proj) load_proj(0, pre_even);
  float c = 0.0f;  // the pair's cell state (LSTM)
  // Where the pair's h' goes: the P blocks of its layer (their h part) and, below the top, the
  // P blocks of the layer above (their x part).
  const int dests = top ? p.P : 2 * p.P;
  cluster.sync();  // every block's buffers and barriers are ready before any value is sent

  // Step s with the registers of its parity: `pre` holds this step's projection and `pre_next`
  // receives the next one; `x_now` holds layer 0's input of the next step (stored into the other
  // buffer now) and `x_later` receives the one after.
  const auto step = [&](int s, const float(&pre)[kQuantities], float(&pre_next)[kQuantities],
                        const float(&x_now)[kXPerThread], float(&x_later)[kXPerThread]) {
    const int t = s - layer, par = s & 1;
    const bool active = t >= 0 && t < steps_here;
    if (s > 0) WaitBarrier(barrier_address + 8 * par, (s >> 1) & 1);
    float h = 0.0f;
    if (active && j0 < H) {  // warp-uniform
      const float* xh = buf + par * kStreams * kKp;
      float a[kGroups][kSums];
#pragma unroll
      for (int g = 0; g < kGroups; ++g) {
#pragma unroll
        for (int n = 0; n < kSums; ++n) a[g][n] = 0.0f;
      }
#pragma unroll
      for (int i = 0; i < kKpl; ++i) {
#pragma unroll
        for (int r = 0; r < kStreams; ++r) {
          const float v = xh[r * kKp + lane + 32 * i];
#pragma unroll
          for (int u = 0; u < kUnits; ++u) {
#pragma unroll
            for (int q = 0; q < kQuantities; ++q) {
              float& acc = a[u / kGroupUnits][((u % kGroupUnits) * kQuantities + q) * kStreams + r];
              acc = fmaf(wr[u][q][i], v, acc);
            }
          }
        }
      }
#pragma unroll
      for (int g = 0; g < kGroups; ++g) HalvingSum<kSums>(a[g], lane);
      float gates[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) {
        const int from = (((pu % kGroupUnits) * kQuantities + q) * kStreams + st) * kLanesPerSum;
        float v = __shfl_sync(kAll, a[0][0], from);
        if constexpr (kGroups > 1) {
          const float other = __shfl_sync(kAll, a[kGroups - 1][0], from);
          v = pu / kGroupUnits == 0 ? v : other;
        }
        gates[q] = v + bias[q] + pre[q];
      }
      const float h_old = kLstm || jp >= H ? 0.0f : xh[st * kKp + xw + jp];
      h = Cell<kLstm, /*kFast=*/true>(gates, h_old, &c);
      const float h_sent = Round16<kRound16>(h, p.round16);  // what the next products multiply
      if (jp < H) {
        const uint32_t next = buf_address + sizeof(float) * ((par ^ 1) * kStreams * kKp + st * kKp);
        const uint32_t next_barrier = barrier_address + 8 * (par ^ 1);
        for (int d = lane / kPairs; d < dests; d += kDestStride) {
          const bool same = d < p.P;
          const uint32_t to = same ? layer * p.P + d : (layer + 1) * p.P + (d - p.P);
          SendToCluster(MapToRank(next + sizeof(float) * (same ? xw + jp : jp), to), h_sent,
                        MapToRank(next_barrier, to));
        }
      }
    }
    if (active && x_from_input) store_x(par ^ 1, x_now);
    // Every warp of the block is done with buffer `par` (and the next input is in place).
    __syncthreads();
    if (threadIdx.x == 0 && s + 2 <= steps) ExpectBytes(barrier_address + 8 * par, owed(s + 2));
    if (layer > 0 && static_cast<int>(threadIdx.x) < p.P) {
      const uint32_t to = (layer - 1) * p.P + threadIdx.x;
      SendToCluster(MapToRank(sink_address, to), 0.0f,
                    MapToRank(barrier_address + 8 * (par ^ 1), to));
    }
    if (active) {
      if (x_from_input) load_x(t + 2, x_later);
      if (has_proj) load_proj(t + 1, pre_next);
      if (top && lane < kPairs && pair_valid) {
        const int tt = time_of(t);
        const int64_t row = static_cast<int64_t>(b0 + st);
        if (p.out_seq != nullptr) {
          p.out_seq[(row * T + tt) * p.out_width + slot.out_offset + jp] = h;
        }
        if (p.out_last != nullptr && tt == T - 1) {
          p.out_last[row * p.out_width + slot.out_offset + jp] = h;
        }
      }
    }
  };

  for (int s = 0; s < steps; s += 2) {
    step(s, pre_even, pre_odd, x_even, x_odd);
    if (s + 1 < steps) step(s + 1, pre_odd, pre_even, x_odd, x_even);
  }
  // What the last step sent (tokens included) lands before any block's memory goes away.
  WaitBarrier(barrier_address + 8 * (steps & 1), (steps >> 1) & 1);
  cluster.sync();
}

// --- launchers

// How a cluster covers a layer of H units whose [x | h] is at most `width` columns.
struct Shape {
  int kpl = 0;    // columns per lane: 8 (width <= 256) or 16 (<= 512); 0: does not fit
  int units = 0;  // units per warp: 2 or 1 (16 weights per lane and unit quantity either way)
  int P = 0;      // blocks per layer
  int UB = 0;     // units per block
  int warps = 0;  // per block
};

Shape ShapeOf(int64_t H, int64_t width, int layers) {
  Shape shape;
  if (H < 1 || layers < 1 || layers > kSequenceMaxLayers || width > 512) return {};
  shape.kpl = width <= 256 ? 8 : 16;
  shape.units = shape.kpl == 8 ? 2 : 1;
  const int64_t max_p = kSequenceMaxBlocks / layers;
  if (max_p < 1) return {};
  // As many blocks as the cluster allows: each SM then carries fewer rows a step.
  const int64_t p = std::min<int64_t>(max_p, (H + shape.units - 1) / shape.units);
  const int64_t per_block = (H + p - 1) / p;
  const int64_t ub = (per_block + shape.units - 1) / shape.units * shape.units;
  if (ub / shape.units > kMaxWarps) return {};
  shape.UB = static_cast<int>(ub);
  shape.warps = static_cast<int>(ub / shape.units);
  shape.P = static_cast<int>((H + ub - 1) / ub);
  return shape;
}

int StreamsFor(int64_t B) { return B <= 1 ? 1 : B <= 2 ? 2 : B <= 4 ? 4 : 8; }

// Lets the instantiation launch clusters of 16 blocks (more than the portable 8), once per
// device (the flag is per kernel: one per instantiation).
template <bool kLstm, int kUnits, int kKpl, int kStreams, bool kRound16>
absl::Status AllowLargeClusters() {
  const auto kernel = SequenceKernel<kLstm, kUnits, kKpl, kStreams, kRound16>;
  static std::atomic<uint64_t> done{0};
  int device = 0;
  CUDA_RETURN_IF_ERROR(cudaGetDevice(&device));
  const uint64_t bit = uint64_t{1} << (device % 64);
  if ((done.load(std::memory_order_acquire) & bit) != 0) return absl::OkStatus();
  CUDA_RETURN_IF_ERROR(
      cudaFuncSetAttribute(kernel, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  done.fetch_or(bit, std::memory_order_acq_rel);
  return absl::OkStatus();
}

template <bool kLstm, int kUnits, int kKpl, int kStreams, bool kRound16>
absl::Status LaunchShaped(const Params& params, const Shape& shape, int ND, cudaStream_t stream) {
  const auto kernel = SequenceKernel<kLstm, kUnits, kKpl, kStreams, kRound16>;
  RETURN_IF_ERROR((AllowLargeClusters<kLstm, kUnits, kKpl, kStreams, kRound16>()));
  const int C = params.layers * shape.P;
  const int tiles = (params.B + kStreams - 1) / kStreams;
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(static_cast<unsigned>(C * tiles), static_cast<unsigned>(ND));
  config.blockDim = dim3(static_cast<unsigned>(shape.warps * 32));
  config.dynamicSmemBytes = sizeof(float) * 2 * kStreams * 32 * kKpl;
  config.stream = stream;
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = static_cast<unsigned>(C);
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  CUDA_RETURN_IF_ERROR(cudaLaunchKernelEx(&config, kernel, params));
  CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return absl::OkStatus();
}

template <bool kLstm, int kUnits, int kKpl, bool kRound16>
absl::Status LaunchStreams(const Params& params, const Shape& shape, int ND, cudaStream_t stream) {
  switch (StreamsFor(params.B)) {
    case 1:
      return LaunchShaped<kLstm, kUnits, kKpl, 1, kRound16>(params, shape, ND, stream);
    case 2:
      return LaunchShaped<kLstm, kUnits, kKpl, 2, kRound16>(params, shape, ND, stream);
    case 4:
      return LaunchShaped<kLstm, kUnits, kKpl, 4, kRound16>(params, shape, ND, stream);
    default:
      return LaunchShaped<kLstm, kUnits, kKpl, 8, kRound16>(params, shape, ND, stream);
  }
}

template <bool kLstm, int kUnits, int kKpl>
absl::Status LaunchRounding(const Params& params, const Shape& shape, int ND, cudaStream_t stream) {
  if (params.round16 != 0) {
    return LaunchStreams<kLstm, kUnits, kKpl, true>(params, shape, ND, stream);
  }
  return LaunchStreams<kLstm, kUnits, kKpl, false>(params, shape, ND, stream);
}

absl::Status Launch(const Params& params, const Shape& shape, StepCell cell, int ND,
                    cudaStream_t stream) {
  const bool lstm = cell == StepCell::kLstm;
  if (shape.kpl == 8) {
    return lstm ? LaunchRounding<true, 2, 8>(params, shape, ND, stream)
                : LaunchRounding<false, 2, 8>(params, shape, ND, stream);
  }
  return lstm ? LaunchRounding<true, 1, 16>(params, shape, ND, stream)
              : LaunchRounding<false, 1, 16>(params, shape, ND, stream);
}

absl::Status CheckWeights(const ref::RecurrentDirectionWeights* weights, int n, const char* what) {
  if (weights == nullptr) return absl::InvalidArgumentError(absl::StrCat(what, ": null weights"));
  for (int l = 0; l < n; ++l) {
    const ref::RecurrentDirectionWeights& w = weights[l];
    if (w.w_ih == nullptr || w.w_hh == nullptr || w.b_ih == nullptr || w.b_hh == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": weights ", l, " have a null tensor"));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckSizes(int64_t B, int64_t T, int64_t I, int64_t H, const char* what) {
  constexpr int64_t kMaxInt = (int64_t{1} << 31) - 1;
  if (B < 0 || T < 1 || I < 1 || H < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": bad sizes B=", B, " T=", T, " I=", I, " H=", H));
  }
  if (B > kMaxInt || T > kMaxInt || I > kMaxInt || H > kMaxInt) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": sizes too large"));
  }
  return absl::OkStatus();
}

int RoundMode(std::optional<Storage16> type) {
  return !type.has_value() ? 0 : *type == Storage16::kBf16 ? 1 : 2;
}

Shape WavefrontShape(int64_t I, int64_t H, int L, bool with_proj) {
  const int64_t width0 = (with_proj ? 0 : I) + H;
  const int64_t width = std::max(width0, L > 1 ? 2 * H : int64_t{0});
  const Shape shape = ShapeOf(H, width, L);
  if (shape.P == 0) return {};
  // Layer 0's input rows of a tile of 8 sequences staged by the block's threads in one pass.
  if (!with_proj && 8 * I > kXPerThread * shape.warps * 32) return {};
  return shape;
}

// The fields both launchers fill alike; the slots are theirs to fill.
Params CommonParams(const float* inp, float* out_seq, float* out_last, int64_t B, int64_t T,
                    int64_t I, int64_t H, int layers, const Shape& shape, int64_t out_width,
                    std::optional<Storage16> operands16) {
  Params params{};
  params.x = inp;
  params.out_seq = out_seq;
  params.out_last = out_last;
  params.B = static_cast<int>(B);
  params.T = static_cast<int>(T);
  params.I = static_cast<int>(I);
  params.H = static_cast<int>(H);
  params.layers = layers;
  params.P = shape.P;
  params.UB = shape.UB;
  params.out_width = static_cast<int>(out_width);
  params.round16 = RoundMode(operands16);
  return params;
}

}  // namespace

bool RecurrentWavefrontFits(int64_t I, int64_t H, int L, bool with_proj) {
  return I >= 1 && H >= 1 && L >= 1 && WavefrontShape(I, H, L, with_proj).P > 0;
}

absl::Status RecurrentWavefront(float* out_seq, float* out_last, const float* inp,
                                const float* proj, const ref::RecurrentDirectionWeights* weights,
                                StepCell cell, int64_t B, int64_t T, int64_t I, int64_t H, int L,
                                std::optional<Storage16> operands16, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSizes(B, T, I, H, "RecurrentWavefront"));
  const Shape shape = WavefrontShape(I, H, L, proj != nullptr);
  if (shape.P == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentWavefront: I=", I, " H=", H, " L=", L, " do not fit one cluster"));
  }
  if (B == 0) return absl::OkStatus();
  if ((out_seq == nullptr && out_last == nullptr) || (inp == nullptr && proj == nullptr)) {
    return absl::InvalidArgumentError("RecurrentWavefront: null pointer");
  }
  RETURN_IF_ERROR(CheckWeights(weights, L, "RecurrentWavefront"));
  Params params = CommonParams(inp, out_seq, out_last, B, T, I, H, L, shape, H, operands16);
  for (int l = 0; l < L; ++l) {
    const ref::RecurrentDirectionWeights& w = weights[l];
    Slot& slot = params.slot[l];
    slot.w = {w.w_ih, w.w_hh, w.b_ih, w.b_hh};
    slot.proj = l == 0 ? proj : nullptr;
    slot.x_width = l > 0 ? static_cast<int>(H) : proj != nullptr ? 0 : static_cast<int>(I);
    slot.steps = static_cast<int>(T);
  }
  return Launch(params, shape, cell, /*ND=*/1, stream);
}

bool RecurrentSweepFits(int64_t I, int64_t H, bool with_proj) {
  return I >= 1 && H >= 1 && WavefrontShape(I, H, 1, with_proj).P > 0;
}

absl::Status RecurrentSweep(float* out_seq, float* out_last, const float* inp,
                            const float* const* proj, const ref::RecurrentDirectionWeights* weights,
                            StepCell cell, int64_t B, int64_t T, int64_t I, int64_t H, int ND,
                            std::optional<Storage16> operands16, cudaStream_t stream) {
  RETURN_IF_ERROR(CheckSizes(B, T, I, H, "RecurrentSweep"));
  const Shape shape = WavefrontShape(I, H, 1, proj != nullptr);
  if (shape.P == 0 || (ND != 1 && ND != 2)) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentSweep: I=", I, " H=", H, " ND=", ND, " do not fit one cluster"));
  }
  if (B == 0) return absl::OkStatus();
  if ((out_seq == nullptr && out_last == nullptr) || (proj == nullptr && inp == nullptr)) {
    return absl::InvalidArgumentError("RecurrentSweep: null pointer");
  }
  RETURN_IF_ERROR(CheckWeights(weights, ND, "RecurrentSweep"));
  Params params =
      CommonParams(inp, out_seq, out_last, B, T, I, H, /*layers=*/1, shape, ND * H, operands16);
  for (int d = 0; d < ND; ++d) {
    if (proj != nullptr && proj[d] == nullptr) {
      return absl::InvalidArgumentError("RecurrentSweep: null projection");
    }
    const ref::RecurrentDirectionWeights& w = weights[d];
    Slot& slot = params.slot[d];
    slot.w = {w.w_ih, w.w_hh, w.b_ih, w.b_hh};
    slot.proj = proj != nullptr ? proj[d] : nullptr;
    slot.x_width = proj != nullptr ? 0 : static_cast<int>(I);
    // Without the whole sequence the reverse direction's h at T - 1 is its first step.
    slot.steps = d == 1 && out_seq == nullptr ? 1 : static_cast<int>(T);
    slot.reverse = d;
    slot.out_offset = static_cast<int>(d * H);
  }
  return Launch(params, shape, cell, ND, stream);
}

}  // namespace forecastd::cuda
