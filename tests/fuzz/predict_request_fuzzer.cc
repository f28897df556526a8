// Fuzz target: request validation on the predict path. The input is a serialized
// forecastd.v1.PredictRequest, as a client's bytes arrive at ForecasterService::Predict; its
// window tensor goes through DecodeWindows (server/predict_input.h, which the KServe
// ModelInfer handler shares) against one of two small fixed models (fuzz_models.h), with the
// limits the service passes: the model's max_batch_size and the daemon's default
// --max-batch-rows and --max-request-memory-bytes. The request's `model` picks the model
// ("transformer_quantile", whose max_batch_size leaves the server's limits to decide;
// "gru_covariates", whose future-known covariates, timestamps and series go through
// BuildRequestRecords too; else the LSTM); bit 0 of its `version` stands for the daemon's
// --allow-non-finite-inputs flag, so both settings are covered. Checks that a request is either
// refused (INVALID_ARGUMENT, NOT_FOUND for an unknown series, or RESOURCE_EXHAUSTED for the
// memory limit) or decoded into exactly B * T * F floats equal to the ones sent, B within every
// limit, finite unless allowed otherwise, and for gru_covariates into B input records.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "engine/models/model_config.h"
#include "forecastd/v1/forecaster.pb.h"
#include "server/predict_input.h"
#include "tests/fuzz/fuzz_check.h"
#include "tests/fuzz/fuzz_models.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using forecastd::Forecaster;
  forecastd::v1::PredictRequest request;
  if (!request.ParseFromArray(data, static_cast<int>(size))) return 0;
  const Forecaster& model =
      request.model() == "transformer_quantile" ? forecastd::fuzz::TransformerModel()
      : request.model() == "gru_covariates"     ? forecastd::fuzz::CovariateModel()
                                                : forecastd::fuzz::LstmModel();
  // The defaults of server/server_options.h.
  const forecastd::WindowLimits limits = {
      .max_batch_rows = forecastd::fuzz::MaxBatchRows(model),
      .server_max_batch_rows = 1024,
      .max_request_bytes = int64_t{512} << 20,
      .allow_non_finite = (request.version() & 1) != 0,
  };
  const forecastd::v1::Tensor& inputs = request.inputs();
  absl::StatusOr<std::vector<float>> windows =
      forecastd::DecodeWindows(model, inputs.shape(), inputs.raw(), inputs.values(), limits);
  if (!windows.ok()) {
    const absl::StatusCode code = windows.status().code();
    FUZZ_CHECK((code == absl::StatusCode::kInvalidArgument ||
                code == absl::StatusCode::kResourceExhausted) &&
                   !windows.status().message().empty(),
               windows.status().ToString());
    return 0;
  }

  // Accepted: the handler now trusts shape(0) as the batch size and the floats as B windows.
  FUZZ_CHECK(inputs.shape_size() == 3, "accepted a shape that is not [B, T, F]");
  const int64_t B = inputs.shape(0), T = model.lookback(),
                F = forecastd::NumInputColumns(model.config());
  FUZZ_CHECK(inputs.shape(1) == T && inputs.shape(2) == F, "accepted another model's shape");
  FUZZ_CHECK(B >= 1 && B <= limits.max_batch_rows && B <= limits.server_max_batch_rows &&
                 forecastd::EstimatePredictBytes(model, B) <= limits.max_request_bytes,
             absl::StrCat("accepted a batch of ", B, " windows"));
  FUZZ_CHECK(windows->size() == static_cast<size_t>(B * T * F),
             absl::StrCat(windows->size(), " floats decoded for ", B, " windows"));
  FUZZ_CHECK(inputs.raw().empty() || inputs.values().empty(), "accepted both raw and values");
  const size_t bytes = windows->size() * sizeof(float);
  if (!inputs.raw().empty()) {
    FUZZ_CHECK(inputs.raw().size() == bytes &&
                   std::memcmp(windows->data(), inputs.raw().data(), bytes) == 0,
               "decoded floats differ from the raw bytes sent");
  } else {
    FUZZ_CHECK(static_cast<size_t>(inputs.values_size()) == windows->size() &&
                   std::memcmp(windows->data(), inputs.values().data(), bytes) == 0,
               "decoded floats differ from the values sent");
  }
  if (!limits.allow_non_finite) {
    for (const float v : *windows) FUZZ_CHECK(std::isfinite(v), "accepted a non-finite input");
  }

  // What the request carries beside its windows, into the model's input records.
  forecastd::RequestExtras extras;
  if (request.has_future()) {
    const forecastd::v1::Tensor& future = request.future();
    extras.future = forecastd::FloatTensorView{
        .shape = future.shape(),
        .raw = future.raw(),
        .values =
            absl::MakeConstSpan(future.values().data(), static_cast<size_t>(future.values_size()))};
  }
  if (request.timestamps_size() > 0) {
    extras.timestamps.emplace(request.timestamps().begin(), request.timestamps().end());
  }
  if (request.series_size() > 0) {
    extras.series.emplace(request.series().begin(), request.series().end());
  }
  const absl::string_view window_bytes(reinterpret_cast<const char*>(windows->data()), bytes);
  if (!forecastd::HasRecordExtras(model.config())) {
    const absl::Status none = forecastd::CheckNoExtras(model, extras);
    FUZZ_CHECK(none.ok() == extras.empty(), none.ToString());
    return 0;
  }
  const absl::StatusOr<std::vector<float>> records =
      forecastd::BuildRequestRecords(model, B, window_bytes, extras, limits.allow_non_finite);
  if (!records.ok()) {
    const absl::StatusCode code = records.status().code();
    FUZZ_CHECK(
        (code == absl::StatusCode::kInvalidArgument || code == absl::StatusCode::kNotFound) &&
            !records.status().message().empty(),
        records.status().ToString());
    return 0;
  }
  FUZZ_CHECK(records->size() == static_cast<size_t>(B * model.input_floats()),
             absl::StrCat(records->size(), " record floats for ", B, " windows"));
  FUZZ_CHECK(
      extras.future.has_value() && extras.timestamps.has_value() && extras.series.has_value(),
      "records built without every extra");
  if (!limits.allow_non_finite) {
    for (const float v : *records) FUZZ_CHECK(std::isfinite(v), "a non-finite record value");
  }
  return 0;
}
