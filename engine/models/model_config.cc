#include "engine/models/model_config.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/file_io.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/base/status.h"

namespace forecastd {
namespace {

// Generous bounds that catch a typo (an extra zero) before it becomes a huge allocation.
constexpr int kMaxLookback = 1 << 16;
constexpr int kMaxHorizon = 1 << 12;
constexpr int kMaxFeatures = 1 << 12;
constexpr int kMaxWidth = 1 << 15;
constexpr int kMaxLayers = 128;
constexpr int kMaxQuantiles = 99;

absl::Status Invalid(const ModelConfig& config, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("model config '", config.name(), "': ", what));
}

absl::Status CheckRange(const ModelConfig& config, absl::string_view field, int64_t value,
                        int64_t lo, int64_t hi) {
  if (value < lo || value > hi) {
    return Invalid(config,
                   absl::StrCat(field, " is ", value, "; it must be in [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status ValidateRecurrent(const ModelConfig& config, const v1::RecurrentConfig& rnn,
                               absl::string_view kind) {
  if (absl::Status s =
          CheckRange(config, absl::StrCat(kind, ".hidden_size"), rnn.hidden_size(), 1, kMaxWidth);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange(config, absl::StrCat(kind, ".num_layers"), rnn.num_layers(), 1, kMaxLayers);
      !s.ok()) {
    return s;
  }
  if (!(rnn.dropout() >= 0.0f && rnn.dropout() < 1.0f)) {
    return Invalid(config, absl::StrCat(kind, ".dropout must be in [0, 1)"));
  }
  return absl::OkStatus();
}

absl::Status ValidateTransformer(const ModelConfig& config, const v1::TransformerConfig& t) {
  if (absl::Status s = CheckRange(config, "transformer.d_model", t.d_model(), 1, kMaxWidth);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(config, "transformer.num_heads", t.num_heads(), 1, t.d_model());
      !s.ok()) {
    return s;
  }
  if (t.d_model() % t.num_heads() != 0) {
    return Invalid(config, absl::StrCat("transformer.d_model (", t.d_model(),
                                        ") must be divisible by num_heads (", t.num_heads(), ")"));
  }
  if (absl::Status s = CheckRange(config, "transformer.num_layers", t.num_layers(), 1, kMaxLayers);
      !s.ok()) {
    return s;
  }
  if (absl::Status s =
          CheckRange(config, "transformer.dim_feedforward", t.dim_feedforward(), 1, 4 * kMaxWidth);
      !s.ok()) {
    return s;
  }
  if (!(t.dropout() >= 0.0f && t.dropout() < 1.0f)) {
    return Invalid(config, "transformer.dropout must be in [0, 1)");
  }
  if (!(t.layer_norm_eps() >= 0.0f && t.layer_norm_eps() < 1.0f)) {
    return Invalid(config, "transformer.layer_norm_eps must be in [0, 1)");
  }
  return absl::OkStatus();
}

absl::Status ValidateMlp(const ModelConfig& config, const v1::MlpConfig& mlp) {
  if (absl::Status s = CheckRange(config, "mlp.num_layers", mlp.num_layers(), 0, kMaxLayers);
      !s.ok()) {
    return s;
  }
  if (mlp.num_layers() > 0) {
    if (absl::Status s = CheckRange(config, "mlp.hidden_size", mlp.hidden_size(), 1, kMaxWidth);
        !s.ok()) {
      return s;
    }
  } else if (mlp.hidden_size() != 0) {
    return Invalid(config, absl::StrCat("mlp.hidden_size is ", mlp.hidden_size(),
                                        " with num_layers 0: a model without hidden layers has "
                                        "no hidden size (leave it 0)"));
  }
  if (!(mlp.dropout() >= 0.0f && mlp.dropout() < 1.0f)) {
    return Invalid(config, "mlp.dropout must be in [0, 1)");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelConfig> ParseModelConfigJson(const std::string& json) {
  ModelConfig config;
  google::protobuf::util::JsonParseOptions options;
  options.ignore_unknown_fields = false;
  const auto status = google::protobuf::util::JsonStringToMessage(json, &config, options);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a valid ModelConfig JSON: ", std::string(status.message())));
  }
  return config;
}

absl::StatusOr<ModelConfig> ReadModelConfig(const std::string& path) {
  ASSIGN_OR_RETURN(const std::string json, ReadFileBytes(path, "model config"));
  absl::StatusOr<ModelConfig> config = ParseModelConfigJson(json);
  if (!config.ok()) {
    return absl::Status(config.status().code(),
                        absl::StrCat(path, ": ", config.status().message()));
  }
  return config;
}

absl::StatusOr<std::string> ModelConfigToJson(const ModelConfig& config) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.add_whitespace = true;
  options.preserve_proto_field_names = false;
  const auto status = google::protobuf::util::MessageToJsonString(config, &json, options);
  if (!status.ok()) {
    return absl::InternalError(
        absl::StrCat("cannot print ModelConfig as JSON: ", std::string(status.message())));
  }
  return json;
}

namespace {

constexpr int kMaxStreams = 1 << 24;
constexpr int kMaxTickBatch = 1 << 16;

absl::Status ValidateStreaming(const ModelConfig& config) {
  const v1::StreamingConfig& streaming = config.streaming();
  if (streaming.mode() == v1::StreamingConfig::STREAM_MODE_STATE && !SupportsStateMode(config)) {
    return Invalid(config,
                   "streaming.mode STREAM_MODE_STATE needs a unidirectional lstm or gru (a "
                   "transformer or a bidirectional model sees the whole window at once); use "
                   "STREAM_MODE_WINDOW");
  }
  if (absl::Status s =
          CheckRange(config, "streaming.max_streams", streaming.max_streams(), 0, kMaxStreams);
      !s.ok()) {
    return s;
  }
  return CheckRange(config, "streaming.max_tick_batch", streaming.max_tick_batch(), 0,
                    kMaxTickBatch);
}

absl::Status ValidateWindowScaling(const ModelConfig& config) {
  const v1::WindowScaling& w = config.window_scaling();
  if (!v1::WindowScaling::Kind_IsValid(w.kind())) {
    return Invalid(config, absl::StrCat("window_scaling.kind ", w.kind(), " is not a known kind"));
  }
  if (w.affine() && w.kind() == v1::WindowScaling::WINDOW_SCALING_NONE) {
    return Invalid(config,
                   "window_scaling.affine needs a window_scaling.kind (WINDOW_SCALING_MEAN_STD or "
                   "WINDOW_SCALING_LAST_VALUE)");
  }
  if (!(w.eps() >= 0.0f && w.eps() <= 1.0f)) {
    return Invalid(config, absl::StrCat("window_scaling.eps ", w.eps(), " is not in [0, 1]"));
  }
  if (HasWindowScaling(config) &&
      config.streaming().mode() == v1::StreamingConfig::STREAM_MODE_STATE) {
    return Invalid(config,
                   "window_scaling scales each window by its own statistics, so the model needs "
                   "the whole window: streaming.mode STREAM_MODE_STATE is not available; use "
                   "STREAM_MODE_WINDOW");
  }
  return absl::OkStatus();
}

constexpr int kMaxSeries = 1 << 20;

absl::Status ValidateCovariates(const ModelConfig& config) {
  const v1::Covariates& c = config.covariates();
  std::set<std::string> features(config.feature_names().begin(), config.feature_names().end());
  std::set<std::string> targets(config.target_names().begin(), config.target_names().end());
  std::set<std::string> seen;
  for (const std::string& name : c.future()) {
    if (!features.count(name)) {
      return Invalid(config, absl::StrCat("covariates.future '", name,
                                          "' is not one of the feature_names (a future-known "
                                          "covariate is also an input of the window)"));
    }
    if (targets.count(name)) {
      return Invalid(config, absl::StrCat("covariates.future '", name,
                                          "' is a target: a forecast target is not known ahead"));
    }
    if (!seen.insert(name).second) {
      return Invalid(config, absl::StrCat("covariates.future '", name, "' repeats"));
    }
  }
  std::set<int> calendar;
  for (int i = 0; i < c.calendar_size(); ++i) {
    const int kind = c.calendar(i);
    if (!v1::CalendarFeature_IsValid(kind) || kind == v1::CALENDAR_UNSPECIFIED) {
      return Invalid(config, absl::StrCat("covariates.calendar ", kind,
                                          " is not a calendar feature (CALENDAR_HOUR_OF_DAY, "
                                          "CALENDAR_DAY_OF_WEEK, CALENDAR_HOUR_OF_WEEK, "
                                          "CALENDAR_DAY_OF_YEAR)"));
    }
    if (!calendar.insert(kind).second) {
      return Invalid(config, absl::StrCat("covariates.calendar ",
                                          v1::CalendarFeature_Name(c.calendar(i)), " repeats"));
    }
  }
  for (int i = 0; i < c.calendar_size(); ++i) {
    for (const char* suffix : {"_sin", "_cos"}) {
      const std::string name = CalendarName(c.calendar(i)) + suffix;
      if (features.count(name)) {
        return Invalid(config, absl::StrCat("feature '", name,
                                            "' is both in feature_names and a calendar feature"));
      }
    }
  }
  std::set<std::string> statics;
  for (const std::string& name : c.static_features()) {
    if (name.empty()) return Invalid(config, "a covariates.static_features name is empty");
    if (features.count(name)) {
      return Invalid(config, absl::StrCat("covariates.static_features '", name,
                                          "' is one of the feature_names: a static covariate is "
                                          "one value per series, not a column of the window"));
    }
    if (!statics.insert(name).second) {
      return Invalid(config, absl::StrCat("covariates.static_features '", name, "' repeats"));
    }
  }
  if (absl::Status s = CheckRange(config, "number of covariates.static_features",
                                  c.static_features_size(), 0, kMaxFeatures);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(config, "number of series", config.series_size(), 0, kMaxSeries);
      !s.ok()) {
    return s;
  }
  std::set<std::string> series;
  for (const std::string& name : config.series()) {
    if (name.empty()) return Invalid(config, "a series name is empty");
    if (!series.insert(name).second) {
      return Invalid(config, absl::StrCat("series '", name, "' repeats"));
    }
  }
  if (config.streaming().mode() == v1::StreamingConfig::STREAM_MODE_STATE &&
      (NumFutureFeatures(config) > 0 || config.series_size() > 0)) {
    return Invalid(config,
                   "a model with future-known covariates, calendar features or several series "
                   "reads more than one row per forecast: streaming.mode STREAM_MODE_STATE is not "
                   "available; use STREAM_MODE_WINDOW");
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status ValidateModelConfig(const ModelConfig& config) {
  if (config.name().empty()) return Invalid(config, "name is empty");
  if (absl::Status s = CheckRange(config, "lookback", config.lookback(), 1, kMaxLookback);
      !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(config, "horizon", config.horizon(), 1, kMaxHorizon); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckRange(config, "number of feature_names", config.feature_names_size(), 1,
                                  kMaxFeatures);
      !s.ok()) {
    return s;
  }
  std::set<std::string> features;
  for (const std::string& f : config.feature_names()) {
    if (f.empty()) return Invalid(config, "a feature name is empty");
    if (!features.insert(f).second)
      return Invalid(config, absl::StrCat("feature '", f, "' repeats"));
  }
  if (config.target_names().empty()) return Invalid(config, "target_names is empty");
  std::set<std::string> targets;
  for (const std::string& t : config.target_names()) {
    if (!features.count(t)) {
      return Invalid(config, absl::StrCat("target '", t, "' is not one of the feature_names"));
    }
    if (!targets.insert(t).second) return Invalid(config, absl::StrCat("target '", t, "' repeats"));
  }
  if (config.quantiles_size() > kMaxQuantiles) {
    return Invalid(config,
                   absl::StrCat(config.quantiles_size(), " quantiles; at most ", kMaxQuantiles));
  }
  for (int q = 0; q < config.quantiles_size(); ++q) {
    const float tau = config.quantiles(q);
    if (!(tau > 0.0f && tau < 1.0f)) {
      return Invalid(config, absl::StrCat("quantile ", tau, " is not in (0, 1)"));
    }
    if (q > 0 && !(tau > config.quantiles(q - 1))) {
      return Invalid(config, "quantiles must be strictly increasing");
    }
  }
  if (absl::Status s = ValidateWindowScaling(config); !s.ok()) return s;
  if (absl::Status s = ValidateCovariates(config); !s.ok()) return s;
  if (absl::Status s = ValidateStreaming(config); !s.ok()) return s;
  switch (config.architecture_case()) {
    case ModelConfig::kLstm:
      return ValidateRecurrent(config, config.lstm(), "lstm");
    case ModelConfig::kGru:
      return ValidateRecurrent(config, config.gru(), "gru");
    case ModelConfig::kTransformer:
      return ValidateTransformer(config, config.transformer());
    case ModelConfig::kMlp:
      return ValidateMlp(config, config.mlp());
    case ModelConfig::ARCHITECTURE_NOT_SET:
      break;
  }
  return Invalid(config, "no architecture: set one of lstm, gru, transformer or mlp");
}

bool HasWindowScaling(const ModelConfig& config) {
  return config.window_scaling().kind() != v1::WindowScaling::WINDOW_SCALING_NONE ||
         config.window_scaling().forecast_change();
}

float WindowScalingEps(const ModelConfig& config) {
  return config.window_scaling().eps() > 0.0f ? config.window_scaling().eps() : 1e-5f;
}

bool SupportsStateMode(const ModelConfig& config) {
  if (HasWindowScaling(config) || HasRecordExtras(config)) return false;
  return (config.has_lstm() && !config.lstm().bidirectional()) ||
         (config.has_gru() && !config.gru().bidirectional());
}

v1::StreamingConfig::Mode StreamMode(const ModelConfig& config) {
  return config.streaming().mode() == v1::StreamingConfig::STREAM_MODE_STATE
             ? v1::StreamingConfig::STREAM_MODE_STATE
             : v1::StreamingConfig::STREAM_MODE_WINDOW;
}

int NumFeatures(const ModelConfig& config) {
  return config.feature_names_size() + 2 * config.covariates().calendar_size();
}
int NumInputColumns(const ModelConfig& config) { return config.feature_names_size(); }

std::string CalendarName(v1::CalendarFeature feature) {
  std::string name = v1::CalendarFeature_Name(feature);
  if (absl::StartsWith(name, "CALENDAR_")) name = name.substr(9);
  return absl::AsciiStrToLower(name);
}

std::vector<std::string> FeatureColumnNames(const ModelConfig& config) {
  std::vector<std::string> names(config.feature_names().begin(), config.feature_names().end());
  for (int i = 0; i < config.covariates().calendar_size(); ++i) {
    const std::string base = CalendarName(config.covariates().calendar(i));
    names.push_back(base + "_sin");
    names.push_back(base + "_cos");
  }
  return names;
}

int NumFutureFeatures(const ModelConfig& config) {
  return config.covariates().future_size() + 2 * config.covariates().calendar_size();
}

std::vector<int> FutureFeatureIndices(const ModelConfig& config) {
  std::vector<int> indices;
  for (const std::string& name : config.covariates().future()) {
    for (int f = 0; f < config.feature_names_size(); ++f) {
      if (config.feature_names(f) == name) indices.push_back(f);
    }
  }
  for (int c = 0; c < 2 * config.covariates().calendar_size(); ++c) {
    indices.push_back(config.feature_names_size() + c);
  }
  return indices;
}

int NumFutureInputColumns(const ModelConfig& config) { return config.covariates().future_size(); }
bool NeedsTimestamps(const ModelConfig& config) { return config.covariates().calendar_size() > 0; }
int NumSeries(const ModelConfig& config) { return config.series_size(); }
int NumStaticFeatures(const ModelConfig& config) {
  return config.covariates().static_features_size();
}

int64_t InputRecordFloats(const ModelConfig& config) {
  return int64_t{config.lookback()} * NumFeatures(config) +
         int64_t{config.horizon()} * NumFutureFeatures(config) + (NumSeries(config) > 0 ? 1 : 0);
}

bool HasRecordExtras(const ModelConfig& config) {
  return NumFutureFeatures(config) > 0 || NumSeries(config) > 0;
}
int NumTargets(const ModelConfig& config) { return config.target_names_size(); }
int NumQuantiles(const ModelConfig& config) { return std::max(1, config.quantiles_size()); }

std::vector<int> TargetFeatureIndices(const ModelConfig& config) {
  std::vector<int> indices;
  for (const std::string& target : config.target_names()) {
    for (int f = 0; f < config.feature_names_size(); ++f) {
      if (config.feature_names(f) == target) indices.push_back(f);
    }
  }
  return indices;
}

float LayerNormEps(const v1::TransformerConfig& config) {
  return config.layer_norm_eps() > 0.0f ? config.layer_norm_eps() : 1e-5f;
}

}  // namespace forecastd
