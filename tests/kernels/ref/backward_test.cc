// Every reference backward pass against central finite differences of its forward pass.
//
// Each test takes the scalar loss L = sum(out * R) for a fixed random R, so dout = R, and
// compares every element of every gradient with (L(x + eps) - L(x - eps)) / (2 eps). Gradient
// buffers start as NaN, so a backward that accumulates instead of writing, or skips an element,
// fails the comparison.
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/ref/activation.h"
#include "kernels/ref/attention.h"
#include "kernels/ref/linear.h"
#include "kernels/ref/normalization.h"
#include "kernels/ref/recurrent.h"
#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

// The forwards compute in double but round every output (and the recurrent states) to float,
// so L carries a rounding noise of about 1e-7 * sqrt(#outputs); divided by 2 eps that is a few
// 1e-5 in the difference quotient, and the eps^2 truncation error is smaller still. The
// tolerance leaves an order of magnitude over the largest error these shapes show, yet is
// far below the size of any real mistake (a wrong sign, a missing term, a wrong gate).
constexpr float kEps = 1e-3f;
constexpr double kAbsTol = 1e-3;
constexpr double kRelTol = 1e-2;

std::vector<float> RandomVector(std::mt19937& rng, size_t n, float lo = -1.0f, float hi = 1.0f) {
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

std::vector<float> NanVector(size_t n) {
  return std::vector<float>(n, std::numeric_limits<float>::quiet_NaN());
}

// L = sum(out * r), in double.
double Dot(const std::vector<float>& out, const std::vector<float>& r) {
  double sum = 0.0;
  for (size_t i = 0; i < out.size(); ++i) sum += static_cast<double>(out[i]) * r[i];
  return sum;
}

// "[i, j, k]" for flat index `flat` of a row-major array of `shape`.
std::string IndexString(int64_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> index(shape.size());
  for (size_t k = shape.size(); k-- > 0;) {
    index[k] = flat % shape[k];
    flat /= shape[k];
  }
  std::ostringstream os;
  os << "[";
  for (size_t k = 0; k < index.size(); ++k) os << (k > 0 ? ", " : "") << index[k];
  os << "]";
  return os.str();
}

// Checks `analytic` (d loss / d x, shaped `shape`) against central differences of `loss` over
// every element of *x, which it perturbs in place and restores.
void CheckGradient(const std::string& name, std::vector<float>* x,
                   const std::vector<float>& analytic, const std::vector<int64_t>& shape,
                   const std::function<double()>& loss) {
  int64_t size = 1;
  for (int64_t s : shape) size *= s;
  REQUIRE(static_cast<int64_t>(x->size()) == size);
  REQUIRE(analytic.size() == x->size());
  int64_t mismatches = 0;
  std::string first;
  for (int64_t e = 0; e < size; ++e) {
    const float x0 = (*x)[e];
    const float x_plus = x0 + kEps, x_minus = x0 - kEps;
    (*x)[e] = x_plus;
    const double l_plus = loss();
    (*x)[e] = x_minus;
    const double l_minus = loss();
    (*x)[e] = x0;
    // The step actually taken, after x +- eps rounded to float.
    const double fd = (l_plus - l_minus) / (static_cast<double>(x_plus) - x_minus);
    const double a = analytic[e];
    if (!(std::abs(fd - a) <= kAbsTol + kRelTol * std::abs(a))) {  // NaN fails too
      if (mismatches == 0) {
        std::ostringstream os;
        os << name << IndexString(e, shape) << ": analytic " << a << ", finite difference " << fd;
        first = os.str();
      }
      ++mismatches;
    }
  }
  INFO(name << ": " << mismatches << " of " << size << " elements differ; first " << first);
  CHECK(mismatches == 0);
}

// --- Linear

void CheckLinear(bool with_bias, bool want_dinp) {
  constexpr int64_t N = 3, IN = 4, OUT = 5;
  std::mt19937 rng(1);
  std::vector<float> inp = RandomVector(rng, N * IN);
  std::vector<float> weight = RandomVector(rng, OUT * IN);
  std::vector<float> bias = RandomVector(rng, OUT);
  const std::vector<float> r = RandomVector(rng, N * OUT);
  const float* bias_or_null = with_bias ? bias.data() : nullptr;
  auto loss = [&] {
    std::vector<float> out(N * OUT);
    LinearForward(out.data(), inp.data(), weight.data(), bias_or_null, N, IN, OUT);
    return Dot(out, r);
  };

  std::vector<float> dinp = NanVector(N * IN), dweight = NanVector(OUT * IN);
  std::vector<float> dbias = NanVector(OUT);
  LinearBackward(want_dinp ? dinp.data() : nullptr, dweight.data(),
                 with_bias ? dbias.data() : nullptr, r.data(), inp.data(), weight.data(), N, IN,
                 OUT);
  CheckGradient("dweight", &weight, dweight, {OUT, IN}, loss);
  if (with_bias) CheckGradient("dbias", &bias, dbias, {OUT}, loss);
  if (want_dinp) {
    CheckGradient("dinp", &inp, dinp, {N, IN}, loss);
  } else {
    for (float x : dinp) REQUIRE(std::isnan(x));  // nothing written through a null dinp
  }
}

TEST_CASE("LinearBackward with bias matches finite differences") { CheckLinear(true, true); }

TEST_CASE("LinearBackward without bias matches finite differences") { CheckLinear(false, true); }

TEST_CASE("LinearBackward with a null dinp writes only the parameter gradients") {
  CheckLinear(true, false);
}

// --- LSTM and GRU

enum class Cell { kLstm, kGru };

struct RecurrentCase {
  int64_t B;
  int64_t T;
  int64_t ND;
  bool init_state;  // pass random h_0 (and c_0), else nullptr
  bool want_dinp;
};

void CheckRecurrent(Cell cell, const RecurrentCase& rc) {
  const bool lstm = cell == Cell::kLstm;
  const int64_t B = rc.B, T = rc.T, ND = rc.ND, I = 3, H = 3;
  const int64_t GH = (lstm ? 4 : 3) * H;
  CAPTURE(lstm ? "LSTM" : "GRU", B, T, ND, rc.init_state, rc.want_dinp);
  std::mt19937 rng(static_cast<uint32_t>(100 * B + 10 * T + ND));
  std::vector<std::vector<float>> w_ih, w_hh, b_ih, b_hh;
  for (int64_t d = 0; d < ND; ++d) {
    w_ih.push_back(RandomVector(rng, GH * I));
    w_hh.push_back(RandomVector(rng, GH * H));
    b_ih.push_back(RandomVector(rng, GH));
    b_hh.push_back(RandomVector(rng, GH));
  }
  // The views stay valid while CheckGradient perturbs the vectors in place.
  std::vector<RecurrentDirectionWeights> weights;
  for (int64_t d = 0; d < ND; ++d) {
    weights.push_back({w_ih[d].data(), w_hh[d].data(), b_ih[d].data(), b_hh[d].data()});
  }
  std::vector<float> inp = RandomVector(rng, B * T * I);
  const std::vector<float> h_0 = RandomVector(rng, ND * B * H);
  const std::vector<float> c_0 = RandomVector(rng, ND * B * H);
  const float* h_0_or_null = rc.init_state ? h_0.data() : nullptr;
  const float* c_0_or_null = rc.init_state ? c_0.data() : nullptr;
  const std::vector<float> r = RandomVector(rng, B * T * ND * H);
  const RecurrentDims dims = {.B = B, .T = T, .I = I, .H = H, .ND = ND};
  auto loss = [&] {
    std::vector<float> out(B * T * ND * H);
    if (lstm) {
      LstmLayerForward(out.data(), nullptr, nullptr, inp.data(), h_0_or_null, c_0_or_null,
                       weights.data(), dims);
    } else {
      GruLayerForward(out.data(), nullptr, inp.data(), h_0_or_null, weights.data(), dims);
    }
    return Dot(out, r);
  };

  std::vector<std::vector<float>> dw_ih, dw_hh, db_ih, db_hh;
  std::vector<RecurrentDirectionGrads> grads;
  for (int64_t d = 0; d < ND; ++d) {
    dw_ih.push_back(NanVector(GH * I));
    dw_hh.push_back(NanVector(GH * H));
    db_ih.push_back(NanVector(GH));
    db_hh.push_back(NanVector(GH));
  }
  for (int64_t d = 0; d < ND; ++d) {
    grads.push_back({dw_ih[d].data(), dw_hh[d].data(), db_ih[d].data(), db_hh[d].data()});
  }
  std::vector<float> dinp = NanVector(B * T * I);
  float* dinp_or_null = rc.want_dinp ? dinp.data() : nullptr;
  if (lstm) {
    LstmLayerBackward(dinp_or_null, grads.data(), r.data(), inp.data(), h_0_or_null, c_0_or_null,
                      weights.data(), dims);
  } else {
    GruLayerBackward(dinp_or_null, grads.data(), r.data(), inp.data(), h_0_or_null, weights.data(),
                     dims);
  }

  for (int64_t d = 0; d < ND; ++d) {
    const std::string dir = "[d=" + std::to_string(d) + "]";
    CheckGradient("dw_ih" + dir, &w_ih[d], dw_ih[d], {GH, I}, loss);
    CheckGradient("dw_hh" + dir, &w_hh[d], dw_hh[d], {GH, H}, loss);
    CheckGradient("db_ih" + dir, &b_ih[d], db_ih[d], {GH}, loss);
    CheckGradient("db_hh" + dir, &b_hh[d], db_hh[d], {GH}, loss);
  }
  if (rc.want_dinp) {
    CheckGradient("dinp", &inp, dinp, {B, T, I}, loss);
  } else {
    for (float x : dinp) REQUIRE(std::isnan(x));
  }
}

// B = 1 and B > 1, T = 1 and T > 1, with and without initial states.
const RecurrentCase kOneDirection[] = {
    {.B = 1, .T = 1, .ND = 1, .init_state = false, .want_dinp = true},
    {.B = 1, .T = 5, .ND = 1, .init_state = true, .want_dinp = true},
    {.B = 3, .T = 1, .ND = 1, .init_state = true, .want_dinp = true},
    {.B = 3, .T = 4, .ND = 1, .init_state = false, .want_dinp = true},
    {.B = 2, .T = 4, .ND = 1, .init_state = true, .want_dinp = true},
};
const RecurrentCase kTwoDirections[] = {
    {.B = 1, .T = 1, .ND = 2, .init_state = true, .want_dinp = true},
    {.B = 1, .T = 4, .ND = 2, .init_state = false, .want_dinp = true},
    {.B = 3, .T = 1, .ND = 2, .init_state = false, .want_dinp = true},
    {.B = 3, .T = 3, .ND = 2, .init_state = true, .want_dinp = true},
};
const RecurrentCase kNullDinp[] = {
    {.B = 2, .T = 3, .ND = 1, .init_state = true, .want_dinp = false},
    {.B = 2, .T = 3, .ND = 2, .init_state = false, .want_dinp = false},
};

TEST_CASE("LstmLayerBackward, one direction, matches finite differences") {
  for (const RecurrentCase& rc : kOneDirection) CheckRecurrent(Cell::kLstm, rc);
}

TEST_CASE("LstmLayerBackward, two directions, matches finite differences") {
  for (const RecurrentCase& rc : kTwoDirections) CheckRecurrent(Cell::kLstm, rc);
}

TEST_CASE("LstmLayerBackward with a null dinp writes only the weight gradients") {
  for (const RecurrentCase& rc : kNullDinp) CheckRecurrent(Cell::kLstm, rc);
}

TEST_CASE("GruLayerBackward, one direction, matches finite differences") {
  for (const RecurrentCase& rc : kOneDirection) CheckRecurrent(Cell::kGru, rc);
}

TEST_CASE("GruLayerBackward, two directions, matches finite differences") {
  for (const RecurrentCase& rc : kTwoDirections) CheckRecurrent(Cell::kGru, rc);
}

TEST_CASE("GruLayerBackward with a null dinp writes only the weight gradients") {
  for (const RecurrentCase& rc : kNullDinp) CheckRecurrent(Cell::kGru, rc);
}

// --- LayerNorm

void CheckLayerNorm(bool want_param_grads) {
  constexpr int64_t N = 3, C = 6;
  constexpr float kLayerNormEps = 1e-5f;
  std::mt19937 rng(3);
  std::vector<float> inp = RandomVector(rng, N * C, -2.0f, 2.0f);
  std::vector<float> gamma = RandomVector(rng, C, 0.5f, 1.5f);
  std::vector<float> beta = RandomVector(rng, C);
  const std::vector<float> r = RandomVector(rng, N * C);
  auto loss = [&] {
    std::vector<float> out(N * C);
    LayerNormForward(out.data(), nullptr, nullptr, inp.data(), gamma.data(), beta.data(), N, C,
                     kLayerNormEps);
    return Dot(out, r);
  };
  std::vector<float> dinp = NanVector(N * C), dgamma = NanVector(C), dbeta = NanVector(C);
  LayerNormBackward(dinp.data(), want_param_grads ? dgamma.data() : nullptr,
                    want_param_grads ? dbeta.data() : nullptr, r.data(), inp.data(), gamma.data(),
                    N, C, kLayerNormEps);
  CheckGradient("dinp", &inp, dinp, {N, C}, loss);
  if (want_param_grads) {
    CheckGradient("dgamma", &gamma, dgamma, {C}, loss);
    CheckGradient("dbeta", &beta, dbeta, {C}, loss);
  } else {
    for (float x : dgamma) REQUIRE(std::isnan(x));
    for (float x : dbeta) REQUIRE(std::isnan(x));
  }
}

TEST_CASE("LayerNormBackward matches finite differences") { CheckLayerNorm(true); }

TEST_CASE("LayerNormBackward with null dgamma and dbeta writes only dinp") {
  CheckLayerNorm(false);
}

// --- Activations

void CheckGelu(GeluForm form) {
  constexpr int64_t n = 32;
  std::mt19937 rng(4);
  std::vector<float> inp = RandomVector(rng, n, -4.0f, 4.0f);
  const std::vector<float> r = RandomVector(rng, n);
  auto loss = [&] {
    std::vector<float> out(n);
    GeluForward(out.data(), inp.data(), n, form);
    return Dot(out, r);
  };
  std::vector<float> dinp = NanVector(n);
  GeluBackward(dinp.data(), r.data(), inp.data(), n, form);
  CheckGradient("dinp", &inp, dinp, {n}, loss);

  // In place, dinp aliasing dout.
  std::vector<float> in_place = r;
  GeluBackward(in_place.data(), in_place.data(), inp.data(), n, form);
  REQUIRE(in_place == dinp);
}

TEST_CASE("GeluBackward, erf form, matches finite differences and works in place") {
  CheckGelu(GeluForm::kErf);
}

TEST_CASE("GeluBackward, tanh form, matches finite differences and works in place") {
  CheckGelu(GeluForm::kTanh);
}

TEST_CASE("ReluBackward matches finite differences away from 0 and works in place") {
  constexpr int64_t n = 32;
  std::mt19937 rng(5);
  std::vector<float> inp = RandomVector(rng, n);
  // Keep every input well clear of the kink, where the finite difference means nothing.
  for (float& x : inp) x = std::copysign(0.01f + std::abs(x), x);
  const std::vector<float> r = RandomVector(rng, n);
  auto loss = [&] {
    std::vector<float> out(n);
    ReluForward(out.data(), inp.data(), n);
    return Dot(out, r);
  };
  std::vector<float> dinp = NanVector(n);
  ReluBackward(dinp.data(), r.data(), inp.data(), n);
  CheckGradient("dinp", &inp, dinp, {n}, loss);

  std::vector<float> in_place = r;
  ReluBackward(in_place.data(), in_place.data(), inp.data(), n);
  REQUIRE(in_place == dinp);
}

TEST_CASE("ReluBackward takes the derivative at 0 as 0, as PyTorch") {
  const std::vector<float> inp = {0.0f, -0.0f, 1e-30f, -1e-30f};
  const std::vector<float> dout = {1.0f, 2.0f, 3.0f, 4.0f};
  std::vector<float> dinp = NanVector(4);
  ReluBackward(dinp.data(), dout.data(), inp.data(), 4);
  REQUIRE(dinp == std::vector<float>{0.0f, 0.0f, 3.0f, 0.0f});
}

TEST_CASE("SoftmaxBackward matches finite differences and works in place") {
  constexpr int64_t R = 3, C = 5;
  std::mt19937 rng(6);
  std::vector<float> inp = RandomVector(rng, R * C, -2.0f, 2.0f);
  const std::vector<float> r = RandomVector(rng, R * C);
  std::vector<float> out(R * C);
  auto loss = [&] {
    SoftmaxForward(out.data(), inp.data(), R, C);
    return Dot(out, r);
  };
  loss();  // leaves the unperturbed output in `out` for the backward
  const std::vector<float> saved_out = out;
  std::vector<float> dinp = NanVector(R * C);
  SoftmaxBackward(dinp.data(), r.data(), saved_out.data(), R, C);
  CheckGradient("dinp", &inp, dinp, {R, C}, loss);

  std::vector<float> in_place = r;
  SoftmaxBackward(in_place.data(), in_place.data(), saved_out.data(), R, C);
  REQUIRE(in_place == dinp);
}

// --- Attention

// With dropout > 0, a fixed mask of multipliers {0, 1/(1-dropout)} on the attention weights:
// the same mask in every evaluation of the loss, as a training step's forward and backward see.
void CheckAttention(bool causal, float dropout) {
  constexpr int64_t B = 2, T = 4, D = 6, NH = 2;
  std::mt19937 rng(causal ? 7 : 8);
  std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  const std::vector<float> r = RandomVector(rng, B * T * D);
  std::vector<float> mask;
  if (dropout > 0.0f) {
    std::bernoulli_distribution drop(dropout);
    mask.resize(B * NH * T * T);
    for (float& m : mask) m = drop(rng) ? 0.0f : 1.0f / (1.0f - dropout);
  }
  const float* m = mask.empty() ? nullptr : mask.data();
  auto loss = [&] {
    std::vector<float> out(B * T * D);
    AttentionForward(out.data(), nullptr, qkv.data(), m, B, T, D, NH, causal);
    return Dot(out, r);
  };
  std::vector<float> out(B * T * D), att = NanVector(B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), m, B, T, D, NH, causal);
  std::vector<float> dqkv = NanVector(B * T * 3 * D);
  AttentionBackward(dqkv.data(), r.data(), qkv.data(), att.data(), m, B, T, D, NH);
  CheckGradient("dqkv", &qkv, dqkv, {B, T, 3 * D}, loss);
}

TEST_CASE("AttentionBackward, non-causal, matches finite differences") {
  CheckAttention(/*causal=*/false, /*dropout=*/0.0f);
}

TEST_CASE("AttentionBackward, causal, matches finite differences") {
  CheckAttention(/*causal=*/true, /*dropout=*/0.0f);
}

TEST_CASE("AttentionBackward with a dropout mask matches finite differences") {
  CheckAttention(/*causal=*/false, /*dropout=*/0.3f);
  CheckAttention(/*causal=*/true, /*dropout=*/0.5f);
}

TEST_CASE("AttentionLastQueryBackward matches finite differences") {
  constexpr int64_t B = 2, T = 5, D = 6, NH = 3;
  std::mt19937 rng(9);
  std::vector<float> q = RandomVector(rng, B * D, -2.0f, 2.0f);
  std::vector<float> kv = RandomVector(rng, B * T * 2 * D, -2.0f, 2.0f);
  const std::vector<float> r = RandomVector(rng, B * D);
  auto loss = [&] {
    std::vector<float> out(B * D);
    AttentionLastQueryForward(out.data(), q.data(), kv.data(), B, T, D, NH);
    return Dot(out, r);
  };
  std::vector<float> dq = NanVector(B * D), dkv = NanVector(B * T * 2 * D);
  AttentionLastQueryBackward(dq.data(), dkv.data(), r.data(), q.data(), kv.data(), B, T, D, NH);
  CheckGradient("dq", &q, dq, {B, D}, loss);
  CheckGradient("dkv", &kv, dkv, {B, T, 2 * D}, loss);
}

}  // namespace
}  // namespace forecastd::ref
