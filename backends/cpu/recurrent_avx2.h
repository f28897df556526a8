// The time loop of the oneDNN backend's LSTM and GRU layers on AVX2 + FMA, for latency at
// small batches. The input projection of every step (W_ih x + biases) is one matmul done by the
// caller before the loop; what remains per step is h @ W_hh^T and the gate nonlinearities on
// vectorised exp. One row reads PyTorch's (G*H, H) row-major weights as they are; several rows
// read them packed into panels once per call (8 columns; 16, with AVX-512 vectors, on a CPU that
// has AVX-512 where ONEDNN_MAX_CPU_ISA does not cap oneDNN below it), so weights may change
// between calls. Directions and batch rows are independent, so they run on separate threads
// without any per-step synchronisation; directions of a few rows are shared out by hidden units
// with a barrier per step, and a one-row stack of layers runs as one wavefront over them. The
// threads are the calling thread's OpenMP threads or, with one, threads of idle workers that
// CpuHelpers lend (cpu_helpers.h). Used by DnnlBackend only; the functions that use AVX2 (or
// AVX-512) are compiled for it and called only when the CPU has it. Stateless; thread-safe.
#ifndef FORECASTD_BACKENDS_CPU_RECURRENT_AVX2_H_
#define FORECASTD_BACKENDS_CPU_RECURRENT_AVX2_H_

#include <cstdint>

#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "backends/backend.h"
#include "kernels/ref/recurrent.h"

namespace forecastd::cpu {

// True when this CPU runs the kernels below.
bool HasAvx2Fma();

enum class Cell { kLstm, kGru };

// One direction of one layer, after its input projection.
struct RecurrenceArgs {
  Cell cell;
  int64_t B, T, H;
  bool reverse;  // run t = T-1 .. 0
  // (B, T, G*H): W_ih x_t plus the biases that add before the nonlinearity (LSTM: b_ih + b_hh;
  // GRU: r and z rows b_ih + b_hh, n rows b_in only).
  const float* gates_x;
  const float* w_hh;  // (G*H, H), PyTorch's layout and gate order
  const float* b_hn;  // GRU: (H), the hidden bias of the n rows (scaled by r); else unused
  const float* h_0;   // (B, H) or nullptr for zeros
  const float* c_0;   // LSTM: (B, H) or nullptr for zeros
  float* out;         // h_t of row b at out + (b * T + t) * out_stride
  int64_t out_stride;
  float* h_n;  // (B, H) or nullptr
  float* c_n;  // LSTM: (B, H) or nullptr
};

// Runs the recurrences of `n` independent directions (typically the two of a bidirectional
// layer), spreading directions and batch rows over the OpenMP threads.
void RunRecurrences(const RecurrenceArgs* args, int n);

// A stack of L >= 2 unidirectional layers of one row, from zero states, as a wavefront: in
// interval k, layer l runs its step t = k - l, so the stack takes T + L - 1 intervals (one
// barrier each) instead of L * T steps. Each layer's hidden units are shared out in blocks of 16
// over threads of its own, as many as its work per step asks (a layer above the first also
// multiplies its input, W_ih h_{l-1,t}, in the step: twice the first layer's work); layer l's
// new h goes through a pair of buffers alternating by step, so that the layer above reads step
// t while step t + 1 is written. Runs on the calling thread's OpenMP threads or, with one, on
// threads CpuHelpers lend (cpu_helpers.h). `project` fills gates_x once the threads are there.
// false, having run nothing (not even `project`), where it does not pay: more than one row,
// fewer than 2 * L threads, or a layer above the first with more than 32 units a thread (on a
// 16-core Xeon, lstm_h128_l2 at B=1: 374-481 us on 16 threads against 681-696 layer by layer;
// bench/RESULTS.md). The caller then runs the layers one by one. An error of `project` is
// returned as is.
struct StackLayer {
  const float* w_ih;  // (G*H, H), layers above the first
  const float* w_hh;  // (G*H, H)
  // (G*H), layers above the first: the biases added before the nonlinearity, as RecurrenceArgs'
  // gates_x holds them (LSTM b_ih + b_hh; GRU r and z rows b_ih + b_hh, n rows b_in).
  const float* bias;
  const float* b_hn;  // GRU: (H), the hidden bias of the n rows (scaled by r); else unused
};
struct StackArgs {
  Cell cell;
  int64_t B, T, H, L;
  // (B, T, G*H): the first layer's W_ih x_t plus its biases, as RecurrenceArgs' gates_x.
  const float* gates_x;
  const StackLayer* layers;  // (L)
  float* out;                // (B, T, H): the top layer's h_t
};
absl::StatusOr<bool> RunStackWavefront(const StackArgs& args,
                                       absl::FunctionRef<absl::Status()> project);

// One time step of a stack of unidirectional layers whose states stay in a slab (the tick
// streams' state mode): stream b's state is slab[slots[b] * S, + S), layer l's h at l * SL and
// an LSTM's c at l * SL + H (SL = 2H or H, S = L * SL), read and replaced in place. Per layer
// and per tile of streams: gates = W_ih x + b_ih and W_hh h + b_hh, then the cell, whose new h
// feeds the next layer. For a few streams the products read PyTorch's row-major weights as
// they are (packing them would cost as much as the step); from 32 streams on, the weights are
// packed into panels once per step (on one CPU of the development machine, 10.5 -> 6.7 us per
// stream at 1,024 streams of lstm_h128_l2). Batch rows are shared out over the OpenMP threads.
struct StepArgs {
  Cell cell;
  int64_t B, I, H, L;
  const float* x;  // (B, I)
  float* slab;
  const int32_t* slots;  // (B), distinct
  // (L): w_ih (G*H, I) for layer 0, (G*H, H) above; w_hh (G*H, H); b_ih, b_hh (G*H).
  const ref::RecurrentDirectionWeights* layers;
  float* top;  // (B, H): the top layer's new h, or nullptr
  // Optional, the whole forecast of a tick in the same pass (Backend::RecurrentStepForecast):
  // layer 0 reads x standardised and y (B, forecast->outputs) gets the head's outputs,
  // de-standardised, as `forecast` says (its head and bias set).
  const RecurrentStepForecastSpec* forecast = nullptr;
  float* y = nullptr;
};
void RunStep(const StepArgs& args);

// Backpropagation through time of one LSTM direction, after its input projection, for a
// training step's backward: the forward is run again over the rows' T steps, keeping each step's
// activated gates, cell state and input state, then walked back from the last step, turning the
// gates into the gradients of their pre-activations:
//   dh = dout_t + dh_next;  tc = tanh(c_t);  do = dh tc;  dc = dc_next + dh o (1 - tc^2)
//   di = dc g;  df = dc c_{t-1};  dg = dc i;  dc_next = dc f
//   dG_t = [di i(1-i), df f(1-f), dg (1-g^2), do o(1-o)];  dh_next = W_hh^T dG_t
// What is left is products over all steps at once, the caller's: dW_ih = dG^T x, dW_hh = dG^T
// h_prev, db_ih = db_hh = sum of dG, dx = dG W_ih. Batch rows (and directions) are shared out
// over the OpenMP threads, as RunRecurrences does. The two halves can run apart (LstmPass): the
// forward of a training step keeping what the backward needs, and later that backward.
struct LstmBackwardArgs {
  int64_t B, T, H;
  bool reverse;  // the direction runs t = T-1 .. 0
  // (B, T, 4H): W_ih x_t + b_ih + b_hh, PyTorch's gate order.
  const float* gates_x;
  const float* w_hh;  // (4H, H)
  const float* h_0;   // (B, H) or nullptr for zeros
  const float* c_0;   // (B, H) or nullptr for zeros
  // d(loss)/d(h_t) of row b at dout + (b * T + t) * dout_stride (the layer output's gradient).
  const float* dout;
  int64_t dout_stride;
  // (B, T, 4H): the activated gates (the forward half), then dG in their place (the backward).
  float* dgates;
  float* h_prev;  // (B, T, H): the state each step read, h_{t-1} in the direction's order
  float* c;       // (B, T, H): each step's c_t
  // The forward half also writes h_t of row b at out + (b * T + t) * out_stride, when not nullptr.
  float* out = nullptr;
  int64_t out_stride = 0;
};
enum class LstmPass { kForward, kBackward, kBoth };
// The forward half reads gates_x, h_0 and c_0 and writes the gates into dgates, h_prev, c and
// out; the backward half reads dout, those gates, h_prev, c and c_0, and writes dG.
void LstmBackwardThroughTime(const LstmBackwardArgs* args, int n, LstmPass pass = LstmPass::kBoth);

// out (N, OUT) = inp (N, IN) W^T + bias for W (OUT, IN) row-major (bias may be nullptr), by
// dot products along W's rows, four input rows at a time: for the few rows of a forecast's
// head, where a GEMM library's per-call set-up costs more than the product.
void SmallLinear(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                 int64_t IN, int64_t OUT);

// The same product by W packed into panels of eight outputs (once per call), then broadcasts
// and FMAs, four rows at a time, rows shared out over the calling thread's OpenMP threads when
// there are many: for products of at most kPanelLinearMacs multiply-adds (a recurrent layer's
// input projection of one window), where a GEMM library's per-call set-up costs as much as
// the product. Larger ones are a GEMM library's job (its blocking and wider vectors).
constexpr int64_t kPanelLinearMacs = int64_t{1} << 20;
void PanelLinear(float* out, const float* inp, const float* weight, const float* bias, int64_t N,
                 int64_t IN, int64_t OUT);

}  // namespace forecastd::cpu

#endif  // FORECASTD_BACKENDS_CPU_RECURRENT_AVX2_H_
