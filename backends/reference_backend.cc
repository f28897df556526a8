#include "backends/reference_backend.h"

#include <algorithm>
#include <vector>

#include "kernels/base/status.h"

#include "kernels/ref/activation.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/normalization.h"
#include "kernels/ref/positional_encoding.h"
#include "kernels/ref/recurrent.h"

namespace forecastd {

absl::Status ReferenceBackend::Linear(float* out, const float* inp, const float* weight,
                                      const float* bias, int64_t N, int64_t IN, int64_t OUT) {
  ref::LinearForward(out, inp, weight, bias, N, IN, OUT);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::LstmLayer(float* out, float* h_n, float* c_n, const float* inp,
                                         const float* h_0, const float* c_0,
                                         const RecurrentDirectionWeights* weights,
                                         const RecurrentDims& dims) {
  ref::LstmLayerForward(out, h_n, c_n, inp, h_0, c_0, weights, dims);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                                        const RecurrentDirectionWeights* weights,
                                        const RecurrentDims& dims) {
  ref::GruLayerForward(out, h_n, inp, h_0, weights, dims);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::RecurrentStackLast(RecurrentCell cell, float* last, float* scratch,
                                                  const float* inp,
                                                  const RecurrentDirectionWeights* weights,
                                                  const RecurrentDims& dims, int num_layers) {
  if (dims.T < 1) return absl::InvalidArgumentError("RecurrentStackLast: T must be >= 1");
  // The stack's output in scratch; the layers in between in a buffer of our own.
  const int64_t C = dims.ND * dims.H;
  std::vector<float> between(static_cast<size_t>(num_layers > 1 ? dims.B * dims.T * C : 0));
  RETURN_IF_ERROR(RecurrentStack(cell, scratch, between.data(), inp, weights, dims, num_layers));
  for (int64_t b = 0; b < dims.B; ++b) {
    std::copy_n(scratch + (b * dims.T + dims.T - 1) * C, C, last + b * C);
  }
  return absl::OkStatus();
}

absl::Status ReferenceBackend::LayerNorm(float* out, float* mean, float* rstd, const float* inp,
                                         const float* gamma, const float* beta, int64_t N,
                                         int64_t C, float eps) {
  ref::LayerNormForward(out, mean, rstd, inp, gamma, beta, N, C, eps);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Gelu(float* out, const float* inp, int64_t n, GeluForm form) {
  ref::GeluForward(out, inp, n, form);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Relu(float* out, const float* inp, int64_t n) {
  ref::ReluForward(out, inp, n);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Softmax(float* out, const float* inp, int64_t R, int64_t C) {
  ref::SoftmaxForward(out, inp, R, C);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Attention(float* out, float* att, const float* qkv,
                                         const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                         int64_t NH, bool causal) {
  ref::AttentionForward(out, att, qkv, dropout_mask, B, T, D, NH, causal);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::AttentionLastQuery(float* out, const float* q, const float* kv,
                                                  int64_t B, int64_t T, int64_t D, int64_t NH) {
  ref::AttentionLastQueryForward(out, q, kv, B, T, D, NH);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::Residual(float* out, const float* a, const float* b, int64_t n) {
  ref::ResidualForward(out, a, b, n);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::PositionalEncoding(float* out, const float* inp, int64_t B,
                                                  int64_t T, int64_t D) {
  ref::PositionalEncodingForward(out, inp, B, T, D);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::LinearBackward(float* dinp, float* dweight, float* dbias,
                                              const float* dout, const float* inp,
                                              const float* /*saved*/, const float* weight,
                                              int64_t N, int64_t IN, int64_t OUT) {
  ref::LinearBackward(dinp, dweight, dbias, dout, inp, weight, N, IN, OUT);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::LstmLayerBackward(float* dinp,
                                                 const RecurrentDirectionGrads* dweights,
                                                 const float* dout, const float* inp,
                                                 const float* h_0, const float* c_0,
                                                 const RecurrentDirectionWeights* weights,
                                                 const RecurrentDims& dims) {
  ref::LstmLayerBackward(dinp, dweights, dout, inp, h_0, c_0, weights, dims);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::GruLayerBackward(
    float* dinp, const RecurrentDirectionGrads* dweights, const float* dout, const float* inp,
    const float* h_0, const RecurrentDirectionWeights* weights, const RecurrentDims& dims) {
  ref::GruLayerBackward(dinp, dweights, dout, inp, h_0, weights, dims);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::LayerNormBackward(float* dinp, float* dgamma, float* dbeta,
                                                 const float* dout, const float* inp,
                                                 const float* gamma, int64_t N, int64_t C,
                                                 float eps) {
  ref::LayerNormBackward(dinp, dgamma, dbeta, dout, inp, gamma, N, C, eps);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::GeluBackward(float* dinp, const float* dout, const float* inp,
                                            int64_t n, GeluForm form) {
  ref::GeluBackward(dinp, dout, inp, n, form);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::ReluBackward(float* dinp, const float* dout, const float* inp,
                                            int64_t n) {
  ref::ReluBackward(dinp, dout, inp, n);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::SoftmaxBackward(float* dinp, const float* dout, const float* out,
                                               int64_t R, int64_t C) {
  ref::SoftmaxBackward(dinp, dout, out, R, C);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::AttentionBackward(float* dqkv, const float* dout, const float* qkv,
                                                 const float* att, const float* dropout_mask,
                                                 int64_t B, int64_t T, int64_t D, int64_t NH,
                                                 bool /*causal: att's zeros say it*/) {
  ref::AttentionBackward(dqkv, dout, qkv, att, dropout_mask, B, T, D, NH);
  return absl::OkStatus();
}

absl::Status ReferenceBackend::AttentionLastQueryBackward(float* dq, float* dkv, const float* dout,
                                                          const float* q, const float* kv,
                                                          int64_t B, int64_t T, int64_t D,
                                                          int64_t NH) {
  ref::AttentionLastQueryBackward(dq, dkv, dout, q, kv, B, T, D, NH);
  return absl::OkStatus();
}

}  // namespace forecastd
