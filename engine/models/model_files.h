// Model files on disk: `<model_dir>/config.json` (ModelConfig as protobuf JSON) and
// `<model_dir>/<version>/model.safetensors` (weights with PyTorch state_dict names), so a
// model trained in PyTorch loads here unchanged and one written here loads into PyTorch.
// Stateless; thread-safe (concurrent writers of the same path must be serialised by the
// caller; each write is atomic on its own).
#ifndef FORECASTD_ENGINE_MODELS_MODEL_FILES_H_
#define FORECASTD_ENGINE_MODELS_MODEL_FILES_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/models/forecaster.h"
#include "forecastd/v1/training.pb.h"

namespace forecastd {

inline constexpr char kModelConfigFile[] = "config.json";
inline constexpr char kWeightsFile[] = "model.safetensors";
// A trained version's v1::VersionLineage, protobuf JSON, beside its weights.
inline constexpr char kLineageFile[] = "lineage.json";

// Copies every parameter from the safetensors file at `path` into `model`. Each parameter
// must be present as F32 with exactly its shape; a missing, misshapen or unexpected tensor
// is an error naming it (a file for another architecture never half-loads). On error the
// model's parameters are unchanged.
absl::Status LoadWeights(const std::string& path, Forecaster& model);

// Writes every parameter, in arena order, atomically (temp file, fsync, rename).
absl::Status SaveWeights(const Forecaster& model, const std::string& path);

// config.json plus the given version's weights.
absl::StatusOr<std::unique_ptr<Forecaster>> LoadForecaster(const std::string& model_dir,
                                                           int64_t version);

// Writes config.json (when absent or different) and `<model_dir>/<version>/model.safetensors`.
absl::Status SaveForecaster(const Forecaster& model, const std::string& model_dir, int64_t version);

// Adds `<model_dir>/<version>/` as a whole: the weights go into a hidden staging directory,
// which is renamed into place only once complete, so a reader (or a restart after a crash at
// any moment) sees the version complete or not at all. Writes config.json first when it is
// absent; when present it must equal the model's config (FAILED_PRECONDITION otherwise: a
// version never changes its model's architecture). ALREADY_EXISTS when the version exists.
// `lineage`, when given, is written into the version as kLineageFile before it appears.
absl::Status PublishVersion(const Forecaster& model, const std::string& model_dir, int64_t version,
                            const v1::VersionLineage* lineage = nullptr);

// The lineage of `<model_dir>/<version>`: NOT_FOUND when the version has none.
absl::StatusOr<v1::VersionLineage> ReadLineage(const std::string& model_dir, int64_t version);

// The versions present in `model_dir`: names of sub-directories that are positive integers,
// ascending. An absent directory has none.
std::vector<int64_t> ListVersions(const std::string& model_dir);

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_MODELS_MODEL_FILES_H_
