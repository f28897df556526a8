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

}  // namespace forecastd::ref

#endif  // FORECASTD_KERNELS_REF_RECURRENT_H_
