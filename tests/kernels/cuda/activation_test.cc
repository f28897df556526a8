// Needs a GPU: the element-wise CUDA kernels (kernels/cuda/activation.h) against kernels/ref on
// seeded random inputs, over sizes around the vector width and block size, on 16-byte aligned
// and misaligned pointers (the two code paths), with aliased outputs where the API allows.
#include "kernels/cuda/activation.h"

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "kernels/ref/activation.h"
#include "tests/kernels/cuda/device_compare.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using testing::DeviceArray;
using testing::ExpectEqual;
using testing::ExpectNear;
using testing::NanVector;
using testing::RandomVector;

const std::vector<int64_t> kSizes = {1, 3, 4, 257, 1000, 4099, (1 << 20) + 3};

// The GELU kernels compute in float with erfcf/expf (a few ulp each) where the reference
// computes in double: relative error a few 1e-7. The backward has a zero of gelu' near
// x = -0.75, where the relative error of a difference of O(0.1) terms is unbounded, so an
// absolute 1e-6 (dout is at most 1) covers it.
constexpr double kGeluAtol = 1e-6;
constexpr double kGeluRtol = 1e-5;

// A device copy of `host` that starts `offset` floats into its buffer, so offset 1 gives a
// pointer that is not 16-byte aligned.
struct OffsetArray {
  OffsetArray(const std::vector<float>& host, int offset)
      : offset(offset), buffer([&] {
          std::vector<float> padded(static_cast<size_t>(offset), 0.0f);
          padded.insert(padded.end(), host.begin(), host.end());
          return padded;
        }()) {}
  float* get() const { return buffer.get() + offset; }
  std::vector<float> Download() const {
    std::vector<float> all = buffer.Download();
    return std::vector<float>(all.begin() + offset, all.end());
  }
  int offset;
  DeviceArray buffer;
};

std::vector<float> GeluInputs(std::mt19937& rng, int64_t n) {
  std::vector<float> x = RandomVector(rng, n, -5.0f, 5.0f);
  if (n > 2) x[1] = 0.0f;
  return x;
}

TEST_CASE("GeluForward and GeluBackward match the reference (erf and tanh forms)", "[gpu]") {
  for (ref::GeluForm form : {ref::GeluForm::kErf, ref::GeluForm::kTanh}) {
    for (int offset : {0, 1}) {
      for (int64_t n : kSizes) {
        const std::string where = std::string(form == ref::GeluForm::kErf ? "erf" : "tanh") +
                                  " offset " + std::to_string(offset) + " n " + std::to_string(n);
        CAPTURE(where);
        std::mt19937 rng(static_cast<unsigned>(n * 2 + offset));
        const std::vector<float> inp = GeluInputs(rng, n);
        const std::vector<float> dout = RandomVector(rng, n);

        std::vector<float> want(inp.size()), dwant(inp.size());
        ref::GeluForward(want.data(), inp.data(), n, form);
        ref::GeluBackward(dwant.data(), dout.data(), inp.data(), n, form);

        OffsetArray d_inp(inp, offset), d_dout(dout, offset);
        OffsetArray d_out(NanVector(n), offset), d_dinp(NanVector(n), offset);
        REQUIRE_OK(cuda::GeluForward(d_out.get(), d_inp.get(), n, form, nullptr));
        REQUIRE_OK(cuda::GeluBackward(d_dinp.get(), d_dout.get(), d_inp.get(), n, form, nullptr));
        ExpectNear("gelu", d_out.Download(), want, {n}, kGeluAtol, kGeluRtol);
        ExpectNear("dinp", d_dinp.Download(), dwant, {n}, kGeluAtol, kGeluRtol);
      }
    }
  }
}

TEST_CASE("GELU works in place (out aliases inp, dinp aliases dout)", "[gpu]") {
  constexpr int64_t n = 1031;
  for (ref::GeluForm form : {ref::GeluForm::kErf, ref::GeluForm::kTanh}) {
    std::mt19937 rng(7);
    const std::vector<float> inp = GeluInputs(rng, n);
    const std::vector<float> dout = RandomVector(rng, n);
    std::vector<float> want(n), dwant(n);
    ref::GeluForward(want.data(), inp.data(), n, form);
    ref::GeluBackward(dwant.data(), dout.data(), inp.data(), n, form);

    DeviceArray d_x(inp), d_inp(inp), d_dx(dout);
    REQUIRE_OK(cuda::GeluForward(d_x.get(), d_x.get(), n, form, nullptr));
    REQUIRE_OK(cuda::GeluBackward(d_dx.get(), d_dx.get(), d_inp.get(), n, form, nullptr));
    ExpectNear("gelu in place", d_x.Download(), want, {n}, kGeluAtol, kGeluRtol);
    ExpectNear("dinp in place", d_dx.Download(), dwant, {n}, kGeluAtol, kGeluRtol);
  }
}

TEST_CASE("ReluForward and ReluBackward match the reference exactly, zeros included", "[gpu]") {
  for (int offset : {0, 1}) {
    for (int64_t n : kSizes) {
      CAPTURE(offset, n);
      std::mt19937 rng(static_cast<unsigned>(100 + n + offset));
      std::vector<float> inp = RandomVector(rng, n);
      for (int64_t i = 0; i < n; i += 17) inp[i] = 0.0f;  // relu'(0) = 0, as PyTorch
      if (n > 5) inp[5] = -0.0f;
      const std::vector<float> dout = RandomVector(rng, n);
      std::vector<float> want(n), dwant(n);
      ref::ReluForward(want.data(), inp.data(), n);
      ref::ReluBackward(dwant.data(), dout.data(), inp.data(), n);

      OffsetArray d_inp(inp, offset), d_dout(dout, offset);
      OffsetArray d_out(NanVector(n), offset), d_dinp(NanVector(n), offset);
      REQUIRE_OK(cuda::ReluForward(d_out.get(), d_inp.get(), n, nullptr));
      REQUIRE_OK(cuda::ReluBackward(d_dinp.get(), d_dout.get(), d_inp.get(), n, nullptr));
      ExpectEqual("relu", d_out.Download(), want, {n});
      ExpectEqual("dinp", d_dinp.Download(), dwant, {n});
    }
  }
}

TEST_CASE("ResidualForward, Scale and MultiplyInto are exact, aliased or not", "[gpu]") {
  for (int offset : {0, 1}) {
    for (int64_t n : kSizes) {
      CAPTURE(offset, n);
      std::mt19937 rng(static_cast<unsigned>(200 + n + offset));
      const std::vector<float> a = RandomVector(rng, n), b = RandomVector(rng, n);
      constexpr float kFactor = 1.0f / 0.9f;  // a dropout scale
      std::vector<float> sum(n), scaled(n), product(n);
      ref::ResidualForward(sum.data(), a.data(), b.data(), n);
      for (int64_t i = 0; i < n; ++i) {
        scaled[i] = a[i] * kFactor;
        product[i] = a[i] * b[i];
      }

      OffsetArray d_a(a, offset), d_b(b, offset), d_out(NanVector(n), offset);
      REQUIRE_OK(cuda::ResidualForward(d_out.get(), d_a.get(), d_b.get(), n, nullptr));
      ExpectEqual("residual", d_out.Download(), sum, {n});
      REQUIRE_OK(cuda::MultiplyInto(d_out.get(), d_a.get(), d_b.get(), n, nullptr));
      ExpectEqual("multiply", d_out.Download(), product, {n});

      OffsetArray d_acc(a, offset);  // out aliases a
      REQUIRE_OK(cuda::ResidualForward(d_acc.get(), d_acc.get(), d_b.get(), n, nullptr));
      ExpectEqual("residual in place", d_acc.Download(), sum, {n});

      OffsetArray d_x(a, offset);
      REQUIRE_OK(cuda::Scale(d_x.get(), n, kFactor, nullptr));
      ExpectEqual("scale", d_x.Download(), scaled, {n});
      OffsetArray d_m(b, offset);  // out aliases b
      REQUIRE_OK(cuda::MultiplyInto(d_m.get(), d_a.get(), d_m.get(), n, nullptr));
      ExpectEqual("multiply in place", d_m.Download(), product, {n});
    }
  }
}

TEST_CASE("Element-wise launchers reject bad sizes and null pointers", "[gpu]") {
  const auto kInvalid = absl::StatusCode::kInvalidArgument;
  DeviceArray d(std::vector<float>(4, 1.0f));
  CHECK(cuda::ReluForward(d.get(), d.get(), -1, nullptr).code() == kInvalid);
  CHECK(cuda::ReluForward(nullptr, d.get(), 4, nullptr).code() == kInvalid);
  CHECK(cuda::GeluBackward(d.get(), nullptr, d.get(), 4, ref::GeluForm::kErf, nullptr).code() ==
        kInvalid);
  CHECK(cuda::Scale(nullptr, 0, 2.0f, nullptr).ok());
  CHECK(cuda::MultiplyInto(d.get(), d.get(), d.get(), -3, nullptr).code() == kInvalid);
}

}  // namespace
}  // namespace forecastd
