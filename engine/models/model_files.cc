#include "engine/models/model_files.h"

#include <algorithm>
#include <filesystem>
#include <map>
#include <set>
#include <system_error>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "engine/file_io.h"
#include "engine/safetensors.h"
#include "google/protobuf/util/json_util.h"
#include "google/protobuf/util/message_differencer.h"
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
  RETURN_IF_ERROR(CreateDirectories(dir));
  ASSIGN_OR_RETURN(const std::string json, ModelConfigToJson(model.config()));
  RETURN_IF_ERROR(WriteFileAtomically(absl::StrCat(model_dir, "/", kModelConfigFile), json));
  return SaveWeights(model, absl::StrCat(dir, "/", kWeightsFile));
}

absl::Status PublishVersion(const Forecaster& model, const std::string& model_dir, int64_t version,
                            const v1::VersionLineage* lineage) {
  if (version <= 0) return absl::InvalidArgumentError(absl::StrCat("version ", version, " <= 0"));
  RETURN_IF_ERROR(CreateDirectories(model_dir));
  std::error_code error;
  const std::string target = VersionDir(model_dir, version);
  if (std::filesystem::exists(target, error)) {
    return absl::AlreadyExistsError(absl::StrCat(target, " already exists"));
  }
  const std::string config_path = absl::StrCat(model_dir, "/", kModelConfigFile);
  ASSIGN_OR_RETURN(const std::string json, ModelConfigToJson(model.config()));
  if (std::filesystem::exists(config_path, error)) {
    ASSIGN_OR_RETURN(const ModelConfig existing, ReadModelConfig(config_path));
    if (!google::protobuf::util::MessageDifferencer::Equals(existing, model.config())) {
      return absl::FailedPreconditionError(
          absl::StrCat(config_path, " describes another configuration than the model being ",
                       "published; a new version cannot change its model's architecture"));
    }
  } else {
    RETURN_IF_ERROR(WriteFileAtomically(config_path, json));
  }
  ASSIGN_OR_RETURN(const std::string staging,
                   MakeStagingDirectory(model_dir, absl::StrCat(version, ".staging")));
  absl::Status status = SaveWeights(model, absl::StrCat(staging, "/", kWeightsFile));
  if (status.ok() && lineage != nullptr) {
    std::string text;
    google::protobuf::util::JsonPrintOptions print;
    print.add_whitespace = true;
    const auto printed = google::protobuf::util::MessageToJsonString(*lineage, &text, print);
    status = printed.ok() ? WriteFileAtomically(absl::StrCat(staging, "/", kLineageFile), text)
                          : absl::InternalError(absl::StrCat("lineage: ", printed.ToString()));
  }
  if (status.ok()) status = PublishDirectory(staging, target);
  if (!status.ok()) std::filesystem::remove_all(staging, error);
  return status;
}

absl::StatusOr<v1::VersionLineage> ReadLineage(const std::string& model_dir, int64_t version) {
  const std::string path = absl::StrCat(VersionDir(model_dir, version), "/", kLineageFile);
  ASSIGN_OR_RETURN(const std::string text, ReadFileBytes(path, "version lineage"));
  v1::VersionLineage lineage;
  google::protobuf::util::JsonParseOptions parse;
  parse.ignore_unknown_fields = true;
  if (const auto parsed = google::protobuf::util::JsonStringToMessage(text, &lineage, parse);
      !parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": ", parsed.ToString()));
  }
  return lineage;
}

std::vector<int64_t> ListVersions(const std::string& model_dir) {
  std::vector<int64_t> versions;
  std::error_code error;
  for (const auto& entry : std::filesystem::directory_iterator(model_dir, error)) {
    const std::string name = entry.path().filename().string();
    int64_t version = 0;
    if (entry.is_directory(error) && absl::SimpleAtoi(name, &version) && version > 0 &&
        absl::StrCat(version) == name) {
      versions.push_back(version);
    }
  }
  std::sort(versions.begin(), versions.end());
  return versions;
}

}  // namespace forecastd
