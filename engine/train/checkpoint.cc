#include "engine/train/checkpoint.h"

#include <cmath>
#include <cstdio>
#include <map>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "engine/safetensors.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

constexpr char kFormat[] = "forecastd-train-checkpoint-1";

// Doubles as text that reads back to the same bits ("nan" and "inf" included).
std::string ExactDouble(double x) {
  char buffer[40];
  std::snprintf(buffer, sizeof(buffer), "%.17g", x);
  return buffer;
}

absl::StatusOr<double> ParseDouble(const std::string& path, absl::string_view key,
                                   absl::string_view text) {
  double x = 0.0;
  if (text == "nan") return std::nan("");
  if (!absl::SimpleAtod(text, &x)) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": checkpoint field '", key, "' = '", text, "' is not a number"));
  }
  return x;
}

absl::StatusOr<std::vector<double>> ParseDoubles(const std::string& path, absl::string_view key,
                                                 absl::string_view text) {
  std::vector<double> values;
  if (text.empty()) return values;
  for (absl::string_view piece : absl::StrSplit(text, ',')) {
    ASSIGN_OR_RETURN(const double x, ParseDouble(path, key, piece));
    values.push_back(x);
  }
  return values;
}

std::string JoinDoubles(const std::vector<double>& values) {
  std::vector<std::string> text;
  for (double x : values) text.push_back(ExactDouble(x));
  return absl::StrJoin(text, ",");
}

}  // namespace

absl::Status WriteCheckpoint(const std::string& path, const TrainCheckpoint& c) {
  const auto n = static_cast<int64_t>(c.params.size());
  std::vector<NamedTensor> tensors = {{"params", {n}, c.params}};
  if (!c.best_params.empty()) {
    tensors.push_back({"best_params", {static_cast<int64_t>(c.best_params.size())}, c.best_params});
  }
  std::vector<std::string> state_names;
  for (const auto& [name, values] : c.optimizer_state) {
    state_names.push_back(name);
    tensors.push_back(
        {absl::StrCat("optimizer.", name), {static_cast<int64_t>(values.size())}, values});
  }
  const std::map<std::string, std::string> metadata = {
      {"format", kFormat},
      {"fingerprint", c.fingerprint},
      {"epochs_done", absl::StrCat(c.epochs_done)},
      {"optimizer_steps", absl::StrCat(c.optimizer_steps)},
      {"best_epoch", absl::StrCat(c.best_epoch)},
      {"best_validation_loss", ExactDouble(c.best_validation_loss)},
      {"epochs_without_improvement", absl::StrCat(c.epochs_without_improvement)},
      {"optimizer_state", absl::StrJoin(state_names, ",")},
      {"train_losses", JoinDoubles(c.train_losses)},
      {"validation_losses", JoinDoubles(c.validation_losses)},
  };
  return WriteSafetensors(path, tensors, metadata);
}

absl::StatusOr<TrainCheckpoint> ReadCheckpoint(const std::string& path) {
  ASSIGN_OR_RETURN(const SafetensorsFile file, SafetensorsFile::Read(path));
  const auto& meta = file.metadata();
  const auto field = [&](const std::string& key) -> absl::StatusOr<std::string> {
    const auto it = meta.find(key);
    if (it == meta.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": not a forecastd training checkpoint (no '", key, "')"));
    }
    return it->second;
  };
  const auto integer = [&](const std::string& key) -> absl::StatusOr<int64_t> {
    ASSIGN_OR_RETURN(const std::string text, field(key));
    int64_t value = 0;
    if (!absl::SimpleAtoi(text, &value)) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": checkpoint field '", key, "' = '", text, "' is not an integer"));
    }
    return value;
  };
  ASSIGN_OR_RETURN(const std::string format, field("format"));
  if (format != kFormat) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": checkpoint format '", format, "', expected '", kFormat, "'"));
  }
  TrainCheckpoint c;
  ASSIGN_OR_RETURN(c.fingerprint, field("fingerprint"));
  ASSIGN_OR_RETURN(c.epochs_done, integer("epochs_done"));
  ASSIGN_OR_RETURN(c.optimizer_steps, integer("optimizer_steps"));
  ASSIGN_OR_RETURN(c.best_epoch, integer("best_epoch"));
  ASSIGN_OR_RETURN(c.epochs_without_improvement, integer("epochs_without_improvement"));
  ASSIGN_OR_RETURN(const std::string best, field("best_validation_loss"));
  ASSIGN_OR_RETURN(c.best_validation_loss, ParseDouble(path, "best_validation_loss", best));
  ASSIGN_OR_RETURN(const std::string train, field("train_losses"));
  ASSIGN_OR_RETURN(c.train_losses, ParseDoubles(path, "train_losses", train));
  ASSIGN_OR_RETURN(const std::string validation, field("validation_losses"));
  ASSIGN_OR_RETURN(c.validation_losses, ParseDoubles(path, "validation_losses", validation));
  if (c.epochs_done < 0 || c.optimizer_steps < 0 ||
      static_cast<int64_t>(c.train_losses.size()) != c.epochs_done ||
      c.validation_losses.size() != c.train_losses.size()) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": inconsistent checkpoint counters"));
  }

  // A tensor the checkpoint must hold. Its absence is damage, not NOT_FOUND, which callers
  // take for "no checkpoint yet" and would start the job afresh, overwriting this file.
  const auto missing_is_damage = [](absl::Status status) {
    return absl::IsNotFound(status) ? absl::DataLossError(status.message()) : status;
  };
  const absl::StatusOr<const TensorInfo*> params = file.Find("params");
  if (!params.ok()) return missing_is_damage(params.status());
  if ((*params)->shape.size() != 1) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": 'params' is not one-dimensional"));
  }
  const std::vector<int64_t> shape = (*params)->shape;
  const auto tensor = [&](const std::string& name) -> absl::StatusOr<std::vector<float>> {
    absl::StatusOr<std::vector<float>> values = file.ReadF32(name, shape);
    if (!values.ok()) return missing_is_damage(values.status());
    return values;
  };
  ASSIGN_OR_RETURN(c.params, tensor("params"));
  if (c.best_epoch >= 0) {
    ASSIGN_OR_RETURN(c.best_params, tensor("best_params"));
  }
  ASSIGN_OR_RETURN(const std::string names, field("optimizer_state"));
  if (!names.empty()) {
    for (absl::string_view name : absl::StrSplit(names, ',')) {
      ASSIGN_OR_RETURN(std::vector<float> values, tensor(absl::StrCat("optimizer.", name)));
      c.optimizer_state.emplace_back(std::string(name), std::move(values));
    }
  }
  return c;
}

}  // namespace forecastd
