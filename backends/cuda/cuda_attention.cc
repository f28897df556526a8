// CudaBackend's full attention (Attention with saved weights or over long windows, and
// AttentionBackward) as cuBLAS batched GEMMs around our softmax kernels (kernels/cuda/
// attention.h), the way the arithmetic runs fastest on a GPU: the two products per direction
// are (T x hs) @ (hs x T) and (T x T) @ (T x hs) per (batch, head), which cuBLAS runs near the
// chip's matrix rate (and on tensor cores in the reduced-precision math modes), while the
// softmax steps are a pass or two over the (T x T) weights.
//
// Layout: row-major q, k, v of head h of batch row b are (T, hs) matrices inside qkv (B, T, 3D)
// at b*T*3D + {0, D, 2D} + h*hs with row stride 3D; cuBLAS sees each row-major (R, C) matrix as
// a column-major (C, R) one with the same leading dimension, so with X_cm = X^T:
//   scores_cm = k_cm^T q_cm  (scores[t, s] = q_t . k_s * scale)
//   out_cm    = v_cm P_cm                 dv_cm = dout_cm P_cm^T
//   dw_cm     = v_cm^T dout_cm            dq_cm = k_cm dS_cm        dk_cm = q_cm dS_cm^T
// where P is the weights after dropout and dS the gradient of the scaled scores.
//
// Scores and their gradient are (B, NH, T, T); inference and the backward pass keep them in
// scratch in chunks of batch rows of at most Options::attention_scratch_bytes (at least one
// row), so memory stays bounded at any batch size.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "backends/cuda/cublas_gemm.h"
#include "backends/cuda/cuda_backend.h"
#include "kernels/base/status.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/dropout.h"
#include "kernels/cuda/flash_attention.h"

namespace forecastd {
namespace {

constexpr int64_t kFloatBytes = sizeof(float);

// Where the (b, h) matrix of a per-head operand starts: b * batch_stride + h * head_stride
// floats from its base, rows ld floats apart.
struct HeadLayout {
  int64_t ld;
  int64_t batch_stride;
  int64_t head_stride;
};

// One GEMM per (b, h) of a B x NH grid: C_bh = alpha op_a(A_bh) op_b(B_bh).
struct HeadGemm {
  cublasOperation_t op_a, op_b;
  int64_t M, N, K;
  float alpha;
  const float* A;
  HeadLayout a;
  const float* B;
  HeadLayout b;
  float* C;
  HeadLayout c;
};

// cuBLAS batches take one stride per operand, and (b, h) needs two: the longer axis becomes
// the batch, the shorter a loop of launches.
absl::Status RunHeadGemms(cublasHandle_t handle, const HeadGemm& g, int64_t B, int64_t NH,
                          CudaBackend::Options::Math math) {
  const bool heads_batched = NH >= B;
  GemmBatch batch;
  batch.op_a = g.op_a;
  batch.op_b = g.op_b;
  batch.M = g.M;
  batch.N = g.N;
  batch.K = g.K;
  batch.alpha = g.alpha;
  batch.lda = g.a.ld;
  batch.ldb = g.b.ld;
  batch.ldc = g.c.ld;
  batch.batch = heads_batched ? NH : B;
  batch.stride_a = heads_batched ? g.a.head_stride : g.a.batch_stride;
  batch.stride_b = heads_batched ? g.b.head_stride : g.b.batch_stride;
  batch.stride_c = heads_batched ? g.c.head_stride : g.c.batch_stride;
  const int64_t loops = heads_batched ? B : NH;
  for (int64_t i = 0; i < loops; ++i) {
    batch.A = g.A + i * (heads_batched ? g.a.batch_stride : g.a.head_stride);
    batch.B = g.B + i * (heads_batched ? g.b.batch_stride : g.b.head_stride);
    batch.C = g.C + i * (heads_batched ? g.c.batch_stride : g.c.head_stride);
    RETURN_IF_ERROR(RunGemm(handle, batch, math));
  }
  return absl::OkStatus();
}

absl::Status CheckAttentionShape(absl::string_view op, int64_t B, int64_t T, int64_t D,
                                 int64_t NH) {
  if (B < 0 || T <= 0 || D <= 0 || NH <= 0 || D % NH != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("CudaBackend::", op, ": need B >= 0, T > 0 and D a positive multiple of ",
                     "NH > 0, got B=", B, " T=", T, " D=", D, " NH=", NH));
  }
  return absl::OkStatus();
}

}  // namespace

// The GEMM attention's sizes: scores are computed `rows` batch rows (per_row floats each) at a
// time, and the layouts are those of one such chunk, for the GEMMs above.
struct CudaBackend::AttentionChunk {
  int64_t T, D, NH, hs;
  float scale;      // 1 / sqrt(hs)
  int64_t rows;     // batch rows per chunk
  int64_t per_row;  // NH * T * T
  HeadLayout qkv() const { return {3 * D, T * 3 * D, hs}; }
  HeadLayout out() const { return {D, T * D, hs}; }  // out, dout
  HeadLayout scores() const { return {T, NH * T * T, T * T}; }
};

CudaBackend::AttentionChunk CudaBackend::ChunkOf(int64_t B, int64_t T, int64_t D,
                                                 int64_t NH) const {
  const int64_t hs = D / NH;
  const int64_t per_row = NH * T * T;
  const int64_t rows = std::clamp<int64_t>(
      options_.attention_scratch_bytes / (per_row * kFloatBytes), 1, std::max<int64_t>(B, 1));
  return {T,    D,      NH, hs, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hs))),
          rows, per_row};
}

bool CudaBackend::FlashTraining(int64_t B, int64_t D, int64_t NH, bool dropout) const {
  if (!Storage16().has_value() || dropout || NH <= 0 || D % NH != 0 || B * NH > 65535) {
    return false;
  }
  const int64_t hs = D / NH;
  return hs == 16 || hs == 32 || hs == 64;
}

// What a fused training forward keeps in `att`, in this order: q, k and v rounded to 16 bits
// (FlashOperandBytes), a copy of the output (B, T, D), and each query's softmax statistic
// (B, NH, T). Offsets in floats.
struct CudaBackend::FlashSaved {
  int64_t out, lse, total;
};

CudaBackend::FlashSaved CudaBackend::FlashSavedOf(int64_t B, int64_t T, int64_t D, int64_t NH) {
  const int64_t operands = cuda::FlashOperandBytes(B, T, D) / kFloatBytes;  // D % 16 == 0
  return {operands, operands + B * T * D, operands + B * T * D + B * NH * T};
}

int64_t CudaBackend::AttentionSavedFloats(int64_t B, int64_t T, int64_t D, int64_t NH,
                                          bool dropout) const {
  if (FlashTraining(B, D, NH, dropout)) return FlashSavedOf(B, T, D, NH).total;
  return B * NH * T * T;
}

absl::Status CudaBackend::AttentionGemmLocked(float* out, float* att, const float* qkv,
                                              const float* dropout_mask, int64_t B, int64_t T,
                                              int64_t D, int64_t NH, bool causal) {
  const AttentionChunk shape = ChunkOf(B, T, D, NH);
  const int64_t hs = shape.hs, chunk = shape.rows, per_row = shape.per_row;
  float* scratch_scores = nullptr;
  if (att == nullptr) {
    ASSIGN_OR_RETURN(scratch_scores, ScratchFloatsLocked(kAttentionScores, chunk * per_row));
  }
  float* dropped = nullptr;
  if (dropout_mask != nullptr) {
    ASSIGN_OR_RETURN(dropped, ScratchFloatsLocked(kAttentionProbs, chunk * per_row));
  }
  for (int64_t b0 = 0; b0 < B; b0 += chunk) {
    const int64_t Bc = std::min(chunk, B - b0);
    const float* q = qkv + b0 * T * 3 * D;
    float* scores = att != nullptr ? att + b0 * per_row : scratch_scores;
    RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                 {CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, shape.scale, q + D,
                                  shape.qkv(), q, shape.qkv(), scores, shape.scores()},
                                 Bc, NH, options_.math));
    RETURN_IF_ERROR(cuda::AttentionSoftmax(scores, Bc * NH * T, T, causal, context_.stream));
    const float* probs = scores;
    if (dropout_mask != nullptr) {
      RETURN_IF_ERROR(cuda::MultiplyLaunch(dropped, scores, dropout_mask + b0 * per_row,
                                           Bc * per_row, context_.stream));
      probs = dropped;
    }
    RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                 {CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, q + 2 * D, shape.qkv(),
                                  probs, shape.scores(), out + b0 * T * D, shape.out()},
                                 Bc, NH, options_.math));
  }
  return absl::OkStatus();
}

absl::Status CudaBackend::Attention(float* out, float* att, const float* qkv,
                                    const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                    int64_t NH, bool causal) {
  RETURN_IF_ERROR(CheckAttentionShape("Attention", B, T, D, NH));
  if (B == 0) return absl::OkStatus();
  if (out == nullptr || qkv == nullptr) {
    return absl::InvalidArgumentError("CudaBackend::Attention: null pointer");
  }
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    // Inference in 16-bit math runs fused on tensor cores; in fp32 / TF32, short windows
    // stream keys and values through one kernel, whose cost grows with T^2 on CUDA cores, and
    // long ones run as GEMMs, whose cost grows on the matrix units.
    const std::optional<cuda::Storage16> type16 = Storage16();
    if (att != nullptr && FlashTraining(B, D, NH, dropout_mask != nullptr)) {
      const FlashSaved saved = FlashSavedOf(B, T, D, NH);
      return cuda::FlashAttentionForward(out, att + saved.out, att + saved.lse, att, qkv, B, T, D,
                                         NH, causal, *type16, context_.stream);
    }
    if (att == nullptr && dropout_mask == nullptr && type16.has_value() &&
        cuda::FlashAttentionSupports(out, qkv, B, D, NH)) {
      ASSIGN_OR_RETURN(void* const operands,
                       ScratchLocked(kAttentionOperands, cuda::FlashOperandBytes(B, T, D)));
      return cuda::FlashAttentionInference(out, operands, qkv, B, T, D, NH, causal, *type16,
                                           context_.stream);
    }
    if (att == nullptr && dropout_mask == nullptr && T < options_.attention_gemm_min_keys &&
        cuda::AttentionInferenceSupports(B, D, NH)) {
      return cuda::AttentionInference(out, qkv, B, T, D, NH, causal, context_.stream);
    }
    return AttentionGemmLocked(out, att, qkv, dropout_mask, B, T, D, NH, causal);
  });
}

absl::Status CudaBackend::AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                                            const float* att, const float* dropout_mask, int64_t B,
                                            int64_t T, int64_t D, int64_t NH, bool causal) {
  RETURN_IF_ERROR(CheckAttentionShape("AttentionBackward", B, T, D, NH));
  if (B == 0) return absl::OkStatus();
  if (dqkv == nullptr || dout == nullptr || qkv == nullptr || att == nullptr) {
    return absl::InvalidArgumentError("CudaBackend::AttentionBackward: null pointer");
  }
  return Run([&]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) -> absl::Status {
    if (FlashTraining(B, D, NH, dropout_mask != nullptr)) {
      // Scratch: dout in 16 bits, then each query's dout . out.
      const int64_t dout16 = cuda::FlashOperandBytes(B, T, D) / 3 / kFloatBytes;
      ASSIGN_OR_RETURN(float* const scratch,
                       ScratchFloatsLocked(kAttentionScores, dout16 + B * NH * T));
      const FlashSaved saved = FlashSavedOf(B, T, D, NH);
      return cuda::FlashAttentionBackward(dqkv, scratch, scratch + dout16, dout, att,
                                          att + saved.out, att + saved.lse, B, T, D, NH, causal,
                                          *Storage16(), context_.stream);
    }
    const AttentionChunk shape = ChunkOf(B, T, D, NH);
    const int64_t hs = shape.hs, chunk = shape.rows, per_row = shape.per_row;
    ASSIGN_OR_RETURN(float* const dw, ScratchFloatsLocked(kAttentionScores, chunk * per_row));
    float* dropped = nullptr;
    if (dropout_mask != nullptr) {
      ASSIGN_OR_RETURN(dropped, ScratchFloatsLocked(kAttentionProbs, chunk * per_row));
    }
    for (int64_t b0 = 0; b0 < B; b0 += chunk) {
      const int64_t Bc = std::min(chunk, B - b0);
      const float* q = qkv + b0 * T * 3 * D;
      float* dq = dqkv + b0 * T * 3 * D;
      const float* dy = dout + b0 * T * D;
      const float* a = att + b0 * per_row;
      const float* mask = dropout_mask != nullptr ? dropout_mask + b0 * per_row : nullptr;
      const float* probs = a;
      if (mask != nullptr) {
        RETURN_IF_ERROR(cuda::MultiplyLaunch(dropped, a, mask, Bc * per_row, context_.stream));
        probs = dropped;
      }
      // dv = P^T dout
      RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                   {CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, dy, shape.out(),
                                    probs, shape.scores(), dq + 2 * D, shape.qkv()},
                                   Bc, NH, options_.math));
      // dw[t, s] = dout_t . v_s, then the softmax backward makes it dS in place.
      RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                   {CUBLAS_OP_T, CUBLAS_OP_N, T, T, hs, 1.0f, q + 2 * D,
                                    shape.qkv(), dy, shape.out(), dw, shape.scores()},
                                   Bc, NH, options_.math));
      RETURN_IF_ERROR(cuda::AttentionSoftmaxBackward(dw, a, mask, Bc * NH * T, T, shape.scale,
                                                     context_.stream));
      // dq = dS k, dk = dS^T q
      RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                   {CUBLAS_OP_N, CUBLAS_OP_N, hs, T, T, 1.0f, q + D, shape.qkv(),
                                    dw, shape.scores(), dq, shape.qkv()},
                                   Bc, NH, options_.math));
      RETURN_IF_ERROR(RunHeadGemms(context_.cublas,
                                   {CUBLAS_OP_N, CUBLAS_OP_T, hs, T, T, 1.0f, q, shape.qkv(), dw,
                                    shape.scores(), dq + D, shape.qkv()},
                                   Bc, NH, options_.math));
    }
    return absl::OkStatus();
  });
}

}  // namespace forecastd
