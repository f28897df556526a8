// The one place where the oneDNN backend (backends/cpu/) tells oneDNN versions apart: a builder
// per primitive descriptor it uses, the output scale of a matmul, and one release's defect.
// oneDNN 2 builds a primitive descriptor from an operation descriptor (dnnl::matmul::desc, ...),
// oneDNN 3 from the engine and the memory descriptors directly; the rest of the backend calls
// these and is written once. Debian 12 ships oneDNN 2.6, Ubuntu 24.04 oneDNN 3.1;
// DNNL_VERSION_MAJOR picks. Every builder throws dnnl::error as oneDNN's own constructors do.
// Thread-safe: pure functions.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_COMPAT_H_
#define FORECASTD_BACKENDS_CPU_DNNL_COMPAT_H_

#include "oneapi/dnnl/dnnl.hpp"
#include "oneapi/dnnl/dnnl_version.h"

#if DNNL_VERSION_MAJOR != 2 && DNNL_VERSION_MAJOR != 3
#error "the oneDNN backend is written for oneDNN 2.x and 3.x"
#endif

namespace forecastd::dnnl_internal {

using MemoryDesc = dnnl::memory::desc;

// --- matmul

inline dnnl::matmul::primitive_desc MatmulPd(const dnnl::engine& engine, const MemoryDesc& src,
                                             const MemoryDesc& weights, const MemoryDesc& dst,
                                             const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, dst), attr, engine);
#else
  return dnnl::matmul::primitive_desc(engine, src, weights, dst, attr);
#endif
}

inline dnnl::matmul::primitive_desc MatmulPd(const dnnl::engine& engine, const MemoryDesc& src,
                                             const MemoryDesc& weights, const MemoryDesc& bias,
                                             const MemoryDesc& dst,
                                             const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, weights, bias, dst), attr, engine);
#else
  return dnnl::matmul::primitive_desc(engine, src, weights, bias, dst, attr);
#endif
}

// Makes a primitive built with `attr` multiply its result by `scale`. oneDNN 3 removed output
// scales; a linear post-op, scale * x + 0, rounds the same (one product per element) and, unlike
// 3.x's source scales, needs no memory argument at execution. `attr` must have no post-ops yet.
inline void SetOutputScale(dnnl::primitive_attr& attr, float scale) {
#if DNNL_VERSION_MAJOR == 2
  attr.set_output_scales(0, {scale});
#else
  dnnl::post_ops ops;
  ops.append_eltwise(dnnl::algorithm::eltwise_linear, /*alpha=*/scale, /*beta=*/0.0f);
  attr.set_post_ops(ops);
#endif
}

// --- layer normalization: `data` is src and dst (and their gradients); `stat` mean and variance.

using LayerNormFwd = dnnl::layer_normalization_forward;
using LayerNormBwd = dnnl::layer_normalization_backward;

// With statistics: forward_training writes them, forward_inference reads them.
inline LayerNormFwd::primitive_desc LayerNormForwardPd(const dnnl::engine& engine,
                                                       dnnl::prop_kind prop, const MemoryDesc& data,
                                                       const MemoryDesc& stat, float eps,
                                                       dnnl::normalization_flags flags,
                                                       const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return LayerNormFwd::primitive_desc(LayerNormFwd::desc(prop, data, stat, eps, flags), attr,
                                      engine);
#else
  return LayerNormFwd::primitive_desc(engine, prop, data, data, stat, eps, flags, attr);
#endif
}

// Without statistics: computed and kept inside the primitive.
inline LayerNormFwd::primitive_desc LayerNormForwardPd(const dnnl::engine& engine,
                                                       dnnl::prop_kind prop, const MemoryDesc& data,
                                                       float eps, dnnl::normalization_flags flags,
                                                       const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return LayerNormFwd::primitive_desc(LayerNormFwd::desc(prop, data, eps, flags), attr, engine);
#else
  return LayerNormFwd::primitive_desc(engine, prop, data, data, eps, flags, attr);
#endif
}

inline LayerNormBwd::primitive_desc LayerNormBackwardPd(
    const dnnl::engine& engine, dnnl::prop_kind prop, const MemoryDesc& data,
    const MemoryDesc& stat, float eps, dnnl::normalization_flags flags,
    const LayerNormFwd::primitive_desc& hint, const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return LayerNormBwd::primitive_desc(LayerNormBwd::desc(prop, data, data, stat, eps, flags), attr,
                                      engine, hint);
#else
  return LayerNormBwd::primitive_desc(engine, prop, data, data, data, stat, eps, flags, hint, attr);
#endif
}

// --- eltwise: `data` is src and dst (and their gradients).

using EltwiseFwd = dnnl::eltwise_forward;
using EltwiseBwd = dnnl::eltwise_backward;

inline EltwiseFwd::primitive_desc EltwiseForwardPd(const dnnl::engine& engine, dnnl::prop_kind prop,
                                                   dnnl::algorithm algorithm,
                                                   const MemoryDesc& data, float alpha, float beta,
                                                   const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return EltwiseFwd::primitive_desc(EltwiseFwd::desc(prop, algorithm, data, alpha, beta), attr,
                                    engine);
#else
  return EltwiseFwd::primitive_desc(engine, prop, algorithm, data, data, alpha, beta, attr);
#endif
}

// The gradient with respect to src, reading src (not dst).
inline EltwiseBwd::primitive_desc EltwiseBackwardPd(const dnnl::engine& engine,
                                                    dnnl::algorithm algorithm,
                                                    const MemoryDesc& data, float alpha, float beta,
                                                    const EltwiseFwd::primitive_desc& hint,
                                                    const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return EltwiseBwd::primitive_desc(EltwiseBwd::desc(algorithm, data, data, alpha, beta), attr,
                                    engine, hint);
#else
  return EltwiseBwd::primitive_desc(engine, algorithm, data, data, data, alpha, beta, hint, attr);
#endif
}

// False where the loaded oneDNN library (whatever headers it was built with) is 3.1, whose
// AVX-512 GELU (erf) forward is off by up to 4.7e-4 for x in about [-5.1, -3.1], where GELU itself
// is below 5e-3 in magnitude: measured against 0.5 x erfc(-x/sqrt 2) in double, 13% of those
// inputs miss the backend tests' tolerance on 3.1.0, none on 2.6 or 3.2. Its backward is right.
inline bool GeluErfForwardIsAccurate() {
  const dnnl_version_t* version = dnnl_version();
  return !(version->major == 3 && version->minor == 1);
}

// --- softmax over `axis` of `data` (src and dst and their gradients). oneDNN 2's softmax has
// one algorithm, the max-subtracting one, which oneDNN 3 names softmax_accurate.

using SoftmaxFwd = dnnl::softmax_forward;

inline SoftmaxFwd::primitive_desc SoftmaxForwardPd(const dnnl::engine& engine, dnnl::prop_kind prop,
                                                   const MemoryDesc& data, int axis,
                                                   const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return SoftmaxFwd::primitive_desc(SoftmaxFwd::desc(prop, data, axis), attr, engine);
#else
  return SoftmaxFwd::primitive_desc(engine, prop, dnnl::algorithm::softmax_accurate, data, data,
                                    axis, attr);
#endif
}

// --- binary

inline dnnl::binary::primitive_desc BinaryPd(const dnnl::engine& engine, dnnl::algorithm algorithm,
                                             const MemoryDesc& src0, const MemoryDesc& src1,
                                             const MemoryDesc& dst,
                                             const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return dnnl::binary::primitive_desc(dnnl::binary::desc(algorithm, src0, src1, dst), attr, engine);
#else
  return dnnl::binary::primitive_desc(engine, algorithm, src0, src1, dst, attr);
#endif
}

// --- recurrent layers (LSTM, linear-before-reset GRU)

// One recurrent primitive's memory descriptors, or their gradients' for the diff_ side of a
// backward. A zero descriptor (MemoryDesc()) leaves that state out; the GRU builders ignore the
// _c (cell state) fields.
struct RnnMds {
  MemoryDesc src_layer, src_iter, src_iter_c;
  MemoryDesc weights_layer, weights_iter, bias;
  MemoryDesc dst_layer, dst_iter, dst_iter_c;
};

inline dnnl::lstm_forward::primitive_desc LstmForwardPd(const dnnl::engine& engine,
                                                        dnnl::prop_kind prop,
                                                        dnnl::rnn_direction direction,
                                                        const RnnMds& md,
                                                        const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return dnnl::lstm_forward::primitive_desc(
      dnnl::lstm_forward::desc(prop, direction, md.src_layer, md.src_iter, md.src_iter_c,
                               md.weights_layer, md.weights_iter, md.bias, md.dst_layer,
                               md.dst_iter, md.dst_iter_c),
      attr, engine);
#else
  return dnnl::lstm_forward::primitive_desc(
      engine, prop, direction, md.src_layer, md.src_iter, md.src_iter_c, md.weights_layer,
      md.weights_iter, md.bias, md.dst_layer, md.dst_iter, md.dst_iter_c, attr);
#endif
}

inline dnnl::lstm_backward::primitive_desc LstmBackwardPd(
    const dnnl::engine& engine, dnnl::rnn_direction direction, const RnnMds& md, const RnnMds& diff,
    const dnnl::lstm_forward::primitive_desc& hint, const dnnl::primitive_attr& attr) {
  const auto prop = dnnl::prop_kind::backward;
#if DNNL_VERSION_MAJOR == 2
  return dnnl::lstm_backward::primitive_desc(
      dnnl::lstm_backward::desc(prop, direction, md.src_layer, md.src_iter, md.src_iter_c,
                                md.weights_layer, md.weights_iter, md.bias, md.dst_layer,
                                md.dst_iter, md.dst_iter_c, diff.src_layer, diff.src_iter,
                                diff.src_iter_c, diff.weights_layer, diff.weights_iter, diff.bias,
                                diff.dst_layer, diff.dst_iter, diff.dst_iter_c),
      attr, engine, hint);
#else
  return dnnl::lstm_backward::primitive_desc(
      engine, prop, direction, md.src_layer, md.src_iter, md.src_iter_c, md.weights_layer,
      md.weights_iter, md.bias, md.dst_layer, md.dst_iter, md.dst_iter_c, diff.src_layer,
      diff.src_iter, diff.src_iter_c, diff.weights_layer, diff.weights_iter, diff.bias,
      diff.dst_layer, diff.dst_iter, diff.dst_iter_c, hint, attr);
#endif
}

inline dnnl::lbr_gru_forward::primitive_desc LbrGruForwardPd(const dnnl::engine& engine,
                                                             dnnl::prop_kind prop,
                                                             dnnl::rnn_direction direction,
                                                             const RnnMds& md,
                                                             const dnnl::primitive_attr& attr) {
#if DNNL_VERSION_MAJOR == 2
  return dnnl::lbr_gru_forward::primitive_desc(
      dnnl::lbr_gru_forward::desc(prop, direction, md.src_layer, md.src_iter, md.weights_layer,
                                  md.weights_iter, md.bias, md.dst_layer, md.dst_iter),
      attr, engine);
#else
  return dnnl::lbr_gru_forward::primitive_desc(engine, prop, direction, md.src_layer, md.src_iter,
                                               md.weights_layer, md.weights_iter, md.bias,
                                               md.dst_layer, md.dst_iter, attr);
#endif
}

inline dnnl::lbr_gru_backward::primitive_desc LbrGruBackwardPd(
    const dnnl::engine& engine, dnnl::rnn_direction direction, const RnnMds& md, const RnnMds& diff,
    const dnnl::lbr_gru_forward::primitive_desc& hint, const dnnl::primitive_attr& attr) {
  const auto prop = dnnl::prop_kind::backward;
#if DNNL_VERSION_MAJOR == 2
  return dnnl::lbr_gru_backward::primitive_desc(
      dnnl::lbr_gru_backward::desc(prop, direction, md.src_layer, md.src_iter, md.weights_layer,
                                   md.weights_iter, md.bias, md.dst_layer, md.dst_iter,
                                   diff.src_layer, diff.src_iter, diff.weights_layer,
                                   diff.weights_iter, diff.bias, diff.dst_layer, diff.dst_iter),
      attr, engine, hint);
#else
  return dnnl::lbr_gru_backward::primitive_desc(
      engine, prop, direction, md.src_layer, md.src_iter, md.weights_layer, md.weights_iter,
      md.bias, md.dst_layer, md.dst_iter, diff.src_layer, diff.src_iter, diff.weights_layer,
      diff.weights_iter, diff.bias, diff.dst_layer, diff.dst_iter, hint, attr);
#endif
}

}  // namespace forecastd::dnnl_internal

#endif  // FORECASTD_BACKENDS_CPU_DNNL_COMPAT_H_
