#include "engine/serving/model_instance.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/base/status.h"

namespace forecastd {

namespace {

// Forecaster::Forward (and Step, on a slab in host memory) with a workspace of its own.
class CpuModelInstance final : public ModelInstance {
 public:
  CpuModelInstance(std::shared_ptr<const Forecaster> model, Backend* backend,
                   int64_t max_batch_size, std::shared_ptr<std::vector<float>> slab,
                   int64_t max_step_rows)
      : model_(std::move(model)),
        backend_(backend),
        max_batch_size_(max_batch_size),
        slab_(std::move(slab)),
        max_step_rows_(max_step_rows),
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

  absl::Status Step(const int32_t* slots, const uint8_t* zero, const float* x, int64_t rows,
                    float* output) override {
    RETURN_IF_ERROR(CheckStep(rows));
    const int64_t S = model_->StateFloats();
    for (int64_t r = 0; r < rows; ++r) {
      RETURN_IF_ERROR(CheckSlot(slots[r]));
      if (zero[r]) std::fill_n(slab_->data() + int64_t{slots[r]} * S, S, 0.0f);
    }
    return model_->Step(*backend_, output, x, slab_->data(), slots, rows, workspace_,
                        ForwardPlacement{});
  }
  absl::Status ReadState(int32_t slot, float* state) override {
    RETURN_IF_ERROR(CheckStep(1));
    RETURN_IF_ERROR(CheckSlot(slot));
    const int64_t S = model_->StateFloats();
    std::copy_n(slab_->data() + int64_t{slot} * S, S, state);
    return absl::OkStatus();
  }
  absl::Status WriteState(int32_t slot, const float* state) override {
    RETURN_IF_ERROR(CheckStep(1));
    RETURN_IF_ERROR(CheckSlot(slot));
    const int64_t S = model_->StateFloats();
    float* row = slab_->data() + int64_t{slot} * S;
    if (state == nullptr) {
      std::fill_n(row, S, 0.0f);
    } else {
      std::copy_n(state, S, row);
    }
    return absl::OkStatus();
  }

 private:
  absl::Status CheckStep(int64_t rows) const {
    if (slab_ == nullptr) return absl::UnimplementedError("this instance keeps no stream states");
    if (rows < 1 || rows > max_step_rows_) {
      return absl::InvalidArgumentError(
          absl::StrCat("step of ", rows, " ticks; this instance takes 1 to ", max_step_rows_));
    }
    return absl::OkStatus();
  }
  absl::Status CheckSlot(int32_t slot) const {
    const int64_t slots = static_cast<int64_t>(slab_->size()) / model_->StateFloats();
    if (slot < 0 || slot >= slots) {
      return absl::InvalidArgumentError(absl::StrCat("slot ", slot, " outside [0, ", slots, ")"));
    }
    return absl::OkStatus();
  }

  const std::shared_ptr<const Forecaster> model_;
  Backend* const backend_;
  const int64_t max_batch_size_;
  // (state_slots, StateFloats), shared by the version's instances; nullptr without state mode.
  const std::shared_ptr<std::vector<float>> slab_;
  const int64_t max_step_rows_;
  Workspace workspace_;
  std::vector<float> input_;   // (max_batch_size, T * F)
  std::vector<float> output_;  // (max_batch_size, num_outputs)
};

absl::StatusOr<std::shared_ptr<std::vector<float>>> NewHostSlab(
    const Forecaster& model, const ExecutionDevice::InstanceOptions& options) {
  RETURN_IF_ERROR(CheckStateOptions(model, options));
  if (options.state_slots == 0) return nullptr;
  return std::make_shared<std::vector<float>>(
      static_cast<size_t>(options.state_slots * model.StateFloats()), 0.0f);
}

}  // namespace

void ModelInstance::Start(const float* input, int64_t rows, float* output,
                          absl::AnyInvocable<void(absl::Status) &&> finish) {
  std::move(finish)(Run(input, rows, output));
}

absl::Status ModelInstance::Step(const int32_t* /*slots*/, const uint8_t* /*zero*/,
                                 const float* /*x*/, int64_t /*rows*/, float* /*output*/) {
  return absl::UnimplementedError("this instance keeps no stream states");
}
absl::Status ModelInstance::ReadState(int32_t /*slot*/, float* /*state*/) {
  return absl::UnimplementedError("this instance keeps no stream states");
}
absl::Status ModelInstance::WriteState(int32_t /*slot*/, const float* /*state*/) {
  return absl::UnimplementedError("this instance keeps no stream states");
}

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
  ASSIGN_OR_RETURN(std::shared_ptr<std::vector<float>> slab, NewHostSlab(*model, options));
  std::vector<std::unique_ptr<ModelInstance>> instances;
  instances.reserve(static_cast<size_t>(instances_));
  for (int i = 0; i < instances_; ++i) {
    instances.push_back(std::make_unique<CpuModelInstance>(model, backend_, options.max_batch_size,
                                                           slab, options.max_step_rows));
  }
  return instances;
}

absl::Status CheckStateOptions(const Forecaster& model,
                               const ExecutionDevice::InstanceOptions& options) {
  if (options.state_slots == 0) return absl::OkStatus();
  if (model.StateFloats() == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model '", model.config().name(), "' has no state mode; it cannot keep stream states"));
  }
  if (options.state_slots < 0 || options.max_step_rows < 1) {
    return absl::InvalidArgumentError("state_slots must be >= 0 and max_step_rows >= 1");
  }
  return absl::OkStatus();
}

}  // namespace forecastd
