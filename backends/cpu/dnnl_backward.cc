// The backward passes of the oneDNN backend (training): Linear on three matmuls, LayerNorm, GELU,
// ReLU and softmax on their backward primitives, the attention core on four matmuls around
// softmax_backward. The recurrent layers are in dnnl_recurrent_backward.cc;
// AttentionLastQueryBackward runs on the reference (see SupportsOp). Every gradient is written,
// never accumulated: oneDNN's backward primitives overwrite their outputs except the recurrent
// ones, which the other file zeroes first.
#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/cpu/dnnl_compat.h"
#include "backends/cpu/dnnl_memory.h"
#include "backends/cpu/dnnl_primitive.h"
#include "backends/cpu/dnnl_status.h"
#include "backends/cpu/recurrent_avx2.h"
#include "backends/cpu/rows_avx2.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

using dnnl_internal::AttentionMds;
using dnnl_internal::AttentionScale;
using dnnl_internal::DnnlPrimitive;
using dnnl_internal::EltwiseBackwardPd;
using dnnl_internal::EltwiseBwd;
using dnnl_internal::EltwiseForwardPd;
using dnnl_internal::EltwiseFwd;
using dnnl_internal::Execute;
using dnnl_internal::F32;
using dnnl_internal::kParallelElements;
using dnnl_internal::LayerNormBackwardPd;
using dnnl_internal::LayerNormBwd;
using dnnl_internal::LayerNormForwardPd;
using dnnl_internal::LayerNormFwd;
using dnnl_internal::LayerNormMds;
using dnnl_internal::MakeAttentionMds;
using dnnl_internal::MakeDnnlPrimitive;
using dnnl_internal::MakeLayerNormMds;
using dnnl_internal::MatmulPd;
using dnnl_internal::ScratchFloats;
using dnnl_internal::SetOutputScale;
using dnnl_internal::SoftmaxForwardPd;
using dnnl_internal::SoftmaxFwd;
using dnnl_internal::Tag;
using dnnl_internal::UserScratchpadAttr;
using dnnl_internal::Wrap;

// --- Linear: dinp = dout @ weight, dweight = dout^T @ inp (dout read transposed in place),
// dbias = ones (1, N) @ dout: the column sums as a matmul, which oneDNN 2.6 runs on its jit
// kernels, where its reduction primitive runs a reference loop for this shape.

struct LinearBackwardMds {
  dnnl::memory::desc dout, dout_t, weight, inp, dinp, dweight, ones, dbias;
};

LinearBackwardMds MakeLinearBackwardMds(int64_t N, int64_t IN, int64_t OUT) {
  return LinearBackwardMds{.dout = F32({N, OUT}, Tag::ab),
                           .dout_t = F32({OUT, N}, Tag::ba),
                           .weight = F32({OUT, IN}, Tag::ab),
                           .inp = F32({N, IN}, Tag::ab),
                           .dinp = F32({N, IN}, Tag::ab),
                           .dweight = F32({OUT, IN}, Tag::ab),
                           .ones = F32({1, N}, Tag::ab),
                           .dbias = F32({1, OUT}, Tag::ab)};
}

struct LinearBackwardPrimitive {
  DnnlPrimitive dinp;       // matmul
  DnnlPrimitive dweight;    // matmul
  DnnlPrimitive dbias;      // matmul
  std::vector<float> ones;  // (N), dbias's src; only read
};

std::shared_ptr<LinearBackwardPrimitive> BuildLinearBackward(const dnnl::engine& engine, int64_t N,
                                                             int64_t IN, int64_t OUT) {
  const LinearBackwardMds md = MakeLinearBackwardMds(N, IN, OUT);
  auto matmul = [&engine](const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                          const dnnl::memory::desc& dst) {
    return MakeDnnlPrimitive<dnnl::matmul>(
        MatmulPd(engine, src, weights, dst, UserScratchpadAttr()));
  };
  auto p = std::make_shared<LinearBackwardPrimitive>();
  p->dinp = matmul(md.dout, md.weight, md.dinp);
  p->dweight = matmul(md.dout_t, md.inp, md.dweight);
  p->dbias = matmul(md.ones, md.dout, md.dbias);
  p->ones.assign(N, 1.0f);
  return p;
}

// --- LayerNorm: the statistics recomputed by a forward_training pass without scale or shift
// (its output is discarded), then the backward primitive with both.

struct LayerNormBackwardPrimitive {
  DnnlPrimitive stats;
  DnnlPrimitive backward;
};

std::shared_ptr<LayerNormBackwardPrimitive> BuildLayerNormBackward(const dnnl::engine& engine,
                                                                   int64_t N, int64_t C,
                                                                   float eps) {
  const LayerNormMds md = MakeLayerNormMds(N, C);
  const LayerNormFwd::primitive_desc fwd_pd =
      LayerNormForwardPd(engine, dnnl::prop_kind::forward_training, md.data, md.stat, eps,
                         dnnl::normalization_flags::none, UserScratchpadAttr());
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  auto p = std::make_shared<LayerNormBackwardPrimitive>();
  p->stats = MakeDnnlPrimitive<LayerNormFwd>(fwd_pd);
  p->backward = MakeDnnlPrimitive<LayerNormBwd>(
      LayerNormBackwardPd(engine, dnnl::prop_kind::backward, md.data, md.stat, eps, flags, fwd_pd,
                          UserScratchpadAttr()));
  return p;
}

// --- Element-wise and row-wise ops. A backward primitive descriptor needs its forward's as a
// hint; only the backward is kept.

std::shared_ptr<DnnlPrimitive> BuildEltwiseBackward(const dnnl::engine& engine,
                                                    dnnl::algorithm algorithm, int64_t n) {
  const dnnl::memory::desc md = F32({n}, Tag::a);
  const EltwiseFwd::primitive_desc fwd_pd =
      EltwiseForwardPd(engine, dnnl::prop_kind::forward_training, algorithm, md, /*alpha=*/0.0f,
                       /*beta=*/0.0f, UserScratchpadAttr());
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<EltwiseBwd>(EltwiseBackwardPd(
      engine, algorithm, md, /*alpha=*/0.0f, /*beta=*/0.0f, fwd_pd, UserScratchpadAttr())));
}

// --- Attention: with scale = 1/sqrt(hs) and per batch and head,
//   dV = att^T dout     datt = dout V^T     dscores = softmax_backward(att, datt)
//   dQ = scale dscores K     dK = scale dscores^T Q
// (with a dropout mask m: dV = (att m)^T dout and datt = (dout V^T) m, the products taken
// element-wise in a loop around the matmuls)
// Q, K, V and their gradients are the strided views of AttentionMds into qkv / dqkv, as in the
// forward; att and dscores are read transposed through strides. Masked weights are 0 in att, so
// their dscores are 0 and the causal mask needs nothing here. The softmax backward is
// SoftmaxBackwardRows, as DnnlBackend::SoftmaxBackward's.

struct AttentionBackwardPrimitive {
  DnnlPrimitive dv;    // matmul
  DnnlPrimitive datt;  // matmul
  DnnlPrimitive dq;    // matmul with the scale as an output scale (SetOutputScale)
  DnnlPrimitive dk;    // matmul with the scale as an output scale (SetOutputScale)
};

// dx = y * (dy - sum(y * dy)) over each of `rows` rows of C: the softmax's backward from its
// output y, rows shared out over the OpenMP threads when there are many; dx may alias dy or y.
// Our own loop: oneDNN 2.6 has no JIT kernel for it on AVX2 and ran its reference one (19 ms a
// call for transformer_small's attention at B=32 on two threads, 7x the forward's time).
void SoftmaxBackwardRows(float* dx, const float* y, const float* dy, int64_t rows, int64_t C) {
#pragma omp parallel for schedule(static) if (rows * C >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* yr = y + r * C;
    const float* dyr = dy + r * C;
    float* dxr = dx + r * C;
    float dot = 0.0f;
    for (int64_t c = 0; c < C; ++c) dot += yr[c] * dyr[c];
    for (int64_t c = 0; c < C; ++c) dxr[c] = yr[c] * (dyr[c] - dot);
  }
}

std::shared_ptr<AttentionBackwardPrimitive> BuildAttentionBackward(const dnnl::engine& engine,
                                                                   int64_t B, int64_t T, int64_t D,
                                                                   int64_t NH) {
  const AttentionMds md = MakeAttentionMds(B, T, D, NH);
  auto matmul = [&engine](const dnnl::memory::desc& src, const dnnl::memory::desc& weights,
                          const dnnl::memory::desc& dst, const dnnl::primitive_attr& attr) {
    return MakeDnnlPrimitive<dnnl::matmul>(MatmulPd(engine, src, weights, dst, attr));
  };
  dnnl::primitive_attr scaled = UserScratchpadAttr();
  SetOutputScale(scaled, AttentionScale(D, NH));
  auto p = std::make_shared<AttentionBackwardPrimitive>();
  p->dv = matmul(md.att_t, md.out, md.head, UserScratchpadAttr());
  p->datt = matmul(md.out, md.head_t, md.att, UserScratchpadAttr());
  p->dq = matmul(md.att, md.head, md.head, scaled);
  p->dk = matmul(md.att_t, md.head, md.head, scaled);
  return p;
}

}  // namespace

absl::Status DnnlBackend::LinearBackward(float* dinp, float* dweight, float* dbias,
                                         const float* dout, const float* inp,
                                         const float* /*saved*/, const float* weight, int64_t N,
                                         int64_t IN, int64_t OUT) {
  if (N == 0 || IN == 0 || OUT == 0) {
    return reference_.LinearBackward(dinp, dweight, dbias, dout, inp, nullptr, weight, N, IN, OUT);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<const LinearBackwardPrimitive> p,
                   cache_.GetOrBuild<LinearBackwardPrimitive>(
                       {static_cast<int64_t>(PrimitiveKind::kLinearBackward), N, IN, OUT},
                       "LinearBackward", [&] { return BuildLinearBackward(engine_, N, IN, OUT); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.LinearBackward(dinp, dweight, dbias, dout, inp, nullptr, weight, N, IN, OUT);
  }
  const LinearBackwardMds md = MakeLinearBackwardMds(N, IN, OUT);
  DNNL_TRY({
    dnnl::stream stream(engine_);
    if (dinp != nullptr) {
      Execute(stream, p->dinp,
              {{DNNL_ARG_SRC, Wrap(md.dout, engine_, dout)},
               {DNNL_ARG_WEIGHTS, Wrap(md.weight, engine_, weight)},
               {DNNL_ARG_DST, Wrap(md.dinp, engine_, dinp)}});
    }
    if (dweight != nullptr) {
      Execute(stream, p->dweight,
              {{DNNL_ARG_SRC, Wrap(md.dout_t, engine_, dout)},
               {DNNL_ARG_WEIGHTS, Wrap(md.inp, engine_, inp)},
               {DNNL_ARG_DST, Wrap(md.dweight, engine_, dweight)}});
    }
    if (dbias != nullptr && cpu::HasAvx2Fma()) {
      cpu::ColumnSums(dbias, dout, N, OUT);
    } else if (dbias != nullptr) {
      Execute(stream, p->dbias,
              {{DNNL_ARG_SRC, Wrap(md.ones, engine_, p->ones.data())},
               {DNNL_ARG_WEIGHTS, Wrap(md.dout, engine_, dout)},
               {DNNL_ARG_DST, Wrap(md.dbias, engine_, dbias)}});
    }
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                            const float* dout, const float* inp, const float* h_0,
                                            const float* c_0,
                                            const RecurrentDirectionWeights* weights,
                                            const RecurrentDims& dims) {
  if (!bf16() && cpu::HasAvx2Fma() && dims.B > 0 && dims.T > 0 && dims.I > 0 && dims.H > 0 &&
      (dims.ND == 1 || dims.ND == 2)) {
    return ProjectedLstmBackward(dinp, dweights, dout, inp, h_0, c_0, weights, dims);
  }
  ASSIGN_OR_RETURN(const bool native,
                   TryRecurrentLayerBackward(PrimitiveKind::kLstmBackward, dinp, dweights, dout,
                                             inp, h_0, c_0, weights, dims));
  if (native) return absl::OkStatus();
  return reference_.LstmLayerBackward(dinp, dweights, dout, inp, h_0, c_0, weights, dims);
}

absl::Status DnnlBackend::GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                           const float* dout, const float* inp, const float* h_0,
                                           const RecurrentDirectionWeights* weights,
                                           const RecurrentDims& dims) {
  ASSIGN_OR_RETURN(const bool native,
                   TryRecurrentLayerBackward(PrimitiveKind::kGruBackward, dinp, dweights, dout, inp,
                                             h_0, /*c_0=*/nullptr, weights, dims));
  if (native) return absl::OkStatus();
  return reference_.GruLayerBackward(dinp, dweights, dout, inp, h_0, weights, dims);
}

absl::Status DnnlBackend::LayerNormBackward(float* dinp, float* dgamma, float* dbeta,
                                            const float* dout, const float* inp, const float* gamma,
                                            int64_t N, int64_t C, float eps) {
  if (N == 0 || C == 0) {
    return reference_.LayerNormBackward(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps);
  }
  if (cpu::HasAvx2Fma()) {
    cpu::LayerNormBackwardRows(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<const LayerNormBackwardPrimitive> p,
      cache_.GetOrBuild<LayerNormBackwardPrimitive>(
          {static_cast<int64_t>(PrimitiveKind::kLayerNormBackward), N, C,
           DnnlPrimitiveCache::FloatKey(eps)},
          "LayerNormBackward", [&] { return BuildLayerNormBackward(engine_, N, C, eps); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.LayerNormBackward(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps);
  }
  // The statistics pass's normalised output is discarded into scratch, which also takes an
  // unwanted dinp: the backward primitive writes all three gradients.
  std::vector<float> mean(N), variance(N), channel_scratch;
  if (dgamma == nullptr || dbeta == nullptr) channel_scratch.resize(2 * C);
  const ScratchFloats data_scratch_buffer(0, N * C);
  float* const data_scratch = data_scratch_buffer.data();
  float* dinp_out = dinp != nullptr ? dinp : data_scratch;
  DNNL_TRY({
    const LayerNormMds md = MakeLayerNormMds(N, C);
    const dnnl::memory mean_mem = Wrap(md.stat, engine_, mean.data());
    const dnnl::memory variance_mem = Wrap(md.stat, engine_, variance.data());
    const dnnl::memory src = Wrap(md.data, engine_, inp);
    const dnnl::memory gamma_mem = Wrap(md.channel, engine_, gamma);
    dnnl::stream stream(engine_);
    Execute(stream, p->stats,
            {{DNNL_ARG_SRC, src},
             {DNNL_ARG_DST, Wrap(md.data, engine_, data_scratch)},
             {DNNL_ARG_MEAN, mean_mem},
             {DNNL_ARG_VARIANCE, variance_mem}});
    Execute(stream, p->backward,
            {{DNNL_ARG_SRC, src},
             {DNNL_ARG_MEAN, mean_mem},
             {DNNL_ARG_VARIANCE, variance_mem},
             {DNNL_ARG_DIFF_DST, Wrap(md.data, engine_, dout)},
             {DNNL_ARG_SCALE, gamma_mem},
             // oneDNN 2.6 refuses to run with use_shift and no shift, though no gradient
             // depends on beta; gamma stands in, its values irrelevant.
             {DNNL_ARG_SHIFT, gamma_mem},
             {DNNL_ARG_DIFF_SRC, Wrap(md.data, engine_, dinp_out)},
             {DNNL_ARG_DIFF_SCALE,
              Wrap(md.channel, engine_, dgamma != nullptr ? dgamma : channel_scratch.data())},
             {DNNL_ARG_DIFF_SHIFT,
              Wrap(md.channel, engine_, dbeta != nullptr ? dbeta : channel_scratch.data() + C)}});
  });
  return absl::OkStatus();
}

absl::StatusOr<bool> DnnlBackend::TryEltwiseBackward(float* dinp, const float* dout,
                                                     const float* inp, int64_t n,
                                                     dnnl::algorithm algorithm) {
  if (n == 0) return false;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const DnnlPrimitive> p,
      cache_.GetOrBuild<DnnlPrimitive>(
          {static_cast<int64_t>(PrimitiveKind::kEltwiseBackward), static_cast<int64_t>(algorithm),
           n},
          "EltwiseBackward", [&] { return BuildEltwiseBackward(engine_, algorithm, n); }));
  if (p == nullptr) {
    CountFallback();
    return false;
  }
  // oneDNN's eltwise backward may run in place (diff_src == diff_dst), as the reference may.
  DNNL_TRY({
    const dnnl::memory::desc md = F32({n}, Tag::a);
    dnnl::stream stream(engine_);
    Execute(stream, *p,
            {{DNNL_ARG_SRC, Wrap(md, engine_, inp)},
             {DNNL_ARG_DIFF_DST, Wrap(md, engine_, dout)},
             {DNNL_ARG_DIFF_SRC, Wrap(md, engine_, dinp)}});
  });
  return true;
}

absl::Status DnnlBackend::GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                                       GeluForm form) {
  const dnnl::algorithm algorithm = form == GeluForm::kErf ? dnnl::algorithm::eltwise_gelu_erf
                                                           : dnnl::algorithm::eltwise_gelu_tanh;
  ASSIGN_OR_RETURN(const bool native, TryEltwiseBackward(dinp, dout, inp, n, algorithm));
  if (native) return absl::OkStatus();
  return reference_.GeluBackward(dinp, dout, inp, n, form);
}

absl::Status DnnlBackend::ReluBackward(float* dinp, const float* dout, const float* inp,
                                       int64_t n) {
  // With alpha = 0, oneDNN's derivative is dout where inp > 0 and 0 elsewhere, at 0 included,
  // as the reference's.
  ASSIGN_OR_RETURN(const bool native,
                   TryEltwiseBackward(dinp, dout, inp, n, dnnl::algorithm::eltwise_relu));
  if (native) return absl::OkStatus();
  return reference_.ReluBackward(dinp, dout, inp, n);
}

absl::Status DnnlBackend::SoftmaxBackward(float* dinp, const float* dout, const float* out,
                                          int64_t R, int64_t C) {
  SoftmaxBackwardRows(dinp, out, dout, R, C);
  return absl::OkStatus();
}

absl::Status DnnlBackend::AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                                            const float* att, const float* dropout_mask, int64_t B,
                                            int64_t T, int64_t D, int64_t NH, bool causal) {
  // As the forward: heads that do not split D evenly have no strided-view form.
  if (B == 0 || T == 0 || D == 0 || NH <= 0 || D % NH != 0) {
    return reference_.AttentionBackward(dqkv, dout, qkv, att, dropout_mask, B, T, D, NH, causal);
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<const AttentionBackwardPrimitive> p,
      cache_.GetOrBuild<AttentionBackwardPrimitive>(
          {static_cast<int64_t>(PrimitiveKind::kAttentionBackward), B, T, D, NH},
          "AttentionBackward", [&] { return BuildAttentionBackward(engine_, B, T, D, NH); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.AttentionBackward(dqkv, dout, qkv, att, dropout_mask, B, T, D, NH, causal);
  }
  const int64_t n_scores = B * NH * T * T;
  const ScratchFloats datt_buffer(0, n_scores), dscores_buffer(1, n_scores);
  float* const datt = datt_buffer.data();
  float* const dscores = dscores_buffer.data();
  // With dropout, V met att * mask in the forward: dV reads that product, and the weights'
  // gradient is masked before the softmax backward, which needs the undropped att.
  const float* att_v = att;
  const ScratchFloats dropped_buffer(2, dropout_mask != nullptr ? n_scores : 0);
  if (dropout_mask != nullptr) {
    float* const dropped = dropped_buffer.data();
    for (int64_t i = 0; i < n_scores; ++i) dropped[i] = att[i] * dropout_mask[i];
    att_v = dropped;
  }
  DNNL_TRY({
    const AttentionMds md = MakeAttentionMds(B, T, D, NH);
    const dnnl::memory dout_mem = Wrap(md.out, engine_, dout);
    const dnnl::memory datt_mem = Wrap(md.att, engine_, datt);
    dnnl::stream stream(engine_);
    Execute(stream, p->dv,
            {{DNNL_ARG_SRC, Wrap(md.att_t, engine_, att_v)},
             {DNNL_ARG_WEIGHTS, dout_mem},
             {DNNL_ARG_DST, Wrap(md.head, engine_, dqkv + 2 * D)}});
    Execute(stream, p->datt,
            {{DNNL_ARG_SRC, dout_mem},
             {DNNL_ARG_WEIGHTS, Wrap(md.head_t, engine_, qkv + 2 * D)},
             {DNNL_ARG_DST, datt_mem}});
    if (dropout_mask != nullptr) {
      for (int64_t i = 0; i < n_scores; ++i) datt[i] *= dropout_mask[i];
    }
    SoftmaxBackwardRows(dscores, att, datt, B * NH * T, T);
    Execute(stream, p->dq,
            {{DNNL_ARG_SRC, Wrap(md.att, engine_, dscores)},
             {DNNL_ARG_WEIGHTS, Wrap(md.head, engine_, qkv + D)},
             {DNNL_ARG_DST, Wrap(md.head, engine_, dqkv)}});
    Execute(stream, p->dk,
            {{DNNL_ARG_SRC, Wrap(md.att_t, engine_, dscores)},
             {DNNL_ARG_WEIGHTS, Wrap(md.head, engine_, qkv)},
             {DNNL_ARG_DST, Wrap(md.head, engine_, dqkv + D)}});
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                     const float* q, const float* kv, int64_t B,
                                                     int64_t T, int64_t D, int64_t NH) {
  return reference_.AttentionLastQueryBackward(dq, dkv, dout, q, kv, B, T, D, NH);
}

}  // namespace forecastd
