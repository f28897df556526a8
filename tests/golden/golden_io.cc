#include "tests/golden/golden_io.h"

#include <algorithm>
#include <cmath>

#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "tests/golden/golden_dir.h"
#include "tests/testing/catch.h"

namespace forecastd {

Golden LoadGoldenCase(const std::string& name) {
  const std::string dir = GoldenCaseDir(name);
  Golden g;
  const auto config = ReadModelConfig(dir + "/config.json");
  INFO(config.status().ToString());
  REQUIRE(config.ok());
  auto model = Forecaster::Create(*config);
  INFO(model.status().ToString());
  REQUIRE(model.ok());
  g.model = *std::move(model);
  const absl::Status loaded = LoadWeights(dir + "/model.safetensors", *g.model);
  INFO(loaded.ToString());
  REQUIRE(loaded.ok());
  const auto io = SafetensorsFile::Read(dir + "/io.safetensors");
  REQUIRE(io.ok());
  const TensorInfo* in = io->Find("input").value();
  const TensorInfo* out = io->Find("output").value();
  g.input_shape = in->shape;
  g.input = io->ReadF32("input", in->shape).value();
  g.output_shape = out->shape;
  g.output = io->ReadF32("output", out->shape).value();
  return g;
}

double MaxGoldenError(const std::vector<float>& got, const std::vector<float>& want,
                      size_t* worst) {
  double max_err = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double err =
        std::abs(double{got[i]} - double{want[i]}) / std::max(1.0, std::abs(double{want[i]}));
    if (!(err <= max_err)) {  // also catches NaN
      max_err = std::isnan(err) ? INFINITY : err;
      *worst = i;
    }
  }
  return max_err;
}

}  // namespace forecastd
