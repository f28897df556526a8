// The on-disk model store, read side: which model directories a repository holds, their
// versions, their validated configs, and a version's weights loaded into a Forecaster.
//   <root>/<name>/config.json                    ModelConfig; its `name` must be <name>
//   <root>/<name>/<version>/model.safetensors    one directory per positive version
// Hidden entries (a leading '.') and plain files are not models. Writers are
// models/model_files.h (SaveForecaster, PublishVersion). ModelRegistry is the caller.
// Stateless apart from the root path; thread-safe.
#ifndef FORECASTD_ENGINE_SERVING_MODEL_REPOSITORY_H_
#define FORECASTD_ENGINE_SERVING_MODEL_REPOSITORY_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"

namespace forecastd {

// INVALID_ARGUMENT unless `name` can name a model directory: non-empty, at most 255 bytes,
// no '/', no NUL, not hidden (no leading '.'). Names come from admin requests, so this is what
// keeps them inside the repository.
absl::Status ValidateModelName(absl::string_view name);

// The version a config asks to serve among `versions` (ascending): config.serving_version when
// set (NOT_FOUND when it is not present), otherwise the highest present (NOT_FOUND when there
// is none).
absl::StatusOr<int64_t> ChooseServingVersion(const ModelConfig& config,
                                             const std::vector<int64_t>& versions);

class ModelRepository {
 public:
  explicit ModelRepository(std::string root) : root_(std::move(root)) {}

  const std::string& root() const { return root_; }
  std::string ModelDir(absl::string_view name) const;

  // The models present: names of non-hidden directories holding config.json, sorted.
  // NOT_FOUND when the root is missing or not a directory.
  absl::StatusOr<std::vector<std::string>> ListModels() const;
  // True when `<root>/<name>/config.json` exists (`name` must be valid).
  bool HasModel(absl::string_view name) const;
  // The model's versions, ascending; none for an absent model.
  std::vector<int64_t> ListVersions(absl::string_view name) const;

  // Reads and validates `<name>/config.json`. Errors name the file; INVALID_ARGUMENT when
  // the config's `name` is not the directory's; PERMISSION_DENIED when the model directory or
  // its config is a symlink leading outside the repository.
  absl::StatusOr<ModelConfig> ReadConfig(absl::string_view name) const;

  // A Forecaster for `config` (as ReadConfig returned it) with version `version`'s weights.
  // Errors name the model, the version and the file; PERMISSION_DENIED for weights that a
  // symlink places outside the repository.
  absl::StatusOr<std::unique_ptr<Forecaster>> LoadVersion(const ModelConfig& config,
                                                          int64_t version) const;

 private:
  // `<root>/<name>/<relative>`, after checking that with symlinks resolved it stays inside
  // the repository (symlinks within it, say one version to another, are fine).
  absl::StatusOr<std::string> PathInside(absl::string_view name, absl::string_view relative) const;

  const std::string root_;
};

}  // namespace forecastd

#endif  // FORECASTD_ENGINE_SERVING_MODEL_REPOSITORY_H_
