#include "engine/serving/model_repository.h"

#include <algorithm>
#include <filesystem>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "engine/models/model_files.h"
#include "kernels/base/status.h"

namespace forecastd {

absl::Status ValidateModelName(absl::string_view name) {
  if (name.empty()) return absl::InvalidArgumentError("model name is empty");
  if (name.size() > 255) {
    return absl::InvalidArgumentError(
        absl::StrCat("model name of ", name.size(), " bytes; at most 255"));
  }
  if (name.front() == '.' || name.find('/') != absl::string_view::npos ||
      name.find('\0') != absl::string_view::npos) {
    return absl::InvalidArgumentError(absl::StrCat(
        "model name '", name, "' is not a directory name (no '/', no NUL, no leading '.')"));
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> ChooseServingVersion(const ModelConfig& config,
                                             const std::vector<int64_t>& versions) {
  if (versions.empty()) {
    return absl::NotFoundError(absl::StrCat("model '", config.name(), "' has no versions"));
  }
  if (config.serving_version() <= 0) return versions.back();
  if (!std::binary_search(versions.begin(), versions.end(), config.serving_version())) {
    return absl::NotFoundError(
        absl::StrCat("model '", config.name(), "': serving_version ", config.serving_version(),
                     " is not in the repository (versions: ", absl::StrJoin(versions, ", "), ")"));
  }
  return config.serving_version();
}

std::string ModelRepository::ModelDir(absl::string_view name) const {
  return absl::StrCat(root_, "/", name);
}

absl::StatusOr<std::vector<std::string>> ModelRepository::ListModels() const {
  std::error_code error;
  if (!std::filesystem::is_directory(root_, error)) {
    return absl::NotFoundError(
        absl::StrCat("model repository ", root_, " is not a directory",
                     error ? absl::StrCat(": ", error.message()) : std::string()));
  }
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(root_, error)) {
    const std::string name = entry.path().filename().string();
    if (!ValidateModelName(name).ok()) continue;
    std::error_code entry_error;
    if (entry.is_directory(entry_error) && HasModel(name)) names.push_back(name);
  }
  if (error) {
    return absl::UnavailableError(
        absl::StrCat("cannot list model repository ", root_, ": ", error.message()));
  }
  std::sort(names.begin(), names.end());
  return names;
}

bool ModelRepository::HasModel(absl::string_view name) const {
  std::error_code error;
  return std::filesystem::is_regular_file(absl::StrCat(ModelDir(name), "/", kModelConfigFile),
                                          error);
}

std::vector<int64_t> ModelRepository::ListVersions(absl::string_view name) const {
  return forecastd::ListVersions(ModelDir(name));
}

absl::StatusOr<std::string> ModelRepository::PathInside(absl::string_view name,
                                                        absl::string_view relative) const {
  RETURN_IF_ERROR(ValidateModelName(name));
  const std::string path = absl::StrCat(ModelDir(name), "/", relative);
  absl::StatusOr<std::string> resolved = ResolveInside(root_, path);
  if (!resolved.ok()) {
    return absl::Status(resolved.status().code(),
                        absl::StrCat("model '", name, "': ", resolved.status().message()));
  }
  return path;
}

absl::StatusOr<ModelConfig> ModelRepository::ReadConfig(absl::string_view name) const {
  ASSIGN_OR_RETURN(const std::string path, PathInside(name, kModelConfigFile));
  ASSIGN_OR_RETURN(ModelConfig config, ReadModelConfig(path));
  if (config.name() != name) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": name is '", config.name(),
                                                   "' but the model's directory is '", name,
                                                   "'; they must be equal"));
  }
  if (absl::Status status = ValidateModelConfig(config); !status.ok()) {
    return WithContext(status, path);
  }
  return config;
}

absl::StatusOr<std::unique_ptr<Forecaster>> ModelRepository::LoadVersion(const ModelConfig& config,
                                                                         int64_t version) const {
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, Forecaster::Create(config));
  absl::StatusOr<std::string> path =
      PathInside(config.name(), absl::StrCat(version, "/", kWeightsFile));
  absl::Status status = path.status();
  if (status.ok()) status = LoadWeights(*path, *model);
  if (!status.ok()) {
    return absl::Status(status.code(), absl::StrCat("model '", config.name(), "' version ", version,
                                                    ": ", status.message()));
  }
  return model;
}

}  // namespace forecastd
