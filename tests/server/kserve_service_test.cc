// KServeService in an in-process gRPC server on 127.0.0.1, over a real ModelRegistry
// (reference backend, 2-worker scheduler) on a repository in a temp dir (tests/testing/
// kserve_env.h), called through the generated C++ stub as Triton's clients call it: ModelInfer
// against Forecaster::Forward on the same input, every validation error's code and message,
// readiness, metadata, the Triton model config, statistics, the repository index and
// load/unload round trips, and an UNIMPLEMENTED that says why from every method not served.
// ModelStreamInfer has its own file, kserve_stream_test.cc.
#include "server/kserve_service.h"

#include <chrono>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/generic/generic_stub.h"
#include "kernels/base/version.h"
#include "spdlog/spdlog.h"
#include "tests/testing/catch.h"
#include "tests/testing/kserve_env.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using kserve_test::Env;
using kserve_test::F;
using kserve_test::Floats;
using kserve_test::kMaxBatch;
using kserve_test::P;
using kserve_test::RawRequest;
using kserve_test::RequireError;
using kserve_test::T;

TEST_CASE("KServe ModelInfer forecasts exactly what Forecaster::Forward computes",
          "[integration][kserve]") {
  Env env;

  SECTION("raw_input_contents, as tritonclient sends them") {
    const std::vector<float> input = testing::RandomWindows(3, T, 11);
    inference::ModelInferRequest request = RawRequest("gru", input, 3);
    request.set_id("req-7");
    (*request.mutable_parameters())["priority"].set_uint64_param(1);
    (*request.mutable_parameters())["timeout"].set_int64_param(2000000);
    request.add_outputs()->set_name("FORECAST");
    inference::ModelInferResponse response;
    const grpc::Status status = env.Infer(request, &response);
    INFO(status.error_message());
    REQUIRE(status.ok());
    REQUIRE(response.model_name() == "gru");
    REQUIRE(response.model_version() == "2");  // the highest version serves
    REQUIRE(response.id() == "req-7");
    REQUIRE(response.outputs_size() == 1);
    REQUIRE(response.outputs(0).name() == "FORECAST");
    REQUIRE(response.outputs(0).datatype() == "FP32");
    REQUIRE(std::vector<int64_t>(response.outputs(0).shape().begin(),
                                 response.outputs(0).shape().end()) ==
            std::vector<int64_t>{3, P, 1});
    REQUIRE(response.raw_output_contents_size() == 1);
    REQUIRE(Floats(response.raw_output_contents(0)) ==
            testing::ReferenceForward(*env.gru_v2, input, 3));
  }

  SECTION("contents.fp32_contents, with an int64 priority and an explicit version") {
    const std::vector<float> input = testing::RandomWindows(2, T, 12);
    inference::ModelInferRequest request;
    request.set_model_name("gru");
    request.set_model_version("2");
    (*request.mutable_parameters())["priority"].set_int64_param(2);
    auto* tensor = request.add_inputs();
    tensor->set_name("INPUT");
    tensor->set_datatype("FP32");
    for (int64_t dim : {int64_t{2}, T, F}) tensor->add_shape(dim);
    tensor->mutable_contents()->mutable_fp32_contents()->Assign(input.begin(), input.end());
    inference::ModelInferResponse response;
    REQUIRE(env.Infer(request, &response).ok());
    // Always raw on the way back: tritonclient's as_numpy() decodes only raw_output_contents.
    REQUIRE(response.outputs(0).contents().fp32_contents_size() == 0);
    REQUIRE(Floats(response.raw_output_contents(0)) ==
            testing::ReferenceForward(*env.gru_v2, input, 2));
  }

  SECTION("a version on disk but not loaded is UNAVAILABLE") {
    inference::ModelInferRequest request = RawRequest("gru", testing::RandomWindows(1, T, 13), 1);
    request.set_model_version("1");
    REQUIRE(env.Infer(request).error_code() == grpc::StatusCode::UNAVAILABLE);
  }
}

TEST_CASE("KServe ModelInfer refuses bad requests with precise codes and messages",
          "[integration][kserve]") {
  Env env;
  const std::vector<float> one = testing::RandomWindows(1, T, 21);
  const auto base = [&] { return RawRequest("gru", one, 1); };
  const auto invalid = [&](const inference::ModelInferRequest& request, const std::string& part) {
    RequireError(env.Infer(request), grpc::StatusCode::INVALID_ARGUMENT, part);
  };

  SECTION("unknown model and bad versions") {
    inference::ModelInferRequest r = base();
    r.set_model_name("nope");
    RequireError(env.Infer(r), grpc::StatusCode::NOT_FOUND, "nope");
    r = base();
    r.set_model_version("two");
    invalid(r, "model version 'two' is not a positive integer");
    r.set_model_version("7");
    RequireError(env.Infer(r), grpc::StatusCode::NOT_FOUND, "7");
    // Version 0 cannot exist: not found, as Triton answers, and not ready.
    r.set_model_version("0");
    RequireError(env.Infer(r), grpc::StatusCode::NOT_FOUND,
                 "model version '0' does not exist: versions start at 1");
    REQUIRE_FALSE(env.ModelReady("gru", "0"));
  }
  SECTION("inputs: names, count and datatype") {
    inference::ModelInferRequest r = base();
    r.mutable_inputs(0)->set_name("WINDOWS");
    invalid(r, "unknown input 'WINDOWS'; model 'gru' takes one input, 'INPUT' (FP32 [B, 4, 2])");
    r = base();
    r.clear_inputs();
    r.clear_raw_input_contents();
    invalid(r, "the request has no input");
    r = base();
    *r.add_inputs() = r.inputs(0);
    r.add_raw_input_contents(r.raw_input_contents(0));
    invalid(r, "input 'INPUT' is given 2 times");
    r = base();
    r.mutable_inputs(0)->set_datatype("FP64");
    invalid(r, "input 'INPUT' has datatype 'FP64'; model 'gru' takes FP32");
  }
  SECTION("shapes: rank, dims, negative, empty and oversized batches") {
    inference::ModelInferRequest r = base();
    r.mutable_inputs(0)->mutable_shape()->RemoveLast();
    invalid(r, "input 'INPUT': inputs have shape [1, 4]; model 'gru' takes [B, 4, 2]");
    r = base();
    r.mutable_inputs(0)->set_shape(1, 5);
    invalid(r, "inputs have shape [1, 5, 2]");
    r = base();
    r.mutable_inputs(0)->set_shape(0, -1);
    invalid(r, "dimensions must be concrete");
    r = RawRequest("gru", {}, 0);
    invalid(r, "the batch dimension is 0");
    r = RawRequest("gru", testing::RandomWindows(kMaxBatch + 1, T, 22), kMaxBatch + 1);
    invalid(r, "batch of 5 windows is above the max_batch_size 4 of model 'gru'");
  }
  SECTION("data: byte sizes, value counts, both forms, non-finite values") {
    inference::ModelInferRequest r = base();
    r.mutable_raw_input_contents(0)->resize(T * F * 4 - 4);
    invalid(r, "raw inputs hold 28 bytes; shape [1, 4, 2] of float32 needs 32");
    r = base();
    r.mutable_raw_input_contents(0)->clear();
    invalid(r, "raw inputs hold 0 bytes; shape [1, 4, 2] of float32 needs 32");
    r = base();
    r.clear_raw_input_contents();
    r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
    invalid(r, "1 input values; shape [1, 4, 2] needs 8");
    r = base();
    r.mutable_inputs(0)->mutable_contents()->add_fp32_contents(1.0f);
    invalid(r, "both contents and raw_input_contents");
    r = base();
    r.mutable_inputs(0)->mutable_contents()->add_fp64_contents(1.0);
    invalid(r, "send its values in contents.fp32_contents");
    r = base();
    r.add_raw_input_contents(r.raw_input_contents(0));
    invalid(r, "raw_input_contents has 2 entries for 1 input");
    std::vector<float> bad = one;
    bad[5] = std::numeric_limits<float>::quiet_NaN();
    invalid(RawRequest("gru", bad, 1), "input 'INPUT': input [0, 2, 1] (feature 'volume') is nan");
    bad[5] = std::numeric_limits<float>::infinity();
    invalid(RawRequest("gru", bad, 1), "only finite values are accepted");
  }
  SECTION("outputs and parameters") {
    inference::ModelInferRequest r = base();
    r.add_outputs()->set_name("OUTPUT0");
    invalid(r, "unknown output 'OUTPUT0'; model 'gru' has one output, 'FORECAST'");
    r = base();
    r.add_outputs()->set_name("FORECAST");
    r.add_outputs()->set_name("FORECAST");
    invalid(r, "output 'FORECAST' is requested more than once");
    r = base();
    (*r.mutable_parameters())["priority"].set_string_param("high");
    invalid(r, "parameter 'priority' must be an int64 or uint64 value");
    r = base();
    (*r.mutable_parameters())["timeout"].set_int64_param(-5);
    invalid(r, "parameter 'timeout' is -5; it must not be negative");
    r = base();
    (*r.mutable_parameters())["priority"].set_uint64_param(3);  // the model has 2 levels
    RequireError(env.Infer(r), grpc::StatusCode::INVALID_ARGUMENT, "3");
    r = base();
    (*r.mutable_parameters())["sequence_id"].set_int64_param(42);
    invalid(r, "model 'gru' is not a sequence model");
  }
}

TEST_CASE("KServe ModelInfer takes non-finite inputs when allowed", "[integration][kserve]") {
  KServeService::Options options;
  options.allow_non_finite_inputs = true;
  Env env(std::move(options));
  std::vector<float> input = testing::RandomWindows(1, T, 31);
  input[3] = std::numeric_limits<float>::infinity();
  REQUIRE(env.Infer(RawRequest("gru", input, 1)).ok());
}

TEST_CASE("KServe readiness follows the ready hook and the registry", "[integration][kserve]") {
  Env env;
  grpc::ClientContext live_context;
  inference::ServerLiveResponse live;
  REQUIRE(env.stub->ServerLive(&live_context, {}, &live).ok());
  REQUIRE(live.live());

  const auto server_ready = [&] {
    grpc::ClientContext context;
    inference::ServerReadyResponse response;
    REQUIRE(env.stub->ServerReady(&context, {}, &response).ok());
    return response.ready();
  };
  REQUIRE(server_ready());
  REQUIRE(env.ModelReady("gru"));
  REQUIRE(env.ModelReady("gru", "2"));
  REQUIRE_FALSE(env.ModelReady("gru", "1"));  // on disk, not loaded
  REQUIRE_FALSE(env.ModelReady("quant"));     // not loaded at start
  REQUIRE_FALSE(env.ModelReady("nope"));

  env.ready = false;  // draining
  REQUIRE_FALSE(server_ready());
  REQUIRE_FALSE(env.ModelReady("gru"));
  RequireError(env.Infer(RawRequest("gru", testing::RandomWindows(1, T, 41), 1)),
               grpc::StatusCode::UNAVAILABLE, "not ready");
  env.ready = true;
  REQUIRE(env.Infer(RawRequest("gru", testing::RandomWindows(1, T, 41), 1)).ok());
}

TEST_CASE("KServe ServerMetadata and ModelMetadata describe the server and the tensors",
          "[integration][kserve]") {
  Env env({}, {"gru", "quant"});
  grpc::ClientContext server_context;
  inference::ServerMetadataResponse server;
  REQUIRE(env.stub->ServerMetadata(&server_context, {}, &server).ok());
  REQUIRE(server.name() == "forecastd");
  REQUIRE(server.version() == kForecastdVersion);
  REQUIRE(std::vector<std::string>(server.extensions().begin(), server.extensions().end()) ==
          kserve_test::ServedExtensions());

  const auto metadata = [&](const std::string& name, const std::string& version,
                            inference::ModelMetadataResponse* response) {
    grpc::ClientContext context;
    inference::ModelMetadataRequest request;
    request.set_name(name);
    request.set_version(version);
    return env.stub->ModelMetadata(&context, request, response);
  };
  const auto shape = [](const auto& tensor) {
    return std::vector<int64_t>(tensor.shape().begin(), tensor.shape().end());
  };
  inference::ModelMetadataResponse gru;
  REQUIRE(metadata("gru", "", &gru).ok());
  REQUIRE(gru.name() == "gru");
  REQUIRE(std::vector<std::string>(gru.versions().begin(), gru.versions().end()) ==
          std::vector<std::string>{"2"});
  REQUIRE(gru.platform() == "forecastd");
  REQUIRE(gru.inputs_size() == 1);
  REQUIRE(gru.inputs(0).name() == "INPUT");
  REQUIRE(gru.inputs(0).datatype() == "FP32");
  REQUIRE(shape(gru.inputs(0)) == std::vector<int64_t>{-1, T, F});
  REQUIRE(gru.outputs_size() == 1);
  REQUIRE(gru.outputs(0).name() == "FORECAST");
  REQUIRE(shape(gru.outputs(0)) == std::vector<int64_t>{-1, P, 1});

  inference::ModelMetadataResponse quant;
  REQUIRE(metadata("quant", "1", &quant).ok());
  REQUIRE(shape(quant.outputs(0)) == std::vector<int64_t>{-1, P, 2, 3});

  inference::ModelMetadataResponse unused;
  RequireError(metadata("nope", "", &unused), grpc::StatusCode::NOT_FOUND, "nope");
  REQUIRE(metadata("gru", "1", &unused).error_code() == grpc::StatusCode::UNAVAILABLE);
}

TEST_CASE("KServe ModelConfig translates forecastd's config into Triton's",
          "[integration][kserve]") {
  Env env;
  const auto config = [&](const std::string& name, inference::ModelConfigResponse* response) {
    grpc::ClientContext context;
    inference::ModelConfigRequest request;
    request.set_name(name);
    return env.stub->ModelConfig(&context, request, response);
  };
  inference::ModelConfigResponse response;
  REQUIRE(config("gru", &response).ok());
  const inference::ModelConfig& c = response.config();
  REQUIRE(c.name() == "gru");
  REQUIRE(c.platform() == "forecastd");
  REQUIRE(c.backend() == "forecastd");
  REQUIRE(c.version_policy().has_latest());
  REQUIRE(c.version_policy().latest().num_versions() == 1);
  REQUIRE(c.max_batch_size() == kMaxBatch);
  REQUIRE(c.input_size() == 1);
  REQUIRE(c.input(0).name() == "INPUT");
  REQUIRE(c.input(0).data_type() == inference::TYPE_FP32);
  REQUIRE(std::vector<int64_t>(c.input(0).dims().begin(), c.input(0).dims().end()) ==
          std::vector<int64_t>{T, F});
  REQUIRE(c.output_size() == 1);
  REQUIRE(c.output(0).name() == "FORECAST");
  REQUIRE(c.output(0).data_type() == inference::TYPE_FP32);
  REQUIRE(std::vector<int64_t>(c.output(0).dims().begin(), c.output(0).dims().end()) ==
          std::vector<int64_t>{P, 1});
  REQUIRE(c.has_dynamic_batching());
  const inference::ModelDynamicBatching& d = c.dynamic_batching();
  REQUIRE(std::vector<int32_t>(d.preferred_batch_size().begin(), d.preferred_batch_size().end()) ==
          std::vector<int32_t>{2});
  REQUIRE(d.max_queue_delay_microseconds() == 0);
  REQUIRE(d.priority_levels() == 2);
  REQUIRE(d.default_priority_level() == 2);
  REQUIRE(d.default_queue_policy().timeout_action() == inference::ModelQueuePolicy::REJECT);
  REQUIRE(d.default_queue_policy().max_queue_size() == 64);
  REQUIRE(d.priority_queue_policy().size() == 1);
  const inference::ModelQueuePolicy& high = d.priority_queue_policy().at(1);
  REQUIRE(high.timeout_action() == inference::ModelQueuePolicy::DELAY);
  REQUIRE(high.default_timeout_microseconds() == 5000000);
  REQUIRE(high.allow_timeout_override());
  REQUIRE(c.instance_group_size() == 1);
  REQUIRE(c.instance_group(0).kind() == inference::ModelInstanceGroup::KIND_CPU);
  REQUIRE(c.instance_group(0).count() == 2);

  // A model never loaded has no config read yet, as in Triton; once loaded it has one, and
  // keeps reporting it after an unload. Batching defaults apply.
  RequireError(config("quant", &response), grpc::StatusCode::UNAVAILABLE,
               "model 'quant' is not loaded");
  REQUIRE(env.Load("quant").ok());
  REQUIRE(env.Unload("quant").ok());
  REQUIRE(config("quant", &response).ok());
  REQUIRE(response.config().max_batch_size() == 32);
  REQUIRE(response.config().dynamic_batching().priority_levels() == 1);
  REQUIRE(response.config().dynamic_batching().default_priority_level() == 1);
  REQUIRE(std::vector<int64_t>(response.config().output(0).dims().begin(),
                               response.config().output(0).dims().end()) ==
          std::vector<int64_t>{P, 2, 3});
  REQUIRE(response.config().instance_group(0).kind() == inference::ModelInstanceGroup::KIND_AUTO);

  RequireError(config("nope", &response), grpc::StatusCode::NOT_FOUND, "nope");
}

TEST_CASE("KServe ModelStatistics counts ModelInfer calls per model version",
          "[integration][kserve]") {
  Env env;
  inference::ModelStatisticsResponse before;
  REQUIRE(env.Statistics("gru", "", &before).ok());
  // A loaded version reports zeros before its first request, so clients can take a snapshot.
  REQUIRE(before.model_stats_size() == 1);
  REQUIRE(before.model_stats(0).name() == "gru");
  REQUIRE(before.model_stats(0).version() == "2");
  REQUIRE(before.model_stats(0).inference_count() == 0);
  REQUIRE(before.model_stats(0).inference_stats().success().count() == 0);

  // Sequential calls, so each runs in a batch of its own.
  const std::vector<int64_t> rows = {1, 2, 3, 1, 2};
  for (size_t i = 0; i < rows.size(); ++i) {
    REQUIRE(env.Infer(RawRequest("gru", testing::RandomWindows(rows[i], T, 50 + i), rows[i])).ok());
  }
  std::vector<float> bad = testing::RandomWindows(1, T, 60);
  bad[0] = std::numeric_limits<float>::quiet_NaN();
  REQUIRE_FALSE(env.Infer(RawRequest("gru", bad, 1)).ok());
  // Refused before the model is known: not counted.
  inference::ModelInferRequest unknown = RawRequest("nope", testing::RandomWindows(1, T, 61), 1);
  REQUIRE_FALSE(env.Infer(unknown).ok());

  inference::ModelStatisticsResponse after;
  REQUIRE(env.Statistics("gru", "2", &after).ok());
  REQUIRE(after.model_stats_size() == 1);
  const inference::ModelStatistics& s = after.model_stats(0);
  REQUIRE(s.version() == "2");
  REQUIRE(s.inference_count() == 9);
  REQUIRE(s.execution_count() == 5);
  REQUIRE(s.last_inference() > 0);
  const inference::InferStatistics& i = s.inference_stats();
  REQUIRE(i.success().count() == 5);
  REQUIRE(i.success().ns() > 0);
  REQUIRE(i.fail().count() == 1);
  REQUIRE(i.queue().count() == 5);
  REQUIRE(i.compute_infer().count() == 5);
  REQUIRE(i.compute_infer().ns() > 0);
  REQUIRE(i.compute_infer().ns() <= i.success().ns());
  REQUIRE(i.compute_input().count() == 5);
  REQUIRE(i.compute_output().count() == 5);
  std::vector<std::pair<uint64_t, uint64_t>> batches;  // (batch size, executions)
  for (const auto& b : s.batch_stats()) {
    batches.emplace_back(b.batch_size(), b.compute_infer().count());
  }
  REQUIRE(batches == std::vector<std::pair<uint64_t, uint64_t>>{{1, 2}, {2, 2}, {3, 1}});

  inference::ModelStatisticsResponse all;
  REQUIRE(env.Statistics("", "", &all).ok());
  REQUIRE(all.model_stats_size() == 1);  // "quant" is neither loaded nor used
  REQUIRE(all.model_stats(0).inference_count() == 9);

  RequireError(env.Statistics("nope", "", &all), grpc::StatusCode::NOT_FOUND, "nope");
  RequireError(env.Statistics("gru", "9", &all), grpc::StatusCode::NOT_FOUND,
               "model 'gru' has no version 9");
  RequireError(env.Statistics("gru", "x", &all), grpc::StatusCode::INVALID_ARGUMENT,
               "not a positive integer");
}

TEST_CASE("KServe RepositoryIndex, RepositoryModelLoad and RepositoryModelUnload round-trip",
          "[integration][kserve]") {
  Env env;
  const auto entries = [](const inference::RepositoryIndexResponse& index) {
    std::vector<std::string> out;
    for (const auto& m : index.models()) {
      out.push_back(
          absl::StrCat(m.name(), "/", m.version(), " ", m.state(), " (", m.reason(), ")"));
    }
    return out;
  };
  REQUIRE(entries(env.Index()) ==
          std::vector<std::string>{"gru/2 READY ()", "quant/ UNAVAILABLE (not loaded)"});
  REQUIRE(entries(env.Index(true)) == std::vector<std::string>{"gru/2 READY ()"});

  // Load "quant" and forecast quantiles with it.
  REQUIRE(env.Load("quant").ok());
  REQUIRE(env.ModelReady("quant"));
  const std::vector<float> input = testing::RandomWindows(2, T, 71);
  inference::ModelInferResponse response;
  REQUIRE(env.Infer(RawRequest("quant", input, 2), &response).ok());
  REQUIRE(std::vector<int64_t>(response.outputs(0).shape().begin(),
                               response.outputs(0).shape().end()) ==
          std::vector<int64_t>{2, P, 2, 3});
  REQUIRE(Floats(response.raw_output_contents(0)) ==
          testing::ReferenceForward(*env.quant, input, 2));

  // Unload "gru": it stops serving, then loads back.
  REQUIRE(env.Unload("gru").ok());
  REQUIRE_FALSE(env.ModelReady("gru"));
  REQUIRE(env.Infer(RawRequest("gru", testing::RandomWindows(1, T, 72), 1)).error_code() ==
          grpc::StatusCode::UNAVAILABLE);
  REQUIRE(entries(env.Index()) ==
          std::vector<std::string>{"gru/ UNAVAILABLE (unloaded)", "quant/1 READY ()"});
  REQUIRE(env.Load("gru").ok());
  REQUIRE(env.ModelReady("gru"));
  REQUIRE(env.Infer(RawRequest("gru", testing::RandomWindows(1, T, 73), 1)).ok());

  RequireError(env.Load("nope"), grpc::StatusCode::NOT_FOUND, "nope");
  // As Triton: unloading a model that is not there succeeds.
  REQUIRE(env.Unload("nope").ok());
  {
    grpc::ClientContext context;
    inference::RepositoryModelLoadRequest request;
    request.set_model_name("gru");
    (*request.mutable_parameters())["config"].set_string_param("{}");
    inference::RepositoryModelLoadResponse unused;
    RequireError(env.stub->RepositoryModelLoad(&context, request, &unused),
                 grpc::StatusCode::INVALID_ARGUMENT, "load parameter 'config' is not supported");
  }
  {
    grpc::ClientContext context;
    inference::RepositoryModelUnloadRequest request;
    request.set_model_name("quant");
    (*request.mutable_parameters())["unload_dependents"].set_bool_param(true);
    inference::RepositoryModelUnloadResponse unused;
    REQUIRE(env.stub->RepositoryModelUnload(&context, request, &unused).ok());
    REQUIRE_FALSE(env.ModelReady("quant"));
  }
  {
    grpc::ClientContext context;
    inference::RepositoryIndexRequest request;
    request.set_repository_name("other");
    inference::RepositoryIndexResponse unused;
    RequireError(env.stub->RepositoryIndex(&context, request, &unused),
                 grpc::StatusCode::UNIMPLEMENTED, "repository_name 'other' is not supported");
  }
}

TEST_CASE("KServe LogSettings reads and changes the log level", "[integration][kserve]") {
  Env env;
  const spdlog::level::level_enum before = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);
  const auto call = [&](const inference::LogSettingsRequest& request,
                        inference::LogSettingsResponse* response) {
    grpc::ClientContext context;
    return env.stub->LogSettings(&context, request, response);
  };
  const auto setting = [](const inference::LogSettingsResponse& response, const std::string& key) {
    REQUIRE(response.settings().contains(key));
    return response.settings().at(key);
  };

  inference::LogSettingsResponse read;
  REQUIRE(call({}, &read).ok());
  REQUIRE(setting(read, "log_level").string_param() == "info");
  REQUIRE(setting(read, "log_info").bool_param());
  REQUIRE(setting(read, "log_warning").bool_param());
  REQUIRE(setting(read, "log_error").bool_param());
  REQUIRE(setting(read, "log_verbose_level").uint32_param() == 0);
  REQUIRE(setting(read, "log_file").string_param().empty());
  REQUIRE(setting(read, "log_format").string_param() == "default");

  // Triton's verbose level turns on debug, then trace.
  inference::LogSettingsRequest verbose;
  (*verbose.mutable_settings())["log_verbose_level"].set_uint32_param(1);
  inference::LogSettingsResponse changed;
  REQUIRE(call(verbose, &changed).ok());
  REQUIRE(spdlog::get_level() == spdlog::level::debug);
  REQUIRE(setting(changed, "log_level").string_param() == "debug");
  REQUIRE(setting(changed, "log_verbose_level").uint32_param() == 1);
  // Turning severities off raises the threshold to the lowest one still on.
  inference::LogSettingsRequest quiet;
  (*quiet.mutable_settings())["log_verbose_level"].set_uint32_param(0);
  (*quiet.mutable_settings())["log_info"].set_bool_param(false);
  (*quiet.mutable_settings())["log_warning"].set_bool_param(false);
  REQUIRE(call(quiet, &changed).ok());
  REQUIRE(spdlog::get_level() == spdlog::level::err);
  REQUIRE_FALSE(setting(changed, "log_info").bool_param());
  REQUIRE(setting(changed, "log_error").bool_param());
  // forecastd's own level names.
  inference::LogSettingsRequest named;
  (*named.mutable_settings())["log_level"].set_string_param("warn");
  REQUIRE(call(named, &changed).ok());
  REQUIRE(spdlog::get_level() == spdlog::level::warn);

  // Refused settings change nothing.
  const auto refused = [&](const char* key, inference::LogSettingsRequest::SettingValue value,
                           grpc::StatusCode code, const std::string& part) {
    inference::LogSettingsRequest request;
    (*request.mutable_settings())["log_verbose_level"].set_uint32_param(2);
    (*request.mutable_settings())[key] = value;
    inference::LogSettingsResponse unused;
    RequireError(call(request, &unused), code, part);
    REQUIRE(spdlog::get_level() == spdlog::level::warn);
  };
  inference::LogSettingsRequest::SettingValue value;
  value.set_string_param("/var/log/forecastd.log");
  refused("log_file", value, grpc::StatusCode::UNIMPLEMENTED, "forecastd logs to stderr");
  value.set_string_param("ISO8601");
  refused("log_format", value, grpc::StatusCode::UNIMPLEMENTED, "--log-format");
  value.set_uint32_param(1);
  refused("log_info", value, grpc::StatusCode::INVALID_ARGUMENT, "'log_info' must be a boolean");
  refused("log_colour", value, grpc::StatusCode::INVALID_ARGUMENT,
          "unknown log setting 'log_colour'");
  value.set_string_param("loud");
  refused("log_level", value, grpc::StatusCode::INVALID_ARGUMENT, "bad log level 'loud'");
  spdlog::set_level(before);
}

TEST_CASE("Triton's methods forecastd does not serve answer UNIMPLEMENTED saying why",
          "[integration][kserve]") {
  Env env;
  const auto unimplemented = [](const grpc::Status& status, const std::string& part) {
    INFO("code " << status.error_code() << ": " << status.error_message());
    REQUIRE(status.error_code() == grpc::StatusCode::UNIMPLEMENTED);
    REQUIRE_FALSE(status.error_message().empty());
    REQUIRE(absl::StrContains(status.error_message(), part));
  };
  {
    grpc::ClientContext context;
    inference::TraceSettingResponse response;
    unimplemented(env.stub->TraceSetting(&context, {}, &response), "request tracing");
  }
  {
    grpc::ClientContext context;
    inference::RepositoryIndexRequest request;
    request.set_repository_name("other");
    inference::RepositoryIndexResponse response;
    unimplemented(env.stub->RepositoryIndex(&context, request, &response),
                  "repository_name 'other' is not supported");
  }

  // Requests that need an extension forecastd does not serve say which.
  {
    inference::ModelInferRequest request = RawRequest("gru", testing::RandomWindows(1, T, 81), 1);
    auto* output = request.add_outputs();
    output->set_name("FORECAST");
    (*output->mutable_parameters())["classification"].set_int64_param(2);
    unimplemented(env.Infer(request), "classification extension");
  }

  // And no method of the service, called by name with an empty request, answers a bare
  // UNIMPLEMENTED: each is served or says what it does not support.
  const google::protobuf::ServiceDescriptor* service =
      inference::ModelInferRequest::descriptor()->file()->FindServiceByName("GRPCInferenceService");
  REQUIRE(service != nullptr);
  grpc::GenericStub generic(env.channel);
  for (int i = 0; i < service->method_count(); ++i) {
    const std::string method =
        absl::StrCat("/", service->full_name(), "/", service->method(i)->name());
    CAPTURE(method);
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
    grpc::Slice empty("");
    const grpc::ByteBuffer request(&empty, 1);
    grpc::ByteBuffer response;
    absl::Notification done;
    grpc::Status status;
    generic.UnaryCall(&context, method, grpc::StubOptions(), &request, &response,
                      [&](grpc::Status s) {
                        status = std::move(s);
                        done.Notify();
                      });
    REQUIRE(done.WaitForNotificationWithTimeout(absl::Seconds(60)));
    INFO("code " << status.error_code() << ": " << status.error_message());
    if (status.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
      REQUIRE_FALSE(status.error_message().empty());
    }
  }
}

}  // namespace
}  // namespace forecastd
