// The Triton ModelConfig that describes a forecaster's config to Triton's clients, as
// KServeService's ModelConfig method returns it. Thread-safe: a function of its argument only.
#ifndef FORECASTD_SERVER_TRITON_MODEL_CONFIG_H_
#define FORECASTD_SERVER_TRITON_MODEL_CONFIG_H_

#include "absl/status/statusor.h"
#include "engine/models/model_config.h"
#include "inference/model_config.pb.h"

namespace forecastd {

// The Triton ModelConfig that describes `config` to Triton's clients: the tensors of
// kserve_request.h, max_batch_size, dynamic_batching from BatchingConfig (with its defaults
// applied), the version policy and instance groups. INVALID_ARGUMENT for a config the batcher would
// refuse.
absl::StatusOr<inference::ModelConfig> ToTritonModelConfig(const v1::ModelConfig& config);

}  // namespace forecastd

#endif  // FORECASTD_SERVER_TRITON_MODEL_CONFIG_H_
