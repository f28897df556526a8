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

// Which kernels run the step.
//   kCluster: the whole stack in one launch, for few streams: a thread-block cluster (up to
//     8 blocks of up to 16 units) per tile of 8 streams covers all H units (H <= 128, each
//     layer's I + H <= 256, L <= 8); each warp holds a unit's gate rows in registers
//     (weight-stationary) and layers hand their new h to the next through distributed shared
//     memory. Where the sizes do not fit: as kAuto.
//   kWarp: one launch per layer, weight-stationary, for few streams: a warp per hidden unit
//     holds the unit's gate rows in registers and walks a tile of 16 streams. Layer widths
//     I + H up to 512.
//   kTiled: one launch per layer, a register-tiled product for many streams: a block computes
//     64 streams x 16 units (every gate of them, so the cell runs where the sums are) over
//     K-chunks staged in shared memory. Any width.
//   kAuto: kCluster up to kStepClusterMaxStreams streams where it fits, kWarp up to
//     kStepWarpMaxStreams where the width allows, kTiled beyond. (On an H100, lstm_h128_l2,
//     bench/step_gpu.sh: kCluster 12.6 us, kWarp 22.3, kTiled 32.3 at 64 streams; kTiled 33.3,
//     kCluster 109, kWarp 127 at 1,024. At 128 and 256, measured before the cluster kernel's
//     eight-stream pass: kWarp 24.3, kCluster 28.1, kTiled 33.1; kTiled 33.2, kWarp 45.3.)
enum class StepKernel { kAuto, kCluster, kWarp, kTiled };
inline constexpr int64_t kStepClusterMaxStreams = 64;
inline constexpr int64_t kStepWarpMaxStreams = 128;

// Ints of the `counters` RecurrentStepForward needs for B streams.
int64_t RecurrentStepCounterInts(int64_t B);

// One time step of L layers for B streams. Stream b's state is the S = L * SL floats at
// slab[slots[b] * S] (SL = 2H for an LSTM, H for a GRU): layer l's h at [l * SL, + H), then for
// an LSTM its c at [l * SL + H, + H). Gates are W_ih x + b_ih + W_hh h + b_hh with PyTorch's
// layout and order (LSTM i, f, g, o; GRU r, z, n, n = tanh(W_in x + b_in + r (W_hn h + b_hn))).
//   out (B, H): the top layer's new h
//   scratch (B, H): the layers in between (one launch per layer); nullptr when L is 1
//   slab: the states, read and written in place at the B slots (distinct); other rows untouched
//   counters: RecurrentStepCounterInts(B) ints of device memory, zero before the call and left
//     zero after it (with one launch per layer, the top layer's kernel counts its finished
//     blocks in them, so that the last one writes the new h back once every block has read
//     the old one; kCluster orders that with a cluster barrier instead)
//   slots (B): int32 of the slab's memory
//   inp (B, I): layer 0's input; layer l > 0 reads layer l-1's new h
//   weights[l]: layer l's parameters, w_ih (G*H, I or H), w_hh (G*H, H), b_ih, b_hh (G*H)
absl::Status RecurrentStepForward(float* out, float* scratch, float* slab, int* counters,
                                  const int32_t* slots, const float* inp,
                                  const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                  StepKernel kernel, int64_t B, int64_t I, int64_t H, int L,
                                  cudaStream_t stream);

// A forecast's computation around one step, done inside the same launch (RecurrentStepForecast):
// layer 0 reads the standardised tick, and the head's Linear of the top layer's h' and the
// de-standardising of the result follow the layers. For the few streams kCluster serves.
inline constexpr int kStepForecastMaxTargets = 8;
struct StepForecast {
  // Layer 0's input is (x - x_mean) / x_std, per feature (I); both nullptr: x as it is.
  const float* x_mean = nullptr;
  const float* x_std = nullptr;
  const float* head_weight = nullptr;  // (O, H)
  const float* head_bias = nullptr;    // (O)
  int outputs = 0;                     // O = P * K * Q, laid out (P, K, Q)
  // Output o becomes y * y_std[f] + y_mean[f] for f = target_feature[(o % (K * Q)) / Q];
  // y_mean and y_std nullptr: y as it is.
  const float* y_mean = nullptr;
  const float* y_std = nullptr;
  int targets = 0;    // K <= kStepForecastMaxTargets
  int quantiles = 1;  // Q
  int target_feature[kStepForecastMaxTargets] = {};
};

// Whether RecurrentStepForecast takes these sizes: B <= kStepClusterMaxStreams and a stack that
// fits one cluster (as kCluster), at most kStepForecastMaxTargets targets.
bool RecurrentStepForecastFits(int64_t B, int64_t I, int64_t H, int L, const StepForecast& f);

// RecurrentStepForward's step for B streams with the forecast around it, in one launch:
//   y (B, O): the de-standardised forecasts
//   x (B, I): the raw ticks
// slab and slots as RecurrentStepForward's. x, slots and y may be pinned host memory (read and
// written by the kernel over the bus), so a step needs no copy of its own.
absl::Status RecurrentStepForecast(float* y, float* slab, const int32_t* slots, const float* x,
                                   const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                   int64_t B, int64_t I, int64_t H, int L,
                                   const StepForecast& forecast, cudaStream_t stream);

// A resident step: RecurrentStepForecast's step for up to kResidentStepMaxStreams streams, run
// by one cluster kernel that stays on the GPU between steps and takes them from a mailbox in
// pinned host memory, so that a step costs no launch and no synchronisation call. The host
// writes a step as the mailbox's chunks of four words: chunk k is a tag, the step's request =
// (step number) * kResidentRequestRows + rows (never 0), then words [3k, 3k + 3) of the payload
// [slots (rows) | ticks (rows, I)], the tag stored last. The kernel reads a chunk in one 16-byte
// access, so a chunk whose tag is the request holds that step's words: it polls chunk 0 and,
// once its tag changes, reads the step's chunks until all tags agree, so the step's data arrive
// with its notice. It runs the step, writes the forecasts into `y` and sets `done` to the
// request. backends/cuda/resident_step.h drives it.
inline constexpr int64_t kResidentStepMaxStreams = 8;
inline constexpr int kResidentStepMaxLayers = 8;
inline constexpr int64_t kResidentStepMaxFeatures = 256;  // I (a layer's I + H is at most 256)
inline constexpr int64_t kResidentStepMaxOutputs = 1024;  // O
inline constexpr uint32_t kResidentRequestRows = 16;
inline constexpr int kResidentChunkWords = 4;  // 16 bytes: a tag and 3 words of payload
inline constexpr int kResidentChunks =
    (kResidentStepMaxStreams * (1 + kResidentStepMaxFeatures) + kResidentChunkWords - 2) /
    (kResidentChunkWords - 1);
struct ResidentStepMailbox {
  // Written by the host.
  alignas(64) uint32_t chunks[kResidentChunks][kResidentChunkWords] = {};
  alignas(64) uint32_t stop = 0;  // nonzero: the kernel leaves (between steps)
  // Written by the kernel, on lines of their own.
  alignas(128) uint32_t done = 0;  // the request finished last
  // Its time on the GPU from seeing the request: to the end of the step's computation, and to
  // just before the forecasts are written out (what follows is one fence and `done`).
  int64_t step_ns = 0;
  int64_t kernel_ns = 0;
  alignas(128) float y[kResidentStepMaxStreams * kResidentStepMaxOutputs] = {};  // (rows, O)
};

// Whether the resident kernel takes these sizes (any B up to kResidentStepMaxStreams): as
// RecurrentStepForecastFits, with room in shared memory for a tile's forecasts.
bool ResidentStepFits(int64_t I, int64_t H, int L, const StepForecast& forecast);

// Launches the resident kernel on `stream` (a stream of its own: the kernel occupies it until it
// leaves) for these weights and sizes (as RecurrentStepForecast's; ResidentStepFits). It takes
// the first step whose number differs from `seen`, and leaves when box->stop is set, after
// idle_us without a step, or max_run_us after it started. box: pinned host memory (or any memory
// the GPU reads and writes coherently).
absl::Status LaunchResidentStep(ResidentStepMailbox* box, float* slab,
                                const ref::RecurrentDirectionWeights* weights, StepCell cell,
                                int64_t I, int64_t H, int L, const StepForecast& forecast,
                                uint32_t seen, int64_t idle_us, int64_t max_run_us,
                                cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_RECURRENT_STEP_H_
