#include "engine/models/model_files.h"

#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "engine/safetensors.h"
#include "kernels/base/status.h"
#include "kernels/base/version.h"

namespace forecastd {
namespace {

std::string VersionDir(const std::string& model_dir, int64_t version) {
  return absl::StrCat(model_dir, "/", version);
}

}  // namespace

absl::Status LoadWeights(const std::string& path, Forecaster& model) {
  ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Read(path));
  const ParameterArena& arena = model.parameters();
  std::set<std::string> expected;
  for (const ParameterSpec& spec : arena.specs()) expected.insert(spec.name);
  std::vector<std::string> unexpected;
  for (const auto& [name, info] : file.tensors()) {
    if (!expected.count(name)) unexpected.push_back(name);
  }
  if (!unexpected.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": tensors that model '", model.config().name(), "' does not have: ",
                     absl::StrJoin(unexpected, ", "), " (is the file for another architecture?)"));
  }
  // Stage into a copy so a bad file leaves the model as it was.
  std::vector<float> staged(static_cast<size_t>(arena.size()));
  for (const ParameterSpec& spec : arena.specs()) {
    RETURN_IF_ERROR(
        file.CopyF32(spec.name, spec.shape,
                     absl::MakeSpan(staged.data() + spec.offset, static_cast<size_t>(spec.numel))));
  }
  std::copy(staged.begin(), staged.end(), model.parameters().data());
  return absl::OkStatus();
}

absl::Status SaveWeights(const Forecaster& model, const std::string& path) {
  const ParameterArena& arena = model.parameters();
  std::vector<NamedTensor> tensors;
  for (const ParameterSpec& spec : arena.specs()) {
    tensors.push_back(
        {spec.name, spec.shape,
         absl::MakeConstSpan(arena.data() + spec.offset, static_cast<size_t>(spec.numel))});
  }
  return WriteSafetensors(path, tensors,
                          {{"format", "pt"},
                           {"generator", absl::StrCat("forecastd ", kForecastdVersion)},
                           {"model", model.config().name()}});
}

absl::StatusOr<std::unique_ptr<Forecaster>> LoadForecaster(const std::string& model_dir,
                                                           int64_t version) {
  ASSIGN_OR_RETURN(const ModelConfig config,
                   ReadModelConfig(absl::StrCat(model_dir, "/", kModelConfigFile)));
  ASSIGN_OR_RETURN(std::unique_ptr<Forecaster> model, Forecaster::Create(config));
  RETURN_IF_ERROR(
      LoadWeights(absl::StrCat(VersionDir(model_dir, version), "/", kWeightsFile), *model));
  return model;
}

absl::Status SaveForecaster(const Forecaster& model, const std::string& model_dir,
                            int64_t version) {
  const std::string dir = VersionDir(model_dir, version);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("cannot create ", dir, ": ", error.message()));
  }
  ASSIGN_OR_RETURN(const std::string json, ModelConfigToJson(model.config()));
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(model_dir, "/", kModelConfigFile), json));
  return SaveWeights(model, absl::StrCat(dir, "/", kWeightsFile));
}

}  // namespace forecastd
