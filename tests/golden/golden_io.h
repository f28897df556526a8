// Reading one golden case (a folder make_golden.py writes: config.json, model.safetensors,
// io.safetensors) the way the server loads a model, and the error measure the forecast checks
// use. Shared by golden_test (CPU backends) and golden_gpu_test (the GPU serving path). A case
// that cannot be read fails the calling test. Thread-compatible.
#ifndef FORECASTD_TESTS_GOLDEN_GOLDEN_IO_H_
#define FORECASTD_TESTS_GOLDEN_GOLDEN_IO_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "engine/models/forecaster.h"

namespace forecastd {

struct Golden {
  std::unique_ptr<Forecaster> model;
  std::vector<int64_t> input_shape;  // (B, T, F)
  std::vector<float> input;
  std::vector<int64_t> output_shape;  // (B, P, targets[, Q])
  std::vector<float> output;
};

// The case `name` under $FORECASTD_GOLDEN_DIR (golden_dir.h).
Golden LoadGoldenCase(const std::string& name);

// max |got - want| / max(|want|, 1), and in *worst the index where it is reached; infinite
// when any element is NaN.
double MaxGoldenError(const std::vector<float>& got, const std::vector<float>& want, size_t* worst);

}  // namespace forecastd

#endif  // FORECASTD_TESTS_GOLDEN_GOLDEN_IO_H_
