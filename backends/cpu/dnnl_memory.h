// The memory descriptors that an op's forward (dnnl_backend.cc) and backward (dnnl_backward.cc)
// in the oneDNN backend must agree on, defined once for both: the attention core's strided
// views into the packed qkv, and LayerNorm's data and statistics. For backends/cpu/ only.
// Thread-safe: pure functions.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_MEMORY_H_
#define FORECASTD_BACKENDS_CPU_DNNL_MEMORY_H_

#include <cmath>
#include <cstdint>

#include "backends/cpu/dnnl_primitive.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace forecastd::dnnl_internal {

// The attention core per batch and head, with hs = D / NH (D % NH == 0). Q, K and V are strided
// views into qkv (B, T, 3*D), and out a strided view of (B, T, D), so nothing is copied: head h
// of qkv[b, t] is columns [h*hs, (h+1)*hs) of each D-wide third. The gradients dQ, dK, dV and
// dout are the same views of dqkv and dout.
struct AttentionMds {
  dnnl::memory::desc head;    // (B, NH, T, hs) view of q, k or v in qkv (at offset 0, D, 2D)
  dnnl::memory::desc head_t;  // (B, NH, hs, T): the same, transposed
  dnnl::memory::desc out;     // (B, NH, T, hs) view of out or dout (B, T, D)
  dnnl::memory::desc att;     // (B, NH, T, T) dense: the scores, the weights, their gradients
  dnnl::memory::desc att_t;   // the same, transposed
};

inline AttentionMds MakeAttentionMds(int64_t B, int64_t T, int64_t D, int64_t NH) {
  const int64_t hs = D / NH;
  const int64_t row = 3 * D;  // stride of t in qkv
  return AttentionMds{
      .head = F32Strided({B, NH, T, hs}, {T * row, hs, row, 1}),
      .head_t = F32Strided({B, NH, hs, T}, {T * row, hs, 1, row}),
      .out = F32Strided({B, NH, T, hs}, {T * D, hs, D, 1}),
      .att = F32({B, NH, T, T}, Tag::abcd),
      .att_t = F32Strided({B, NH, T, T}, {NH * T * T, T * T, 1, T}),
  };
}

// 1/sqrt(hs): the scale of the scores, and so of dQ and dK.
inline float AttentionScale(int64_t D, int64_t NH) {
  return static_cast<float>(1.0 / std::sqrt(static_cast<double>(D / NH)));
}

// LayerNorm over the C channels of each of N rows.
struct LayerNormMds {
  dnnl::memory::desc data;     // (N, C): inp, out and their gradients
  dnnl::memory::desc channel;  // (C): gamma, beta and their gradients
  dnnl::memory::desc stat;     // (N): mean and variance
};

inline LayerNormMds MakeLayerNormMds(int64_t N, int64_t C) {
  return LayerNormMds{
      .data = F32({N, C}, Tag::ab), .channel = F32({C}, Tag::a), .stat = F32({N}, Tag::a)};
}

}  // namespace forecastd::dnnl_internal

#endif  // FORECASTD_BACKENDS_CPU_DNNL_MEMORY_H_
