// Needs a GPU. Parity with PyTorch on the GPU, through the serving path: every golden case
// (tests/golden/, written by make_golden.py) is loaded as the server loads it, made into a CUDA
// model instance (weights uploaded, a CUDA graph captured at the case's batch size, fp32) and
// its forecast must match PyTorch's to 1e-5, the CPU backends' tolerance (golden_test).
#include <cmath>
#include <cstdio>
#include <memory>
#include <vector>

#include "engine/serving/cuda_execution_device.h"
#include "tests/golden/golden_cases.h"
#include "tests/golden/golden_io.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

constexpr double kTolerance = 1e-5;

TEST_CASE("Forecasts match PyTorch on the GPU, through GPU model instances", "[gpu][golden]") {
  CudaExecutionDevice::Options options;
  options.instances_per_model = 1;
  options.workspace_bytes_per_instance = int64_t{4} << 20;
  absl::StatusOr<std::unique_ptr<CudaExecutionDevice>> device =
      CudaExecutionDevice::Create(options);
  INFO(device.status().ToString());
  REQUIRE(device.ok());
  for (const char* name : kGoldenCases) {
    Golden g = LoadGoldenCase(name);
    const int64_t B = g.input_shape[0];
    const std::shared_ptr<const Forecaster> model = std::move(g.model);
    ExecutionDevice::InstanceOptions instance_options;
    instance_options.max_batch_size = B;
    absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> instances =
        (*device)->CreateInstances(model, instance_options);
    INFO(name << ": " << instances.status().ToString());
    REQUIRE(instances.ok());
    std::vector<float> got(g.output.size(), NAN);
    const absl::Status run = (*instances)[0]->Run(g.input.data(), B, got.data());
    INFO(run.ToString());
    REQUIRE(run.ok());
    size_t worst = 0;
    const double err = MaxGoldenError(got, g.output, &worst);
    std::printf("%-32s B=%lld  max err %.2e\n", name, static_cast<long long>(B), err);
    CAPTURE(name, err, worst, got[worst], g.output[worst]);
    CHECK(err <= kTolerance);
  }
}

}  // namespace
}  // namespace forecastd
