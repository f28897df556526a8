#include "backends/cpu/dnnl_recurrent_layout.h"

#include <array>
#include <cstring>

namespace forecastd::dnnl_internal {
namespace {

// oneDNN gate g takes PyTorch gate kGateFrom[g] (and gives its gradient back to it).
constexpr std::array<int64_t, 4> kLstmGateFrom = {0, 1, 2, 3};  // i f g o -> i f c~ o
constexpr std::array<int64_t, 3> kGruGateFrom = {1, 0, 2};      // r z n -> u(z) r o(n)

int64_t GateFrom(bool lstm, int64_t g) { return lstm ? kLstmGateFrom[g] : kGruGateFrom[g]; }

}  // namespace

OneDnnWeights ToOneDnnWeights(const RecurrentLayout& s, const RecurrentDirectionWeights* weights) {
  const auto [lstm, G, B, T, I, H, ND, data] = s;
  const int64_t parts = s.BiasParts();
  OneDnnWeights w;
  w.layer.resize(ND * G * H * I);
  w.iter.resize(ND * G * H * H);
  w.bias.resize(ND * parts * H);
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionWeights& wd = weights[d];
    for (int64_t g = 0; g < G; ++g) {
      const int64_t from = GateFrom(lstm, g);
      std::memcpy(w.layer.data() + (d * G + g) * H * I, wd.w_ih + from * H * I,
                  sizeof(float) * H * I);
      std::memcpy(w.iter.data() + (d * G + g) * H * H, wd.w_hh + from * H * H,
                  sizeof(float) * H * H);
      float* bias = w.bias.data() + (d * parts + g) * H;
      const bool input_part_only = !lstm && g == 2;  // GRU o = b_in; b_hn goes to u'
      for (int64_t j = 0; j < H; ++j) {
        bias[j] = BiasAt(wd.b_ih, from * H + j) +
                  (input_part_only ? 0.0f : BiasAt(wd.b_hh, from * H + j));
      }
    }
    if (!lstm) {
      float* u_prime = w.bias.data() + (d * parts + G) * H;
      for (int64_t j = 0; j < H; ++j) u_prime[j] = BiasAt(wd.b_hh, 2 * H + j);
    }
  }
  return w;
}

void FromOneDnnGrads(const RecurrentLayout& s, const OneDnnWeights& grads,
                     const RecurrentDirectionGrads* dweights) {
  const auto [lstm, G, B, T, I, H, ND, data] = s;
  const int64_t parts = s.BiasParts();
  for (int64_t d = 0; d < ND; ++d) {
    const RecurrentDirectionGrads& gd = dweights[d];
    for (int64_t g = 0; g < G; ++g) {
      const int64_t from = GateFrom(lstm, g);
      if (gd.dw_ih != nullptr) {
        std::memcpy(gd.dw_ih + from * H * I, grads.layer.data() + (d * G + g) * H * I,
                    sizeof(float) * H * I);
      }
      if (gd.dw_hh != nullptr) {
        std::memcpy(gd.dw_hh + from * H * H, grads.iter.data() + (d * G + g) * H * H,
                    sizeof(float) * H * H);
      }
      const float* dbias = grads.bias.data() + (d * parts + g) * H;
      // GRU n gate: b_hn's gradient is u''s, not the input-side o's.
      const float* dbias_hh = !lstm && g == 2 ? grads.bias.data() + (d * parts + G) * H : dbias;
      if (gd.db_ih != nullptr) std::memcpy(gd.db_ih + from * H, dbias, sizeof(float) * H);
      if (gd.db_hh != nullptr) std::memcpy(gd.db_hh + from * H, dbias_hh, sizeof(float) * H);
    }
  }
}

}  // namespace forecastd::dnnl_internal
