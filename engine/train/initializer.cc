#include "engine/train/initializer.h"

#include <cmath>
#include <string>
#include <string_view>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "engine/random.h"

namespace forecastd {

void InitializeParameters(Forecaster& model, uint64_t seed) {
  ParameterArena& arena = model.parameters();
  const ModelConfig& config = model.config();
  // One stream per parameter, so adding a parameter never shifts another's values.
  uint64_t index = 0;
  for (const ParameterSpec& spec : arena.specs()) {
    ++index;
    if (!Forecaster::IsTrainable(spec)) continue;
    float* w = arena.data() + spec.offset;
    const absl::string_view name = spec.name;
    const auto fill = [&](float value) { std::fill_n(w, spec.numel, value); };
    Random rng(DeriveSeed(seed, SeedPurpose::kWeightInit, index));
    const auto uniform = [&](double bound) {
      const auto b = static_cast<float>(bound);
      for (int64_t i = 0; i < spec.numel; ++i) w[i] = rng.Uniform(-b, b);
    };
    if (absl::StartsWith(name, "window_scaling.")) {
      fill(absl::EndsWith(name, ".weight") ? 1.0f : 0.0f);  // RevIN's identity start
    } else if (absl::StartsWith(name, "rnn.")) {
      const int H = config.has_lstm() ? config.lstm().hidden_size() : config.gru().hidden_size();
      uniform(1.0 / std::sqrt(static_cast<double>(H)));
    } else if (absl::StrContains(name, "norm")) {
      fill(absl::EndsWith(name, ".weight") ? 1.0f : 0.0f);
    } else if (absl::EndsWith(name, "in_proj_weight")) {
      const double fan_in = static_cast<double>(spec.shape[1]);
      const double fan_out = static_cast<double>(spec.shape[0]);
      uniform(std::sqrt(6.0 / (fan_in + fan_out)));
    } else if (absl::EndsWith(name, "in_proj_bias") || absl::EndsWith(name, "out_proj.bias")) {
      fill(0.0f);
    } else if (absl::EndsWith(name, ".weight")) {
      uniform(1.0 / std::sqrt(static_cast<double>(spec.shape[1])));
    } else {
      // A Linear's bias, bounded by its weight's fan_in.
      const std::string weight_name =
          absl::StrCat(name.substr(0, name.size() - std::string_view(".bias").size()), ".weight");
      const auto weight = arena.Find(weight_name);
      const int64_t fan_in = weight.ok() ? (*weight)->shape[1] : spec.numel;
      uniform(1.0 / std::sqrt(static_cast<double>(fan_in)));
    }
  }
}

}  // namespace forecastd
