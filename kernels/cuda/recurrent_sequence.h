// The inference forward of stacked LSTM / GRU layers over whole sequences in persistent kernels,
// for small batches: one launch runs every time step, each warp keeping its units' weight rows
// in registers for the whole sequence, and the blocks of a thread-block cluster hand each new h
// to one another through distributed shared memory, one cluster barrier a step. fp32 weights,
// fp32 accumulation (no tensor cores), as the reference layers (kernels/ref/recurrent.h); with
// `operands16` the products' operands (weights, inputs, each h passed on) are rounded to that
// 16-bit type first, as the 16-bit precisions' GEMMs take them, and the rest stays fp32.
// Called by CudaBackend (RecurrentStack, RecurrentStackLast), which picks these kernels or cuDNN.
// Launchers only; the kernels live in recurrent_sequence.cu. Capturable in a CUDA graph: no
// allocation, no synchronisation. Thread-safe: each call works on the stream it is given.
#ifndef FORECASTD_KERNELS_CUDA_RECURRENT_SEQUENCE_H_
#define FORECASTD_KERNELS_CUDA_RECURRENT_SEQUENCE_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <optional>

#include "absl/status/status.h"
#include "kernels/cuda/convert.h"
#include "kernels/cuda/recurrent_step.h"
#include "kernels/ref/recurrent.h"

namespace forecastd::cuda {

// A cluster of up to 16 blocks (the non-portable size sm_90 allows) serves one tile of up to 8
// sequences; more sequences take more clusters, which run side by side.
inline constexpr int kSequenceMaxBlocks = 16;
inline constexpr int kSequenceMaxLayers = 8;

// The wavefront: a unidirectional stack of L layers in one launch. Block groups of the cluster
// own a layer each; at barrier-separated step s layer l computes time step t = s - l from its
// own h at t - 1 and the layer below's h at t (both arrived at the previous barrier), so L layers
// over T steps take T + L - 1 steps, not L * T. Layer 0 multiplies its input rows in the kernel
// (where I + H and the sizes fit) or reads a projection computed beforehand (`proj`).
//   out_seq (B, T, H): the top layer's h at every step, or nullptr
//   out_last (B, H): the top layer's h at step T - 1, or nullptr (not both nullptr)
//   inp (B, T, I): layer 0's input (unused when proj is given)
//   proj (B, T, G*H) or nullptr: W_ih x + b_ih of layer 0 for every step
//   weights[l]: layer l's parameters, PyTorch's layout and gate order
// RecurrentWavefrontFits says whether the stack fits one cluster (with `proj` or without).
bool RecurrentWavefrontFits(int64_t I, int64_t H, int L, bool with_proj);
absl::Status RecurrentWavefront(float* out_seq, float* out_last, const float* inp,
                                const float* proj, const ref::RecurrentDirectionWeights* weights,
                                StepCell cell, int64_t B, int64_t T, int64_t I, int64_t H, int L,
                                std::optional<Storage16> operands16, cudaStream_t stream);

// The sweep: one layer's ND directions (a cluster each). A bidirectional layer cannot be a
// wavefront (the layer above needs the reverse direction's whole sweep before its own first
// step), so a bidirectional stack runs a sweep per layer, each from its input projections
// computed beforehand (a GEMM) or, where I + H and the sizes fit, multiplying its input in the
// kernel.
//   out_seq (B, T, ND*H): [b, t, d*H + j] direction d's h at time t, or nullptr
//   out_last (B, ND*H): the same at t = T - 1, or nullptr (not both nullptr). Without out_seq
//     the reverse direction runs its first step only, all that t = T - 1 needs.
//   inp (B, T, I): the layer's input (unused when proj is given)
//   proj: nullptr, or proj[d] (B, T, G*H): W_ih x + b_ih of direction d for every step
//   weights[d]: direction d's parameters
// RecurrentSweepFits says whether a layer fits a cluster (with projections or without).
bool RecurrentSweepFits(int64_t I, int64_t H, bool with_proj);
absl::Status RecurrentSweep(float* out_seq, float* out_last, const float* inp,
                            const float* const* proj, const ref::RecurrentDirectionWeights* weights,
                            StepCell cell, int64_t B, int64_t T, int64_t I, int64_t H, int ND,
                            std::optional<Storage16> operands16, cudaStream_t stream);

}  // namespace forecastd::cuda

#endif  // FORECASTD_KERNELS_CUDA_RECURRENT_SEQUENCE_H_
