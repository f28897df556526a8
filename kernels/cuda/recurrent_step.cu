#include "kernels/cuda/recurrent_step.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"
#include "kernels/cuda/cuda_status.h"

namespace forecastd::cuda {
namespace {

// Each unit j of a layer needs four dot products of its rows with [x | h] (K = I + H). For an
// LSTM they are the four gates' pre-activations. For a GRU they are r and z (x and h parts
// summed) and the two halves of n, W_in x + b_in and W_hn h + b_hn, which the cell combines as
// n = tanh(nx + r * nh). Quantity q of unit j reads row Row(q) * H + j of w_ih for its x part
// (when UsesX(q)) and of w_hh for its h part (when UsesH(q)).
constexpr int kQuantities = 4;

template <bool kLstm>
__device__ __forceinline__ int Row(int q) {
  return kLstm ? q : min(q, 2);
}
template <bool kLstm>
__device__ __forceinline__ bool UsesX(int q) {
  return kLstm || q != 3;
}
template <bool kLstm>
__device__ __forceinline__ bool UsesH(int q) {
  return kLstm || q != 2;
}

struct Weights {
  const float* w_ih;  // (G*H, I)
  const float* w_hh;  // (G*H, H)
  const float* b_ih;  // (G*H)
  const float* b_hh;  // (G*H)
};

// Column k of quantity q's row of unit j over [x | h]; 0 past K = I + H.
template <bool kLstm>
__device__ __forceinline__ float WeightAt(const Weights& w, int q, int j, int k, int I, int H) {
  const int64_t row = static_cast<int64_t>(Row<kLstm>(q)) * H + j;
  if (k < I) return UsesX<kLstm>(q) ? w.w_ih[row * I + k] : 0.0f;
  if (k < I + H) return UsesH<kLstm>(q) ? w.w_hh[row * H + (k - I)] : 0.0f;
  return 0.0f;
}

template <bool kLstm>
__device__ __forceinline__ float BiasOf(const Weights& w, int q, int j, int H) {
  const int64_t row = static_cast<int64_t>(Row<kLstm>(q)) * H + j;
  return (UsesX<kLstm>(q) ? w.b_ih[row] : 0.0f) + (UsesH<kLstm>(q) ? w.b_hh[row] : 0.0f);
}

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The cell from the four sums (biases included). LSTM: c is the old cell state, replaced by
// c'; GRU: h is the old hidden state. Returns h'.
template <bool kLstm>
__device__ __forceinline__ float Cell(const float (&a)[kQuantities], float h, float* c) {
  if (kLstm) {
    const float i = Sigmoid(a[0]), f = Sigmoid(a[1]), g = tanhf(a[2]), o = Sigmoid(a[3]);
    const float c_new = f * *c + i * g;
    *c = c_new;
    return o * tanhf(c_new);
  }
  const float r = Sigmoid(a[0]), z = Sigmoid(a[1]);
  const float n = tanhf(a[2] + r * a[3]);
  return (1.0f - z) * n + z * h;
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
  for (int e = threadIdx.x; e < nb * H; e += blockDim.x) {
    const int r = e / H, j = e - r * H;
    state[rows[r] + j] = __ldcg(&out[static_cast<int64_t>(b0 + r) * H + j]);
  }
  if (threadIdx.x == 0) counters[blockIdx.y] = 0;
}

// --- kernels

// kWarp. Grid (ceil(H / kWarpUnits), ceil(B / kWarpStreams)); warp w of block (x, y) owns unit
// j = x * kWarpUnits + w and streams [y * kWarpStreams, + kWarpStreams). Lane l holds columns
// l, l + 32, ... of the unit's four rows (KPL of them, K <= 32 * KPL) in registers; for each
// stream of the tile it multiplies them with [x | h] staged in shared memory and the warp sums
// the four dot products in 6 shuffles (halving the values each lane carries on the first two).
constexpr int kWarpUnits = 4;
constexpr int kWarpStreams = 16;

template <bool kLstm, int KPL>
__global__ void __launch_bounds__(kWarpUnits * 32)
    StepWarpKernel(float* out, float* state, float* prev_h, int* counters, const int32_t* slots,
                   const float* inp, Weights w, int B, int I, int H, int64_t S) {
  constexpr int kKp = 32 * KPL;
  extern __shared__ float xh[];  // (kWarpStreams, kKp): [x | h | 0]
  __shared__ int64_t rows[kWarpStreams];
  const int b0 = blockIdx.y * kWarpStreams, nb = min(kWarpStreams, B - b0);
  const int j0 = blockIdx.x * kWarpUnits, K = I + H;
  if (threadIdx.x < nb) rows[threadIdx.x] = static_cast<int64_t>(slots[b0 + threadIdx.x]) * S;
  __syncthreads();
  for (int e = threadIdx.x; e < nb * kKp; e += blockDim.x) {
    const int r = e / kKp, k = e - r * kKp;
    float v = 0.0f;
    if (k < I) {
      v = inp[static_cast<int64_t>(b0 + r) * I + k];
      // The layer below's h' is this layer's input; this block writes its own units' share.
      if (prev_h != nullptr && k >= j0 && k < j0 + kWarpUnits) prev_h[rows[r] + k] = v;
    } else if (k < K) {
      v = state[rows[r] + (k - I)];
    }
    xh[e] = v;
  }
  const int lane = threadIdx.x % 32, j = j0 + static_cast<int>(threadIdx.x / 32);
  float wr[kQuantities][KPL];
  float bias[kQuantities];
  if (j < H) {
#pragma unroll
    for (int q = 0; q < kQuantities; ++q) {
      bias[q] = BiasOf<kLstm>(w, q, j, H);
#pragma unroll
      for (int i = 0; i < KPL; ++i) wr[q][i] = WeightAt<kLstm>(w, q, j, lane + 32 * i, I, H);
    }
  }
  __syncthreads();
  if (j < H) {
    const bool hi16 = (lane & 16) != 0, hi8 = (lane & 8) != 0;
    for (int r = 0; r < nb; ++r) {
      float a[kQuantities] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
      for (int i = 0; i < KPL; ++i) {
        const float x = xh[r * kKp + lane + 32 * i];
#pragma unroll
        for (int q = 0; q < kQuantities; ++q) a[q] = fmaf(wr[q][i], x, a[q]);
      }
      // Lanes with bit 4 clear keep quantities 0 and 1, the others 2 and 3; then bit 3 picks
      // one of the two; the last three steps finish the sum within each group of 8 lanes.
      const float s0 = __shfl_xor_sync(0xffffffffu, hi16 ? a[0] : a[2], 16);
      const float s1 = __shfl_xor_sync(0xffffffffu, hi16 ? a[1] : a[3], 16);
      const float u0 = (hi16 ? a[2] : a[0]) + s0, u1 = (hi16 ? a[3] : a[1]) + s1;
      float v = (hi8 ? u1 : u0) + __shfl_xor_sync(0xffffffffu, hi8 ? u0 : u1, 8);
      v += __shfl_xor_sync(0xffffffffu, v, 4);
      v += __shfl_xor_sync(0xffffffffu, v, 2);
      v += __shfl_xor_sync(0xffffffffu, v, 1);
      // Lane 8q now holds quantity q.
      float sums[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) sums[q] = __shfl_sync(0xffffffffu, v, 8 * q);
      if (lane == 0) {
#pragma unroll
        for (int q = 0; q < kQuantities; ++q) sums[q] += bias[q];
        float* c = kLstm ? state + rows[r] + H + j : nullptr;
        float c_old = kLstm ? *c : 0.0f;
        const float h_new = Cell<kLstm>(sums, xh[r * kKp + I + j], &c_old);
        if (kLstm) *c = c_old;
        out[static_cast<int64_t>(b0 + r) * H + j] = h_new;
      }
    }
  }
  if (counters != nullptr) WriteBackWhenLast(state, counters, rows, out, b0, nb, H);
}

// kTiled. Grid (ceil(H / kTileUnits), ceil(B / kTileStreams)), kTileThreads threads: thread
// (tx, ty) = (t % kTileUnits, t / kTileUnits) accumulates unit j0 + tx's four quantities for
// streams ty * kThreadStreams + [0, kThreadStreams) of the tile, over chunks of kTileK columns
// of [x | h] (xs, stream-contiguous so a thread reads its streams as float4s) and of the
// weights (ws).
constexpr int kTileUnits = 16;
constexpr int kTileStreams = 64;
constexpr int kThreadStreams = 8;
constexpr int kTileK = 32;
constexpr int kTileThreads = (kTileStreams / kThreadStreams) * kTileUnits;

template <bool kLstm>
__global__ void __launch_bounds__(kTileThreads)
    StepTiledKernel(float* out, float* state, float* prev_h, int* counters, const int32_t* slots,
                    const float* inp, Weights w, int B, int I, int H, int64_t S) {
  __shared__ __align__(16) float xs[kTileK][kTileStreams + 4];
  __shared__ float ws[kTileK][kQuantities * kTileUnits + 1];
  __shared__ int64_t rows[kTileStreams];
  const int b0 = blockIdx.y * kTileStreams, nb = min(kTileStreams, B - b0);
  const int j0 = blockIdx.x * kTileUnits, K = I + H;
  const int tx = threadIdx.x % kTileUnits, ty = threadIdx.x / kTileUnits;
  if (threadIdx.x < nb) rows[threadIdx.x] = static_cast<int64_t>(slots[b0 + threadIdx.x]) * S;
  float acc[kThreadStreams][kQuantities] = {};
  for (int k0 = 0; k0 < K; k0 += kTileK) {
    __syncthreads();  // rows are in; the previous chunk is consumed
    for (int e = threadIdx.x; e < kTileStreams * kTileK; e += kTileThreads) {
      const int r = e / kTileK, k = e - r * kTileK, kk = k0 + k;
      float v = 0.0f;
      if (r < nb) {
        if (kk < I) {
          v = inp[static_cast<int64_t>(b0 + r) * I + kk];
          if (prev_h != nullptr && kk >= j0 && kk < j0 + kTileUnits) prev_h[rows[r] + kk] = v;
        } else if (kk < K) {
          v = state[rows[r] + (kk - I)];
        }
      }
      xs[k][r] = v;
    }
    for (int e = threadIdx.x; e < kQuantities * kTileUnits * kTileK; e += kTileThreads) {
      const int row = e / kTileK, k = e - row * kTileK;
      const int q = row / kTileUnits, j = j0 + row % kTileUnits;
      ws[k][row] = j < H ? WeightAt<kLstm>(w, q, j, k0 + k, I, H) : 0.0f;
    }
    __syncthreads();
#pragma unroll 8
    for (int k = 0; k < kTileK; ++k) {
      const float4 x0 = *reinterpret_cast<const float4*>(&xs[k][ty * kThreadStreams]);
      const float4 x1 = *reinterpret_cast<const float4*>(&xs[k][ty * kThreadStreams + 4]);
      const float x[kThreadStreams] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
      float wq[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) wq[q] = ws[k][q * kTileUnits + tx];
#pragma unroll
      for (int s = 0; s < kThreadStreams; ++s) {
#pragma unroll
        for (int q = 0; q < kQuantities; ++q) acc[s][q] = fmaf(wq[q], x[s], acc[s][q]);
      }
    }
  }
  const int j = j0 + tx;
  if (j < H) {
    float bias[kQuantities];
#pragma unroll
    for (int q = 0; q < kQuantities; ++q) bias[q] = BiasOf<kLstm>(w, q, j, H);
#pragma unroll
    for (int s = 0; s < kThreadStreams; ++s) {
      const int r = ty * kThreadStreams + s;
      if (r >= nb) break;
      float a[kQuantities];
#pragma unroll
      for (int q = 0; q < kQuantities; ++q) a[q] = acc[s][q] + bias[q];
      float* c = kLstm ? state + rows[r] + H + j : nullptr;
      float c_old = kLstm ? *c : 0.0f;
      const float h_old = kLstm ? 0.0f : state[rows[r] + j];
      const float h_new = Cell<kLstm>(a, h_old, &c_old);
      if (kLstm) *c = c_old;
      out[static_cast<int64_t>(b0 + r) * H + j] = h_new;
    }
  }
  if (counters != nullptr) WriteBackWhenLast(state, counters, rows, out, b0, nb, H);
}

// --- launchers

template <bool kLstm, int KPL>
absl::Status LaunchWarp(float* out, float* state, float* prev_h, int* counters,
                        const int32_t* slots, const float* inp, const Weights& w, int B, int I,
                        int H, int64_t S, cudaStream_t stream) {
  const dim3 grid((H + kWarpUnits - 1) / kWarpUnits, (B + kWarpStreams - 1) / kWarpStreams);
  const size_t smem = sizeof(float) * kWarpStreams * 32 * KPL;
  StepWarpKernel<kLstm, KPL><<<grid, kWarpUnits * 32, smem, stream>>>(out, state, prev_h, counters,
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

}  // namespace

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
  const int64_t SL = (lstm ? 2 : 1) * H, S = L * SL;
  const float* layer_in = inp;
  for (int l = 0; l < L; ++l) {
    const ref::RecurrentDirectionWeights& lw = weights[l];
    if (lw.w_ih == nullptr || lw.w_hh == nullptr || lw.b_ih == nullptr || lw.b_hh == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("RecurrentStepForward: layer ", l, " has a null weight"));
    }
    const int width = static_cast<int>(l == 0 ? I : H);
    StepKernel k = kernel;
    if (k == StepKernel::kAuto || width + H > 32 * 16) {
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

}  // namespace forecastd::cuda
