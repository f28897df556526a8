// KServeHttpServer over the KServe test environment (tests/testing/kserve_env.h: a real
// ModelRegistry on the reference backend and KServeService, also served over gRPC), called
// with cpp-httplib's client as Triton's HTTP clients call it: every endpoint, inference with
// JSON and with binary tensors against the gRPC path's forecast, bad requests' HTTP status and
// KServe error body, the unsupported endpoints' 501, bearer tokens decided as gRPC decides
// them, and HTTPS with the gRPC port's certificate flags.
#include "server/kserve_http.h"

#include <sys/stat.h>

#include <cstring>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "httplib.h"
#include "nlohmann/json.hpp"
#include "server/auth_interceptor.h"
#include "server/token_store.h"
#include "spdlog/spdlog.h"
#include "tests/testing/catch.h"
#include "tests/testing/kserve_env.h"
#include "tests/testing/process.h"
#include "tests/testing/shm_object.h"
#include "tests/testing/test_certificates.h"
#include "tests/testing/test_models.h"

namespace forecastd {
namespace {

using kserve_test::Bytes;
using kserve_test::Env;
using kserve_test::F;
using kserve_test::Floats;
using kserve_test::P;
using kserve_test::RawRequest;
using kserve_test::T;
using nlohmann::json;

constexpr char kPredictToken[] = "p-0123456789abcdef";
constexpr char kAdminToken[] = "a-0123456789abcdef";

// The REST port over an Env's service, and a client for it.
struct Rest {
  explicit Rest(Env& env, KServeHttpServer::Options options = {}) {
    options.address = "127.0.0.1:0";
    options.service = env.service.get();
    absl::StatusOr<std::unique_ptr<KServeHttpServer>> created = KServeHttpServer::Create(options);
    INFO(created.status().ToString());
    REQUIRE(created.ok());
    server = *std::move(created);
    REQUIRE(server->port() > 0);
    if (!options.tls.enabled()) {
      client = std::make_unique<httplib::Client>("127.0.0.1", server->port());
      client->set_read_timeout(60, 0);
    }
  }

  httplib::Result Get(const std::string& path, const httplib::Headers& headers = {}) {
    return client->Get(path.c_str(), headers);
  }
  httplib::Result Post(const std::string& path, const std::string& body,
                       const httplib::Headers& headers = {},
                       const char* type = "application/json") {
    return client->Post(path.c_str(), headers, body, type);
  }

  std::unique_ptr<KServeHttpServer> server;
  std::unique_ptr<httplib::Client> client;
};

// REQUIREs an answer with `status` and, for an error, KServe's body with `part` in its message.
void RequireStatus(const httplib::Result& result, int status, const std::string& part = "") {
  REQUIRE(result);
  INFO(result->status << " " << result->body);
  REQUIRE(result->status == status);
  if (status >= 400) {
    REQUIRE(result->get_header_value("Content-Type") == "application/json");
    const json body = json::parse(result->body);
    REQUIRE(body.is_object());
    REQUIRE(body.size() == 1);
    REQUIRE(body["error"].is_string());
    REQUIRE(absl::StrContains(body["error"].get<std::string>(), part));
  }
}

json Json(const httplib::Result& result) {
  REQUIRE(result);
  INFO(result->status << " " << result->body);
  REQUIRE(result->status == 200);
  return json::parse(result->body);
}

// A JSON infer request for `rows` windows of the gru model, with the values as one flat array.
json JsonInfer(const std::vector<float>& input, int64_t rows) {
  return {{"inputs",
           {{{"name", "INPUT"}, {"shape", {rows, T, F}}, {"datatype", "FP32"}, {"data", input}}}}};
}

// The forecast the gRPC front door gives for the same windows.
std::vector<float> GrpcForecast(Env& env, const std::vector<float>& input, int64_t rows) {
  inference::ModelInferResponse response;
  const grpc::Status status = env.Infer(RawRequest("gru", input, rows), &response);
  INFO(status.error_message());
  REQUIRE(status.ok());
  REQUIRE(response.raw_output_contents_size() == 1);
  return Floats(response.raw_output_contents(0));
}

std::vector<float> JsonFloats(const json& data) {
  std::vector<float> out;
  for (const json& v : data) out.push_back(v.get<float>());
  return out;
}

TEST_CASE("KServe REST health, server metadata and model metadata", "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);

  RequireStatus(rest.Get("/v2/health/live"), 200);
  RequireStatus(rest.Get("/v2/health/ready"), 200);
  RequireStatus(rest.Get("/v2/models/gru/ready"), 200);
  RequireStatus(rest.Get("/v2/models/gru/versions/2/ready"), 200);
  RequireStatus(rest.Get("/v2/models/gru/versions/1/ready"), 503, "model 'gru' is not ready");
  RequireStatus(rest.Get("/v2/models/quant/ready"), 503, "model 'quant' is not ready");
  RequireStatus(rest.Get("/v2/models/nope/ready"), 503, "model 'nope' is not ready");

  const json server = Json(rest.Get("/v2"));
  REQUIRE(server["name"] == "forecastd");
  REQUIRE(server["extensions"] == json(kserve_test::ServedExtensions()));

  const json model = Json(rest.Get("/v2/models/gru"));
  REQUIRE(model["name"] == "gru");
  REQUIRE(model["versions"] == json({"2"}));
  REQUIRE(model["platform"] == "forecastd");
  REQUIRE(model["inputs"] ==
          json::parse(R"([{"name":"INPUT","datatype":"FP32","shape":[-1,4,2]}])"));
  REQUIRE(model["outputs"] ==
          json::parse(R"([{"name":"FORECAST","datatype":"FP32","shape":[-1,2,1]}])"));
  REQUIRE(Json(rest.Get("/v2/models/gru/versions/2"))["versions"] == json({"2"}));
  RequireStatus(rest.Get("/v2/models/gru/versions/1"), 503,
                "version 1 of model 'gru' is not loaded");
  RequireStatus(rest.Get("/v2/models/nope"), 404, "nope");
  RequireStatus(rest.Get("/v2/models/gru/versions/x"), 400,
                "model version 'x' is not a positive integer");

  // Draining: readiness and inference say so, liveness does not change.
  env.ready = false;
  RequireStatus(rest.Get("/v2/health/live"), 200);
  RequireStatus(rest.Get("/v2/health/ready"), 503, "not ready");
  RequireStatus(rest.Get("/v2/models/gru/ready"), 503, "not ready");
  RequireStatus(
      rest.Post("/v2/models/gru/infer", JsonInfer(testing::RandomWindows(1, T, 3), 1).dump()), 503,
      "not ready");
}

TEST_CASE("KServe REST infer with JSON tensors gives the gRPC path's forecast",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);
  const std::vector<float> input = testing::RandomWindows(3, T, 31);
  const std::vector<float> expected = GrpcForecast(env, input, 3);
  REQUIRE(expected == testing::ReferenceForward(*env.gru_v2, input, 3));

  SECTION("flat data, an id, request parameters and a requested output") {
    json request = JsonInfer(input, 3);
    request["id"] = "req-9";
    request["parameters"] = {{"priority", 1}, {"timeout", 2000000}};
    request["outputs"] = {{{"name", "FORECAST"}}};
    const httplib::Result result = rest.Post("/v2/models/gru/infer", request.dump());
    const json response = Json(result);
    REQUIRE(result->get_header_value("Content-Type") == "application/json");
    REQUIRE(response["model_name"] == "gru");
    REQUIRE(response["model_version"] == "2");
    REQUIRE(response["id"] == "req-9");
    REQUIRE(response["outputs"].size() == 1);
    const json& output = response["outputs"][0];
    REQUIRE(output["name"] == "FORECAST");
    REQUIRE(output["datatype"] == "FP32");
    REQUIRE(output["shape"] == json({3, P, 1}));
    REQUIRE(JsonFloats(output["data"]) == expected);
  }
  SECTION("nested data and an explicit version") {
    json nested = json::array();
    for (int64_t b = 0; b < 3; ++b) {
      json window = json::array();
      for (int64_t t = 0; t < T; ++t) {
        json row = json::array();
        for (int64_t f = 0; f < F; ++f) row.push_back(input[(b * T + t) * F + f]);
        window.push_back(row);
      }
      nested.push_back(window);
    }
    json request = JsonInfer(input, 3);
    request["inputs"][0]["data"] = nested;
    const json response = Json(rest.Post("/v2/models/gru/versions/2/infer", request.dump()));
    REQUIRE(response["model_version"] == "2");
    REQUIRE(JsonFloats(response["outputs"][0]["data"]) == expected);
  }
}

// A body of Triton's binary tensor extension: the JSON header, then the bytes.
std::string BinaryBody(const json& header, const std::string& bytes, size_t* header_bytes) {
  const std::string text = header.dump();
  *header_bytes = text.size();
  return text + bytes;
}

TEST_CASE("KServe REST infer with binary tensors gives the same forecast",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);
  const std::vector<float> input = testing::RandomWindows(2, T, 41);
  const std::vector<float> expected = GrpcForecast(env, input, 2);
  const std::string bytes = Bytes(input);
  json header = {{"inputs",
                  {{{"name", "INPUT"},
                    {"shape", {2, T, F}},
                    {"datatype", "FP32"},
                    {"parameters", {{"binary_data_size", bytes.size()}}}}}}};
  // The forecast of a binary answer: the JSON header says its size, the bytes follow it.
  const auto binary_forecast = [](const httplib::Result& result) {
    REQUIRE(result);
    INFO(result->status << " " << result->body);
    REQUIRE(result->status == 200);
    REQUIRE(result->has_header("Inference-Header-Content-Length"));
    const size_t length = std::stoul(result->get_header_value("Inference-Header-Content-Length"));
    REQUIRE(length <= result->body.size());
    const json response = json::parse(result->body.substr(0, length));
    const json& output = response["outputs"][0];
    REQUIRE(output["shape"] == json({2, P, 1}));
    REQUIRE_FALSE(output.contains("data"));
    REQUIRE(output["parameters"]["binary_data_size"] == result->body.size() - length);
    return Floats(result->body.substr(length));
  };

  SECTION("binary input, binary output asked for by name") {
    header["outputs"] = {{{"name", "FORECAST"}, {"parameters", {{"binary_data", true}}}}};
    size_t length = 0;
    const std::string body = BinaryBody(header, bytes, &length);
    REQUIRE(binary_forecast(rest.Post("/v2/models/gru/infer", body,
                                      {{"Inference-Header-Content-Length", std::to_string(length)}},
                                      "application/octet-stream")) == expected);
  }
  SECTION("binary input, every output binary through binary_data_output") {
    header["parameters"] = {{"binary_data_output", true}};
    size_t length = 0;
    const std::string body = BinaryBody(header, bytes, &length);
    REQUIRE(binary_forecast(rest.Post("/v2/models/gru/infer", body,
                                      {{"Inference-Header-Content-Length", std::to_string(length)}},
                                      "application/octet-stream")) == expected);
  }
  SECTION("binary input, JSON output") {
    size_t length = 0;
    const std::string body = BinaryBody(header, bytes, &length);
    const json response = Json(rest.Post(
        "/v2/models/gru/infer", body, {{"Inference-Header-Content-Length", std::to_string(length)}},
        "application/octet-stream"));
    REQUIRE(JsonFloats(response["outputs"][0]["data"]) == expected);
  }
  SECTION("JSON input, binary output") {
    json request = JsonInfer(input, 2);
    request["outputs"] = {{{"name", "FORECAST"}, {"parameters", {{"binary_data", true}}}}};
    REQUIRE(binary_forecast(rest.Post("/v2/models/gru/infer", request.dump())) == expected);
  }
}

TEST_CASE("KServe REST refuses bad requests with the KServe error body and HTTP status",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env, {.max_body_bytes = 4096});
  const std::vector<float> one = testing::RandomWindows(1, T, 51);
  const auto infer = [&](const std::string& body, const httplib::Headers& headers = {}) {
    return rest.Post("/v2/models/gru/infer", body, headers);
  };

  SECTION("bodies that are not a KServe request") {
    RequireStatus(infer("{"), 400, "the body is not valid JSON");
    RequireStatus(infer("[]"), 400, "the body must be a JSON object");
    RequireStatus(infer("{}"), 400, "'inputs' must be an array of tensors");
    json r = JsonInfer(one, 1);
    r["inputs"][0].erase("datatype");
    RequireStatus(infer(r.dump()), 400, "input 'INPUT': 'datatype' must be a string");
    r = JsonInfer(one, 1);
    r["inputs"][0]["shape"] = {1, -4, F};
    RequireStatus(infer(r.dump()), 400, "'shape' holds -4, which is not a non-negative integer");
    r = JsonInfer(one, 1);
    r["inputs"][0]["data"] = {1.0, "x"};
    RequireStatus(infer(r.dump()), 400, "'data' holds \"x\", which is not a FP32 value");
    r["inputs"][0]["data"] = {1.0, 1e300};
    RequireStatus(infer(r.dump()), 400, "'data' holds 1e+300, which is not a FP32 value");
    r = JsonInfer(one, 1);
    r["inputs"][0].erase("data");
    RequireStatus(infer(r.dump()), 400, "has neither 'data' nor the parameter 'binary_data_size'");
    r = JsonInfer(one, 1);
    r["parameters"] = {{"priority", {1}}};
    RequireStatus(infer(r.dump()), 400,
                  "parameter 'priority' must be a boolean, a number or a string");
    r = JsonInfer(one, 1);
    r["inputs"][0]["datatype"] = "FP16";
    RequireStatus(infer(r.dump()), 400, "FP16 tensors have no JSON form");
  }
  SECTION("requests the service refuses, with the gRPC path's messages") {
    json r = JsonInfer(one, 1);
    r["inputs"][0]["name"] = "WINDOWS";
    RequireStatus(infer(r.dump()), 400, "unknown input 'WINDOWS'");
    r = JsonInfer(one, 1);
    r["inputs"][0]["datatype"] = "FP64";
    RequireStatus(infer(r.dump()), 400,
                  "input 'INPUT' has datatype 'FP64'; model 'gru' takes FP32");
    r = JsonInfer(one, 1);
    r["inputs"][0]["shape"] = {2, T, F};
    RequireStatus(infer(r.dump()), 400, "INPUT");
    r = JsonInfer(one, 1);
    r["outputs"] = {{{"name", "LEVEL"}}};
    RequireStatus(infer(r.dump()), 400, "LEVEL");
    RequireStatus(rest.Post("/v2/models/nope/infer", JsonInfer(one, 1).dump()), 404, "nope");
    RequireStatus(rest.Post("/v2/models/gru/versions/7/infer", JsonInfer(one, 1).dump()), 404, "7");
    RequireStatus(rest.Post("/v2/models/gru/versions/0/infer", JsonInfer(one, 1).dump()), 404,
                  "model version '0' does not exist");
    RequireStatus(rest.Post("/v2/models/gru/versions/-1/infer", JsonInfer(one, 1).dump()), 400,
                  "model version '-1' is not a positive integer");
  }
  SECTION("binary bodies whose sizes do not add up") {
    const std::string bytes = Bytes(one);
    const json header = {{"inputs",
                          {{{"name", "INPUT"},
                            {"shape", {1, T, F}},
                            {"datatype", "FP32"},
                            {"parameters", {{"binary_data_size", bytes.size()}}}}}}};
    const std::string text = header.dump();
    RequireStatus(infer(text + bytes, {{"Inference-Header-Content-Length", "x"}}), 400,
                  "Inference-Header-Content-Length must be a byte count");
    RequireStatus(infer(text + bytes, {{"Inference-Header-Content-Length", "99999"}}), 400,
                  "but the body has only");
    RequireStatus(infer(text + bytes.substr(4),
                        {{"Inference-Header-Content-Length", std::to_string(text.size())}}),
                  400, "only 28 bytes of binary data are left");
    RequireStatus(infer(text + bytes + "xxxx",
                        {{"Inference-Header-Content-Length", std::to_string(text.size())}}),
                  400, "4 bytes of binary data after the JSON header belong to no input");
  }
  SECTION("HTTP-level refusals") {
    RequireStatus(infer(std::string(5000, ' ')), 413, "larger than --max-message-bytes");
    RequireStatus(rest.Get("/v2/nothing/here"), 404,
                  "forecastd has no endpoint GET /v2/nothing/here");
    RequireStatus(rest.Get("/v2/models/gru/infer"), 404, "no endpoint");
  }
}

TEST_CASE("KServe REST model config, statistics and the repository round-trip",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);

  const json config = Json(rest.Get("/v2/models/gru/config"));
  REQUIRE(config["name"] == "gru");
  REQUIRE(config["max_batch_size"] == kserve_test::kMaxBatch);
  REQUIRE(config["input"][0]["data_type"] == "TYPE_FP32");
  REQUIRE(config["input"][0]["dims"] == json({T, F}));
  RequireStatus(rest.Get("/v2/models/nope/config"), 404, "nope");

  Json(rest.Post("/v2/models/gru/infer", JsonInfer(testing::RandomWindows(2, T, 61), 2).dump()));
  const json stats = Json(rest.Get("/v2/models/gru/versions/2/stats"));
  REQUIRE(stats["model_stats"].size() == 1);
  const json& gru = stats["model_stats"][0];
  REQUIRE(gru["name"] == "gru");
  REQUIRE(gru["version"] == "2");
  // Counts are JSON numbers, as Triton writes them (perf_analyzer reads them as such).
  REQUIRE(gru["inference_count"] == 2);
  REQUIRE(gru["inference_stats"]["success"]["count"] == 1);
  REQUIRE(gru["inference_stats"]["fail"]["count"] == 0);
  REQUIRE(Json(rest.Get("/v2/models/stats"))["model_stats"].size() >= 1);
  RequireStatus(rest.Get("/v2/models/nope/stats"), 404, "nope");

  json index = Json(rest.Post("/v2/repository/index", ""));
  REQUIRE(index == json::parse(R"([{"name":"gru","version":"2","state":"READY","reason":""},
                                    {"name":"quant","version":"","state":"UNAVAILABLE",
                                     "reason":"not loaded"}])"));
  REQUIRE(Json(rest.Post("/v2/repository/index", R"({"ready": true})")).size() == 1);

  RequireStatus(rest.Post("/v2/repository/models/quant/load", ""), 200);
  RequireStatus(rest.Get("/v2/models/quant/ready"), 200);
  RequireStatus(rest.Post("/v2/repository/models/quant/unload",
                          R"({"parameters": {"unload_dependents": true}})"),
                200);
  RequireStatus(rest.Get("/v2/models/quant/ready"), 503, "not ready");
  RequireStatus(rest.Post("/v2/repository/models/nope/load", ""), 404, "nope");
  RequireStatus(rest.Post("/v2/repository/models/nope/unload", ""), 200);
  RequireStatus(
      rest.Post("/v2/repository/models/quant/load", R"({"parameters": {"config": "{}"}})"), 400,
      "load parameter 'config' is not supported");
  RequireStatus(rest.Post("/v2/repository/index", "[1]"), 400,
                "the body must be empty or a JSON object");
}

TEST_CASE("KServe REST answers 501 naming what forecastd does not serve",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);
  // CUDA shared memory is served: a region never registered is 404, a bad body 400.
  RequireStatus(rest.Post("/v2/cudasharedmemory/region/r/unregister", ""), 404,
                "shared-memory region 'r' is not registered");
  RequireStatus(rest.Post("/v2/cudasharedmemory/unregister", ""), 200);
  RequireStatus(rest.Get("/v2/cudasharedmemory/status"), 200);
  RequireStatus(rest.Post("/v2/cudasharedmemory/region/r/register",
                          R"({"raw_handle": "AAAA", "device_id": 0, "byte_size": 8})"),
                400, "'raw_handle' must be {\"b64\"");
  RequireStatus(rest.Post("/v2/cudasharedmemory/region/r/register",
                          R"({"raw_handle": {"b64": "AAAA"}, "device_id": 0, "byte_size": 8})"),
                400, "a CUDA IPC handle has 64 bytes; got 3");
  RequireStatus(rest.Post("/v2/cudasharedmemory/region/r/register",
                          R"({"raw_handle": {"b64": "AAAA"}, "byte_size": 8})"),
                400, "'device_id' must be a non-negative integer");
  RequireStatus(rest.Get("/v2/trace/setting"), 501, "tracing");
  RequireStatus(rest.Get("/v2/models/gru/trace/setting"), 501, "tracing");
  RequireStatus(rest.Post("/v2/models/gru/generate", "{}"), 501, "generate");
  // An input in a region never registered is refused, never read as an input without data.
  const json region = json::parse(R"({"inputs": [{"name": "INPUT", "datatype": "FP32",
      "shape": [1, 4, 2], "parameters": {"shared_memory_region": "in0",
      "shared_memory_byte_size": 32}}]})");
  RequireStatus(rest.Post("/v2/models/gru/infer", region.dump()), 404,
                "shared-memory region 'in0' is not registered");
}

TEST_CASE("KServe REST reads and changes the log level at /v2/logging",
          "[integration][kserve][rest]") {
  Env env;
  Rest rest(env);
  const spdlog::level::level_enum before = spdlog::get_level();
  spdlog::set_level(spdlog::level::info);
  const json read = Json(rest.Get("/v2/logging"));
  REQUIRE(read == json::parse(R"({"log_level": "info", "log_info": true, "log_warning": true,
      "log_error": true, "log_verbose_level": 0, "log_file": "", "log_format": "default"})"));
  const json changed = Json(rest.Post("/v2/logging", R"({"log_verbose_level": 2})"));
  REQUIRE(changed["log_level"] == "trace");
  REQUIRE(spdlog::get_level() == spdlog::level::trace);
  RequireStatus(rest.Post("/v2/logging", R"({"log_info": 1})"), 400, "must be a boolean");
  RequireStatus(rest.Post("/v2/logging", R"({"log_verbose_level": -1})"), 400,
                "must be a boolean, an unsigned integer or a string");
  RequireStatus(rest.Post("/v2/logging", R"({"log_file": "/tmp/x"})"), 501, "stderr");
  REQUIRE(spdlog::get_level() == spdlog::level::trace);
  spdlog::set_level(before);
}

TEST_CASE("KServe REST decides bearer tokens with gRPC's roles", "[integration][kserve][rest]") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/tokens";
  {
    std::ofstream out(path);
    out << "predict " << kPredictToken << " p\npredict,admin " << kAdminToken << " a\n";
  }
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  std::unique_ptr<TokenStore> tokens = TokenStore::Create({.path = path}).value();
  CallAuthenticator authenticator({.tokens = tokens.get()});
  Env env;
  Rest rest(env, {.authenticator = &authenticator});
  const auto bearer = [](const char* token) {
    return httplib::Headers{{"Authorization", absl::StrCat("Bearer ", token)}};
  };
  const std::string request = JsonInfer(testing::RandomWindows(1, T, 71), 1).dump();

  // Health stays open, as over gRPC.
  RequireStatus(rest.Get("/v2/health/live"), 200);
  RequireStatus(rest.Get("/v2/health/ready"), 200);

  const httplib::Result missing = rest.Post("/v2/models/gru/infer", request);
  RequireStatus(missing, 401, "this call needs a bearer token");
  REQUIRE(missing->get_header_value("WWW-Authenticate") == "Bearer");
  RequireStatus(rest.Get("/v2/models/gru"), 401, "bearer token");
  RequireStatus(rest.Post("/v2/models/gru/infer", request, bearer("not-a-valid-token-at-all")), 401,
                "the bearer token is not valid");
  RequireStatus(rest.Post("/v2/models/gru/infer", request,
                          {{"Authorization", absl::StrCat("Basic ", kPredictToken)}}),
                401, "");

  RequireStatus(rest.Post("/v2/models/gru/infer", request, bearer(kPredictToken)), 200);
  RequireStatus(rest.Get("/v2/models/gru", bearer(kPredictToken)), 200);
  RequireStatus(rest.Post("/v2/repository/models/quant/load", "", bearer(kPredictToken)), 403,
                "RepositoryModelLoad needs the role 'admin'");
  RequireStatus(rest.Post("/v2/repository/models/quant/load", "", bearer(kAdminToken)), 200);
  // An unsupported endpoint is decided before it says so.
  RequireStatus(rest.Get("/v2/cudasharedmemory/status"), 401, "bearer token");
}

// A JSON infer request for `rows` windows whose input is in `region` and, when `out_region` is
// not empty, whose forecast goes to `out_region`.
json ShmInfer(int64_t rows, const std::string& region, int64_t offset,
              const std::string& out_region = "", int64_t out_bytes = 0) {
  json request = {{"inputs",
                   {{{"name", "INPUT"},
                     {"shape", {rows, T, F}},
                     {"datatype", "FP32"},
                     {"parameters",
                      {{"shared_memory_region", region},
                       {"shared_memory_byte_size", rows * T * F * 4},
                       {"shared_memory_offset", offset}}}}}}};
  if (!out_region.empty()) {
    request["outputs"] = {
        {{"name", "FORECAST"},
         {"parameters",
          {{"shared_memory_region", out_region}, {"shared_memory_byte_size", out_bytes}}}}};
  }
  return request;
}

TEST_CASE("KServe REST registers system shared memory and infers through it",
          "[integration][kserve][rest][shared_memory]") {
  Env env;
  Rest rest(env);
  testing::ShmObject object(4096);
  REQUIRE(object.ok());
  const int64_t rows = 2;
  const std::vector<float> input = testing::RandomWindows(rows, T, 91);
  object.Write(64, input);
  const json in_body = {{"key", object.key()}, {"offset", 0}, {"byte_size", 1024}};
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/in/register", in_body.dump()), 200);
  RequireStatus(
      rest.Post("/v2/systemsharedmemory/region/out/register",
                json({{"key", object.key()}, {"offset", 2048}, {"byte_size", 256}}).dump()),
      200);
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/in/register", in_body.dump()), 409,
                "shared-memory region 'in' is already registered");
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/big/register",
                          json({{"key", object.key()}, {"byte_size", 8192}}).dump()),
                400, "shared-memory region 'big': 8192 bytes at offset 0 do not fit");
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/x/register", R"({"byte_size": 8})"), 400,
                "'key' must be a string");

  const json all = Json(rest.Get("/v2/systemsharedmemory/status"));
  REQUIRE(all.size() == 2);
  const json one = Json(rest.Get("/v2/systemsharedmemory/region/out/status"));
  REQUIRE(one ==
          json::array(
              {{{"name", "out"}, {"key", object.key()}, {"offset", 2048}, {"byte_size", 256}}}));
  RequireStatus(rest.Get("/v2/systemsharedmemory/region/nope/status"), 404,
                "shared-memory region 'nope' is not registered");

  const std::vector<float> expected = GrpcForecast(env, input, rows);
  // Input in shared memory, forecast in the JSON reply.
  const json answer = Json(rest.Post("/v2/models/gru/infer", ShmInfer(rows, "in", 64).dump()));
  REQUIRE(JsonFloats(answer["outputs"][0]["data"]) == expected);
  // Both in shared memory: the forecast is in the region.
  const json written =
      Json(rest.Post("/v2/models/gru/infer", ShmInfer(rows, "in", 64, "out", rows * P * 4).dump()));
  // The reply's output has no data and no parameters (which tritonclient's C++ client would read
  // as binary data), only its name, datatype and shape.
  REQUIRE_FALSE(written["outputs"][0].contains("data"));
  REQUIRE_FALSE(written["outputs"][0].contains("parameters"));
  REQUIRE(written["outputs"][0]["shape"] == json({rows, P, 1}));
  REQUIRE(object.Read(2048, static_cast<size_t>(rows * P)) == expected);
  RequireStatus(rest.Post("/v2/models/gru/infer", ShmInfer(rows, "in", 1000).dump()), 400,
                "input 'INPUT': 64 bytes at offset 1000 do not lie inside the shared-memory "
                "region 'in' of 1024 bytes");

  RequireStatus(rest.Post("/v2/systemsharedmemory/region/in/unregister", ""), 200);
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/in/unregister", ""), 404,
                "shared-memory region 'in' is not registered");
  RequireStatus(rest.Post("/v2/models/gru/infer", ShmInfer(rows, "in", 64).dump()), 404,
                "shared-memory region 'in' is not registered");
  RequireStatus(rest.Post("/v2/systemsharedmemory/unregister", ""), 200);
  REQUIRE(Json(rest.Get("/v2/systemsharedmemory/status")).empty());
}

TEST_CASE("KServe REST shared-memory regions belong to the token that registered them",
          "[integration][kserve][rest][shared_memory]") {
  testing::TempDir dir;
  const std::string path = dir.path() + "/tokens";
  constexpr char kOtherToken[] = "q-0123456789abcdef";
  {
    std::ofstream out(path);
    out << "predict " << kPredictToken << " p\npredict " << kOtherToken << " q\n";
  }
  REQUIRE(chmod(path.c_str(), 0600) == 0);
  std::unique_ptr<TokenStore> tokens = TokenStore::Create({.path = path}).value();
  CallAuthenticator authenticator({.tokens = tokens.get()});
  Env env;
  Rest rest(env, {.authenticator = &authenticator});
  const auto bearer = [](const char* token) {
    return httplib::Headers{{"Authorization", absl::StrCat("Bearer ", token)}};
  };
  testing::ShmObject object(1024);
  REQUIRE(object.ok());
  const std::vector<float> input = testing::RandomWindows(1, T, 92);
  object.Write(0, input);
  const std::string body = json({{"key", object.key()}, {"byte_size", 512}}).dump();
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/r/register", body), 401, "bearer token");
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/r/register", body, bearer(kPredictToken)),
                200);
  // The other token cannot see, use or unregister it.
  REQUIRE(Json(rest.Get("/v2/systemsharedmemory/status", bearer(kOtherToken))).empty());
  RequireStatus(rest.Get("/v2/systemsharedmemory/region/r/status", bearer(kOtherToken)), 404,
                "'r' is not registered");
  RequireStatus(rest.Post("/v2/models/gru/infer", ShmInfer(1, "r", 0).dump(), bearer(kOtherToken)),
                404, "shared-memory region 'r' is not registered");
  RequireStatus(rest.Post("/v2/systemsharedmemory/region/r/unregister", "", bearer(kOtherToken)),
                404, "'r' is not registered");
  RequireStatus(rest.Post("/v2/systemsharedmemory/unregister", "", bearer(kOtherToken)), 200);
  // Its owner still can.
  const json answer =
      Json(rest.Post("/v2/models/gru/infer", ShmInfer(1, "r", 0).dump(), bearer(kPredictToken)));
  REQUIRE(JsonFloats(answer["outputs"][0]["data"]) == GrpcForecast(env, input, 1));
  REQUIRE(Json(rest.Get("/v2/systemsharedmemory/status", bearer(kPredictToken))).size() == 1);
}

TEST_CASE("KServe REST serves HTTPS with the gRPC port's TLS files",
          "[integration][kserve][rest]") {
  testing::TempDir dir;
  absl::StatusOr<testing::TestCertificates> certs = testing::MakeTestCertificates(dir.path());
  INFO(certs.status().ToString());
  REQUIRE(certs.ok());
  Env env;

  SECTION("TLS") {
    KServeHttpServer::Options options;
    options.tls.cert_path = certs->server_cert;
    options.tls.key_path = certs->server_key;
    Rest rest(env, options);
    httplib::SSLClient client("127.0.0.1", rest.server->port());
    client.set_ca_cert_path(certs->ca_cert.c_str());
    client.enable_server_certificate_verification(true);
    RequireStatus(client.Get("/v2/health/ready"), 200);
    REQUIRE(Json(client.Get("/v2/models/gru"))["name"] == "gru");
    // Plain HTTP gets no answer from the HTTPS port.
    httplib::Client plain("127.0.0.1", rest.server->port());
    REQUIRE_FALSE(plain.Get("/v2/health/ready"));
  }
  SECTION("mutual TLS") {
    KServeHttpServer::Options options;
    options.tls.cert_path = certs->server_cert;
    options.tls.key_path = certs->server_key;
    options.tls.client_ca_path = certs->ca_cert;
    Rest rest(env, options);
    httplib::SSLClient trusted("127.0.0.1", rest.server->port(), certs->client_cert,
                               certs->client_key);
    trusted.set_ca_cert_path(certs->ca_cert.c_str());
    RequireStatus(trusted.Get("/v2/health/ready"), 200);
    httplib::SSLClient rogue("127.0.0.1", rest.server->port(), certs->rogue_client_cert,
                             certs->rogue_client_key);
    rogue.set_ca_cert_path(certs->ca_cert.c_str());
    REQUIRE_FALSE(rogue.Get("/v2/health/ready"));
    httplib::SSLClient anonymous("127.0.0.1", rest.server->port());
    anonymous.set_ca_cert_path(certs->ca_cert.c_str());
    REQUIRE_FALSE(anonymous.Get("/v2/health/ready"));
  }
}

TEST_CASE("HttpStatusOf gives each code KServe REST's status", "[unit][kserve][rest]") {
  REQUIRE(HttpStatusOf(absl::StatusCode::kOk) == 200);
  REQUIRE(HttpStatusOf(absl::StatusCode::kInvalidArgument) == 400);
  REQUIRE(HttpStatusOf(absl::StatusCode::kUnauthenticated) == 401);
  REQUIRE(HttpStatusOf(absl::StatusCode::kPermissionDenied) == 403);
  REQUIRE(HttpStatusOf(absl::StatusCode::kNotFound) == 404);
  REQUIRE(HttpStatusOf(absl::StatusCode::kResourceExhausted) == 429);
  REQUIRE(HttpStatusOf(absl::StatusCode::kInternal) == 500);
  REQUIRE(HttpStatusOf(absl::StatusCode::kUnimplemented) == 501);
  REQUIRE(HttpStatusOf(absl::StatusCode::kUnavailable) == 503);
  REQUIRE(HttpStatusOf(absl::StatusCode::kDeadlineExceeded) == 504);
}

TEST_CASE("KServeHttpServer refuses bad options and a port in use", "[integration][kserve][rest]") {
  Env env;
  REQUIRE(KServeHttpServer::Create({.address = "127.0.0.1:0"}).status().code() ==
          absl::StatusCode::kInvalidArgument);
  KServeHttpServer::Options no_keep_alive;
  no_keep_alive.service = env.service.get();
  no_keep_alive.keep_alive_timeout_s = 0;
  REQUIRE(KServeHttpServer::Create(no_keep_alive).status().code() ==
          absl::StatusCode::kInvalidArgument);
  REQUIRE(KServeHttpServer::Create({.address = "nowhere", .service = env.service.get()})
              .status()
              .code() == absl::StatusCode::kInvalidArgument);
  Rest rest(env);
  const absl::StatusOr<std::unique_ptr<KServeHttpServer>> second = KServeHttpServer::Create(
      {.address = absl::StrCat("127.0.0.1:", rest.server->port()), .service = env.service.get()});
  REQUIRE(second.status().code() == absl::StatusCode::kUnavailable);
  REQUIRE(absl::StrContains(second.status().message(), "cannot serve REST"));
}

}  // namespace
}  // namespace forecastd
