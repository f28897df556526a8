// Fuzz target: the model config.json path on untrusted text: ParseModelConfigJson, then
// ValidateModelConfig and Forecaster::Create, as the model repository does for config.json
// and the Train RPC does for a client's ModelConfig (engine/models/model_config.h). Checks
// that a parsed config prints and re-parses to the same message, that a valid one's derived
// sizes are consistent, and that building the model either succeeds with a well-formed
// parameter arena or fails cleanly.
#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/models/forecaster.h"
#include "engine/models/model_config.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "tests/fuzz/fuzz_check.h"

namespace forecastd {
namespace {

// The message's deterministic wire bytes: equal bytes, equal messages (NaNs included).
std::string Canonical(const ModelConfig& config) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream coded(&stream);
    coded.SetSerializationDeterministic(true);
    config.SerializeToCodedStream(&coded);
  }
  return bytes;
}

void CheckRoundTrip(const ModelConfig& config) {
  absl::StatusOr<std::string> json = ModelConfigToJson(config);
  FUZZ_CHECK(json.ok(), "a parsed config does not print: " + json.status().ToString());
  absl::StatusOr<ModelConfig> reparsed = ParseModelConfigJson(*json);
  FUZZ_CHECK(reparsed.ok(),
             "a printed config does not parse: " + reparsed.status().ToString() + "\n" + *json);
  FUZZ_CHECK(Canonical(*reparsed) == Canonical(config),
             "config changed in a round trip:\n" + *json);
}

void CheckValid(const ModelConfig& config) {
  const int F = NumFeatures(config), K = NumTargets(config), Q = NumQuantiles(config);
  FUZZ_CHECK(F >= 1 && K >= 1 && K <= F && Q >= 1, absl::StrCat(F, " ", K, " ", Q));
  const std::vector<int> targets = TargetFeatureIndices(config);
  FUZZ_CHECK(static_cast<int>(targets.size()) == K, "a target is not found among the features");
  for (int k = 0; k < K; ++k) {
    FUZZ_CHECK(targets[k] >= 0 && targets[k] < F &&
                   config.feature_names(targets[k]) == config.target_names(k),
               "TargetFeatureIndices points at the wrong feature");
  }
  if (config.has_transformer()) {
    FUZZ_CHECK(LayerNormEps(config.transformer()) > 0.0f, "layer norm eps is not positive");
  }

  absl::StatusOr<std::unique_ptr<Forecaster>> model = Forecaster::Create(config);
  if (!model.ok()) {
    FUZZ_CHECK(
        model.status().code() == absl::StatusCode::kInvalidArgument,
        "a valid config fails to build with an unexpected code: " + model.status().ToString());
    return;
  }
  const Forecaster& m = **model;
  FUZZ_CHECK(m.lookback() == config.lookback() && m.num_features() == F && m.num_targets() == K &&
                 m.num_quantiles() == Q && m.num_outputs() == int64_t{config.horizon()} * K * Q,
             "the model's sizes differ from the config's");
  // The parameters tile the arena in declaration order.
  int64_t offset = 0;
  for (const ParameterSpec& spec : m.parameters().specs()) {
    int64_t numel = 1;
    for (const int64_t d : spec.shape) numel *= d;
    FUZZ_CHECK(spec.offset == offset && spec.numel == numel && numel >= 1,
               "parameter " + spec.name + " is misplaced in the arena");
    offset += numel;
  }
  FUZZ_CHECK(offset == m.parameters().size() && m.parameters().size() > 0,
             "the parameters do not fill the arena");
}

}  // namespace
}  // namespace forecastd

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string json(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<forecastd::ModelConfig> config = forecastd::ParseModelConfigJson(json);
  if (!config.ok()) {
    FUZZ_CHECK(config.status().code() == absl::StatusCode::kInvalidArgument,
               config.status().ToString());
    return 0;
  }
  forecastd::CheckRoundTrip(*config);
  const absl::Status valid = forecastd::ValidateModelConfig(*config);
  if (!valid.ok()) {
    FUZZ_CHECK(valid.code() == absl::StatusCode::kInvalidArgument, valid.ToString());
    return 0;
  }
  forecastd::CheckValid(*config);
  return 0;
}
