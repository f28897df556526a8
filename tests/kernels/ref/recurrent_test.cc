#include "kernels/ref/recurrent.h"

#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

double Sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

std::vector<float> RandomVector(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

enum class Cell { kLstm, kGru };

int64_t Gates(Cell cell) { return cell == Cell::kLstm ? 4 : 3; }

// Random parameters for ND directions of one layer, owning the storage the views point to.
struct Layer {
  Layer(std::mt19937& rng, Cell cell, int64_t I, int64_t H, int64_t ND) {
    const int64_t GH = Gates(cell) * H;
    for (int64_t d = 0; d < ND; ++d) {
      w_ih.push_back(RandomVector(rng, GH * I));
      w_hh.push_back(RandomVector(rng, GH * H));
      b_ih.push_back(RandomVector(rng, GH));
      b_hh.push_back(RandomVector(rng, GH));
    }
  }
  RecurrentDirectionWeights View(int64_t d) const {
    return {w_ih[d].data(), w_hh[d].data(), b_ih[d].data(), b_hh[d].data()};
  }
  std::vector<std::vector<float>> w_ih, w_hh, b_ih, b_hh;
};

// Runs either cell; c_0 and c_n are ignored for the GRU.
void Run(Cell cell, float* out, float* h_n, float* c_n, const float* inp, const float* h_0,
         const float* c_0, const RecurrentDirectionWeights* weights, const RecurrentDims& dims) {
  if (cell == Cell::kLstm) {
    LstmLayerForward(out, h_n, c_n, inp, h_0, c_0, weights, dims);
  } else {
    GruLayerForward(out, h_n, inp, h_0, weights, dims);
  }
}

TEST_CASE("LstmLayerForward: one step with H=1 matches the formulas by hand") {
  // Gate rows in PyTorch's order i, f, g, o.
  const std::vector<float> w_ih = {0.1f, -0.2f, 0.3f, 0.4f, -0.5f, 0.6f, 0.7f, -0.8f};  // (4, 2)
  const std::vector<float> w_hh = {0.9f, -1.0f, 1.1f, -1.2f};                           // (4, 1)
  const std::vector<float> b_ih = {0.01f, 0.02f, 0.03f, 0.04f};
  const std::vector<float> b_hh = {-0.05f, 0.06f, -0.07f, 0.08f};
  const std::vector<float> x = {0.5f, -1.5f};
  const float h0 = 0.2f, c0 = -0.3f;
  const RecurrentDirectionWeights weights = {w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data()};

  const double i = Sigmoid(0.1 * 0.5 + -0.2 * -1.5 + 0.01 + 0.9 * 0.2 + -0.05);
  const double f = Sigmoid(0.3 * 0.5 + 0.4 * -1.5 + 0.02 + -1.0 * 0.2 + 0.06);
  const double g = std::tanh(-0.5 * 0.5 + 0.6 * -1.5 + 0.03 + 1.1 * 0.2 + -0.07);
  const double o = Sigmoid(0.7 * 0.5 + -0.8 * -1.5 + 0.04 + -1.2 * 0.2 + 0.08);
  const double c1 = f * -0.3 + i * g;
  const double h1 = o * std::tanh(c1);

  float out = -99.0f, h_n = -99.0f, c_n = -99.0f;
  LstmLayerForward(&out, &h_n, &c_n, x.data(), &h0, &c0, &weights,
                   {.B = 1, .T = 1, .I = 2, .H = 1, .ND = 1});
  REQUIRE(out == Approx(h1).epsilon(1e-6));
  REQUIRE(h_n == out);
  REQUIRE(c_n == Approx(c1).epsilon(1e-6));
}

TEST_CASE("GruLayerForward: one step with H=1 matches the formulas by hand") {
  // Gate rows in PyTorch's order r, z, n.
  const std::vector<float> w_ih = {0.2f, -0.4f, 0.6f, 0.1f, -0.3f, 0.8f};  // (3, 2)
  const std::vector<float> w_hh = {0.5f, -0.7f, 1.3f};                     // (3, 1)
  const std::vector<float> b_ih = {0.05f, -0.1f, 0.15f};
  const std::vector<float> b_hh = {0.2f, 0.3f, -0.4f};
  const std::vector<float> x = {1.0f, -0.5f};
  const float h0 = 0.6f;
  const RecurrentDirectionWeights weights = {w_ih.data(), w_hh.data(), b_ih.data(), b_hh.data()};

  const double r = Sigmoid(0.2 * 1.0 + -0.4 * -0.5 + 0.05 + 0.5 * 0.6 + 0.2);
  const double z = Sigmoid(0.6 * 1.0 + 0.1 * -0.5 + -0.1 + -0.7 * 0.6 + 0.3);
  // The reset gate scales (W_hn h + b_hn), bias included: PyTorch's form.
  const double n = std::tanh(-0.3 * 1.0 + 0.8 * -0.5 + 0.15 + r * (1.3 * 0.6 + -0.4));
  const double h1 = (1 - z) * n + z * 0.6;
  // The other common form, r * (W_hn h) + b_hn, which this kernel must not compute.
  const double n_reset_before = std::tanh(-0.3 * 1.0 + 0.8 * -0.5 + 0.15 + r * 1.3 * 0.6 - 0.4);
  const double h1_reset_before = (1 - z) * n_reset_before + z * 0.6;
  REQUIRE(std::abs(h1 - h1_reset_before) > 1e-2);

  float out = -99.0f, h_n = -99.0f;
  GruLayerForward(&out, &h_n, x.data(), &h0, &weights, {.B = 1, .T = 1, .I = 2, .H = 1, .ND = 1});
  REQUIRE(out == Approx(h1).epsilon(1e-6));
  REQUIRE(h_n == out);
}

TEST_CASE("Recurrent layers: two steps with H=1 and no initial state match by hand") {
  // All weights 1 and biases 0, scalar input: every gate sees x + h.
  const std::vector<float> ones(4, 1.0f), zeros(4, 0.0f);
  const RecurrentDirectionWeights weights = {ones.data(), ones.data(), zeros.data(), zeros.data()};
  const std::vector<float> x = {0.5f, -0.25f};
  // The kernel keeps h in float between steps, hence the absolute margin near zero.
  const RecurrentDims dims = {.B = 1, .T = 2, .I = 1, .H = 1, .ND = 1};

  SECTION("LSTM") {
    double h = 0, c = 0;
    std::vector<double> expected;
    for (double xt : {0.5, -0.25}) {
      const double s = Sigmoid(xt + h), g = std::tanh(xt + h);
      c = s * c + s * g;
      h = s * std::tanh(c);
      expected.push_back(h);
    }
    std::vector<float> out(2);
    float c_n = 0;
    LstmLayerForward(out.data(), nullptr, &c_n, x.data(), nullptr, nullptr, &weights, dims);
    REQUIRE(out[0] == Approx(expected[0]).epsilon(1e-6).margin(1e-7));
    REQUIRE(out[1] == Approx(expected[1]).epsilon(1e-6).margin(1e-7));
    REQUIRE(c_n == Approx(c).epsilon(1e-6).margin(1e-7));
  }
  SECTION("GRU") {
    double h = 0;
    std::vector<double> expected;
    for (double xt : {0.5, -0.25}) {
      const double s = Sigmoid(xt + h);  // r and z
      const double n = std::tanh(xt + s * h);
      h = (1 - s) * n + s * h;
      expected.push_back(h);
    }
    std::vector<float> out(2);
    GruLayerForward(out.data(), nullptr, x.data(), nullptr, &weights, dims);
    REQUIRE(out[0] == Approx(expected[0]).epsilon(1e-6).margin(1e-7));
    REQUIRE(out[1] == Approx(expected[1]).epsilon(1e-6).margin(1e-7));
  }
}

TEST_CASE("Recurrent layers: the reverse direction is the forward one on reversed time") {
  constexpr int64_t B = 2, T = 5, I = 3, H = 4;
  for (Cell cell : {Cell::kLstm, Cell::kGru}) {
    CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU");
    std::mt19937 rng(42);
    const Layer layer(rng, cell, I, H, /*ND=*/2);
    const RecurrentDirectionWeights both[2] = {layer.View(0), layer.View(1)};
    const std::vector<float> inp = RandomVector(rng, B * T * I);
    const std::vector<float> h_0 = RandomVector(rng, 2 * B * H);
    const std::vector<float> c_0 = RandomVector(rng, 2 * B * H);

    std::vector<float> out(B * T * 2 * H), h_n(2 * B * H), c_n(2 * B * H);
    Run(cell, out.data(), h_n.data(), c_n.data(), inp.data(), h_0.data(), c_0.data(), both,
        {.B = B, .T = T, .I = I, .H = H, .ND = 2});

    std::vector<float> inp_rev(B * T * I);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t i = 0; i < I; ++i) {
          inp_rev[(b * T + t) * I + i] = inp[(b * T + (T - 1 - t)) * I + i];
        }
      }
    }
    const RecurrentDims one_dir = {.B = B, .T = T, .I = I, .H = H, .ND = 1};
    std::vector<float> out_f(B * T * H), h_n_f(B * H), c_n_f(B * H);
    Run(cell, out_f.data(), h_n_f.data(), c_n_f.data(), inp.data(), h_0.data(), c_0.data(),
        &both[0], one_dir);
    std::vector<float> out_r(B * T * H), h_n_r(B * H), c_n_r(B * H);
    Run(cell, out_r.data(), h_n_r.data(), c_n_r.data(), inp_rev.data(), h_0.data() + B * H,
        c_0.data() + B * H, &both[1], one_dir);

    for (int64_t b = 0; b < B; ++b) {
      for (int64_t t = 0; t < T; ++t) {
        for (int64_t j = 0; j < H; ++j) {
          CAPTURE(b, t, j);
          REQUIRE(out[(b * T + t) * 2 * H + j] == out_f[(b * T + t) * H + j]);
          REQUIRE(out[(b * T + t) * 2 * H + H + j] == out_r[(b * T + (T - 1 - t)) * H + j]);
        }
      }
      for (int64_t j = 0; j < H; ++j) {
        CAPTURE(b, j);
        REQUIRE(h_n[b * H + j] == h_n_f[b * H + j]);
        REQUIRE(h_n[(B + b) * H + j] == h_n_r[b * H + j]);
        // As in PyTorch: the forward final state is out at t = T-1, the reverse one at t = 0.
        REQUIRE(h_n[b * H + j] == out[(b * T + T - 1) * 2 * H + j]);
        REQUIRE(h_n[(B + b) * H + j] == out[(b * T + 0) * 2 * H + H + j]);
        if (cell == Cell::kLstm) {
          REQUIRE(c_n[b * H + j] == c_n_f[b * H + j]);
          REQUIRE(c_n[(B + b) * H + j] == c_n_r[b * H + j]);
        }
      }
    }
  }
}

TEST_CASE("Recurrent layers: T steps at once equal T single steps chained through h_n/c_n") {
  constexpr int64_t B = 3, T = 6, I = 2, H = 5;
  for (Cell cell : {Cell::kLstm, Cell::kGru}) {
    CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU");
    std::mt19937 rng(3);
    const Layer layer(rng, cell, I, H, /*ND=*/1);
    const RecurrentDirectionWeights weights = layer.View(0);
    const std::vector<float> inp = RandomVector(rng, B * T * I);
    std::vector<float> h = RandomVector(rng, B * H);
    std::vector<float> c = RandomVector(rng, B * H);

    std::vector<float> out(B * T * H), h_n(B * H), c_n(B * H);
    Run(cell, out.data(), h_n.data(), c_n.data(), inp.data(), h.data(), c.data(), &weights,
        {.B = B, .T = T, .I = I, .H = H, .ND = 1});

    for (int64_t t = 0; t < T; ++t) {
      std::vector<float> x_t(B * I);
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t i = 0; i < I; ++i) x_t[b * I + i] = inp[(b * T + t) * I + i];
      }
      std::vector<float> out_t(B * H), h_next(B * H), c_next(B * H);
      Run(cell, out_t.data(), h_next.data(), c_next.data(), x_t.data(), h.data(), c.data(),
          &weights, {.B = B, .T = 1, .I = I, .H = H, .ND = 1});
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t j = 0; j < H; ++j) {
          CAPTURE(t, b, j);
          REQUIRE(out_t[b * H + j] == out[(b * T + t) * H + j]);
        }
      }
      h = h_next;
      c = c_next;
    }
    REQUIRE(h == h_n);
    if (cell == Cell::kLstm) REQUIRE(c == c_n);
  }
}

TEST_CASE("Recurrent layers: null h_0/c_0 mean zeros and null h_n/c_n are not written") {
  constexpr int64_t B = 2, T = 3, I = 3, H = 2, ND = 2;
  for (Cell cell : {Cell::kLstm, Cell::kGru}) {
    CAPTURE(cell == Cell::kLstm ? "LSTM" : "GRU");
    std::mt19937 rng(5);
    const Layer layer(rng, cell, I, H, ND);
    const RecurrentDirectionWeights both[2] = {layer.View(0), layer.View(1)};
    const std::vector<float> inp = RandomVector(rng, B * T * I);
    const std::vector<float> zeros(ND * B * H, 0.0f);
    const RecurrentDims dims = {.B = B, .T = T, .I = I, .H = H, .ND = ND};

    std::vector<float> out_null(B * T * ND * H), out_zero(B * T * ND * H);
    Run(cell, out_null.data(), nullptr, nullptr, inp.data(), nullptr, nullptr, both, dims);
    Run(cell, out_zero.data(), nullptr, nullptr, inp.data(), zeros.data(), zeros.data(), both,
        dims);
    REQUIRE(out_null == out_zero);
    // Something was computed: a zero state does not give a zero output here.
    bool any_nonzero = false;
    for (float v : out_null) any_nonzero |= v != 0.0f;
    REQUIRE(any_nonzero);
  }
}

}  // namespace
}  // namespace forecastd::ref
