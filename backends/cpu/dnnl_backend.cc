#include "backends/cpu/dnnl_backend.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/bf16.h"
#include "backends/cpu/dnnl_compat.h"
#include "backends/cpu/dnnl_memory.h"
#include "backends/cpu/dnnl_primitive.h"
#include "backends/cpu/dnnl_status.h"
#include "backends/cpu/recurrent_avx2.h"
#include "backends/cpu/rows_avx2.h"
#include "kernels/base/status.h"
#include "kernels/ref/positional_encoding.h"

namespace forecastd {
namespace {

// Linear calls of at most this many rows run cpu::SmallLinear (one tile of rows: the weights
// are read once).
constexpr int64_t kSmallLinearRows = 4;

using dnnl_internal::Args;
using dnnl_internal::AttentionMds;
using dnnl_internal::AttentionScale;
using dnnl_internal::BinaryPd;
using dnnl_internal::DnnlPrimitive;
using dnnl_internal::EltwiseForwardPd;
using dnnl_internal::EltwiseFwd;
using dnnl_internal::Execute;
using dnnl_internal::F32;
using dnnl_internal::GeluErfForwardIsAccurate;
using dnnl_internal::kParallelElements;
using dnnl_internal::LayerNormForwardPd;
using dnnl_internal::LayerNormFwd;
using dnnl_internal::LayerNormMds;
using dnnl_internal::MakeAttentionMds;
using dnnl_internal::MakeDnnlPrimitive;
using dnnl_internal::MakeLayerNormMds;
using dnnl_internal::MatmulPd;
using dnnl_internal::ScratchBf16;
using dnnl_internal::ScratchFloats;
using dnnl_internal::SetOutputScale;
using dnnl_internal::SoftmaxForwardPd;
using dnnl_internal::SoftmaxFwd;
using dnnl_internal::Tag;
using dnnl_internal::UserScratchpadAttr;
using dnnl_internal::Wrap;

// bf16 tensors (Options::Math::kBf16).
dnnl::memory::desc Bf16(const dnnl::memory::dims& dims, Tag tag) {
  return {dims, dnnl::memory::data_type::bf16, tag};
}

dnnl::memory WrapBf16(const dnnl::memory::desc& md, const dnnl::engine& engine,
                      const uint16_t* data) {
  return dnnl::memory(md, engine, const_cast<uint16_t*>(data));
}

// --- Linear: matmul with nn.Linear's (OUT, IN) weight read transposed in place.

struct LinearMds {
  dnnl::memory::desc src, weights, bias, dst;
};

LinearMds MakeLinearMds(int64_t N, int64_t IN, int64_t OUT) {
  return LinearMds{F32({N, IN}, Tag::ab), F32({IN, OUT}, Tag::ba), F32({1, OUT}, Tag::ab),
                   F32({N, OUT}, Tag::ab)};
}

std::shared_ptr<DnnlPrimitive> BuildLinear(const dnnl::engine& engine, int64_t N, int64_t IN,
                                           int64_t OUT, bool has_bias) {
  const LinearMds md = MakeLinearMds(N, IN, OUT);
  const dnnl::primitive_attr attr = UserScratchpadAttr();
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<dnnl::matmul>(
      has_bias ? MatmulPd(engine, md.src, md.weights, md.bias, md.dst, attr)
               : MatmulPd(engine, md.src, md.weights, md.dst, attr)));
}

// --- LayerNorm: forward_training when the statistics are wanted, since only it returns them.

std::shared_ptr<DnnlPrimitive> BuildLayerNorm(const dnnl::engine& engine, int64_t N, int64_t C,
                                              float eps, bool with_stats) {
  const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
  const LayerNormMds md = MakeLayerNormMds(N, C);
  const dnnl::primitive_attr attr = UserScratchpadAttr();
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<LayerNormFwd>(
      with_stats ? LayerNormForwardPd(engine, dnnl::prop_kind::forward_training, md.data, md.stat,
                                      eps, flags, attr)
                 : LayerNormForwardPd(engine, dnnl::prop_kind::forward_inference, md.data, eps,
                                      flags, attr)));
}

// --- Element-wise and row-wise ops on dense 1-D / 2-D tensors.

std::shared_ptr<DnnlPrimitive> BuildEltwise(const dnnl::engine& engine, dnnl::algorithm algorithm,
                                            int64_t n) {
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<EltwiseFwd>(
      EltwiseForwardPd(engine, dnnl::prop_kind::forward_inference, algorithm, F32({n}, Tag::a),
                       /*alpha=*/0.0f, /*beta=*/0.0f, UserScratchpadAttr())));
}

std::shared_ptr<DnnlPrimitive> BuildSoftmax(const dnnl::engine& engine, int64_t R, int64_t C) {
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<SoftmaxFwd>(
      SoftmaxForwardPd(engine, dnnl::prop_kind::forward_inference, F32({R, C}, Tag::ab),
                       /*axis=*/1, UserScratchpadAttr())));
}

std::shared_ptr<DnnlPrimitive> BuildBinaryAdd(const dnnl::engine& engine, int64_t n) {
  const dnnl::memory::desc md = F32({n}, Tag::a);
  return std::make_shared<DnnlPrimitive>(MakeDnnlPrimitive<dnnl::binary>(
      BinaryPd(engine, dnnl::algorithm::binary_add, md, md, md, UserScratchpadAttr())));
}

// --- Attention: scores = (Q K^T) * scale, causal mask, softmax over keys, out = att V (or
// out = (att * dropout mask) V, the product taken in a loop), on the strided views of
// AttentionMds.

struct AttentionPrimitive {
  DnnlPrimitive scores;   // matmul with the 1/sqrt(hs) scale as an output scale (SetOutputScale)
  DnnlPrimitive softmax;  // in place on the scores
  DnnlPrimitive context;  // matmul
};

// The attention core under bf16: Q, K and V as dense bf16 copies (B, NH, T, hs) each
// (SplitHeadsBf16; oneDNN 2.6 runs bf16 products on strided views of qkv on its slow gemm
// path, dense ones on AMX), K read transposed; the softmax's weights as a bf16 copy; scores and
// out fp32.
struct AttentionBf16Mds {
  dnnl::memory::desc head, head_t, att, att16, out;
};

AttentionBf16Mds MakeAttentionBf16Mds(int64_t B, int64_t T, int64_t D, int64_t NH) {
  const AttentionMds md = MakeAttentionMds(B, T, D, NH);
  const int64_t hs = D / NH;
  return AttentionBf16Mds{.head = Bf16({B, NH, T, hs}, Tag::abcd),
                          .head_t = Bf16({B, NH, hs, T}, Tag::abdc),
                          .att = md.att,
                          .att16 = Bf16({B, NH, T, T}, Tag::abcd),
                          .out = md.out};
}

// q16, k16, v16 (B, NH, T, hs) = qkv (B, T, 3D)'s thirds split into heads, rounded to bf16.
void SplitHeadsBf16(const float* qkv, int64_t B, int64_t T, int64_t D, int64_t NH, uint16_t* q16,
                    uint16_t* k16, uint16_t* v16) {
  const int64_t hs = D / NH, rows = B * T;
#pragma omp parallel for schedule(static) if (rows * 3 * D >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t b = r / T, t = r % T;
    const float* row = qkv + r * 3 * D;
    for (int64_t h = 0; h < NH; ++h) {
      const int64_t at = ((b * NH + h) * T + t) * hs;
      for (int64_t i = 0; i < hs; ++i) {
        q16[at + i] = cpu::ToBf16(row[h * hs + i]);
        k16[at + i] = cpu::ToBf16(row[D + h * hs + i]);
        v16[at + i] = cpu::ToBf16(row[2 * D + h * hs + i]);
      }
    }
  }
}

// The three primitives of the attention core on the given views: scores = (head x head_t) *
// scale into att (fp32), the softmax in place on att, out = weights x head, where `weights` is
// att itself (fp32) or its bf16 copy.
std::shared_ptr<AttentionPrimitive> BuildAttentionOn(const dnnl::engine& engine,
                                                     const dnnl::memory::desc& head,
                                                     const dnnl::memory::desc& head_t,
                                                     const dnnl::memory::desc& att,
                                                     const dnnl::memory::desc& weights,
                                                     const dnnl::memory::desc& out, float scale) {
  auto p = std::make_shared<AttentionPrimitive>();
  dnnl::primitive_attr scores_attr = UserScratchpadAttr();
  SetOutputScale(scores_attr, scale);
  p->scores = MakeDnnlPrimitive<dnnl::matmul>(MatmulPd(engine, head, head_t, att, scores_attr));
  p->softmax = MakeDnnlPrimitive<SoftmaxFwd>(SoftmaxForwardPd(
      engine, dnnl::prop_kind::forward_inference, att, /*axis=*/3, UserScratchpadAttr()));
  p->context =
      MakeDnnlPrimitive<dnnl::matmul>(MatmulPd(engine, weights, head, out, UserScratchpadAttr()));
  return p;
}

std::shared_ptr<AttentionPrimitive> BuildAttentionBf16(const dnnl::engine& engine, int64_t B,
                                                       int64_t T, int64_t D, int64_t NH) {
  const AttentionBf16Mds md = MakeAttentionBf16Mds(B, T, D, NH);
  return BuildAttentionOn(engine, md.head, md.head_t, md.att, md.att16, md.out,
                          AttentionScale(D, NH));
}

std::shared_ptr<AttentionPrimitive> BuildAttention(const dnnl::engine& engine, int64_t B, int64_t T,
                                                   int64_t D, int64_t NH) {
  const AttentionMds md = MakeAttentionMds(B, T, D, NH);
  return BuildAttentionOn(engine, md.head, md.head_t, md.att, md.att, md.out,
                          AttentionScale(D, NH));
}

// --- bf16 (Options::Math::kBf16): the same products on bfloat16 operands, fp32 results.

// Linear as a matmul of bf16 inp (N, IN) by bf16 weights in the layout the matmul prefers
// (reordered from nn.Linear's fp32 (OUT, IN) on every call), fp32 bias and out.
struct LinearBf16Primitive {
  DnnlPrimitive matmul;
  dnnl::memory::desc weights_md;
  DnnlPrimitive weights_reorder;  // fp32 (IN, OUT) in ba -> weights_md
};

std::shared_ptr<LinearBf16Primitive> BuildLinearBf16(const dnnl::engine& engine, int64_t N,
                                                     int64_t IN, int64_t OUT, bool has_bias) {
  const dnnl::memory::desc src = Bf16({N, IN}, Tag::ab), weights = Bf16({IN, OUT}, Tag::any);
  const dnnl::memory::desc bias = F32({1, OUT}, Tag::ab), dst = F32({N, OUT}, Tag::ab);
  const dnnl::primitive_attr attr = UserScratchpadAttr();
  const dnnl::matmul::primitive_desc pd = has_bias ? MatmulPd(engine, src, weights, bias, dst, attr)
                                                   : MatmulPd(engine, src, weights, dst, attr);
  auto p = std::make_shared<LinearBf16Primitive>();
  p->matmul = MakeDnnlPrimitive<dnnl::matmul>(pd);
  p->weights_md = pd.weights_desc();
  p->weights_reorder = MakeDnnlPrimitive<dnnl::reorder>(dnnl::reorder::primitive_desc(
      engine, F32({IN, OUT}, Tag::ba), engine, p->weights_md, UserScratchpadAttr()));
  return p;
}

// Sets the scores of keys after their query to -inf, whose softmax weight is then exactly 0, as
// the reference's. A loop rather than a broadcast binary post-op on the matmul: oneDNN 2.6 runs
// that post-op on its slow reference matmul.
void MaskFuture(float* scores, int64_t rows, int64_t T) {
  for (int64_t r = 0; r < rows; ++r) {
    float* row = scores + r * T;
    const int64_t t = r % T;
    for (int64_t s = t + 1; s < T; ++s) row[s] = -std::numeric_limits<float>::infinity();
  }
}

// The rest of DnnlBackend::Attention under bf16, on its primitives `p` with the scores in
// `scores`: Q, K and V split into dense bf16 heads, the scores' matmul, the causal mask and the
// softmax in fp32, the weights (times the dropout mask) rounded to bf16 for the context's.
absl::Status AttentionBf16(const dnnl::engine& engine, const AttentionPrimitive& p, float* out,
                           float* scores, const float* qkv, const float* dropout_mask, int64_t B,
                           int64_t T, int64_t D, int64_t NH, bool causal) {
  const int64_t n_scores = B * NH * T * T;
  const int64_t head_n = B * T * D;  // each of Q, K, V
  const ScratchBf16 heads16(0, 3 * head_n), weights16(1, n_scores);
  const uint16_t* q16 = heads16.data();
  const uint16_t* k16 = q16 + head_n;
  const uint16_t* v16 = k16 + head_n;
  SplitHeadsBf16(qkv, B, T, D, NH, heads16.data(), heads16.data() + head_n,
                 heads16.data() + 2 * head_n);
  DNNL_TRY({
    const AttentionBf16Mds md = MakeAttentionBf16Mds(B, T, D, NH);
    const dnnl::memory scores_mem = Wrap(md.att, engine, scores);
    dnnl::stream stream(engine);
    Execute(stream, p.scores,
            {{DNNL_ARG_SRC, WrapBf16(md.head, engine, q16)},
             {DNNL_ARG_WEIGHTS, WrapBf16(md.head_t, engine, k16)},
             {DNNL_ARG_DST, scores_mem}});
    if (causal) MaskFuture(scores, B * NH * T, T);
    Execute(stream, p.softmax, {{DNNL_ARG_SRC, scores_mem}, {DNNL_ARG_DST, scores_mem}});
    // `att` keeps the undropped weights; the context reads (weights * mask) in bf16.
    if (dropout_mask == nullptr) {
      cpu::ToBf16(scores, weights16.data(), n_scores);
    } else {
      uint16_t* w16 = weights16.data();
      for (int64_t i = 0; i < n_scores; ++i) w16[i] = cpu::ToBf16(scores[i] * dropout_mask[i]);
    }
    Execute(stream, p.context,
            {{DNNL_ARG_SRC, WrapBf16(md.att16, engine, weights16.data())},
             {DNNL_ARG_WEIGHTS, WrapBf16(md.head, engine, v16)},
             {DNNL_ARG_DST, Wrap(md.out, engine, out)}});
  });
  return absl::OkStatus();
}

}  // namespace

void DnnlBackend::SetThreadsForCallingThread(int threads) {
  omp_set_num_threads(std::max(1, threads));
}

int DnnlBackend::ThreadsForCallingThread() { return std::max(1, omp_get_max_threads()); }

absl::StatusOr<std::unique_ptr<DnnlBackend>> DnnlBackend::Create(const Options& options) {
  if (options.primitive_cache_capacity == 0) {
    return absl::InvalidArgumentError("DnnlBackend: primitive_cache_capacity must be > 0");
  }
  if (options.math == Options::Math::kBf16 && !CpuRunsBf16()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "DnnlBackend: bf16 needs a CPU with AVX512-BF16 or AMX; this one runs ", CpuIsa()));
  }
  dnnl::engine engine;
  DNNL_TRY(engine = dnnl::engine(dnnl::engine::kind::cpu, 0));
  return std::unique_ptr<DnnlBackend>(new DnnlBackend(std::move(engine), options));
}

DnnlBackend::DnnlBackend(dnnl::engine engine, const Options& options)
    : engine_(std::move(engine)), math_(options.math), cache_(options.primitive_cache_capacity) {}

std::string DnnlBackend::CpuIsa() {
  using Isa = dnnl::cpu_isa;
  switch (dnnl::get_effective_cpu_isa()) {
    case Isa::sse41:
      return "sse41";
    case Isa::avx:
      return "avx";
    case Isa::avx2:
      return "avx2";
    case Isa::avx2_vnni:
      return "avx2_vnni";
    case Isa::avx512_core:
      return "avx512_core";
    case Isa::avx512_core_vnni:
      return "avx512_core_vnni";
    case Isa::avx512_core_bf16:
      return "avx512_core_bf16";
    case Isa::avx512_core_amx:
      return "avx512_core_amx";
    default:
      return "other";
  }
}

int64_t DnnlBackend::recurrent_row_tile() const { return !bf16() && cpu::HasAvx2Fma() ? 4 : 1; }

bool DnnlBackend::CpuRunsBf16() {
  // oneDNN's ISA values are sets of feature bits, each containing the ones below it.
  const auto bits = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto bf16 = static_cast<unsigned>(dnnl::cpu_isa::avx512_core_bf16);
  return (bits & bf16) == bf16;
}

std::string DnnlBackend::compute() const {
  return absl::StrCat(bf16() ? "bf16" : "fp32", " on ", CpuIsa());
}

bool DnnlBackend::SupportsOp(Op op) const {
  switch (op) {
    case Op::kLinear:
    case Op::kLstmLayer:
    case Op::kGruLayer:
    case Op::kLayerNorm:
    case Op::kGelu:
    case Op::kRelu:
    case Op::kSoftmax:
    case Op::kAttention:
    case Op::kAttentionLastQuery:  // own loops: smaller than any primitive's overhead
    case Op::kResidual:
    case Op::kLinearBackward:
    case Op::kLstmLayerBackward:
    case Op::kGruLayerBackward:
    case Op::kLayerNormBackward:
    case Op::kGeluBackward:
    case Op::kReluBackward:
    case Op::kSoftmaxBackward:
    case Op::kAttentionBackward:
    case Op::kPositionalEncoding:  // a table built once per shape, then an add
      return true;
    case Op::kAttentionLastQueryBackward:  // B * NH rows of T: the reference loops serve
      return false;
  }
  return false;
}

absl::Status DnnlBackend::Linear(float* out, const float* inp, const float* weight,
                                 const float* bias, int64_t N, int64_t IN, int64_t OUT) {
  if (N == 0 || IN == 0 || OUT == 0) {
    return reference_.Linear(out, inp, weight, bias, N, IN, OUT);
  }
  if (bf16()) return LinearBf16(out, inp, weight, bias, N, IN, OUT);
  // A few rows (a forecast's head at a small batch): dot products straight from the weights;
  // oneDNN's per-call set-up (memory objects, a stream, the primitive's lookup) would cost more.
  if (N <= kSmallLinearRows && cpu::HasAvx2Fma()) {
    cpu::SmallLinear(out, inp, weight, bias, N, IN, OUT);
    return absl::OkStatus();
  }
  // A small product (a recurrent layer's projection of one window): broadcasts and FMAs over W
  // in panels, without oneDNN's per-call set-up (memory objects, a stream, the primitive's
  // lookup), which in a server, on a thread whose caches hold other work, costs as much as the
  // product.
  if (N * IN * OUT <= cpu::kPanelLinearMacs && cpu::HasAvx2Fma()) {
    cpu::PanelLinear(out, inp, weight, bias, N, IN, OUT);
    return absl::OkStatus();
  }
  const bool has_bias = bias != nullptr;
  ASSIGN_OR_RETURN(std::shared_ptr<const DnnlPrimitive> p,
                   cache_.GetOrBuild<DnnlPrimitive>(
                       {static_cast<int64_t>(PrimitiveKind::kLinear), N, IN, OUT, has_bias},
                       "Linear", [&] { return BuildLinear(engine_, N, IN, OUT, has_bias); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.Linear(out, inp, weight, bias, N, IN, OUT);
  }
  const LinearMds md = MakeLinearMds(N, IN, OUT);
  DNNL_TRY({
    dnnl::stream stream(engine_);
    Args args({{DNNL_ARG_SRC, Wrap(md.src, engine_, inp)},
               {DNNL_ARG_WEIGHTS, Wrap(md.weights, engine_, weight)},
               {DNNL_ARG_DST, Wrap(md.dst, engine_, out)}});
    if (has_bias) args.emplace(DNNL_ARG_BIAS, Wrap(md.bias, engine_, bias));
    Execute(stream, *p, std::move(args));
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::LinearBf16(float* out, const float* inp, const float* weight,
                                     const float* bias, int64_t N, int64_t IN, int64_t OUT) {
  const bool has_bias = bias != nullptr;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const LinearBf16Primitive> p,
      cache_.GetOrBuild<LinearBf16Primitive>(
          {static_cast<int64_t>(PrimitiveKind::kLinearBf16), N, IN, OUT, has_bias}, "Linear bf16",
          [&] { return BuildLinearBf16(engine_, N, IN, OUT, has_bias); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.Linear(out, inp, weight, bias, N, IN, OUT);
  }
  const ScratchBf16 inp16(0, N * IN);
  cpu::ToBf16(inp, inp16.data(), N * IN);
  DNNL_TRY({
    dnnl::stream stream(engine_);
    dnnl::memory weights16(p->weights_md, engine_);
    Execute(stream, p->weights_reorder,
            {{DNNL_ARG_FROM, Wrap(F32({IN, OUT}, Tag::ba), engine_, weight)},
             {DNNL_ARG_TO, weights16}});
    Args args({{DNNL_ARG_SRC, WrapBf16(Bf16({N, IN}, Tag::ab), engine_, inp16.data())},
               {DNNL_ARG_WEIGHTS, weights16},
               {DNNL_ARG_DST, Wrap(F32({N, OUT}, Tag::ab), engine_, out)}});
    if (has_bias) args.emplace(DNNL_ARG_BIAS, Wrap(F32({1, OUT}, Tag::ab), engine_, bias));
    Execute(stream, p->matmul, std::move(args));
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::LstmLayer(float* out, float* h_n, float* c_n, const float* inp,
                                    const float* h_0, const float* c_0,
                                    const RecurrentDirectionWeights* weights,
                                    const RecurrentDims& dims) {
  ASSIGN_OR_RETURN(const bool native, TryRecurrentLayer(PrimitiveKind::kLstm, out, h_n, c_n, inp,
                                                        h_0, c_0, weights, dims));
  if (native) return absl::OkStatus();
  return reference_.LstmLayer(out, h_n, c_n, inp, h_0, c_0, weights, dims);
}

absl::Status DnnlBackend::GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                                   const RecurrentDirectionWeights* weights,
                                   const RecurrentDims& dims) {
  ASSIGN_OR_RETURN(const bool native,
                   TryRecurrentLayer(PrimitiveKind::kGru, out, h_n, /*c_n=*/nullptr, inp, h_0,
                                     /*c_0=*/nullptr, weights, dims));
  if (native) return absl::OkStatus();
  return reference_.GruLayer(out, h_n, inp, h_0, weights, dims);
}

absl::Status DnnlBackend::LayerNorm(float* out, float* mean, float* rstd, const float* inp,
                                    const float* gamma, const float* beta, int64_t N, int64_t C,
                                    float eps) {
  if (N == 0 || C == 0) return reference_.LayerNorm(out, mean, rstd, inp, gamma, beta, N, C, eps);
  if (cpu::HasAvx2Fma()) {
    cpu::LayerNormRows(out, mean, rstd, inp, gamma, beta, N, C, eps);
    return absl::OkStatus();
  }
  const bool with_stats = mean != nullptr || rstd != nullptr;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const DnnlPrimitive> p,
      cache_.GetOrBuild<DnnlPrimitive>(
          {static_cast<int64_t>(PrimitiveKind::kLayerNorm), N, C, DnnlPrimitiveCache::FloatKey(eps),
           with_stats},
          "LayerNorm", [&] { return BuildLayerNorm(engine_, N, C, eps, with_stats); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.LayerNorm(out, mean, rstd, inp, gamma, beta, N, C, eps);
  }
  // oneDNN returns the variance; rstd is derived from it below. A missing mean lands in a
  // scratch buffer.
  std::vector<float> variance, mean_scratch;
  if (with_stats) {
    variance.resize(N);
    if (mean == nullptr) mean_scratch.resize(N);
  }
  float* mean_out = mean != nullptr ? mean : mean_scratch.data();
  DNNL_TRY({
    const LayerNormMds md = MakeLayerNormMds(N, C);
    Args args({{DNNL_ARG_SRC, Wrap(md.data, engine_, inp)},
               {DNNL_ARG_DST, Wrap(md.data, engine_, out)},
               {DNNL_ARG_SCALE, Wrap(md.channel, engine_, gamma)},
               {DNNL_ARG_SHIFT, Wrap(md.channel, engine_, beta)}});
    if (with_stats) {
      args.emplace(DNNL_ARG_MEAN, Wrap(md.stat, engine_, mean_out));
      args.emplace(DNNL_ARG_VARIANCE, Wrap(md.stat, engine_, variance.data()));
    }
    dnnl::stream stream(engine_);
    Execute(stream, *p, std::move(args));
  });
  if (rstd != nullptr) {
    for (int64_t n = 0; n < N; ++n) {
      rstd[n] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(variance[n]) + eps));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DnnlBackend::TryEltwise(float* out, const float* inp, int64_t n,
                                             dnnl::algorithm algorithm) {
  if (n == 0) return false;
  ASSIGN_OR_RETURN(
      std::shared_ptr<const DnnlPrimitive> p,
      cache_.GetOrBuild<DnnlPrimitive>(
          {static_cast<int64_t>(PrimitiveKind::kEltwise), static_cast<int64_t>(algorithm), n},
          "Eltwise", [&] { return BuildEltwise(engine_, algorithm, n); }));
  if (p == nullptr) {
    CountFallback();
    return false;
  }
  DNNL_TRY({
    const dnnl::memory::desc md = F32({n}, Tag::a);
    dnnl::stream stream(engine_);
    Execute(stream, *p,
            {{DNNL_ARG_SRC, Wrap(md, engine_, inp)}, {DNNL_ARG_DST, Wrap(md, engine_, out)}});
  });
  return true;
}

absl::Status DnnlBackend::Gelu(float* out, const float* inp, int64_t n, GeluForm form) {
  // oneDNN 3.1's is inaccurate (dnnl_compat.h): the reference runs instead, by choice rather
  // than because oneDNN rejected the shape, so it counts as no fallback.
  if (form == GeluForm::kErf && !GeluErfForwardIsAccurate()) {
    return reference_.Gelu(out, inp, n, form);
  }
  const dnnl::algorithm algorithm = form == GeluForm::kErf ? dnnl::algorithm::eltwise_gelu_erf
                                                           : dnnl::algorithm::eltwise_gelu_tanh;
  ASSIGN_OR_RETURN(const bool native, TryEltwise(out, inp, n, algorithm));
  if (native) return absl::OkStatus();
  return reference_.Gelu(out, inp, n, form);
}

absl::Status DnnlBackend::Relu(float* out, const float* inp, int64_t n) {
  ASSIGN_OR_RETURN(const bool native, TryEltwise(out, inp, n, dnnl::algorithm::eltwise_relu));
  if (native) return absl::OkStatus();
  return reference_.Relu(out, inp, n);
}

absl::Status DnnlBackend::Softmax(float* out, const float* inp, int64_t R, int64_t C) {
  if (R == 0 || C == 0) return reference_.Softmax(out, inp, R, C);
  ASSIGN_OR_RETURN(
      std::shared_ptr<const DnnlPrimitive> p,
      cache_.GetOrBuild<DnnlPrimitive>({static_cast<int64_t>(PrimitiveKind::kSoftmax), R, C},
                                       "Softmax", [&] { return BuildSoftmax(engine_, R, C); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.Softmax(out, inp, R, C);
  }
  DNNL_TRY({
    const dnnl::memory::desc md = F32({R, C}, Tag::ab);
    dnnl::stream stream(engine_);
    Execute(stream, *p,
            {{DNNL_ARG_SRC, Wrap(md, engine_, inp)}, {DNNL_ARG_DST, Wrap(md, engine_, out)}});
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::Attention(float* out, float* att, const float* qkv,
                                    const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                    int64_t NH, bool causal) {
  // Heads that do not split D evenly have no strided-view form; the reference defines them.
  if (B == 0 || T == 0 || D == 0 || NH <= 0 || D % NH != 0) {
    return reference_.Attention(out, att, qkv, dropout_mask, B, T, D, NH, causal);
  }
  const PrimitiveKind kind = bf16() ? PrimitiveKind::kAttentionBf16 : PrimitiveKind::kAttention;
  ASSIGN_OR_RETURN(std::shared_ptr<const AttentionPrimitive> p,
                   cache_.GetOrBuild<AttentionPrimitive>(
                       {static_cast<int64_t>(kind), B, T, D, NH}, "Attention", [&] {
                         return bf16() ? BuildAttentionBf16(engine_, B, T, D, NH)
                                       : BuildAttention(engine_, B, T, D, NH);
                       }));
  if (p == nullptr) {
    CountFallback();
    return reference_.Attention(out, att, qkv, dropout_mask, B, T, D, NH, causal);
  }
  const int64_t n_scores = B * NH * T * T;
  const ScratchFloats scores_scratch(0, att != nullptr ? 0 : n_scores);
  float* scores = att != nullptr ? att : scores_scratch.data();
  if (bf16())
    return AttentionBf16(engine_, *p, out, scores, qkv, dropout_mask, B, T, D, NH, causal);
  // With dropout the context matmul reads att * mask from its own buffer, since `att` must keep
  // the undropped weights for the backward pass.
  const ScratchFloats dropped_scratch(1, dropout_mask != nullptr ? n_scores : 0);
  float* dropped = dropped_scratch.data();
  DNNL_TRY({
    const AttentionMds md = MakeAttentionMds(B, T, D, NH);
    const dnnl::memory scores_mem = Wrap(md.att, engine_, scores);
    dnnl::stream stream(engine_);
    Execute(stream, p->scores,
            {{DNNL_ARG_SRC, Wrap(md.head, engine_, qkv)},
             {DNNL_ARG_WEIGHTS, Wrap(md.head_t, engine_, qkv + D)},
             {DNNL_ARG_DST, scores_mem}});
    if (causal) MaskFuture(scores, B * NH * T, T);
    Execute(stream, p->softmax, {{DNNL_ARG_SRC, scores_mem}, {DNNL_ARG_DST, scores_mem}});
    dnnl::memory weights_mem = scores_mem;
    if (dropout_mask != nullptr) {
      for (int64_t i = 0; i < n_scores; ++i) dropped[i] = scores[i] * dropout_mask[i];
      weights_mem = Wrap(md.att, engine_, dropped);
    }
    Execute(stream, p->context,
            {{DNNL_ARG_SRC, weights_mem},
             {DNNL_ARG_WEIGHTS, Wrap(md.head, engine_, qkv + 2 * D)},
             {DNNL_ARG_DST, Wrap(md.out, engine_, out)}});
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B,
                                             int64_t T, int64_t D, int64_t NH) {
  if (B == 0 || T == 0 || D == 0 || NH <= 0 || D % NH != 0) {
    return reference_.AttentionLastQuery(out, q, kv, B, T, D, NH);
  }
  // B * NH rows of T scores: a few hundred thousand multiply-adds even for large batches,
  // below what a primitive launch would cost, so plain fp32 loops the compiler vectorises,
  // the (batch, head) pairs shared out over the OpenMP threads when there are many (each pair
  // on one thread, in the same order: the result does not depend on the threads).
  const int64_t hs = D / NH, pairs = B * NH;
  const float scale = AttentionScale(D, NH);
#pragma omp parallel if (pairs > 1 && pairs * T * hs >= kParallelElements)
  {
    std::vector<float> w(T);
#pragma omp for schedule(static)
    for (int64_t bh = 0; bh < pairs; ++bh) {
      const int64_t b = bh / NH, h = bh % NH;
      const float* kv_b = kv + b * T * 2 * D;
      const float* q_bh = q + b * D + h * hs;
      float max = -std::numeric_limits<float>::infinity();
      for (int64_t s = 0; s < T; ++s) {
        const float* k = kv_b + s * 2 * D + h * hs;
        float dot = 0.0f;
        for (int64_t i = 0; i < hs; ++i) dot += q_bh[i] * k[i];
        w[s] = dot * scale;
        max = std::max(max, w[s]);
      }
      float sum = 0.0f;
      for (int64_t s = 0; s < T; ++s) {
        w[s] = std::exp(w[s] - max);
        sum += w[s];
      }
      const float inv = 1.0f / sum;
      float* o = out + b * D + h * hs;
      std::fill(o, o + hs, 0.0f);
      for (int64_t s = 0; s < T; ++s) {
        const float* v = kv_b + s * 2 * D + D + h * hs;
        const float ws = w[s] * inv;
        for (int64_t i = 0; i < hs; ++i) o[i] += ws * v[i];
      }
    }
  }
  return absl::OkStatus();
}

absl::Status DnnlBackend::Residual(float* out, const float* a, const float* b, int64_t n) {
  if (n == 0) return absl::OkStatus();
  if (cpu::HasAvx2Fma()) {
    cpu::AddRows(out, a, b, n);
    return absl::OkStatus();
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<const DnnlPrimitive> p,
      cache_.GetOrBuild<DnnlPrimitive>({static_cast<int64_t>(PrimitiveKind::kBinaryAdd), n},
                                       "Residual", [&] { return BuildBinaryAdd(engine_, n); }));
  if (p == nullptr) {
    CountFallback();
    return reference_.Residual(out, a, b, n);
  }
  // oneDNN allows dst to alias src0 only; addition commutes, so an alias of b goes first.
  if (out == b) std::swap(a, b);
  DNNL_TRY({
    const dnnl::memory::desc md = F32({n}, Tag::a);
    dnnl::stream stream(engine_);
    Execute(stream, *p,
            {{DNNL_ARG_SRC_0, Wrap(md, engine_, a)},
             {DNNL_ARG_SRC_1, Wrap(md, engine_, b)},
             {DNNL_ARG_DST, Wrap(md, engine_, out)}});
  });
  return absl::OkStatus();
}

absl::Status DnnlBackend::PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                             int64_t D) {
  if (B == 0 || T == 0 || D == 0) return reference_.PositionalEncoding(out, inp, B, T, D);
  // The table (T, D) once per shape, with the reference's values (ref::PositionalEncodingTable,
  // which takes sin and cos in double); then a float add per element, as the reference's, so
  // the result is the reference's bit for bit. (The reference takes B * T * D sines: on a
  // 16-core Xeon a third of a transformer_small forecast at B=32.)
  ASSIGN_OR_RETURN(
      std::shared_ptr<const std::vector<float>> table,
      cache_.GetOrBuild<std::vector<float>>(
          {static_cast<int64_t>(PrimitiveKind::kPositionalTable), T, D}, "PositionalEncoding", [&] {
            auto pe = std::make_shared<std::vector<float>>(T * D);
            ref::PositionalEncodingTable(pe->data(), T, D);
            return pe;
          }));
  if (table == nullptr) {
    CountFallback();
    return reference_.PositionalEncoding(out, inp, B, T, D);
  }
  const float* pe = table->data();
  const int64_t rows = B * T;
#pragma omp parallel for schedule(static) if (rows * D >= kParallelElements)
  for (int64_t r = 0; r < rows; ++r) {
    const float* p = pe + (r % T) * D;
    for (int64_t c = 0; c < D; ++c) out[r * D + c] = inp[r * D + c] + p[c];
  }
  return absl::OkStatus();
}

}  // namespace forecastd
