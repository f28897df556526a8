#include "kernels/ref/attention.h"

#include <cmath>
#include <random>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd::ref {
namespace {

std::vector<float> RandomVector(std::mt19937& rng, size_t n) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Element i of head h's v at (b, t) in a packed (B, T, 3*D) qkv.
float V(const std::vector<float>& qkv, int64_t T, int64_t D, int64_t b, int64_t t, int64_t c) {
  return qkv[(b * T + t) * 3 * D + 2 * D + c];
}

TEST_CASE("AttentionForward: two positions, one head, matches the formulas by hand") {
  // Per position: q (2), k (2), v (2).
  const std::vector<float> qkv = {1, 0, /**/ 1, 0, /**/ 1, 2,  //
                                  0, 2, /**/ 0, 1, /**/ 3, -1};
  const double a = 1.0 / std::sqrt(2.0);  // scores are q.k / sqrt(hs), hs = 2
  // t = 0: scores (1 * a, 0); t = 1: scores (0, 2 * a).
  const double w00 = std::exp(a) / (std::exp(a) + 1.0), w01 = 1.0 - w00;
  const double w10 = 1.0 / (1.0 + std::exp(2 * a)), w11 = 1.0 - w10;

  std::vector<float> out(4), att(4);
  SECTION("bidirectional") {
    AttentionForward(out.data(), att.data(), qkv.data(), nullptr, 1, 2, 2, 1, /*causal=*/false);
    REQUIRE(att[0] == Approx(w00));
    REQUIRE(att[1] == Approx(w01));
    REQUIRE(out[0] == Approx(w00 * 1 + w01 * 3));
    REQUIRE(out[1] == Approx(w00 * 2 + w01 * -1));
  }
  SECTION("causal") {
    AttentionForward(out.data(), att.data(), qkv.data(), nullptr, 1, 2, 2, 1, /*causal=*/true);
    REQUIRE(att[0] == 1.0f);
    REQUIRE(att[1] == 0.0f);
    REQUIRE(out[0] == 1.0f);
    REQUIRE(out[1] == 2.0f);
  }
  // The last position sees every key either way.
  REQUIRE(att[2] == Approx(w10));
  REQUIRE(att[3] == Approx(w11));
  REQUIRE(out[2] == Approx(w10 * 1 + w11 * 3));
  REQUIRE(out[3] == Approx(w10 * 2 + w11 * -1));
}

TEST_CASE("AttentionForward with one head and one position returns v") {
  constexpr int64_t B = 3, T = 1, D = 4;
  std::mt19937 rng(8);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  for (bool causal : {false, true}) {
    std::vector<float> out(B * T * D);
    AttentionForward(out.data(), nullptr, qkv.data(), nullptr, B, T, D, 1, causal);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t c = 0; c < D; ++c) {
        CAPTURE(causal, b, c);
        REQUIRE(out[b * D + c] == Approx(V(qkv, T, D, b, 0, c)).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("AttentionForward causal: rows sum to 1, masked entries are 0, t=0 is v_0") {
  constexpr int64_t B = 2, T = 5, D = 6, NH = 3;
  std::mt19937 rng(9);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  std::vector<float> out(B * T * D), att(B * NH * T * T, -99.0f);
  AttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, D, NH, /*causal=*/true);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t c = 0; c < D; ++c) {
      CAPTURE(b, c);
      REQUIRE(out[(b * T + 0) * D + c] == Approx(V(qkv, T, D, b, 0, c)).epsilon(1e-6));
    }
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* row = att.data() + ((b * NH + h) * T + t) * T;
        double sum = 0;
        for (int64_t s = 0; s < T; ++s) {
          CAPTURE(b, h, t, s);
          if (s > t) {
            REQUIRE(row[s] == 0.0f);
          } else {
            REQUIRE(row[s] > 0.0f);
          }
          sum += row[s];
        }
        CAPTURE(b, h, t);
        REQUIRE(sum == Approx(1.0).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("AttentionForward non-causal: att rows sum to 1 and out is att times v") {
  constexpr int64_t B = 2, T = 4, D = 8, NH = 2, hs = D / NH;
  std::mt19937 rng(10);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  std::vector<float> out(B * T * D), att(B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, D, NH, /*causal=*/false);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < NH; ++h) {
      for (int64_t t = 0; t < T; ++t) {
        const float* row = att.data() + ((b * NH + h) * T + t) * T;
        double sum = 0;
        for (int64_t s = 0; s < T; ++s) sum += row[s];
        CAPTURE(b, h, t);
        REQUIRE(sum == Approx(1.0).epsilon(1e-6));
        for (int64_t i = 0; i < hs; ++i) {
          double expected = 0;
          for (int64_t s = 0; s < T; ++s) expected += row[s] * V(qkv, T, D, b, s, h * hs + i);
          CAPTURE(i);
          REQUIRE(out[(b * T + t) * D + h * hs + i] == Approx(expected).epsilon(1e-5).margin(1e-6));
        }
      }
    }
  }
}

TEST_CASE("AttentionForward splits heads contiguously, each an independent attention") {
  constexpr int64_t B = 2, T = 3, D = 6, NH = 2, hs = D / NH;
  std::mt19937 rng(12);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  for (bool causal : {false, true}) {
    std::vector<float> out(B * T * D), att(B * NH * T * T);
    AttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, D, NH, causal);
    for (int64_t h = 0; h < NH; ++h) {
      // Head h alone: columns [h*hs, (h+1)*hs) of each of q, k and v.
      std::vector<float> qkv_h(B * T * 3 * hs);
      for (int64_t bt = 0; bt < B * T; ++bt) {
        for (int64_t part = 0; part < 3; ++part) {
          for (int64_t i = 0; i < hs; ++i) {
            qkv_h[bt * 3 * hs + part * hs + i] = qkv[bt * 3 * D + part * D + h * hs + i];
          }
        }
      }
      std::vector<float> out_h(B * T * hs), att_h(B * T * T);
      AttentionForward(out_h.data(), att_h.data(), qkv_h.data(), nullptr, B, T, hs, 1, causal);
      for (int64_t bt = 0; bt < B * T; ++bt) {
        for (int64_t i = 0; i < hs; ++i) {
          CAPTURE(causal, h, bt, i);
          REQUIRE(out[bt * D + h * hs + i] == out_h[bt * hs + i]);
        }
      }
      for (int64_t b = 0; b < B; ++b) {
        for (int64_t ts = 0; ts < T * T; ++ts) {
          CAPTURE(causal, h, b, ts);
          REQUIRE(att[(b * NH + h) * T * T + ts] == att_h[b * T * T + ts]);
        }
      }
    }
  }
}

TEST_CASE("AttentionForward causal: no position sees the future") {
  constexpr int64_t B = 1, T = 6, D = 4, NH = 2;
  std::mt19937 rng(13);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  std::vector<float> out(B * T * D);
  AttentionForward(out.data(), nullptr, qkv.data(), nullptr, B, T, D, NH, /*causal=*/true);
  // Changing the last position leaves every earlier output as it was.
  std::vector<float> changed = qkv;
  for (int64_t c = 0; c < 3 * D; ++c) changed[(T - 1) * 3 * D + c] += 0.5f;
  std::vector<float> out_changed(B * T * D);
  AttentionForward(out_changed.data(), nullptr, changed.data(), nullptr, B, T, D, NH,
                   /*causal=*/true);
  for (int64_t i = 0; i < (T - 1) * D; ++i) {
    CAPTURE(i);
    REQUIRE(out_changed[i] == out[i]);
  }
  bool last_changed = false;
  for (int64_t i = (T - 1) * D; i < T * D; ++i) last_changed |= out_changed[i] != out[i];
  REQUIRE(last_changed);
  // And the last position, which sees every key, agrees with the unmasked attention.
  std::vector<float> out_full(B * T * D);
  AttentionForward(out_full.data(), nullptr, qkv.data(), nullptr, B, T, D, NH, /*causal=*/false);
  for (int64_t i = (T - 1) * D; i < T * D; ++i) {
    CAPTURE(i);
    REQUIRE(out_full[i] == Approx(out[i]).epsilon(1e-6));
  }
}

TEST_CASE("AttentionForward gives the same out with and without att") {
  constexpr int64_t B = 2, T = 4, D = 4, NH = 2;
  std::mt19937 rng(14);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  std::vector<float> out(B * T * D), out_no_att(B * T * D), att(B * NH * T * T);
  AttentionForward(out.data(), att.data(), qkv.data(), nullptr, B, T, D, NH, /*causal=*/true);
  AttentionForward(out_no_att.data(), nullptr, qkv.data(), nullptr, B, T, D, NH, /*causal=*/true);
  REQUIRE(out == out_no_att);
}

TEST_CASE("AttentionForward's dropout mask scales the weights that meet V, not the saved att") {
  constexpr int64_t B = 2, T = 4, D = 4, NH = 2, hs = D / NH;
  std::mt19937 rng(15);
  const std::vector<float> qkv = RandomVector(rng, B * T * 3 * D);
  std::vector<float> mask(B * NH * T * T);
  std::bernoulli_distribution drop(0.4);
  for (float& m : mask) m = drop(rng) ? 0.0f : 1.0f / 0.6f;
  for (const bool causal : {false, true}) {
    CAPTURE(causal);
    std::vector<float> out(B * T * D), att(B * NH * T * T);
    std::vector<float> out_plain(B * T * D), att_plain(B * NH * T * T);
    AttentionForward(out.data(), att.data(), qkv.data(), mask.data(), B, T, D, NH, causal);
    AttentionForward(out_plain.data(), att_plain.data(), qkv.data(), nullptr, B, T, D, NH, causal);
    REQUIRE(att == att_plain);
    for (int64_t b = 0; b < B; ++b) {
      for (int64_t h = 0; h < NH; ++h) {
        for (int64_t t = 0; t < T; ++t) {
          for (int64_t i = 0; i < hs; ++i) {
            double want = 0.0;
            for (int64_t s = 0; s < T; ++s) {
              const int64_t w = ((b * NH + h) * T + t) * T + s;
              want += double{att[w]} * mask[w] * qkv[(b * T + s) * 3 * D + 2 * D + h * hs + i];
            }
            CAPTURE(b, h, t, i);
            REQUIRE(out[(b * T + t) * D + h * hs + i] == Approx(want).margin(1e-6));
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace forecastd::ref
