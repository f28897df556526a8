// The device-side pieces every recurrent kernel shares (recurrent_step.cu's one-step kernels and
// recurrent_sequence.cu's persistent ones): which weight rows feed each of a unit's four
// quantities, the LSTM and GRU cells, and the warp-wide sums of many dot products at once.
// Included by .cu files only.
#ifndef FORECASTD_KERNELS_CUDA_RECURRENT_CELL_CUH_
#define FORECASTD_KERNELS_CUDA_RECURRENT_CELL_CUH_

#include <cstdint>

namespace forecastd::cuda::cell {

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

// Quantity q's bias: b_ih's row where the quantity has an x part and `with_ih`, plus b_hh's
// where it has an h part.
template <bool kLstm>
__device__ __forceinline__ float BiasOf(const Weights& w, int q, int j, int H,
                                        bool with_ih = true) {
  const int64_t row = static_cast<int64_t>(Row<kLstm>(q)) * H + j;
  return (with_ih && UsesX<kLstm>(q) ? w.b_ih[row] : 0.0f) + (UsesH<kLstm>(q) ? w.b_hh[row] : 0.0f);
}

__device__ __forceinline__ float Sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// The sigmoid from the hardware's exp2 and reciprocal: __expf's error, 2 + 1.16 |x| ulp, and
// __fdividef's 2 ulp leave a gate within a few 1e-7 of the exact sigmoid (the kernels'
// tolerance is 1e-5); past |x| ~ 87 it is 0 or 1, as the exact one rounds.
__device__ __forceinline__ float FastSigmoid(float x) {
  return __fdividef(1.0f, 1.0f + __expf(-x));
}

// The activation of quantity q's pre-activation: LSTM i, f, o sigmoid and g tanh; GRU r, z
// sigmoid, and n's two halves as they are (the cell combines them).
template <bool kLstm>
__device__ __forceinline__ float ActivateQuantity(float x, int q) {
  if (kLstm) return q == 2 ? tanhf(x) : FastSigmoid(x);
  return q < 2 ? FastSigmoid(x) : x;
}

// tanh(x) = 1 - 2 / (1 + e^2x) from the hardware's exp2 and reciprocal: within a few 1e-7 of
// tanhf, absolute, in a fraction of its time on a step's critical path.
__device__ __forceinline__ float FastTanh(float x) {
  return 1.0f - __fdividef(2.0f, 1.0f + __expf(2.0f * x));
}

// The cell from the four sums (biases included). LSTM: c is the old cell state, replaced by
// c'; GRU: h is the old hidden state. Returns h'. kFast: FastSigmoid and FastTanh instead of
// expf and tanhf (within a few 1e-7, absolute).
template <bool kLstm, bool kFast = false>
__device__ __forceinline__ float Cell(const float (&a)[kQuantities], float h, float* c) {
  const auto sigmoid = [](float x) { return kFast ? FastSigmoid(x) : Sigmoid(x); };
  const auto tanh = [](float x) { return kFast ? FastTanh(x) : tanhf(x); };
  if (kLstm) {
    const float i = sigmoid(a[0]), f = sigmoid(a[1]), g = tanh(a[2]), o = sigmoid(a[3]);
    const float c_new = f * *c + i * g;
    *c = c_new;
    return o * tanh(c_new);
  }
  const float r = sigmoid(a[0]), z = sigmoid(a[1]);
  const float n = tanh(a[2] + r * a[3]);
  return (1.0f - z) * n + z * h;
}

// Sums N values (a power of two up to 32) across a warp: value n of lane l is a[n] of that lane,
// and each of the N sums is over the 32 lanes. Halving: at offset 16 a lane keeps the half of its
// values its bit 4 picks and adds its partner's copy of that half; then 8, 4, ... on the rest,
// until one value is left; the offsets left after that add the copies up. Lane l ends with sum
// l >> (5 - log2 N) in a[0] (the other entries are spent): with N = 32 sum l, with N = 4 sum
// l / 8. 31 shuffles for 32 sums where one sum at a time would take 5 * 32.
template <int kOffset, int kCount, int N>
__device__ __forceinline__ void HalvingLevels(float (&a)[N], int lane) {
  constexpr unsigned kAllLanes = 0xffffffffu;
  if constexpr (kCount > 1) {
    constexpr int kHalf = kCount / 2;
    const bool hi = (lane & kOffset) != 0;
#pragma unroll
    for (int n = 0; n < kHalf; ++n) {
      const float send = hi ? a[n] : a[n + kHalf], keep = hi ? a[n + kHalf] : a[n];
      a[n] = keep + __shfl_xor_sync(kAllLanes, send, kOffset);
    }
    if constexpr (kOffset > 1) HalvingLevels<kOffset / 2, kHalf>(a, lane);
  } else {
    a[0] += __shfl_xor_sync(kAllLanes, a[0], kOffset);
    if constexpr (kOffset > 1) HalvingLevels<kOffset / 2, 1>(a, lane);
  }
}

template <int N>
__device__ __forceinline__ void HalvingSum(float (&a)[N], int lane) {
  static_assert(N >= 1 && N <= 32 && (N & (N - 1)) == 0, "a power of two up to 32 sums");
  HalvingLevels<16, N>(a, lane);
}

}  // namespace forecastd::cuda::cell

#endif  // FORECASTD_KERNELS_CUDA_RECURRENT_CELL_CUH_
