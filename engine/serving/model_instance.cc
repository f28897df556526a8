#include "engine/serving/model_instance.h"

#include <algorithm>
#include <set>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {

namespace {

// Forecaster::Forward (and Step, on a slab in host memory) with a workspace of its own.
class CpuModelInstance final : public ModelInstance {
 public:
  CpuModelInstance(std::shared_ptr<const Forecaster> model, Backend* backend,
                   int64_t max_batch_size, std::shared_ptr<std::vector<float>> slab,
                   int64_t max_step_rows, std::string compute)
      : compute_(std::move(compute)),
        model_(std::move(model)),
        backend_(backend),
        max_batch_size_(max_batch_size),
        slab_(std::move(slab)),
        max_step_rows_(max_step_rows),
        input_(static_cast<size_t>(max_batch_size * model_->input_floats())),
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
  std::string compute() const override { return compute_; }
  // A recurrent model's rows go through the backend's time loop, whose tile of rows sets it.
  int64_t efficient_batch_rows() const override {
    const auto& config = model_->config();
    return config.has_lstm() || config.has_gru() ? backend_->recurrent_row_tile() : 1;
  }

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

  const std::string compute_;
  const std::shared_ptr<const Forecaster> model_;
  Backend* const backend_;
  const int64_t max_batch_size_;
  // (state_slots, StateFloats), shared by the version's instances; nullptr without state mode.
  const std::shared_ptr<std::vector<float>> slab_;
  const int64_t max_step_rows_;
  Workspace workspace_;
  std::vector<float> input_;   // (max_batch_size, input_floats)
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

absl::Status ModelInstance::RunWithDeviceRows(const float* /*input*/, int64_t /*rows*/,
                                              float* /*output*/, const DeviceRowsIo& /*device*/) {
  return absl::UnimplementedError("this instance does not read device memory");
}

void ModelInstance::StartWithDeviceRows(const float* input, int64_t rows, float* output,
                                        const DeviceRowsIo& device,
                                        absl::AnyInvocable<void(absl::Status) &&> finish) {
  std::move(finish)(RunWithDeviceRows(input, rows, output, device));
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

std::string PrecisionName(v1::Precision precision) {
  if (precision == v1::PRECISION_UNSPECIFIED) return "fp32";
  return absl::AsciiStrToLower(absl::StripPrefix(v1::Precision_Name(precision), "PRECISION_"));
}

std::vector<int64_t> FixedBatchSizes(const ExecutionDevice::InstanceOptions& options) {
  std::set<int64_t> sizes(options.preferred_batch_sizes.begin(),
                          options.preferred_batch_sizes.end());
  for (int64_t b = 1; b < options.max_batch_size; b *= 2) sizes.insert(b);
  sizes.insert(options.max_batch_size);
  return std::vector<int64_t>(sizes.begin(), sizes.end());
}

CpuExecutionDevice::CpuExecutionDevice(Backend* backend, DeviceScheduler* scheduler, int instances,
                                       Backend* bf16_backend)
    : backend_(backend),
      scheduler_(scheduler),
      instances_(instances > 0 ? instances : scheduler->num_workers()),
      bf16_backend_(bf16_backend) {}

absl::StatusOr<std::vector<std::unique_ptr<ModelInstance>>> CpuExecutionDevice::CreateInstances(
    std::shared_ptr<const Forecaster> model, const InstanceOptions& options) {
  if (model == nullptr) return absl::InvalidArgumentError("CreateInstances: no model");
  if (options.max_batch_size < 1) {
    return absl::InvalidArgumentError("CreateInstances: max_batch_size must be >= 1");
  }
  ASSIGN_OR_RETURN(std::shared_ptr<std::vector<float>> slab, NewHostSlab(*model, options));
  const v1::Precision precision = model->config().precision();
  Backend* backend = backend_;
  std::string compute = backend_->compute();
  if (precision == v1::PRECISION_BF16 && bf16_backend_ != nullptr) {
    backend = bf16_backend_;
    compute = bf16_backend_->compute();
  } else if (precision != v1::PRECISION_UNSPECIFIED && precision != v1::PRECISION_FP32) {
    absl::StrAppend(&compute, " (", PrecisionName(precision), " asked: ",
                    precision == v1::PRECISION_BF16 ? "bf16 needs a CPU with AVX512-BF16 or AMX"
                                                    : "the CPU computes it in fp32",
                    ")");
    spdlog::warn("model '{}' on cpu: {}", model->config().name(), compute);
  }
  std::vector<std::unique_ptr<ModelInstance>> instances;
  instances.reserve(static_cast<size_t>(instances_));
  for (int i = 0; i < instances_; ++i) {
    instances.push_back(std::make_unique<CpuModelInstance>(model, backend, options.max_batch_size,
                                                           slab, options.max_step_rows, compute));
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
