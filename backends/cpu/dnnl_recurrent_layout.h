// How PyTorch's LSTM and GRU layers map onto oneDNN's recurrent primitives (lstm_* and
// lbr_gru_*, oneDNN's linear-before-reset GRU being PyTorch's GRU), for the forward
// (dnnl_recurrent.cc) and the backward (dnnl_recurrent_backward.cc) of the oneDNN backend only:
//   - inp (B, T, I) and out (B, T, ND*H) are oneDNN's ntc layer layout: used in place.
//   - h_0 / c_0 / h_n / c_n (ND, B, H) are its ldnc state layout: used in place.
//   - weights: PyTorch's (G*H, I) / (G*H, H) per direction is oneDNN's ldgoi for that
//     direction once the gates are permuted; ToOneDnnWeights copies them back to back.
//   - gates: LSTM i, f, g, o = oneDNN i, f, c~, o. GRU r, z, n -> oneDNN u (= z), r, o (= n).
//   - bias: LSTM b_ih + b_hh. GRU has four parts: u = b_iz + b_hz, r = b_ir + b_hr,
//     o = b_in, u' = b_hn (the part that the reset gate scales).
// Thread-safe: pure functions and values.
#ifndef FORECASTD_BACKENDS_CPU_DNNL_RECURRENT_LAYOUT_H_
#define FORECASTD_BACKENDS_CPU_DNNL_RECURRENT_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "backends/backend.h"
#include "backends/cpu/dnnl_primitive.h"
#include "oneapi/dnnl/dnnl.hpp"

namespace forecastd::dnnl_internal {

// One recurrent layer's shape and its memory descriptors in oneDNN's layouts.
struct RecurrentLayout {
  static RecurrentLayout Lstm(const RecurrentDims& dims) { return Of(true, 4, dims); }
  static RecurrentLayout Gru(const RecurrentDims& dims) { return Of(false, 3, dims); }

  using DataType = dnnl::memory::data_type;

  bool lstm;
  int64_t G;  // gates: 4 for LSTM, 3 for GRU
  int64_t B, T, I, H, ND;
  // The type of the layers' data and of h (f32, or bf16 for a bf16 forward); c and the biases
  // are f32 in either case.
  DataType data = DataType::f32;

  // A (B, T, C) tensor in the ntc layer layout.
  dnnl::memory::desc Layer(int64_t C) const { return {{T, B, C}, data, Tag::ntc}; }
  dnnl::memory::desc SrcLayer() const { return Layer(I); }
  dnnl::memory::desc DstLayer() const { return Layer(ND * H); }
  // h_0 / h_n, then c_0 / c_n.
  dnnl::memory::desc State() const { return {{1, ND, B, H}, data, Tag::ldnc}; }
  dnnl::memory::desc CellState() const { return F32({1, ND, B, H}, Tag::ldnc); }
  // The weights as the primitive takes them (`tag` any) are of `data`'s type; PyTorch's, copied
  // into ldgoi (ToOneDnnWeights), are f32.
  dnnl::memory::desc WeightsLayer(Tag tag) const { return {{1, ND, I, G, H}, TypeOf(tag), tag}; }
  dnnl::memory::desc WeightsIter(Tag tag) const { return {{1, ND, H, G, H}, TypeOf(tag), tag}; }
  // LSTM: one bias per gate; linear-before-reset GRU: G + 1.
  int64_t BiasParts() const { return lstm ? G : G + 1; }
  dnnl::memory::desc Bias() const { return F32({1, ND, BiasParts(), H}, Tag::ldgo); }

 private:
  DataType TypeOf(Tag tag) const { return tag == Tag::any ? data : DataType::f32; }

  static RecurrentLayout Of(bool lstm, int64_t G, const RecurrentDims& dims) {
    return RecurrentLayout{
        .lstm = lstm, .G = G, .B = dims.B, .T = dims.T, .I = dims.I, .H = dims.H, .ND = dims.ND};
  }
};

// PyTorch's per-direction weights and biases (or their gradients) in oneDNN's ldgoi / ldgo
// order.
struct OneDnnWeights {
  std::vector<float> layer;  // (ND, G, H, I)
  std::vector<float> iter;   // (ND, G, H, H)
  std::vector<float> bias;   // (ND, BiasParts, H)
};

// A null bias reads as zeros.
inline float BiasAt(const float* bias, int64_t i) { return bias != nullptr ? bias[i] : 0.0f; }

// `weights[d]` for d < ND, gates permuted and biases combined as the file comment says.
OneDnnWeights ToOneDnnWeights(const RecurrentLayout& s, const RecurrentDirectionWeights* weights);

// The inverse of ToOneDnnWeights for the gradients. oneDNN has one bias per gate where PyTorch
// has b_ih + b_hh, so both of PyTorch's gradients are the combined bias's: LSTM
// db_ih = db_hh = dbias for every gate; GRU db_iz = db_hz = dbias[u], db_ir = db_hr = dbias[r],
// and the n gate's two biases, which linear-before-reset keeps apart, db_in = dbias[o] and
// db_hn = dbias[u']. Null gradients in `dweights` are skipped.
void FromOneDnnGrads(const RecurrentLayout& s, const OneDnnWeights& grads,
                     const RecurrentDirectionGrads* dweights);

}  // namespace forecastd::dnnl_internal

#endif  // FORECASTD_BACKENDS_CPU_DNNL_RECURRENT_LAYOUT_H_
