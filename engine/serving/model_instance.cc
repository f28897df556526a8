#include "engine/serving/model_instance.h"

#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"

namespace forecastd {

namespace {

// Forecaster::Forward on host memory with a workspace of its own.
class CpuModelInstance final : public ModelInstance {
 public:
  CpuModelInstance(std::shared_ptr<const Forecaster> model, Backend* backend,
                   int64_t max_batch_size)
      : model_(std::move(model)),
        backend_(backend),
        max_batch_size_(max_batch_size),
        input_(static_cast<size_t>(max_batch_size * model_->lookback() * model_->num_features())),
        output_(static_cast<size_t>(max_batch_size * model_->num_outputs())) {}

  absl::Status Run(const float* input, int64_t rows, float* output) override {
    if (rows < 1 || rows > max_batch_size_) {
      return absl::InvalidArgumentError(
          absl::StrCat("batch of ", rows, " rows; this instance takes 1 to ", max_batch_size_));
    }
    return model_->Forward(*backend_, output, input, rows, workspace_);
  }
  float* input_staging() override { return input_.data(); }
  float* output_staging() override { return output_.data(); }

 private:
  const std::shared_ptr<const Forecaster> model_;
  Backend* const backend_;
  const int64_t max_batch_size_;
  Workspace workspace_;
  std::vector<float> input_;   // (max_batch_size, T * F)
  std::vector<float> output_;  // (max_batch_size, num_outputs)
};

}  // namespace

std::vector<int64_t> FixedBatchSizes(const ExecutionDevice::InstanceOptions& options) {
  std::set<int64_t> sizes(options.preferred_batch_sizes.begin(),
                          options.preferred_batch_sizes.end());
  for (int64_t b = 1; b < options.max_batch_size; b *= 2) sizes.insert(b);
  sizes.insert(options.max_batch_size);
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

CpuExecutionDevice::CpuExecutionDevice(Backend* backend, DeviceScheduler* scheduler, int instances)
    : backend_(backend),
      scheduler_(scheduler),
      instances_(instances > 0 ? instances : scheduler->num_workers()) {}

absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CpuExecutionDevice::CreateInstances(
    std::shared_ptr<const Forecaster> model, const InstanceOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateInstances: no model");
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError("CreateInstances: max_batch_size must be >= 1");
  }
  std::vector<std::unique_ptr<ModelInstance>> instances;
  instances.reserve(static_cast<size_t>(instances_));
  for (int i = 0; i < instances_; ++i) {
    instances.push_back(
        std::make_unique<CpuModelInstance>(model, backend_, options.max_batch_size));
  }
  return instances;
}

}  // namespace forecastd
