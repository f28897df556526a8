// The training settings a golden training file (train.safetensors, tbptt.safetensors) names in
// its metadata, as forecastd's loss and optimiser, and the error measure training goldens are
// compared with. Shared by train_golden_test and tbptt_golden_test. A missing or malformed
// setting fails the calling test. Thread-compatible.
#ifndef FORECASTD_TESTS_GOLDEN_GOLDEN_TRAINING_H_
#define FORECASTD_TESTS_GOLDEN_GOLDEN_TRAINING_H_

#include <memory>
#include <string>

#include "engine/models/model_config.h"
#include "engine/models/parameters.h"
#include "engine/safetensors.h"
#include "engine/train/loss.h"
#include "engine/train/optimizer.h"

namespace forecastd {

// The training goldens' tolerance (tests/golden/README.md).
inline constexpr double kTrainGoldenTolerance = 1e-4;

// The metadata entry `key`, as written, and parsed as a number.
std::string GoldenText(const SafetensorsFile& file, const std::string& key);
float GoldenNumber(const SafetensorsFile& file, const std::string& key);

// The loss (`loss`, `huber_delta`) and the optimiser (`optimizer`, `lr`, `beta1`, `beta2`,
// `eps`, `weight_decay`, `momentum`, `nesterov`, `clip_grad_norm`) the metadata names.
TrainingLoss GoldenLoss(const SafetensorsFile& file, const ModelConfig& model);
std::unique_ptr<Optimizer> GoldenOptimizer(const SafetensorsFile& file, ParameterArena& params);

// |got - want| / max(|want|, 1).
double GoldenError(double got, double want);

}  // namespace forecastd

#endif  // FORECASTD_TESTS_GOLDEN_GOLDEN_TRAINING_H_
