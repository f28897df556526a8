#include "kernels/ref/optimizer.h"

#include <cmath>
#include <cstdint>
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

// The kernels round their state to float after every step, the references below keep it in
// double; over a handful of steps that drifts by a few float ulps.
void RequireClose(const std::vector<float>& actual, const std::vector<double>& expected,
                  const char* what) {
  REQUIRE(actual.size() == expected.size());
  for (size_t i = 0; i < expected.size(); ++i) {
    CAPTURE(what, i, actual[i], expected[i]);
    REQUIRE(actual[i] == Approx(expected[i]).epsilon(1e-5).margin(1e-9));
  }
}

// --- SGD, by hand on one or two elements

TEST_CASE("SgdUpdate without momentum is param -= lr * grad and leaves velocity alone") {
  std::vector<float> param = {1.0f, -2.0f};
  const std::vector<float> grad = {0.5f, -0.25f};
  SgdUpdate(param.data(), nullptr, grad.data(), 2, {.lr = 0.1f}, /*first_step=*/true);
  REQUIRE(param[0] == Approx(1.0 - 0.1 * 0.5));
  REQUIRE(param[1] == Approx(-2.0 + 0.1 * 0.25));
}

TEST_CASE("SgdUpdate weight decay adds weight_decay * param to the gradient") {
  std::vector<float> param = {2.0f};
  const std::vector<float> grad = {0.5f};
  SgdUpdate(param.data(), nullptr, grad.data(), 1, {.lr = 0.1f, .weight_decay = 0.25f}, true);
  REQUIRE(param[0] == Approx(2.0 - 0.1 * (0.5 + 0.25 * 2.0)));
}

TEST_CASE("SgdUpdate with momentum: the first step copies the gradient, later ones damp it") {
  const SgdHyper hyper = {.lr = 0.1f, .momentum = 0.9f, .dampening = 0.5f};
  std::vector<float> param = {1.0f}, velocity = {123.0f};  // garbage: the first step ignores it
  const std::vector<float> g1 = {0.5f}, g2 = {-1.0f};

  SgdUpdate(param.data(), velocity.data(), g1.data(), 1, hyper, /*first_step=*/true);
  // No dampening on the first step: buf = g.
  REQUIRE(velocity[0] == 0.5f);
  REQUIRE(param[0] == Approx(1.0 - 0.1 * 0.5));

  SgdUpdate(param.data(), velocity.data(), g2.data(), 1, hyper, /*first_step=*/false);
  const double buf2 = 0.9 * 0.5 + (1 - 0.5) * -1.0;  // -0.05
  REQUIRE(velocity[0] == Approx(buf2));
  REQUIRE(param[0] == Approx(1.0 - 0.1 * 0.5 - 0.1 * buf2));
}

TEST_CASE("SgdUpdate nesterov steps along g + momentum * buf") {
  const SgdHyper hyper = {.lr = 0.1f, .momentum = 0.9f, .nesterov = true};
  std::vector<float> param = {1.0f}, velocity = {0.0f};
  const std::vector<float> g1 = {0.5f}, g2 = {0.25f};

  SgdUpdate(param.data(), velocity.data(), g1.data(), 1, hyper, true);
  const double p1 = 1.0 - 0.1 * (0.5 + 0.9 * 0.5);
  REQUIRE(velocity[0] == 0.5f);
  REQUIRE(param[0] == Approx(p1));

  SgdUpdate(param.data(), velocity.data(), g2.data(), 1, hyper, false);
  const double buf2 = 0.9 * 0.5 + 0.25;
  REQUIRE(velocity[0] == Approx(buf2));
  REQUIRE(param[0] == Approx(p1 - 0.1 * (0.25 + 0.9 * buf2)));
}

// A plain double re-implementation of torch.optim.SGD's update, state kept in double.
void ReferenceSgd(std::vector<double>* param, std::vector<double>* buf,
                  const std::vector<float>& grad, const SgdHyper& h, bool first_step) {
  for (size_t i = 0; i < grad.size(); ++i) {
    double g = grad[i] + double{h.weight_decay} * (*param)[i];
    if (h.momentum != 0.0f) {
      (*buf)[i] = first_step ? g : h.momentum * (*buf)[i] + (1.0 - h.dampening) * g;
      g = h.nesterov ? g + h.momentum * (*buf)[i] : (*buf)[i];
    }
    (*param)[i] -= h.lr * g;
  }
}

TEST_CASE("SgdUpdate over five steps matches a double re-implementation") {
  constexpr int64_t n = 16;
  const SgdHyper hypers[] = {
      {.lr = 0.05f},
      {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.01f},
      {.lr = 0.05f, .momentum = 0.8f, .dampening = 0.1f},
      {.lr = 0.05f, .momentum = 0.9f, .weight_decay = 0.02f, .nesterov = true},
  };
  for (const SgdHyper& hyper : hypers) {
    CAPTURE(hyper.momentum, hyper.dampening, hyper.weight_decay, hyper.nesterov);
    std::mt19937 rng(30);
    std::vector<float> param = RandomVector(rng, n), velocity(n, 0.0f);
    std::vector<double> ref_param(param.begin(), param.end()), ref_buf(n, 0.0);
    for (int step = 0; step < 5; ++step) {
      const std::vector<float> grad = RandomVector(rng, n);
      SgdUpdate(param.data(), velocity.data(), grad.data(), n, hyper, step == 0);
      ReferenceSgd(&ref_param, &ref_buf, grad, hyper, step == 0);
    }
    RequireClose(param, ref_param, "param");
    if (hyper.momentum != 0.0f) RequireClose(velocity, ref_buf, "velocity");
  }
}

// --- Adam and AdamW

TEST_CASE("AdamUpdate's first step moves each parameter by about lr * sign(grad)") {
  // At t = 1 the bias corrections undo the (1 - beta) factors exactly: m_hat = g, v_hat = g^2,
  // so the step is lr * g / (|g| + eps).
  std::vector<float> param = {1.0f, -1.0f}, m = {0.0f, 0.0f}, v = {0.0f, 0.0f};
  const std::vector<float> grad = {0.5f, -2.0f};
  const AdamHyper hyper = {.lr = 1e-2f};
  AdamUpdate(param.data(), m.data(), v.data(), grad.data(), 2, /*t=*/1, hyper);
  // The hyper-parameters are floats: 1 - 0.999f is 0.00099998713..., not 0.001.
  const double lr = hyper.lr, beta1 = hyper.beta1, beta2 = hyper.beta2;
  REQUIRE(m[0] == Approx((1 - beta1) * 0.5));
  REQUIRE(v[0] == Approx((1 - beta2) * 0.25));
  REQUIRE(m[1] == Approx((1 - beta1) * -2.0));
  REQUIRE(v[1] == Approx((1 - beta2) * 4.0));
  REQUIRE(param[0] == Approx(1.0 - lr * 0.5 / (0.5 + 1e-8)).epsilon(1e-6));
  REQUIRE(param[1] == Approx(-1.0 + lr * 2.0 / (2.0 + 1e-8)).epsilon(1e-6));
}

TEST_CASE("AdamUpdate and AdamW apply weight decay differently on the first step") {
  const std::vector<float> grad = {0.5f};
  const float lr = 1e-2f, wd = 0.5f;
  SECTION("Adam: L2 term added to the gradient before the moments") {
    std::vector<float> param = {2.0f}, m = {0.0f}, v = {0.0f};
    AdamUpdate(param.data(), m.data(), v.data(), grad.data(), 1, 1, {.lr = lr, .weight_decay = wd});
    const double g = 0.5 + 0.5 * 2.0;
    REQUIRE(m[0] == Approx((1 - double{0.9f}) * g));
    REQUIRE(param[0] == Approx(2.0 - double{lr} * g / (g + 1e-8)).epsilon(1e-6));
  }
  SECTION("AdamW: param shrunk by 1 - lr * wd, the moments see the raw gradient") {
    std::vector<float> param = {2.0f}, m = {0.0f}, v = {0.0f};
    AdamUpdate(param.data(), m.data(), v.data(), grad.data(), 1, 1,
               {.lr = lr, .weight_decay = wd, .decoupled_weight_decay = true});
    REQUIRE(m[0] == Approx((1 - double{0.9f}) * 0.5));
    const double shrunk = 2.0 * (1.0 - double{lr} * wd);
    REQUIRE(param[0] == Approx(shrunk - double{lr} * 0.5 / (0.5 + 1e-8)).epsilon(1e-6));
  }
}

// A plain double re-implementation of PyTorch's single-tensor Adam / AdamW, state in double.
void ReferenceAdam(std::vector<double>* param, std::vector<double>* m, std::vector<double>* v,
                   const std::vector<float>& grad, int64_t t, const AdamHyper& h) {
  const double lr = h.lr, beta1 = h.beta1, beta2 = h.beta2, eps = h.eps, wd = h.weight_decay;
  for (size_t i = 0; i < grad.size(); ++i) {
    double& p = (*param)[i];
    double g = grad[i];
    if (h.decoupled_weight_decay) {
      p *= 1.0 - lr * wd;
    } else {
      g += wd * p;
    }
    (*m)[i] = beta1 * (*m)[i] + (1.0 - beta1) * g;
    (*v)[i] = beta2 * (*v)[i] + (1.0 - beta2) * g * g;
    const double m_hat = (*m)[i] / (1.0 - std::pow(beta1, t));
    const double v_hat = (*v)[i] / (1.0 - std::pow(beta2, t));
    // PyTorch puts eps outside the bias-corrected root: sqrt(v) / sqrt(bc2) + eps.
    p -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

TEST_CASE("AdamUpdate over six steps matches a double re-implementation") {
  constexpr int64_t n = 16;
  const AdamHyper hypers[] = {
      {.lr = 1e-2f},
      {.lr = 1e-2f, .beta1 = 0.8f, .beta2 = 0.99f, .eps = 1e-6f},
      {.lr = 1e-2f, .weight_decay = 0.1f},
      {.lr = 1e-2f, .weight_decay = 0.1f, .decoupled_weight_decay = true},
  };
  for (const AdamHyper& hyper : hypers) {
    CAPTURE(hyper.beta1, hyper.beta2, hyper.eps, hyper.weight_decay, hyper.decoupled_weight_decay);
    std::mt19937 rng(40);
    std::vector<float> param = RandomVector(rng, n), m(n, 0.0f), v(n, 0.0f);
    std::vector<double> ref_param(param.begin(), param.end()), ref_m(n, 0.0), ref_v(n, 0.0);
    for (int64_t t = 1; t <= 6; ++t) {
      const std::vector<float> grad = RandomVector(rng, n);
      AdamUpdate(param.data(), m.data(), v.data(), grad.data(), n, t, hyper);
      ReferenceAdam(&ref_param, &ref_m, &ref_v, grad, t, hyper);
    }
    RequireClose(param, ref_param, "param");
    RequireClose(m, ref_m, "m");
    RequireClose(v, ref_v, "v");
  }
}

// --- Gradient norm and clipping

TEST_CASE("GradNorm is the L2 norm") {
  const std::vector<float> grad = {3.0f, -4.0f, 0.0f, 12.0f};
  REQUIRE(GradNorm(grad.data(), 4) == 13.0);
  REQUIRE(GradNorm(grad.data(), 0) == 0.0);
}

TEST_CASE("ClipGradNorm leaves gradients below the threshold alone") {
  std::vector<float> grad = {3.0f, -4.0f};  // norm 5
  const std::vector<float> before = grad;
  REQUIRE(ClipGradNorm(grad.data(), 2, GradNorm(grad.data(), 2), 10.0) == 1.0f);
  REQUIRE(grad == before);
  REQUIRE(ClipGradNorm(grad.data(), 2, 5.0, 5.0 + 1e-3) == 1.0f);
  REQUIRE(grad == before);
}

TEST_CASE("ClipGradNorm at exactly max_norm scales by max_norm / (norm + 1e-6), as PyTorch") {
  std::vector<float> grad = {3.0f, -4.0f};  // norm 5
  const float scale = ClipGradNorm(grad.data(), 2, 5.0, 5.0);
  REQUIRE(scale == static_cast<float>(5.0 / (5.0 + 1e-6)));
  REQUIRE(scale < 1.0f);
  REQUIRE(grad[0] == 3.0f * scale);
  REQUIRE(grad[1] == -4.0f * scale);
}

TEST_CASE("ClipGradNorm scales gradients above the threshold to max_norm") {
  std::vector<float> grad = {3.0f, -4.0f, 0.0f, 12.0f};  // norm 13
  const double norm = GradNorm(grad.data(), 4);
  const float scale = ClipGradNorm(grad.data(), 4, norm, 1.0);
  REQUIRE(scale == Approx(1.0 / (13.0 + 1e-6)));
  REQUIRE(grad[0] == Approx(3.0 / 13.0));
  REQUIRE(grad[1] == Approx(-4.0 / 13.0));
  REQUIRE(grad[2] == 0.0f);
  REQUIRE(grad[3] == Approx(12.0 / 13.0));
  REQUIRE(GradNorm(grad.data(), 4) == Approx(1.0).epsilon(1e-6));
}

}  // namespace
}  // namespace forecastd::ref
