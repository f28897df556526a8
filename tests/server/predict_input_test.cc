// DecodeWindows' limits (server/predict_input.h): the model's and the server's batch bounds
// are INVALID_ARGUMENT, the request-memory estimate RESOURCE_EXHAUSTED, each naming the limit,
// and the estimate grows with the batch as its parts say.
#include "server/predict_input.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tests/testing/catch.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

constexpr int kT = 6, kP = 2;

ModelConfig LstmConfig() {
  ModelConfig c;
  c.set_name("lstm");
  c.set_lookback(kT);
  c.set_horizon(kP);
  c.add_feature_names("price");
  c.add_feature_names("volume");
  c.add_target_names("price");
  c.mutable_lstm()->set_hidden_size(4);
  c.mutable_lstm()->set_num_layers(1);
  return c;
}

absl::StatusOr<std::vector<float>> Decode(const Forecaster& model, int64_t B,
                                          const WindowLimits& limits) {
  const std::vector<float> x = testing::RandomWindows(B, kT, 1);
  const std::vector<int64_t> shape = {B, kT, 2};
  return DecodeWindows(model, shape, "", x, limits);
}

void RequireRefused(const absl::Status& status, absl::StatusCode code, const std::string& phrase) {
  CAPTURE(status.ToString());
  REQUIRE(status.code() == code);
  REQUIRE(status.message().find(phrase) != absl::string_view::npos);
}

TEST_CASE("The server's batch limit applies on top of the model's", "[unit][limits]") {
  const std::unique_ptr<Forecaster> model = testing::RandomModel(LstmConfig(), 1);
  REQUIRE(Decode(*model, 4, {.max_batch_rows = 8, .server_max_batch_rows = 4}).ok());
  RequireRefused(Decode(*model, 5, {.max_batch_rows = 8, .server_max_batch_rows = 4}).status(),
                 absl::StatusCode::kInvalidArgument,
                 "batch of 5 windows is above this server's limit of 4 per request "
                 "(--max-batch-rows)");
  RequireRefused(Decode(*model, 9, {.max_batch_rows = 8, .server_max_batch_rows = 16}).status(),
                 absl::StatusCode::kInvalidArgument, "above the max_batch_size 8 of model 'lstm'");
  REQUIRE(Decode(*model, 16, {.max_batch_rows = 0, .server_max_batch_rows = 0}).ok());
}

TEST_CASE("The memory estimate refuses a request before its windows are allocated",
          "[unit][limits]") {
  const std::unique_ptr<Forecaster> model = testing::RandomModel(LstmConfig(), 2);
  const int64_t one = EstimatePredictBytes(*model, 1);
  const int64_t four = EstimatePredictBytes(*model, 4);
  // At least the request's inputs, the forecasts in the reply and the forward pass's workspace.
  REQUIRE(four >= 4 * (4 * kT * 2 + 4 * kP + model->WorkspaceFloats(4)));
  REQUIRE(four > one);
  REQUIRE(EstimatePredictBytes(*model, 0) >= 0);

  REQUIRE(Decode(*model, 4, {.max_batch_rows = 8, .max_request_bytes = four}).ok());
  RequireRefused(Decode(*model, 4, {.max_batch_rows = 8, .max_request_bytes = four - 1}).status(),
                 absl::StatusCode::kResourceExhausted, "(--max-request-memory-bytes)");
  RequireRefused(Decode(*model, 4, {.max_batch_rows = 8, .max_request_bytes = four - 1}).status(),
                 absl::StatusCode::kResourceExhausted, "batch of 4 windows needs an estimated");

  // A batch far beyond any real one is refused without computing with its size.
  const std::vector<int64_t> shape = {int64_t{1} << 60, kT, 2};
  RequireRefused(DecodeWindows(*model, shape, "", {}, {.max_request_bytes = one}).status(),
                 absl::StatusCode::kResourceExhausted, "--max-request-memory-bytes");
}

}  // namespace
}  // namespace forecastd
