// Reference (naive, fp32) LSTM and GRU layers with exactly PyTorch's nn.LSTM / nn.GRU
// semantics, one layer (one or two directions) per call; a model stacks layers itself.
// The oracle every backend's LstmLayer / GruLayer is tested against. Thread-safe.
#ifndef FORECASTD_KERNELS_REF_RECURRENT_H_
#define FORECASTD_KERNELS_REF_RECURRENT_H_

#include <cstdint>

namespace forecastd::ref {

// The parameters of one direction of one layer, as PyTorch names them
// (`weight_ih_l{k}[_reverse]`, ...). G is the number of gates: 4 for LSTM, 3 for GRU.
struct RecurrentDirectionWeights {
  const float* w_ih;  // (G*H, I)
  const float* w_hh;  // (G*H, H)
  const float* b_ih;  // (G*H)
  const float* b_hh;  // (G*H)
};

// Shapes of one recurrent layer call. ND is 1, or 2 for bidirectional.
struct RecurrentDims {
  int64_t B;   // batch
  int64_t T;   // time steps
  int64_t I;   // input features of this layer (F for layer 0, ND*H above it)
  int64_t H;   // hidden size
  int64_t ND;  // directions
};

// LSTM, gate order i, f, g, o (PyTorch's):
//   i = sigmoid(W_ii x + b_ii + W_hi h + b_hi)     f = sigmoid(... f rows ...)
//   g = tanh(... g rows ...)                       o = sigmoid(... o rows ...)
//   c' = f * c + i * g                             h' = o * tanh(c')
// The reverse direction (d = 1) runs t = T-1 .. 0 over the same input.
//   out (B, T, ND*H)  out[b, t, d*H + j] is direction d's h at time t
//   h_n (ND, B, H), c_n (ND, B, H): final states, or nullptr when not wanted
//   inp (B, T, I)
//   h_0 (ND, B, H), c_0 (ND, B, H): initial states, or nullptr for zeros
//   weights[d] for d in [0, ND)
void LstmLayerForward(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                      const float* c_0, const RecurrentDirectionWeights* weights,
                      const RecurrentDims& dims);

// GRU, gate order r, z, n (PyTorch's), reset applied after the hidden matmul:
//   r = sigmoid(W_ir x + b_ir + W_hr h + b_hr)
//   z = sigmoid(W_iz x + b_iz + W_hz h + b_hz)
//   n = tanh(W_in x + b_in + r * (W_hn h + b_hn))
//   h' = (1 - z) * n + z * h
// Shapes as for LstmLayerForward, without the cell state.
void GruLayerForward(float* out, float* h_n, const float* inp, const float* h_0,
                     const RecurrentDirectionWeights* weights, const RecurrentDims& dims);

// Where one direction's parameter gradients go; same shapes as RecurrentDirectionWeights.
struct RecurrentDirectionGrads {
  float* dw_ih;  // (G*H, I)
  float* dw_hh;  // (G*H, H)
  float* db_ih;  // (G*H)
  float* db_hh;  // (G*H)
};

// Backpropagation through time for one LSTM layer, given dout = dLoss/dout (B, T, ND*H). The
// final states are taken not to reach the loss (the forecasters read `out` only), and no
// gradient flows to h_0 / c_0. The forward pass is recomputed from inp, h_0, c_0 and the
// weights, so the caller keeps nothing but the layer's input.
//   dinp (B, T, I) or nullptr when the input needs no gradient (the first layer)
//   dweights[d] for d in [0, ND): written, not accumulated
void LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
                       const float* inp, const float* h_0, const float* c_0,
                       const RecurrentDirectionWeights* weights, const RecurrentDims& dims);

// The same for one GRU layer.
void GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights, const float* dout,
                      const float* inp, const float* h_0, const RecurrentDirectionWeights* weights,
                      const RecurrentDims& dims);

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_RECURRENT_H_
