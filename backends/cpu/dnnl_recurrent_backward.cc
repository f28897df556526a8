// DnnlBackend's LSTM and GRU backward passes on oneDNN (an LSTM's on a CPU with AVX2 runs
// ProjectedLstmBackward instead): lstm_backward and lbr_gru_backward, both
// directions in one primitive with bidirectional_concat (direction 1 runs right to left, as
// PyTorch's reverse direction). Each call first reruns the layer's forward as forward_training,
// which writes the workspace the backward reads, then the backward. Layouts and gate orders as
// dnnl_recurrent_layout.h maps them, and back again for the gradients: dinp and dout are in
// place like inp and out; the weights in ldgoi are reordered into the layouts the forward and
// the backward primitives ask for (they differ); the weight gradients come out in the
// backward's layout (ldigo), are reordered to ldgoi and go back through FromOneDnnGrads.
// oneDNN accumulates into the weight gradients (2.x always, 3.x by default), so they are zeroed
// before each call.
#include <cstring>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "backends/cpu/dnnl_backend.h"
#include "backends/cpu/dnnl_compat.h"
#include "backends/cpu/dnnl_primitive.h"
#include "backends/cpu/dnnl_recurrent_layout.h"
#include "backends/cpu/dnnl_status.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

using dnnl_internal::Args;
using dnnl_internal::DnnlPrimitive;
using dnnl_internal::Execute;
using dnnl_internal::FromOneDnnGrads;
using dnnl_internal::LbrGruBackwardPd;
using dnnl_internal::LbrGruForwardPd;
using dnnl_internal::LstmBackwardPd;
using dnnl_internal::LstmForwardPd;
using dnnl_internal::MakeDnnlPrimitive;
using dnnl_internal::MaybeReorder;
using dnnl_internal::OneDnnWeights;
using dnnl_internal::RecurrentLayout;
using dnnl_internal::Reordered;
using dnnl_internal::RnnMds;
using dnnl_internal::Tag;
using dnnl_internal::ToOneDnnWeights;
using dnnl_internal::UserScratchpadAttr;
using dnnl_internal::Wrap;

// Everything a recurrent backward of one shape builds once. A reorder is empty when the
// layouts on its two sides are the same.
struct RecurrentBackwardPrimitive {
  DnnlPrimitive forward;  // forward_training
  DnnlPrimitive backward;
  dnnl::memory::desc workspace_md;
  dnnl::memory::desc fwd_weights_layer_md, fwd_weights_iter_md;
  dnnl::memory::desc bwd_weights_layer_md, bwd_weights_iter_md;
  dnnl::memory::desc diff_weights_layer_md, diff_weights_iter_md, diff_bias_md;
  // From ldgoi into the forward's and the backward's weight layouts.
  std::optional<DnnlPrimitive> fwd_layer_reorder, fwd_iter_reorder;
  std::optional<DnnlPrimitive> bwd_layer_reorder, bwd_iter_reorder;
  // From the backward's weight gradient layouts into ldgoi / ldgo.
  std::optional<DnnlPrimitive> diff_layer_reorder, diff_iter_reorder, diff_bias_reorder;
};

template <typename RnnFwd, typename RnnBwd>
std::shared_ptr<RecurrentBackwardPrimitive> FinishBuild(
    const dnnl::engine& engine, const RecurrentLayout& s,
    const typename RnnFwd::primitive_desc& fwd_pd, const typename RnnBwd::primitive_desc& bwd_pd) {
  auto p = std::make_shared<RecurrentBackwardPrimitive>();
  p->forward = MakeDnnlPrimitive<RnnFwd>(fwd_pd);
  p->backward = MakeDnnlPrimitive<RnnBwd>(bwd_pd);
  p->workspace_md = fwd_pd.workspace_desc();
  p->fwd_weights_layer_md = fwd_pd.weights_layer_desc();
  p->fwd_weights_iter_md = fwd_pd.weights_iter_desc();
  p->bwd_weights_layer_md = bwd_pd.weights_layer_desc();
  p->bwd_weights_iter_md = bwd_pd.weights_iter_desc();
  p->diff_weights_layer_md = bwd_pd.diff_weights_layer_desc();
  p->diff_weights_iter_md = bwd_pd.diff_weights_iter_desc();
  p->diff_bias_md = bwd_pd.diff_bias_desc();
  const dnnl::memory::desc user_layer = s.WeightsLayer(Tag::ldgoi);
  const dnnl::memory::desc user_iter = s.WeightsIter(Tag::ldgoi);
  p->fwd_layer_reorder = MaybeReorder(engine, user_layer, p->fwd_weights_layer_md);
  p->fwd_iter_reorder = MaybeReorder(engine, user_iter, p->fwd_weights_iter_md);
  p->bwd_layer_reorder = MaybeReorder(engine, user_layer, p->bwd_weights_layer_md);
  p->bwd_iter_reorder = MaybeReorder(engine, user_iter, p->bwd_weights_iter_md);
  p->diff_layer_reorder = MaybeReorder(engine, p->diff_weights_layer_md, user_layer);
  p->diff_iter_reorder = MaybeReorder(engine, p->diff_weights_iter_md, user_iter);
  p->diff_bias_reorder = MaybeReorder(engine, p->diff_bias_md, s.Bias());
  return p;
}

std::shared_ptr<RecurrentBackwardPrimitive> BuildRecurrentBackward(const dnnl::engine& engine,
                                                                   const RecurrentLayout& s) {
  const auto direction = s.ND == 1 ? dnnl::rnn_direction::unidirectional_left2right
                                   : dnnl::rnn_direction::bidirectional_concat;
  // The final states do not reach the loss: no dst_iter, no diff_dst_iter. The initial states
  // and their gradients (scratch: they reach no caller) are always given, as zeros when the
  // caller has none: with a zero descriptor instead, oneDNN 2.6's LSTM backward gets dW_hh
  // wrong for one row of one step (nonzero, where h_0 = 0 makes it 0).
  // The gradients have the same layouts as their values, so one set of descriptors serves both.
  const dnnl::memory::desc state = s.State();
  const RnnMds md{.src_layer = s.SrcLayer(),
                  .src_iter = state,
                  .src_iter_c = state,
                  .weights_layer = s.WeightsLayer(Tag::any),
                  .weights_iter = s.WeightsIter(Tag::any),
                  .bias = s.Bias(),
                  .dst_layer = s.DstLayer(),
                  .dst_iter = dnnl::memory::desc(),
                  .dst_iter_c = dnnl::memory::desc()};
  const auto fwd_prop = dnnl::prop_kind::forward_training;
  const dnnl::primitive_attr attr = UserScratchpadAttr();
  if (s.lstm) {
    const auto fwd_pd = LstmForwardPd(engine, fwd_prop, direction, md, attr);
    return FinishBuild<dnnl::lstm_forward, dnnl::lstm_backward>(
        engine, s, fwd_pd, LstmBackwardPd(engine, direction, md, md, fwd_pd, attr));
  }
  const auto fwd_pd = LbrGruForwardPd(engine, fwd_prop, direction, md, attr);
  return FinishBuild<dnnl::lbr_gru_forward, dnnl::lbr_gru_backward>(
      engine, s, fwd_pd, LbrGruBackwardPd(engine, direction, md, md, fwd_pd, attr));
}

// Runs `reorder` from `from` into `to`; with no reorder they are the same layout and the data
// is copied.
void ReorderOrCopy(dnnl::stream& stream, const std::optional<DnnlPrimitive>& reorder,
                   const dnnl::memory& from, const dnnl::memory& to) {
  if (reorder.has_value()) {
    Execute(stream, *reorder, {{DNNL_ARG_FROM, from}, {DNNL_ARG_TO, to}});
    return;
  }
  std::memcpy(to.get_data_handle(), from.get_data_handle(), from.get_desc().get_size());
}

// A new memory of layout `md`, zeroed.
dnnl::memory Zeroed(const dnnl::engine& engine, const dnnl::memory::desc& md) {
  dnnl::memory mem(md, engine);
  std::memset(mem.get_data_handle(), 0, md.get_size());
  return mem;
}

}  // namespace

absl::StatusOr<bool> DnnlBackend::TryRecurrentLayerBackward(
    PrimitiveKind kind, float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
    const float* inp, const float* h_0, const float* c_0, const RecurrentDirectionWeights* weights,
    const RecurrentDims& dims) {
  const bool lstm = kind == PrimitiveKind::kLstmBackward;
  const RecurrentLayout s = lstm ? RecurrentLayout::Lstm(dims) : RecurrentLayout::Gru(dims);
  if (s.B == 0 || s.T == 0 || s.I == 0 || s.H == 0 || (s.ND != 1 && s.ND != 2)) return false;
  ASSIGN_OR_RETURN(std::shared_ptr<const RecurrentBackwardPrimitive> p,
                   cache_.GetOrBuild<RecurrentBackwardPrimitive>(
                       {static_cast<int64_t>(kind), s.B, s.T, s.I, s.H, s.ND},
                       lstm ? "LstmLayerBackward" : "GruLayerBackward",
                       [&] { return BuildRecurrentBackward(engine_, s); }));
  if (p == nullptr) {
    CountFallback();
    return false;
  }

  const OneDnnWeights w = ToOneDnnWeights(s, weights);
  OneDnnWeights grads;
  grads.layer.resize(w.layer.size());
  grads.iter.resize(w.iter.size());
  grads.bias.resize(w.bias.size());
  // A missing initial state starts from zeros (see State()). The initial states' gradients and
  // an unwanted dinp land in scratch.
  const int64_t state_size = s.ND * s.B * s.H;
  std::vector<float> zeros, dst_layer(s.B * s.T * s.ND * s.H), dinp_scratch,
      dstate_scratch((lstm ? 2 : 1) * state_size);
  if (h_0 == nullptr || (lstm && c_0 == nullptr)) zeros.assign(state_size, 0.0f);
  if (dinp == nullptr) dinp_scratch.resize(s.B * s.T * s.I);

  DNNL_TRY({
    dnnl::stream stream(engine_);
    const dnnl::memory user_layer = Wrap(s.WeightsLayer(Tag::ldgoi), engine_, w.layer.data());
    const dnnl::memory user_iter = Wrap(s.WeightsIter(Tag::ldgoi), engine_, w.iter.data());
    const dnnl::memory src_layer = Wrap(s.SrcLayer(), engine_, inp);
    const dnnl::memory bias = Wrap(s.Bias(), engine_, w.bias.data());
    const dnnl::memory dst = Wrap(s.DstLayer(), engine_, dst_layer.data());
    const dnnl::memory workspace(p->workspace_md, engine_);
    Args common({{DNNL_ARG_SRC_LAYER, src_layer},
                 {DNNL_ARG_BIAS, bias},
                 {DNNL_ARG_DST_LAYER, dst},
                 {DNNL_ARG_WORKSPACE, workspace}});
    common.emplace(DNNL_ARG_SRC_ITER,
                   Wrap(s.State(), engine_, h_0 != nullptr ? h_0 : zeros.data()));
    if (lstm) {
      common.emplace(DNNL_ARG_SRC_ITER_C,
                     Wrap(s.State(), engine_, c_0 != nullptr ? c_0 : zeros.data()));
    }

    Args fwd_args = common;
    fwd_args.emplace(DNNL_ARG_WEIGHTS_LAYER,
                     Reordered(stream, p->fwd_layer_reorder, p->fwd_weights_layer_md, user_layer));
    fwd_args.emplace(DNNL_ARG_WEIGHTS_ITER,
                     Reordered(stream, p->fwd_iter_reorder, p->fwd_weights_iter_md, user_iter));
    Execute(stream, p->forward, std::move(fwd_args));

    const dnnl::memory diff_layer = Zeroed(engine_, p->diff_weights_layer_md);
    const dnnl::memory diff_iter = Zeroed(engine_, p->diff_weights_iter_md);
    const dnnl::memory diff_bias = Zeroed(engine_, p->diff_bias_md);
    Args bwd_args = std::move(common);
    bwd_args.emplace(DNNL_ARG_WEIGHTS_LAYER,
                     Reordered(stream, p->bwd_layer_reorder, p->bwd_weights_layer_md, user_layer));
    bwd_args.emplace(DNNL_ARG_WEIGHTS_ITER,
                     Reordered(stream, p->bwd_iter_reorder, p->bwd_weights_iter_md, user_iter));
    bwd_args.emplace(DNNL_ARG_DIFF_DST_LAYER, Wrap(s.DstLayer(), engine_, dout));
    bwd_args.emplace(DNNL_ARG_DIFF_SRC_LAYER,
                     Wrap(s.SrcLayer(), engine_, dinp != nullptr ? dinp : dinp_scratch.data()));
    bwd_args.emplace(DNNL_ARG_DIFF_SRC_ITER, Wrap(s.State(), engine_, dstate_scratch.data()));
    if (lstm) {
      bwd_args.emplace(DNNL_ARG_DIFF_SRC_ITER_C,
                       Wrap(s.State(), engine_, dstate_scratch.data() + state_size));
    }
    bwd_args.emplace(DNNL_ARG_DIFF_WEIGHTS_LAYER, diff_layer);
    bwd_args.emplace(DNNL_ARG_DIFF_WEIGHTS_ITER, diff_iter);
    bwd_args.emplace(DNNL_ARG_DIFF_BIAS, diff_bias);
    Execute(stream, p->backward, std::move(bwd_args));

    if (dweights != nullptr) {
      ReorderOrCopy(stream, p->diff_layer_reorder, diff_layer,
                    Wrap(s.WeightsLayer(Tag::ldgoi), engine_, grads.layer.data()));
      ReorderOrCopy(stream, p->diff_iter_reorder, diff_iter,
                    Wrap(s.WeightsIter(Tag::ldgoi), engine_, grads.iter.data()));
      ReorderOrCopy(stream, p->diff_bias_reorder, diff_bias,
                    Wrap(s.Bias(), engine_, grads.bias.data()));
    }
  });
  if (dweights != nullptr) FromOneDnnGrads(s, grads, dweights);
  return true;
}

}  // namespace forecastd
