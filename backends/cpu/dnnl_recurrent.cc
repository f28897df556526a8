// DnnlBackend's LSTM and GRU layers: lstm_forward and lbr_gru_forward (oneDNN's
// linear-before-reset GRU is PyTorch's GRU), both directions in one primitive with
// bidirectional_concat. dnnl_recurrent_layout.h maps PyTorch's layouts onto oneDNN's; the
// weights are copied into ldgoi and reordered to whatever layout the primitive asks for, on
// every call.
#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/bf16.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/cpu/dnnl_compat.h"
#include "backends/cpu/dnnl_primitive.h"
#include "backends/cpu/dnnl_recurrent_layout.h"
#include "backends/cpu/dnnl_status.h"
#include "backends/cpu/recurrent_avx2.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

using dnnl_internal::Args;
using dnnl_internal::BiasAt;
using dnnl_internal::DnnlPrimitive;
using dnnl_internal::Execute;
using dnnl_internal::LbrGruForwardPd;
using dnnl_internal::LstmForwardPd;
using dnnl_internal::MakeDnnlPrimitive;
using dnnl_internal::MaybeReorder;
using dnnl_internal::OneDnnWeights;
using dnnl_internal::RecurrentLayout;
using dnnl_internal::Reordered;
using dnnl_internal::RnnMds;
using dnnl_internal::ScratchBf16;
using dnnl_internal::Tag;
using dnnl_internal::ToOneDnnWeights;
using dnnl_internal::UserScratchpadAttr;
using dnnl_internal::Wrap;

// The biases a layer's input projection adds (the time loops' gates_x): LSTM b_ih + b_hh; GRU
// r and z rows b_ih + b_hh, n rows b_in only (b_hn is applied inside r * (...)).
void ProjectionBias(bool lstm, const RecurrentDirectionWeights& w, int64_t H, float* bias) {
  const int64_t GH = (lstm ? 4 : 3) * H;
  for (int64_t j = 0; j < GH; ++j) {
    const bool n_row = !lstm && j >= 2 * H;
    bias[j] = BiasAt(w.b_ih, j) + (n_row ? 0.0f : BiasAt(w.b_hh, j));
  }
}

// Everything a recurrent layer of one shape builds once.
struct RecurrentPrimitive {
  DnnlPrimitive rnn;
  // The weight layouts the primitive chose, and the reorders into them from ldgoi; a reorder
  // is empty when the primitive takes ldgoi itself.
  dnnl::memory::desc weights_layer_md, weights_iter_md;
  std::optional<DnnlPrimitive> weights_layer_reorder, weights_iter_reorder;
};

struct RecurrentShape : RecurrentLayout {
  bool has_initial;  // h_0 (and, for LSTM, c_0) given; else oneDNN starts from zeros
  bool has_final;    // h_n (and, for LSTM, c_n) wanted
};

template <typename RnnFwd>
std::shared_ptr<RecurrentPrimitive> FinishBuild(const dnnl::engine& engine, const RecurrentShape& s,
                                                const typename RnnFwd::primitive_desc& pd) {
  auto p = std::make_shared<RecurrentPrimitive>();
  p->rnn = MakeDnnlPrimitive<RnnFwd>(pd);
  p->weights_layer_md = pd.weights_layer_desc();
  p->weights_iter_md = pd.weights_iter_desc();
  p->weights_layer_reorder = MaybeReorder(engine, s.WeightsLayer(Tag::ldgoi), p->weights_layer_md);
  p->weights_iter_reorder = MaybeReorder(engine, s.WeightsIter(Tag::ldgoi), p->weights_iter_md);
  return p;
}

std::shared_ptr<RecurrentPrimitive> BuildRecurrent(const dnnl::engine& engine,
                                                   const RecurrentShape& s) {
  const auto direction = s.ND == 1 ? dnnl::rnn_direction::unidirectional_left2right
                                   : dnnl::rnn_direction::bidirectional_concat;
  // A zero descriptor tells oneDNN to start from zeros / not to write the final state.
  const dnnl::memory::desc none;
  const RnnMds md{.src_layer = s.SrcLayer(),
                  .src_iter = s.has_initial ? s.State() : none,
                  .src_iter_c = s.has_initial ? s.CellState() : none,
                  .weights_layer = s.WeightsLayer(Tag::any),
                  .weights_iter = s.WeightsIter(Tag::any),
                  .bias = s.Bias(),
                  .dst_layer = s.DstLayer(),
                  .dst_iter = s.has_final ? s.State() : none,
                  .dst_iter_c = s.has_final ? s.CellState() : none};
  const auto prop = dnnl::prop_kind::forward_inference;
  if (s.lstm) {
    return FinishBuild<dnnl::lstm_forward>(
        engine, s, LstmForwardPd(engine, prop, direction, md, UserScratchpadAttr()));
  }
  return FinishBuild<dnnl::lbr_gru_forward>(
      engine, s, LbrGruForwardPd(engine, prop, direction, md, UserScratchpadAttr()));
}

}  // namespace

absl::Status DnnlBackend::ProjectedRecurrentLayer(PrimitiveKind kind, float* out, float* h_n,
                                                  float* c_n, const float* inp, const float* h_0,
                                                  const float* c_0,
                                                  const RecurrentDirectionWeights* weights,
                                                  const RecurrentDims& dims) {
  const bool lstm = kind == PrimitiveKind::kLstm;
  const auto [B, T, I, H, ND] = dims;
  const int64_t G = lstm ? 4 : 3, GH = G * H, N = B * T;
  // Per thread, grown to the largest layer seen: a fresh multi-megabyte buffer per call would
  // cost page faults on every forecast.
  thread_local std::vector<float> gates_x;
  if (gates_x.size() < static_cast<size_t>(ND * N * GH)) gates_x.resize(ND * N * GH);
  std::vector<float> bias(GH);
  cpu::RecurrenceArgs args[2];
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& w = weights[d];
    ProjectionBias(lstm, w, H, bias.data());
    float* gx = gates_x.data() + d * N * GH;
    RETURN_IF_ERROR(Linear(gx, inp, w.w_ih, bias.data(), N, I, GH));
    args[d] = cpu::RecurrenceArgs{
        .cell = lstm ? cpu::Cell::kLstm : cpu::Cell::kGru,
        .B = B,
        .T = T,
        .H = H,
        .reverse = d == 1,
        .gates_x = gx,
        .w_hh = w.w_hh,
        .b_hn = lstm || w.b_hh == nullptr ? nullptr : w.b_hh + 2 * H,
        .h_0 = h_0 != nullptr ? h_0 + d * B * H : nullptr,
        .c_0 = c_0 != nullptr ? c_0 + d * B * H : nullptr,
        .out = out + d * H,
        .out_stride = ND * H,
        .h_n = h_n != nullptr ? h_n + d * B * H : nullptr,
        .c_n = c_n != nullptr ? c_n + d * B * H : nullptr,
    };
  }
  std::vector<float> zero_b_hn;
  if (!lstm) {
    for (int64_t d = 0; d < ND; ++d) {
      if (args[d].b_hn == nullptr) {
        zero_b_hn.assign(H, 0.0f);
        args[d].b_hn = zero_b_hn.data();
      }
    }
  }
  cpu::RunRecurrences(args, static_cast<int>(ND));
  return absl::OkStatus();
}

absl::Status DnnlBackend::RecurrentStack(RecurrentCell cell, float* out, float* scratch,
                                         const float* inp, const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims, int num_layers) {
  // Plain names, not a structured binding: the lambda below captures them.
  const int64_t B = dims.B, T = dims.T, I = dims.I, H = dims.H, ND = dims.ND;
  if (!bf16() && cpu::HasAvx2Fma() && ND == 1 && num_layers >= 2 && B >= 1 && T >= 1 && I >= 1 &&
      H >= 1) {
    // A few rows of a unidirectional stack: the layers as one wavefront where there are threads
    // for it (recurrent_avx2.h), the first layer's input projection made once they are there.
    const bool lstm = cell == RecurrentCell::kLstm;
    const int64_t GH = (lstm ? 4 : 3) * H, L = num_layers;
    thread_local std::vector<float> gates_x;
    std::vector<float> biases(L * GH), zero_b_hn;
    std::vector<cpu::StackLayer> layers(static_cast<size_t>(L));
    for (int64_t l = 0; l < L; ++l) {
      const RecurrentDirectionWeights& w = weights[l];
      ProjectionBias(lstm, w, H, biases.data() + l * GH);
      const float* b_hn = nullptr;
      if (!lstm) {
        if (w.b_hh == nullptr) zero_b_hn.assign(H, 0.0f);
        b_hn = w.b_hh != nullptr ? w.b_hh + 2 * H : zero_b_hn.data();
      }
      layers[l] = {w.w_ih, w.w_hh, biases.data() + l * GH, b_hn};
    }
    cpu::StackArgs args{.cell = lstm ? cpu::Cell::kLstm : cpu::Cell::kGru,
                        .B = B,
                        .T = T,
                        .H = H,
                        .L = L,
                        .gates_x = nullptr,
                        .layers = layers.data(),
                        .out = out};
    ASSIGN_OR_RETURN(const bool ran, cpu::RunStackWavefront(args, [&]() -> absl::Status {
                       if (gates_x.size() < static_cast<size_t>(B * T * GH))
                         gates_x.resize(B * T * GH);
                       args.gates_x = gates_x.data();
                       return Linear(gates_x.data(), inp, weights[0].w_ih, biases.data(), B * T, I,
                                     GH);
                     }));
    if (ran) return absl::OkStatus();
  }
  return Backend::RecurrentStack(cell, out, scratch, inp, weights, dims, num_layers);
}

absl::Status DnnlBackend::LstmProjection(float* gx, const float* x,
                                         const RecurrentDirectionWeights& w, int64_t N, int64_t I,
                                         int64_t H) {
  const int64_t GH = 4 * H;
  std::vector<float> bias(GH);
  for (int64_t j = 0; j < GH; ++j) bias[j] = BiasAt(w.b_ih, j) + BiasAt(w.b_hh, j);
  return Linear(gx, x, w.w_ih, bias.data(), N, I, GH);
}

absl::Status DnnlBackend::LstmLayerGradients(float* dx, float* dx_scratch,
                                             const RecurrentDirectionGrads* grads,
                                             const cpu::LstmBackwardArgs* args,
                                             const RecurrentDirectionWeights* weights,
                                             const float* x, int64_t ND, int64_t I) {
  const int64_t N = args[0].B * args[0].T, GH = 4 * args[0].H;
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& w = weights[d];
    const RecurrentDirectionGrads* g = grads != nullptr ? &grads[d] : nullptr;
    const float* dgates = args[d].dgates;
    float* dx_d = dx == nullptr ? nullptr : d == 0 ? dx : dx_scratch;
    RETURN_IF_ERROR(LinearBackward(dx_d, g != nullptr ? g->dw_ih : nullptr,
                                   g != nullptr ? g->db_ih : nullptr, dgates, x, nullptr, w.w_ih, N,
                                   I, GH));
    if (d > 0 && dx != nullptr) {
      for (int64_t k = 0; k < N * I; ++k) dx[k] += dx_scratch[k];
    }
    if (g == nullptr || (g->dw_hh == nullptr && g->db_hh == nullptr)) continue;
    // b_hh adds where b_ih does, so its gradient is db_ih's.
    const bool copy_bias = g->db_ih != nullptr;
    RETURN_IF_ERROR(LinearBackward(nullptr, g->dw_hh, copy_bias ? nullptr : g->db_hh, dgates,
                                   args[d].h_prev, nullptr, w.w_hh, N, args[d].H, GH));
    if (copy_bias && g->db_hh != nullptr) std::copy(g->db_ih, g->db_ih + GH, g->db_hh);
  }
  return absl::OkStatus();
}

absl::Status DnnlBackend::ProjectedLstmBackward(float* dinp,
                                                const RecurrentDirectionGrads* dweights,
                                                const float* dout, const float* inp,
                                                const float* h_0, const float* c_0,
                                                const RecurrentDirectionWeights* weights,
                                                const RecurrentDims& dims) {
  const auto [B, T, I, H, ND] = dims;
  const int64_t GH = 4 * H, N = B * T;
  // Per direction: the projected inputs and dG (N, 4H), the states read and c (N, H); then the
  // second direction's dinp before it is added to the first's. Per call: a training step's
  // layers can be hundreds of megabytes, which a thread would otherwise keep after the job.
  const int64_t per_direction = 2 * N * GH + 2 * N * H;
  // Every float is written before it is read: no zeroing pass.
  const std::unique_ptr<float[]> buffers(new float[ND * per_direction + (ND > 1 ? N * I : 0)]);
  cpu::LstmBackwardArgs args[2];
  for (int64_t d = 0; d < ND; ++d) {
    float* gx = buffers.get() + d * per_direction;
    RETURN_IF_ERROR(LstmProjection(gx, inp, weights[d], N, I, H));
    args[d] = cpu::LstmBackwardArgs{
        .B = B,
        .T = T,
        .H = H,
        .reverse = d == 1,
        .gates_x = gx,
        .w_hh = weights[d].w_hh,
        .h_0 = h_0 != nullptr ? h_0 + d * B * H : nullptr,
        .c_0 = c_0 != nullptr ? c_0 + d * B * H : nullptr,
        .dout = dout + d * H,
        .dout_stride = ND * H,
        .dgates = gx + N * GH,
        .h_prev = gx + 2 * N * GH,
        .c = gx + 2 * N * GH + N * H,
    };
  }
  cpu::LstmBackwardThroughTime(args, static_cast<int>(ND));
  return LstmLayerGradients(dinp, buffers.get() + ND * per_direction, dweights, args, weights, inp,
                            ND, I);
}

bool DnnlBackend::StackedTraining(const RecurrentDims& dims) const {
  return !bf16() && cpu::HasAvx2Fma() && dims.B > 0 && dims.T > 0 && dims.I > 0 && dims.H > 0 &&
         (dims.ND == 1 || dims.ND == 2);
}

namespace {

// RecurrentSaved::state of a stack's training pair. An LSTM's, on the AVX2 time loops: for layer
// l and direction d (block l * ND + d), its gates then dG (N, 4H), the states its steps read
// (N, H) and c (N, H). After those blocks (none for a GRU), the outputs of the layers below the
// top (N, ND*H each), the inputs of the layers above them, so that no layer runs again. Last,
// for an LSTM, room for a layer's projected inputs (ND, N, 4H) during the forward and the
// second direction's dx (N, max(I, ND*H)) during the backward: the tape's memory, given back
// with it, rather than a thread's.
struct SavedStack {
  bool lstm;
  int64_t N, I, H, ND, L;
  float* state;
  int64_t Block() const { return lstm ? N * 4 * H + 2 * N * H : 0; }
  int64_t Work() const { return lstm ? std::max(ND * N * 4 * H, N * std::max(I, ND * H)) : 0; }
  int64_t Floats() const { return L * ND * Block() + (L - 1) * N * ND * H + Work(); }
  float* WorkArea() const { return state + L * ND * Block() + (L - 1) * N * ND * H; }
  float* Gates(int64_t l, int64_t d) const { return state + (l * ND + d) * Block(); }
  float* HPrev(int64_t l, int64_t d) const { return Gates(l, d) + N * 4 * H; }
  float* C(int64_t l, int64_t d) const { return HPrev(l, d) + N * H; }
  float* Output(int64_t l) const { return state + L * ND * Block() + l * N * ND * H; }
};

}  // namespace

absl::StatusOr<int64_t> DnnlBackend::RecurrentSavedFloats(RecurrentCell cell,
                                                          const RecurrentDims& dims,
                                                          int num_layers) {
  if (!StackedTraining(dims) || num_layers < 1) {
    return Backend::RecurrentSavedFloats(cell, dims, num_layers);
  }
  return SavedStack{
      cell == RecurrentCell::kLstm, dims.B * dims.T, dims.I, dims.H, dims.ND, num_layers, nullptr}
      .Floats();
}

absl::Status DnnlBackend::RecurrentStackForTraining(RecurrentCell cell, float* out, float* scratch,
                                                    const float* inp,
                                                    const RecurrentDirectionWeights* weights,
                                                    const RecurrentDims& dims, int num_layers,
                                                    RecurrentSaved* saved) {
  if (!StackedTraining(dims) || num_layers < 1 || saved == nullptr || saved->state == nullptr) {
    return Backend::RecurrentStackForTraining(cell, out, scratch, inp, weights, dims, num_layers,
                                              saved);
  }
  const auto [B, T, I, H, ND] = dims;
  const int64_t N = B * T, L = num_layers;
  const bool lstm = cell == RecurrentCell::kLstm;
  const SavedStack s{lstm, N, I, H, ND, L, saved->state};
  if (saved->state_floats < s.Floats()) {
    return absl::InvalidArgumentError(
        absl::StrCat("RecurrentStackForTraining: the saved state holds ", saved->state_floats,
                     " floats; this stack needs ", s.Floats()));
  }
  if (!lstm) {
    // A GRU's layers as they run for a forecast, each lower one's output kept.
    for (int64_t l = 0; l < L; ++l) {
      RETURN_IF_ERROR(GruLayer(l + 1 == L ? out : s.Output(l), nullptr,
                               l == 0 ? inp : s.Output(l - 1), nullptr, weights + l * ND,
                               RecurrentDims{B, T, l == 0 ? I : ND * H, H, ND}));
    }
    saved->out = out;
    saved->filled = true;
    return absl::OkStatus();
  }
  for (int64_t l = 0; l < L; ++l) {
    const float* x = l == 0 ? inp : s.Output(l - 1);
    float* y = l + 1 == L ? out : s.Output(l);
    cpu::LstmBackwardArgs args[2];
    for (int64_t d = 0; d < ND; ++d) {
      const RecurrentDirectionWeights& w = weights[l * ND + d];
      float* gx = s.WorkArea() + d * N * 4 * H;
      RETURN_IF_ERROR(LstmProjection(gx, x, w, N, l == 0 ? I : ND * H, H));
      args[d] = cpu::LstmBackwardArgs{.B = B,
                                      .T = T,
                                      .H = H,
                                      .reverse = d == 1,
                                      .gates_x = gx,
                                      .w_hh = w.w_hh,
                                      .h_0 = nullptr,
                                      .c_0 = nullptr,
                                      .dout = nullptr,
                                      .dout_stride = 0,
                                      .dgates = s.Gates(l, d),
                                      .h_prev = s.HPrev(l, d),
                                      .c = s.C(l, d),
                                      .out = y + d * H,
                                      .out_stride = ND * H};
    }
    cpu::LstmBackwardThroughTime(args, static_cast<int>(ND), cpu::LstmPass::kForward);
  }
  saved->out = out;
  saved->filled = true;
  return absl::OkStatus();
}

absl::Status DnnlBackend::RecurrentStackBackward(
    RecurrentCell cell, float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
    float* scratch, const float* inp, const RecurrentDirectionWeights* weights,
    const RecurrentDims& dims, int num_layers, RecurrentSaved* saved) {
  if (!StackedTraining(dims) || num_layers < 1 || saved == nullptr || !saved->filled ||
      saved->state == nullptr) {
    return Backend::RecurrentStackBackward(cell, dinp, dweights, dout, scratch, inp, weights, dims,
                                           num_layers, saved);
  }
  if (scratch == nullptr) return absl::InvalidArgumentError("RecurrentStackBackward: no scratch");
  const auto [B, T, I, H, ND] = dims;
  const int64_t N = B * T, L = num_layers, S = N * ND * H;
  const bool lstm = cell == RecurrentCell::kLstm;
  const SavedStack s{lstm, N, I, H, ND, L, saved->state};
  // The state serves this one backward: dG replaces the gates.
  saved->filled = false;
  float* const dlayer[2] = {scratch + (L - 1) * S, scratch + L * S};
  const float* dl_out = dout;
  for (int64_t l = L - 1; l >= 0 && !lstm; --l) {
    // A GRU's layer backwards top down, on the kept inputs.
    float* dl_in = l > 0 ? dlayer[(L - 1 - l) % 2] : dinp;
    RETURN_IF_ERROR(GruLayerBackward(dl_in, dweights != nullptr ? dweights + l * ND : nullptr,
                                     dl_out, l == 0 ? inp : s.Output(l - 1), nullptr,
                                     weights + l * ND,
                                     RecurrentDims{B, T, l == 0 ? I : ND * H, H, ND}));
    dl_out = dl_in;
  }
  for (int64_t l = L - 1; l >= 0 && lstm; --l) {
    cpu::LstmBackwardArgs args[2];
    for (int64_t d = 0; d < ND; ++d) {
      args[d] = cpu::LstmBackwardArgs{.B = B,
                                      .T = T,
                                      .H = H,
                                      .reverse = d == 1,
                                      .gates_x = nullptr,
                                      .w_hh = weights[l * ND + d].w_hh,
                                      .h_0 = nullptr,
                                      .c_0 = nullptr,
                                      .dout = dl_out + d * H,
                                      .dout_stride = ND * H,
                                      .dgates = s.Gates(l, d),
                                      .h_prev = s.HPrev(l, d),
                                      .c = s.C(l, d)};
    }
    cpu::LstmBackwardThroughTime(args, static_cast<int>(ND), cpu::LstmPass::kBackward);
    float* dl_in = l > 0 ? dlayer[(L - 1 - l) % 2] : dinp;
    RETURN_IF_ERROR(LstmLayerGradients(
        dl_in, s.WorkArea(), dweights != nullptr ? dweights + l * ND : nullptr, args,
        weights + l * ND, l == 0 ? inp : s.Output(l - 1), ND, l == 0 ? I : ND * H));
    dl_out = dl_in;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> DnnlBackend::TryRecurrentLayer(PrimitiveKind kind, float* out, float* h_n,
                                                    float* c_n, const float* inp, const float* h_0,
                                                    const float* c_0,
                                                    const RecurrentDirectionWeights* weights,
                                                    const RecurrentDims& dims) {
  const bool lstm = kind == PrimitiveKind::kLstm;
  RecurrentShape s{lstm ? RecurrentLayout::Lstm(dims) : RecurrentLayout::Gru(dims),
                   /*has_initial=*/h_0 != nullptr || c_0 != nullptr,
                   /*has_final=*/h_n != nullptr || c_n != nullptr};
  if (bf16()) s.data = dnnl::memory::data_type::bf16;
  if (s.B == 0 || s.T == 0 || s.I == 0 || s.H == 0 || (s.ND != 1 && s.ND != 2)) return false;
  if (!bf16() && cpu::HasAvx2Fma()) {
    RETURN_IF_ERROR(ProjectedRecurrentLayer(kind, out, h_n, c_n, inp, h_0, c_0, weights, dims));
    return true;
  }
  ASSIGN_OR_RETURN(
      std::shared_ptr<const RecurrentPrimitive> p,
      cache_.GetOrBuild<RecurrentPrimitive>(
          {static_cast<int64_t>(kind), s.B, s.T, s.I, s.H, s.ND, s.has_initial, s.has_final},
          lstm ? "LstmLayer" : "GruLayer", [&] { return BuildRecurrent(engine_, s); }));
  if (p == nullptr) {
    CountFallback();
    return false;
  }

  const OneDnnWeights w = ToOneDnnWeights(s, weights);
  // oneDNN takes h and c together: a missing one of the pair starts from zeros or lands in
  // scratch.
  const int64_t state_size = s.ND * s.B * s.H;
  std::vector<float> zeros, h_scratch, c_scratch;
  if (s.has_initial && (h_0 == nullptr || c_0 == nullptr)) zeros.assign(state_size, 0.0f);
  if (s.has_final && h_n == nullptr) h_scratch.resize(state_size);
  if (s.has_final && c_n == nullptr) c_scratch.resize(state_size);
  const float* h_init = h_0 != nullptr ? h_0 : zeros.data();
  float* h_final = h_n != nullptr ? h_n : h_scratch.data();

  // Under bf16 the layers' data and h cross into bf16 copies and back (c stays fp32).
  const int64_t in_size = s.B * s.T * s.I, out_size = s.B * s.T * s.ND * s.H;
  const ScratchBf16 inp16(0, bf16() ? in_size : 0), out16(1, bf16() ? out_size : 0),
      h16(2, bf16() ? 2 * state_size : 0);
  if (bf16()) {
    cpu::ToBf16(inp, inp16.data(), in_size);
    if (s.has_initial) cpu::ToBf16(h_init, h16.data(), state_size);
  }
  const auto data = [&](const float* f32, uint16_t* b16) {
    return bf16() ? static_cast<void*>(b16) : const_cast<float*>(f32);
  };

  DNNL_TRY({
    dnnl::stream stream(engine_);
    const dnnl::memory weights_layer =
        Reordered(stream, p->weights_layer_reorder, p->weights_layer_md,
                  Wrap(s.WeightsLayer(Tag::ldgoi), engine_, w.layer.data()));
    const dnnl::memory weights_iter =
        Reordered(stream, p->weights_iter_reorder, p->weights_iter_md,
                  Wrap(s.WeightsIter(Tag::ldgoi), engine_, w.iter.data()));
    Args args({{DNNL_ARG_SRC_LAYER, dnnl::memory(s.SrcLayer(), engine_, data(inp, inp16.data()))},
               {DNNL_ARG_WEIGHTS_LAYER, weights_layer},
               {DNNL_ARG_WEIGHTS_ITER, weights_iter},
               {DNNL_ARG_BIAS, Wrap(s.Bias(), engine_, w.bias.data())},
               {DNNL_ARG_DST_LAYER, dnnl::memory(s.DstLayer(), engine_, data(out, out16.data()))}});
    if (s.has_initial) {
      args.emplace(DNNL_ARG_SRC_ITER, dnnl::memory(s.State(), engine_, data(h_init, h16.data())));
      if (lstm) {
        args.emplace(DNNL_ARG_SRC_ITER_C,
                     Wrap(s.CellState(), engine_, c_0 != nullptr ? c_0 : zeros.data()));
      }
    }
    if (s.has_final) {
      args.emplace(DNNL_ARG_DST_ITER,
                   dnnl::memory(s.State(), engine_, data(h_final, h16.data() + state_size)));
      if (lstm) {
        args.emplace(DNNL_ARG_DST_ITER_C,
                     Wrap(s.CellState(), engine_, c_n != nullptr ? c_n : c_scratch.data()));
      }
    }
    Execute(stream, p->rnn, std::move(args));
  });
  if (bf16()) {
    cpu::FromBf16(out16.data(), out, out_size);
    if (s.has_final) cpu::FromBf16(h16.data() + state_size, h_final, state_size);
  }
  return true;
}

bool DnnlBackend::HasFastPath(FastPath path) const {
  return (path == FastPath::kRecurrentStep || path == FastPath::kRecurrentStepForecast ||
          path == FastPath::kRecurrentStackBackward) &&
         !bf16() && cpu::HasAvx2Fma();
}

bool DnnlBackend::RecurrentStepForecastFits(const RecurrentDims& dims, int num_layers,
                                            const RecurrentStepForecastSpec& spec) const {
  const int64_t per_quantile_target =
      static_cast<int64_t>(spec.target_features.size()) * spec.quantiles;
  return !bf16() && cpu::HasAvx2Fma() && dims.B >= 1 && dims.I >= 1 && dims.H >= 1 && dims.T == 1 &&
         dims.ND == 1 && num_layers >= 1 && spec.outputs >= 1 && spec.quantiles >= 1 &&
         (spec.y_mean == nullptr ||
          (per_quantile_target >= 1 && spec.outputs % per_quantile_target == 0));
}

absl::Status DnnlBackend::RecurrentStepForecast(RecurrentCell cell, float* y, float* slab,
                                                const int32_t* slots, const float* x,
                                                const RecurrentDirectionWeights* weights,
                                                const RecurrentDims& dims, int num_layers,
                                                const RecurrentStepForecastSpec& spec) {
  if (!RecurrentStepForecastFits(dims, num_layers, spec) || spec.head_weight == nullptr ||
      spec.head_bias == nullptr || (spec.x_mean == nullptr) != (spec.x_std == nullptr) ||
      (spec.y_mean == nullptr) != (spec.y_std == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "RecurrentStepForecast: B=", dims.B, " T=", dims.T, " I=", dims.I, " H=", dims.H,
        " ND=", dims.ND, ", ", num_layers, " layers, ", spec.outputs, " outputs, ",
        spec.target_features.size(), " targets, ", spec.quantiles,
        " quantiles (or a missing head or normaliser) is not a step this CPU runs in one call"));
  }
  cpu::StepArgs args{cell == RecurrentCell::kLstm ? cpu::Cell::kLstm : cpu::Cell::kGru,
                     dims.B,
                     dims.I,
                     dims.H,
                     num_layers,
                     x,
                     slab,
                     slots,
                     weights,
                     /*top=*/nullptr};
  args.forecast = &spec;
  args.y = y;
  cpu::RunStep(args);
  return absl::OkStatus();
}

absl::Status DnnlBackend::RecurrentStep(RecurrentCell cell, float* out, float* scratch, float* slab,
                                        const int32_t* slots, const float* inp,
                                        const RecurrentDirectionWeights* weights,
                                        const RecurrentDims& dims, int num_layers) {
  if (bf16() || !cpu::HasAvx2Fma()) {
    return Backend::RecurrentStep(cell, out, scratch, slab, slots, inp, weights, dims, num_layers);
  }
  if (dims.B < 1 || dims.I < 1 || dims.H < 1 || dims.T != 1 || dims.ND != 1 || num_layers < 1) {
    return absl::InvalidArgumentError(absl::StrCat("RecurrentStep: bad shape B=", dims.B,
                                                   " T=", dims.T, " I=", dims.I, " H=", dims.H,
                                                   " ND=", dims.ND, " layers=", num_layers));
  }
  // The layers in between stay in the slab: `scratch` is not needed.
  cpu::RunStep({cell == RecurrentCell::kLstm ? cpu::Cell::kLstm : cpu::Cell::kGru, dims.B, dims.I,
                dims.H, num_layers, inp, slab, slots, weights, out});
  return absl::OkStatus();
}

}  // namespace forecastd
