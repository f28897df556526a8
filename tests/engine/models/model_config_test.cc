#include "engine/models/model_config.h"

#include <string>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

ModelConfig ValidLstm() {
  ModelConfig c;
  c.set_name("m");
  c.set_lookback(100);
  c.set_horizon(10);
  for (const char* f : {"price", "volume", "spread"}) c.add_feature_names(f);
  c.add_target_names("price");
  c.mutable_lstm()->set_hidden_size(128);
  c.mutable_lstm()->set_num_layers(2);
  return c;
}

TEST_CASE("A complete config validates and round-trips through JSON", "[unit][config]") {
  const ModelConfig c = ValidLstm();
  REQUIRE(ValidateModelConfig(c).ok());
  const std::string json = ModelConfigToJson(c).value();
  CAPTURE(json);
  REQUIRE(json.find("\"hiddenSize\": 128") != std::string::npos);
  const ModelConfig back = ParseModelConfigJson(json).value();
  REQUIRE(back.SerializeAsString() == c.SerializeAsString());
  REQUIRE(TargetFeatureIndices(c) == std::vector<int>{0});
}

TEST_CASE("JSON with unknown fields or wrong types is rejected", "[unit][config]") {
  REQUIRE(ParseModelConfigJson(R"({"name":"m","lookbak":3})").status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(ParseModelConfigJson(R"({"name":"m","lookback":"many"})").status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(ParseModelConfigJson("not json").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(ReadModelConfig("/nonexistent/config.json").status().code() ==
          absl::StatusCode::kNotFound);
}

TEST_CASE("Invalid configs name the offending field", "[unit][config]") {
  struct Case {
    std::string expected;
    void (*mutate)(ModelConfig&);
  };
  const Case cases[] = {
      {"name is empty", [](ModelConfig& c) { c.clear_name(); }},
      {"lookback is 0", [](ModelConfig& c) { c.set_lookback(0); }},
      {"horizon is -1", [](ModelConfig& c) { c.set_horizon(-1); }},
      {"feature 'price' repeats", [](ModelConfig& c) { c.add_feature_names("price"); }},
      {"target 'bid' is not one of the feature_names",
       [](ModelConfig& c) { c.add_target_names("bid"); }},
      {"target_names is empty", [](ModelConfig& c) { c.clear_target_names(); }},
      {"lstm.hidden_size is 0", [](ModelConfig& c) { c.mutable_lstm()->set_hidden_size(0); }},
      {"lstm.num_layers is 0", [](ModelConfig& c) { c.mutable_lstm()->set_num_layers(0); }},
      {"lstm.dropout must be in [0, 1)", [](ModelConfig& c) { c.mutable_lstm()->set_dropout(1); }},
      {"no architecture", [](ModelConfig& c) { c.clear_lstm(); }},
      {"window_scaling.affine needs a window_scaling.kind",
       [](ModelConfig& c) { c.mutable_window_scaling()->set_affine(true); }},
      {"window_scaling.eps -1 is not in [0, 1]",
       [](ModelConfig& c) {
         c.mutable_window_scaling()->set_kind(v1::WindowScaling::WINDOW_SCALING_MEAN_STD);
         c.mutable_window_scaling()->set_eps(-1.0f);
       }},
      {"window_scaling.kind 7 is not a known kind",
       [](ModelConfig& c) {
         c.mutable_window_scaling()->set_kind(static_cast<v1::WindowScaling::Kind>(7));
       }},
      {"streaming.mode STREAM_MODE_STATE is not available",
       [](ModelConfig& c) {
         c.mutable_window_scaling()->set_forecast_change(true);
         c.mutable_streaming()->set_mode(v1::StreamingConfig::STREAM_MODE_STATE);
       }},
      {"d_model (10) must be divisible by num_heads (4)",
       [](ModelConfig& c) {
         auto* t = c.mutable_transformer();
         t->set_d_model(10);
         t->set_num_heads(4);
         t->set_num_layers(1);
         t->set_dim_feedforward(8);
       }},
      {"mlp.hidden_size is 0", [](ModelConfig& c) { c.mutable_mlp()->set_num_layers(2); }},
      {"mlp.num_layers is -1", [](ModelConfig& c) { c.mutable_mlp()->set_num_layers(-1); }},
      {"mlp.hidden_size is 8 with num_layers 0",
       [](ModelConfig& c) { c.mutable_mlp()->set_hidden_size(8); }},
      {"mlp.dropout must be in [0, 1)",
       [](ModelConfig& c) {
         c.mutable_mlp()->set_num_layers(1);
         c.mutable_mlp()->set_hidden_size(8);
         c.mutable_mlp()->set_dropout(1);
       }},
  };
  for (const Case& k : cases) {
    ModelConfig c = ValidLstm();
    k.mutate(c);
    const absl::Status s = ValidateModelConfig(c);
    CAPTURE(k.expected, s.ToString());
    REQUIRE(s.code() == absl::StatusCode::kInvalidArgument);
    REQUIRE(std::string(s.message()).find(k.expected) != std::string::npos);
  }
}

TEST_CASE("An MLP config validates with hidden layers or none", "[unit][config]") {
  ModelConfig c = ValidLstm();
  c.mutable_mlp()->set_num_layers(2);
  c.mutable_mlp()->set_hidden_size(64);
  c.mutable_mlp()->set_activation(v1::ACTIVATION_RELU);
  REQUIRE(ValidateModelConfig(c).ok());
  REQUIRE(!SupportsStateMode(c));
  c.mutable_mlp()->Clear();  // no hidden layers: a linear model of the window
  REQUIRE(c.has_mlp());
  REQUIRE(ValidateModelConfig(c).ok());
}

}  // namespace
}  // namespace forecastd
