// One time step of stacked unidirectional LSTM / GRU layers for a batch of tick streams whose
// recurrent states live in a slab on the device (state mode): each layer's kernel reads the
// streams' h (and c) straight from the slab by slot, computes the gates, applies the cell and
// writes the new states back in place, with no gather or scatter pass. fp32 weights, fp32
// accumulation (no tensor cores), as the reference layers (kernels/ref/recurrent.h) for T = 1.
// Launchers only; the kernels live in recurrent_step.cu. Capturable in a CUDA graph: no
// allocation, no synchronisation. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_RECURRENT_STEP_H_
#define FORECASTD_KERNELS_CUDA_RECURRENT_STEP_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "absl/status/status.h"
#include "kernels/ref/recurrent.h"

namespace forecastd::cuda {

enum class StepCell { kLstm, kGru };

// Which kernel runs a layer.
//   kWarp: weight-stationary, for few streams: a warp per hidden unit holds the unit's gate
//     rows in registers and walks a tile of 16 streams, one dot product per stream and gate,
//     split over the lanes. Layer widths I + H up to 512.
//   kTiled: a register-tiled product for many streams: a block computes 64 streams x 16 units
//     (every gate of them, so the cell runs where the sums are) over K-chunks staged in
//     shared memory. Any width.
//   kAuto: kWarp up to kStepWarpMaxStreams streams where the width allows, else kTiled.
enum class StepKernel { kAuto, kWarp, kTiled };
inline constexpr int64_t kStepWarpMaxStreams = 256;

// Ints of the `counters` RecurrentStepForward needs for B streams.
int64_t RecurrentStepCounterInts(int64_t B);

// One time step of L layers for B streams. Stream b's state is the S = L * SL floats at
// slab[slots[b] * S] (SL = 2H for an LSTM, H for a GRU): layer l's h at [l * SL, + H), then for
// an LSTM its c at [l * SL + H, + H). Gates are W_ih x + b_ih + W_hh h + b_hh with PyTorch's
// layout and order (LSTM i, f, g, o; GRU r, z, n, n = tanh(W_in x + b_in + r (W_hn h + b_hn))).
//   out (B, H): the top layer's new h
//   scratch (B, H): the layers in between; nullptr when L is 1
//   slab: the states, read and written in place at the B slots (distinct); other rows untouched
//   counters: RecurrentStepCounterInts(B) ints of device memory, zero before the call and left
//     zero after it (the kernel of the top layer counts its finished blocks in them, so that
//     the last one writes the new h back once every block has read the old one)
//   slots (B): int32 of the slab's memory
//   inp (B, I): layer 0's input; layer l > 0 reads layer l-1's new h
//   weights[l]: layer l's parameters, w_ih (G*H, I or H), w_hh (G*H, H), b_ih, b_hh (G*H)
absl::Status RecurrentStepForward(float* out, float* scratch, float* slab, int* counters,
                                  const int32_t* slots, const float* inp,
                                  const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                  StepKernel kernel, int64_t B, int64_t I, int64_t H, int L,
                                  cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_RECURRENT_STEP_H_
