// Parity with PyTorch: every case under tests/golden/ (written by make_golden.py) is loaded
// the way the server loads a model and run on every CPU backend; the forecast must match
// PyTorch's to 1e-5 (|got - want| / max(|want|, 1)). Then the model is saved by forecastd
// and loaded back, which must give bit-identical parameters and forecasts; and a model written
// by forecastd, with forecastd's forecast, is checked by make_golden.py --verify in PyTorch.
#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "tests/golden/golden_cases.h"
#include "tests/golden/golden_dir.h"
#include "tests/golden/golden_io.h"
#include "tests/testing/catch.h"
#include "tests/testing/process.h"

namespace forecastd {
namespace {

constexpr double kTolerance = 1e-5;

std::vector<std::unique_ptr<Backend>> CpuBackends() {
  std::vector<std::unique_ptr<Backend>> backends;
  backends.push_back(std::make_unique<ReferenceBackend>());
  auto dnnl = DnnlBackend::Create({});
  REQUIRE(dnnl.ok());
  backends.push_back(*std::move(dnnl));
  return backends;
}

std::vector<float> Run(const Golden& g, Backend& backend) {
  const int64_t B = g.input_shape[0];
  std::vector<float> got(g.output.size(), NAN);
  Workspace workspace;
  const absl::Status s = g.model->Forward(backend, got.data(), g.input.data(), B, workspace);
  INFO(s.ToString());
  REQUIRE(s.ok());
  return got;
}

TEST_CASE("Forecasts match PyTorch on every CPU backend", "[golden]") {
  auto backends = CpuBackends();
  for (const char* name : kGoldenCases) {
    const Golden g = LoadGoldenCase(name);
    for (auto& backend : backends) {
      const std::vector<float> got = Run(g, *backend);
      size_t worst = 0;
      const double err = MaxGoldenError(got, g.output, &worst);
      CAPTURE(name, backend->name(), err, worst, got[worst], g.output[worst]);
      REQUIRE(err <= kTolerance);
    }
  }
}

TEST_CASE("A model saved by forecastd loads back bit-identical", "[golden]") {
  testing::TempDir dir;
  ReferenceBackend backend;
  for (const char* name : kGoldenCases) {
    CAPTURE(name);
    const Golden g = LoadGoldenCase(name);
    const std::string model_dir = absl::StrCat(dir.path(), "/", name);
    const absl::Status saved = SaveForecaster(*g.model, model_dir, 3);
    INFO(saved.ToString());
    REQUIRE(saved.ok());
    auto loaded = LoadForecaster(model_dir, 3);
    INFO(loaded.status().ToString());
    REQUIRE(loaded.ok());
    REQUIRE((*loaded)->config().SerializeAsString() == g.model->config().SerializeAsString());
    const ParameterArena& a = g.model->parameters();
    const ParameterArena& b = (*loaded)->parameters();
    REQUIRE(a.size() == b.size());
    REQUIRE(std::equal(a.data(), a.data() + a.size(), b.data()));

    Golden reloaded{*std::move(loaded), g.input_shape, g.input, g.output_shape, g.output};
    REQUIRE(Run(reloaded, backend) == Run(g, backend));
  }
}

TEST_CASE("A model written by forecastd loads into PyTorch and gives forecastd's forecast",
          "[golden]") {
  testing::TempDir dir;
  auto backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  std::vector<std::string> argv = {FORECASTD_TEST_PYTHON, GoldenDir() + "/make_golden.py",
                                   "--verify"};
  for (const char* name : kGoldenCases) {
    CAPTURE(name);
    Golden g = LoadGoldenCase(name);
    // New weights, so the forecast PyTorch must reproduce is forecastd's alone.
    ParameterArena& params = g.model->parameters();
    for (int64_t i = 0; i < params.size(); ++i) {
      params.data()[i] = params.data()[i] * 0.9f + 0.01f * static_cast<float>(i % 7 - 3);
    }
    const std::vector<float> forecast = Run(g, **backend);
    size_t worst = 0;
    REQUIRE(MaxGoldenError(forecast, g.output, &worst) > 100 * kTolerance);

    const std::string model_dir = absl::StrCat(dir.path(), "/", name);
    const absl::Status saved = SaveForecaster(*g.model, model_dir, 1);
    INFO(saved.ToString());
    REQUIRE(saved.ok());
    const absl::Status io = WriteSafetensors(
        absl::StrCat(model_dir, "/1/io.safetensors"),
        {{"input", g.input_shape, g.input}, {"output", g.output_shape, forecast}}, {});
    INFO(io.ToString());
    REQUIRE(io.ok());
    argv.push_back(absl::StrCat(model_dir, "/1"));
  }
  const auto result = testing::Run(argv, absl::Minutes(5));
  INFO(result.status().ToString());
  REQUIRE(result.ok());
  INFO(result->output);
  REQUIRE(result->exit_code == 0);
  REQUIRE(std::count(result->output.begin(), result->output.end(), '\n') >=
          static_cast<std::ptrdiff_t>(std::size(kGoldenCases)));
}

TEST_CASE("Weights for another architecture are refused by name", "[golden]") {
  const Golden lstm = LoadGoldenCase("lstm_uni_l1");
  const Golden gru = LoadGoldenCase("gru_uni_l1");
  const std::vector<float> before(
      lstm.model->parameters().data(),
      lstm.model->parameters().data() + lstm.model->parameters().size());
  // Same names, GRU shapes (3H rows instead of 4H).
  const absl::Status s =
      LoadWeights(GoldenCaseDir("gru_uni_l1") + "/model.safetensors", *lstm.model);
  CAPTURE(s.ToString());
  REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(s.message()).find("rnn.") != std::string::npos);
  // Nothing was half-loaded.
  REQUIRE(std::equal(before.begin(), before.end(), lstm.model->parameters().data()));

  const absl::Status t =
      LoadWeights(GoldenCaseDir("transformer_postln_gelu") + "/model.safetensors", *gru.model);
  CAPTURE(t.ToString());
  REQUIRE(t.code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(std::string(t.message()).find("does not have: encoder.layers.0.") != std::string::npos);
}

}  // namespace
}  // namespace forecastd
