// The reference backend: every op runs the plain loops of kernels/ref/. It is the oracle
// the other backends are tested against and the fallback they use for what they cannot do.
// Stateless; thread-safe.
#ifndef FORECASTD_BACKENDS_REFERENCE_BACKEND_H_
#define FORECASTD_BACKENDS_REFERENCE_BACKEND_H_

#include "backends/backend.h"

namespace forecastd {

class ReferenceBackend final : public Backend {
 public:
  absl::string_view name() const override { return "reference"; }
  bool SupportsOp(Op) const override { return true; }
  // Its own RecurrentStackLast (the top layer's last step of the layer-by-layer stack).
  bool HasFastPath(FastPath path) const override { return path == FastPath::kRecurrentStackLast; }

  absl::Status Linear(float* out, const float* inp, const float* weight, const float* bias,
                      int64_t N, int64_t IN, int64_t OUT) override;
  absl::Status LstmLayer(float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
                         const float* c_0, const RecurrentDirectionWeights* weights,
                         const RecurrentDims& dims) override;
  absl::Status GruLayer(float* out, float* h_n, const float* inp, const float* h_0,
                        const RecurrentDirectionWeights* weights,
                        const RecurrentDims& dims) override;
  absl::Status RecurrentStackLast(RecurrentCell cell, float* last, float* scratch, const float* inp,
                                  const RecurrentDirectionWeights* weights,
                                  const RecurrentDims& dims, int num_layers) override;
  absl::Status LayerNorm(float* out, float* mean, float* rstd, const float* inp, const float* gamma,
                         const float* beta, int64_t N, int64_t C, float eps) override;
  absl::Status Gelu(float* out, const float* inp, int64_t n, GeluForm form) override;
  absl::Status Relu(float* out, const float* inp, int64_t n) override;
  absl::Status Softmax(float* out, const float* inp, int64_t R, int64_t C) override;
  absl::Status Attention(float* out, float* att, const float* qkv, const float* dropout_mask,
                         int64_t B, int64_t T, int64_t D, int64_t NH, bool causal) override;
  absl::Status AttentionLastQuery(float* out, const float* q, const float* kv, int64_t B, int64_t T,
                                  int64_t D, int64_t NH) override;
  absl::Status Residual(float* out, const float* a, const float* b, int64_t n) override;
  absl::Status PositionalEncoding(float* out, const float* inp, int64_t B, int64_t T,
                                  int64_t D) override;

  absl::Status LinearBackward(float* dinp, float* dweight, float* dbias, const float* dout,
                              const float* inp, const float* saved, const float* weight, int64_t N,
                              int64_t IN, int64_t OUT) override;
  absl::Status LstmLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                 const float* dout, const float* inp, const float* h_0,
                                 const float* c_0, const RecurrentDirectionWeights* weights,
                                 const RecurrentDims& dims) override;
  absl::Status GruLayerBackward(float* dinp, const RecurrentDirectionGrads* dweights,
                                const float* dout, const float* inp, const float* h_0,
                                const RecurrentDirectionWeights* weights,
                                const RecurrentDims& dims) override;
  absl::Status LayerNormBackward(float* dinp, float* dgamma, float* dbeta, const float* dout,
                                 const float* inp, const float* gamma, int64_t N, int64_t C,
                                 float eps) override;
  absl::Status GeluBackward(float* dinp, const float* dout, const float* inp, int64_t n,
                            GeluForm form) override;
  absl::Status ReluBackward(float* dinp, const float* dout, const float* inp, int64_t n) override;
  absl::Status SoftmaxBackward(float* dinp, const float* dout, const float* out, int64_t R,
                               int64_t C) override;
  absl::Status AttentionBackward(float* dqkv, const float* dout, const float* qkv, const float* att,
                                 const float* dropout_mask, int64_t B, int64_t T, int64_t D,
                                 int64_t NH, bool causal) override;
  absl::Status AttentionLastQueryBackward(float* dq, float* dkv, const float* dout, const float* q,
                                          const float* kv, int64_t B, int64_t T, int64_t D,
                                          int64_t NH) override;
};

}  // namespace forecastd

#endif  // FORECASTD_BACKENDS_REFERENCE_BACKEND_H_
