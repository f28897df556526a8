#include "server/kserve_http.h"

#include <sys/socket.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <exception>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/notification.h"
#include "httplib.h"
#include "kernels/base/status.h"
#include "server/kserve_json.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

using nlohmann::json;

constexpr char kJsonType[] = "application/json";
constexpr char kBinaryType[] = "application/octet-stream";
constexpr char kHeaderLength[] = "Inference-Header-Content-Length";
// How REST inference requests are counted in forecastd_requests_total{method}.
constexpr char kRestInferMethod[] = "ModelInferREST";

// The {m} and optional /versions/{v} of a model URL: the matches 1 and 2.
constexpr char kModel[] = R"(/v2/models/([^/]+)(?:/versions/([^/]+))?)";

std::string Dump(const json& value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

void ReplyError(httplib::Response& res, const absl::Status& status) {
  res.status = HttpStatusOf(status.code());
  if (status.code() == absl::StatusCode::kUnauthenticated) {
    res.set_header("WWW-Authenticate", "Bearer");
  }
  res.set_content(kserve::ErrorBody(status.message()), kJsonType);
}

void ReplyJson(httplib::Response& res, const json& body) {
  res.status = 200;
  res.set_content(Dump(body), kJsonType);
}

// The body of a repository call: empty, or a JSON object.
absl::StatusOr<json> OptionalObject(const std::string& body) {
  if (body.empty()) return json::object();
  json root = json::parse(body, nullptr, /*allow_exceptions=*/false);
  if (root.is_discarded() || !root.is_object()) {
    return absl::InvalidArgumentError("the body must be empty or a JSON object");
  }
  return root;
}

// A shared-memory register body's non-negative integer `field` of region `name`; nullopt when
// absent and not `required`.
absl::StatusOr<std::optional<uint64_t>> RegionField(const json& root, const std::string& name,
                                                    const char* field, bool required) {
  const auto it = root.find(field);
  if (it == root.end() && !required) return std::nullopt;
  if (it == root.end() || !it->is_number_unsigned()) {
    return absl::InvalidArgumentError(absl::StrCat("shared-memory region '", name, "': '", field,
                                                   "' must be a non-negative integer"));
  }
  return it->get<uint64_t>();
}

// A load or unload body's "parameters" as ModelRepositoryParameters.
absl::Status ReadRepositoryParameters(
    const json& root,
    google::protobuf::Map<std::string, inference::ModelRepositoryParameter>* out) {
  const auto parameters = root.find("parameters");
  if (parameters == root.end()) return absl::OkStatus();
  google::protobuf::Map<std::string, inference::InferParameter> read;
  RETURN_IF_ERROR(kserve::ReadParameters(*parameters, "repository request", &read));
  for (const auto& [key, value] : read) {
    inference::ModelRepositoryParameter& parameter = (*out)[key];
    switch (value.parameter_choice_case()) {
      case inference::InferParameter::kBoolParam:
        parameter.set_bool_param(value.bool_param());
        break;
      case inference::InferParameter::kInt64Param:
        parameter.set_int64_param(value.int64_param());
        break;
      case inference::InferParameter::kStringParam:
        parameter.set_string_param(value.string_param());
        break;
      default:
        return absl::InvalidArgumentError(absl::StrCat(
            "repository parameter '", key, "' must be a boolean, an integer or a string"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

int HttpStatusOf(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kOk:
      return 200;
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kOutOfRange:
      return 400;
    case absl::StatusCode::kUnauthenticated:
      return 401;
    case absl::StatusCode::kPermissionDenied:
      return 403;
    case absl::StatusCode::kNotFound:
      return 404;
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kAborted:
      return 409;
    case absl::StatusCode::kResourceExhausted:
      return 429;
    case absl::StatusCode::kUnimplemented:
      return 501;
    case absl::StatusCode::kUnavailable:
      return 503;
    case absl::StatusCode::kDeadlineExceeded:
      return 504;
    default:
      return 500;
  }
}

absl::StatusOr<std::unique_ptr<KServeHttpServer>> KServeHttpServer::Create(const Options& options) {
  if (options.service == nullptr) {
    return absl::InvalidArgumentError("the REST server needs the KServe service");
  }
  if (options.threads < 1) return absl::InvalidArgumentError("the REST server needs a thread");
  if (options.keep_alive_timeout_s < 1) {
    return absl::InvalidArgumentError("the REST keep-alive timeout must be >= 1 s");
  }
  const size_t colon = options.address.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(options.address.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("bad REST address '", options.address, "': expected host:port"));
  }
  std::string host = options.address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }

  std::unique_ptr<KServeHttpServer> server(new KServeHttpServer(options));
  if (options.tls.enabled()) {
    server->http_ = std::make_unique<httplib::SSLServer>(
        options.tls.cert_path.c_str(), options.tls.key_path.c_str(),
        options.tls.mutual() ? options.tls.client_ca_path.c_str() : nullptr);
  } else {
    server->http_ = std::make_unique<httplib::Server>();
  }
  if (!server->http_->is_valid()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the REST port cannot use the TLS files (--tls-cert '", options.tls.cert_path,
                     "', --tls-key, --tls-client-ca '", options.tls.client_ca_path, "')"));
  }
  const int threads = options.threads;
  server->http_->new_task_queue = [threads] {
    return new httplib::ThreadPool(static_cast<size_t>(threads));
  };
  server->http_->set_payload_max_length(static_cast<size_t>(options.max_body_bytes));
  // cpp-httplib's default also sets SO_REUSEPORT, with which a second daemon could silently
  // share the port with the first.
  server->http_->set_socket_options([](int socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  // A reply goes out at once: with Nagle's algorithm on, a response written in two pieces
  // (headers, then body) waits for the client's delayed ACK, 40 ms a request on Linux
  // (perf_analyzer -i http measured 44 ms p50 at concurrency 1 before this).
  server->http_->set_tcp_nodelay(true);
  // tritonclient and perf_analyzer keep their connections open across requests.
  server->http_->set_keep_alive_max_count(1000);
  server->http_->set_keep_alive_timeout(options.keep_alive_timeout_s);
  server->Route();
  if (port == 0) {
    port = server->http_->bind_to_any_port(host);
  } else if (!server->http_->bind_to_port(host, port)) {
    port = -1;
  }
  if (port <= 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot serve REST on ", options.address, " (is the port in use?)"));
  }
  server->port_ = port;
  httplib::Server* http = server->http_.get();
  KServeHttpServer* self = server.get();
  server->listener_ = std::thread([http, self] {
    http->listen_after_bind();
    self->listener_ended_.store(true);
  });
  // httplib's stop() does nothing until the accept loop has begun, so a Shutdown right after
  // Create would leave the listener running: wait for the loop (or its failure) first.
  while (!http->is_running() && !server->listener_ended_.load()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return server;
}

KServeHttpServer::KServeHttpServer(const Options& options) : options_(options) {}

KServeHttpServer::~KServeHttpServer() { Shutdown(); }

void KServeHttpServer::Shutdown() {
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) return;
    shut_down_ = true;
  }
  if (http_ != nullptr) http_->stop();
  if (listener_.joinable()) listener_.join();
}

void KServeHttpServer::Route() {
  KServeService* const service = options_.service;
  CallAuthenticator* const authenticator = options_.authenticator;
  httplib::Server& http = *http_;

  // Every endpoint: the caller is decided as a call of the gRPC method `grpc_method` would be,
  // then `handle` answers; an error status becomes the KServe error body.
  // `owned_endpoint` hands `handle` the caller's identity too (the token's name; "" without
  // tokens), which owns what the call registers or uses (shared-memory regions).
  using Handle = std::function<absl::Status(const httplib::Request&, httplib::Response&)>;
  using OwnedHandle = std::function<absl::Status(const httplib::Request&, httplib::Response&,
                                                 const std::string& owner)>;
  const auto owned_endpoint = [authenticator](const char* grpc_method, OwnedHandle handle) {
    return [authenticator, grpc_method, handle = std::move(handle)](const httplib::Request& req,
                                                                    httplib::Response& res) {
      std::string owner;
      if (authenticator != nullptr) {
        std::vector<absl::string_view> authorization;
        const auto range = req.headers.equal_range("Authorization");
        for (auto it = range.first; it != range.second; ++it) authorization.push_back(it->second);
        const absl::Status allowed = authenticator->Decide(
            absl::StrCat("/inference.GRPCInferenceService/", grpc_method), authorization,
            absl::StrCat("http:", req.remote_addr, ":", req.remote_port), nullptr, &owner);
        if (!allowed.ok()) return ReplyError(res, allowed);
      }
      if (absl::Status status = handle(req, res, owner); !status.ok()) ReplyError(res, status);
    };
  };
  const auto endpoint = [owned_endpoint](const char* grpc_method, Handle handle) {
    return owned_endpoint(grpc_method, [handle = std::move(handle)](
                                           const httplib::Request& req, httplib::Response& res,
                                           const std::string&) { return handle(req, res); });
  };
  const auto model_of = [](const httplib::Request& req) { return req.matches[1].str(); };
  const auto version_of = [](const httplib::Request& req) { return req.matches[2].str(); };

  http.Get("/v2/health/live", endpoint("ServerLive", [](const auto&, auto& res) {
             res.status = 200;
             return absl::OkStatus();
           }));
  http.Get("/v2/health/ready", endpoint("ServerReady", [service](const auto&, auto& res) {
             if (!service->IsReady()) {
               return absl::UnavailableError("forecastd is not ready: starting or shutting down");
             }
             res.status = 200;
             return absl::OkStatus();
           }));
  http.Get(R"(/v2/?)", endpoint("ServerMetadata", [service](const auto&, auto& res) {
             inference::ServerMetadataResponse response;
             service->DescribeServer(&response);
             ReplyJson(res, kserve::MessageToJson(response));
             return absl::OkStatus();
           }));

  // Statistics before model metadata, whose pattern would take "stats" for a model's name.
  const auto statistics = [service](const httplib::Request& req, httplib::Response& res,
                                    std::string name, std::string version) {
    inference::ModelStatisticsRequest request;
    request.set_name(std::move(name));
    request.set_version(std::move(version));
    inference::ModelStatisticsResponse response;
    RETURN_IF_ERROR(service->GetStatistics(request, &response));
    ReplyJson(res, kserve::MessageToJson(response));
    return absl::OkStatus();
  };
  http.Get("/v2/models/stats",
           endpoint("ModelStatistics", [statistics](const auto& req, auto& res) {
             return statistics(req, res, "", "");
           }));
  http.Get(
      absl::StrCat(kModel, "/stats"),
      endpoint("ModelStatistics", [statistics, model_of, version_of](const auto& req, auto& res) {
        return statistics(req, res, model_of(req), version_of(req));
      }));
  http.Get(absl::StrCat(kModel, "/config"),
           endpoint("ModelConfig", [service, model_of, version_of](const auto& req, auto& res) {
             inference::ModelConfigRequest request;
             request.set_name(model_of(req));
             request.set_version(version_of(req));
             inference::ModelConfigResponse response;
             RETURN_IF_ERROR(service->GetModelConfig(request, &response));
             ReplyJson(res, kserve::MessageToJson(response.config()));
             return absl::OkStatus();
           }));
  http.Get(
      absl::StrCat(kModel, "/ready"),
      endpoint("ModelReady", [service, model_of, version_of](const auto& req, auto& res) {
        inference::ModelReadyRequest request;
        request.set_name(model_of(req));
        request.set_version(version_of(req));
        inference::ModelReadyResponse response;
        RETURN_IF_ERROR(service->CheckModelReady(request, &response));
        if (!response.ready()) {
          return absl::UnavailableError(absl::StrCat("model '", request.name(), "' is not ready"));
        }
        res.status = 200;
        return absl::OkStatus();
      }));
  http.Get(kModel,
           endpoint("ModelMetadata", [service, model_of, version_of](const auto& req, auto& res) {
             inference::ModelMetadataRequest request;
             request.set_name(model_of(req));
             request.set_version(version_of(req));
             inference::ModelMetadataResponse response;
             RETURN_IF_ERROR(service->DescribeModel(request, &response));
             ReplyJson(res, kserve::MessageToJson(response));
             return absl::OkStatus();
           }));
  http.Post(absl::StrCat(kModel, "/infer"),
            owned_endpoint("ModelInfer", [service, model_of, version_of](const auto& req, auto& res,
                                                                         const std::string& owner) {
              inference::ModelInferRequest request;
              request.set_model_name(model_of(req));
              request.set_model_version(version_of(req));
              std::optional<size_t> json_bytes;
              if (req.has_header(kHeaderLength)) {
                size_t length = 0;
                if (!absl::SimpleAtoi(req.get_header_value(kHeaderLength), &length)) {
                  return absl::InvalidArgumentError(
                      absl::StrCat(kHeaderLength, " must be a byte count, not '",
                                   req.get_header_value(kHeaderLength), "'"));
                }
                json_bytes = length;
              }
              kserve::OutputEncoding encoding;
              RETURN_IF_ERROR(kserve::ParseInferRequest(req.body, json_bytes, &request, &encoding));
              inference::ModelInferResponse response;
              absl::Status result;
              absl::Notification done;
              service->InferAuthorized(kRestInferMethod, owner, absl::InfiniteFuture(), request,
                                       &response, [&result, &done](const absl::Status& status) {
                                         result = status;
                                         done.Notify();
                                       });
              done.WaitForNotification();
              RETURN_IF_ERROR(result);
              ASSIGN_OR_RETURN(kserve::HttpBody body,
                               kserve::WriteInferResponse(response, encoding));
              res.status = 200;
              if (body.json_bytes.has_value()) {
                res.set_header(kHeaderLength, absl::StrCat(*body.json_bytes));
                res.set_content(std::move(body.body), kBinaryType);
              } else {
                res.set_content(std::move(body.body), kJsonType);
              }
              return absl::OkStatus();
            }));

  // Triton's log settings: GET reads them, POST {"log_verbose_level": 1, ...} changes them.
  const auto log_settings = [service](const httplib::Request& req, httplib::Response& res) {
    ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
    inference::LogSettingsRequest request;
    for (const auto& [key, value] : root.items()) {
      auto& setting = (*request.mutable_settings())[key];
      if (value.is_boolean()) {
        setting.set_bool_param(value.get<bool>());
      } else if (value.is_number_unsigned() && value.get<uint64_t>() <= UINT32_MAX) {
        setting.set_uint32_param(static_cast<uint32_t>(value.get<uint64_t>()));
      } else if (value.is_string()) {
        setting.set_string_param(value.get<std::string>());
      } else {
        return absl::InvalidArgumentError(absl::StrCat(
            "log setting '", key, "' must be a boolean, an unsigned integer or a string"));
      }
    }
    inference::LogSettingsResponse response;
    RETURN_IF_ERROR(service->UpdateLogSettings(request, &response));
    json settings = json::object();
    for (const auto& [key, value] : response.settings()) {
      switch (value.parameter_choice_case()) {
        case inference::LogSettingsResponse::SettingValue::kBoolParam:
          settings[key] = value.bool_param();
          break;
        case inference::LogSettingsResponse::SettingValue::kUint32Param:
          settings[key] = value.uint32_param();
          break;
        default:
          settings[key] = value.string_param();
          break;
      }
    }
    ReplyJson(res, settings);
    return absl::OkStatus();
  };
  http.Get("/v2/logging", endpoint("LogSettings", log_settings));
  http.Post("/v2/logging", endpoint("LogSettings", log_settings));

  http.Post("/v2/repository/index",
            endpoint("RepositoryIndex", [service](const auto& req, auto& res) {
              ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
              inference::RepositoryIndexRequest request;
              if (const auto ready = root.find("ready"); ready != root.end()) {
                if (!ready->is_boolean()) {
                  return absl::InvalidArgumentError("'ready' must be a boolean");
                }
                request.set_ready(ready->template get<bool>());
              }
              inference::RepositoryIndexResponse response;
              RETURN_IF_ERROR(service->ListRepository(request, &response));
              json models = json::array();
              for (const auto& model : response.models()) {
                models.push_back(kserve::MessageToJson(model));
              }
              ReplyJson(res, models);
              return absl::OkStatus();
            }));
  http.Post(R"(/v2/repository/models/([^/]+)/load)",
            endpoint("RepositoryModelLoad", [service, model_of](const auto& req, auto& res) {
              ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
              inference::RepositoryModelLoadRequest request;
              request.set_model_name(model_of(req));
              RETURN_IF_ERROR(ReadRepositoryParameters(root, request.mutable_parameters()));
              RETURN_IF_ERROR(service->LoadModel(request));
              res.status = 200;
              return absl::OkStatus();
            }));
  http.Post(R"(/v2/repository/models/([^/]+)/unload)",
            endpoint("RepositoryModelUnload", [service, model_of](const auto& req, auto& res) {
              ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
              inference::RepositoryModelUnloadRequest request;
              request.set_model_name(model_of(req));
              RETURN_IF_ERROR(ReadRepositoryParameters(root, request.mutable_parameters()));
              RETURN_IF_ERROR(service->UnloadModel(request));
              res.status = 200;
              return absl::OkStatus();
            }));

  // System shared memory: regions of the caller's POSIX shared-memory objects.
  const auto region_of = [](const httplib::Request& req) {
    return req.matches.size() > 1 ? req.matches[1].str() : std::string();
  };
  const auto shm_status = [service, region_of](const httplib::Request& req, httplib::Response& res,
                                               const std::string& owner) {
    inference::SystemSharedMemoryStatusRequest request;
    request.set_name(region_of(req));
    inference::SystemSharedMemoryStatusResponse response;
    RETURN_IF_ERROR(service->SharedMemoryStatus(owner, request, &response));
    // Triton's REST answer: an array of the regions.
    json regions = json::array();
    for (const auto& [name, region] : response.regions()) {
      regions.push_back({{"name", region.name()},
                         {"key", region.key()},
                         {"offset", region.offset()},
                         {"byte_size", region.byte_size()}});
    }
    ReplyJson(res, regions);
    return absl::OkStatus();
  };
  http.Get("/v2/systemsharedmemory/status", owned_endpoint("SystemSharedMemoryStatus", shm_status));
  http.Get(R"(/v2/systemsharedmemory/region/([^/]+)/status)",
           owned_endpoint("SystemSharedMemoryStatus", shm_status));
  http.Post(
      R"(/v2/systemsharedmemory/region/([^/]+)/register)",
      owned_endpoint("SystemSharedMemoryRegister", [service, region_of](const auto& req, auto& res,
                                                                        const std::string& owner) {
        ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
        inference::SystemSharedMemoryRegisterRequest request;
        request.set_name(region_of(req));
        const auto key = root.find("key");
        if (key == root.end() || !key->is_string()) {
          return absl::InvalidArgumentError(
              absl::StrCat("shared-memory region '", request.name(), "': 'key' must be a string"));
        }
        request.set_key(key->template get<std::string>());
        ASSIGN_OR_RETURN(const std::optional<uint64_t> offset,
                         RegionField(root, request.name(), "offset", /*required=*/false));
        ASSIGN_OR_RETURN(const std::optional<uint64_t> byte_size,
                         RegionField(root, request.name(), "byte_size", /*required=*/true));
        request.set_offset(offset.value_or(0));
        request.set_byte_size(*byte_size);
        RETURN_IF_ERROR(service->RegisterSharedMemory(owner, request));
        res.status = 200;
        return absl::OkStatus();
      }));
  const auto shm_unregister = [service, region_of](const httplib::Request& req,
                                                   httplib::Response& res,
                                                   const std::string& owner) {
    inference::SystemSharedMemoryUnregisterRequest request;
    request.set_name(region_of(req));
    RETURN_IF_ERROR(service->UnregisterSharedMemory(owner, request));
    res.status = 200;
    return absl::OkStatus();
  };
  http.Post("/v2/systemsharedmemory/unregister",
            owned_endpoint("SystemSharedMemoryUnregister", shm_unregister));
  http.Post(R"(/v2/systemsharedmemory/region/([^/]+)/unregister)",
            owned_endpoint("SystemSharedMemoryUnregister", shm_unregister));

  // CUDA shared memory: regions of the caller's device allocations, named by CUDA IPC handles.
  const auto cuda_status = [service, region_of](const httplib::Request& req, httplib::Response& res,
                                                const std::string& owner) {
    inference::CudaSharedMemoryStatusRequest request;
    request.set_name(region_of(req));
    inference::CudaSharedMemoryStatusResponse response;
    RETURN_IF_ERROR(service->CudaSharedMemoryStatus(owner, request, &response));
    json regions = json::array();
    for (const auto& [name, region] : response.regions()) {
      regions.push_back({{"name", region.name()},
                         {"device_id", region.device_id()},
                         {"byte_size", region.byte_size()}});
    }
    ReplyJson(res, regions);
    return absl::OkStatus();
  };
  http.Get("/v2/cudasharedmemory/status", owned_endpoint("CudaSharedMemoryStatus", cuda_status));
  http.Get(R"(/v2/cudasharedmemory/region/([^/]+)/status)",
           owned_endpoint("CudaSharedMemoryStatus", cuda_status));
  http.Post(
      R"(/v2/cudasharedmemory/region/([^/]+)/register)",
      owned_endpoint("CudaSharedMemoryRegister", [service, region_of](const auto& req, auto& res,
                                                                      const std::string& owner) {
        ASSIGN_OR_RETURN(const json root, OptionalObject(req.body));
        inference::CudaSharedMemoryRegisterRequest request;
        request.set_name(region_of(req));
        // Triton's body: {"raw_handle": {"b64": "..."}, "device_id": d, "byte_size": n}.
        const auto handle = root.find("raw_handle");
        const bool has_b64 = handle != root.end() && handle->is_object() &&
                             handle->contains("b64") && handle->at("b64").is_string();
        std::string raw;
        if (!has_b64 ||
            !absl::Base64Unescape(handle->at("b64").template get<std::string>(), &raw)) {
          return absl::InvalidArgumentError(
              absl::StrCat("shared-memory region '", request.name(),
                           "': 'raw_handle' must be {\"b64\": the CUDA IPC handle in base64}"));
        }
        request.set_raw_handle(raw);
        ASSIGN_OR_RETURN(const std::optional<uint64_t> device_id,
                         RegionField(root, request.name(), "device_id", /*required=*/true));
        ASSIGN_OR_RETURN(const std::optional<uint64_t> byte_size,
                         RegionField(root, request.name(), "byte_size", /*required=*/true));
        if (*device_id > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
          return absl::InvalidArgumentError(absl::StrCat("shared-memory region '", request.name(),
                                                         "': 'device_id' ", *device_id,
                                                         " is not a GPU"));
        }
        request.set_device_id(static_cast<int64_t>(*device_id));
        request.set_byte_size(*byte_size);
        RETURN_IF_ERROR(service->RegisterCudaSharedMemory(owner, request));
        res.status = 200;
        return absl::OkStatus();
      }));
  const auto cuda_unregister = [service, region_of](const httplib::Request& req,
                                                    httplib::Response& res,
                                                    const std::string& owner) {
    inference::CudaSharedMemoryUnregisterRequest request;
    request.set_name(region_of(req));
    RETURN_IF_ERROR(service->UnregisterCudaSharedMemory(owner, request));
    res.status = 200;
    return absl::OkStatus();
  };
  http.Post("/v2/cudasharedmemory/unregister",
            owned_endpoint("CudaSharedMemoryUnregister", cuda_unregister));
  http.Post(R"(/v2/cudasharedmemory/region/([^/]+)/unregister)",
            owned_endpoint("CudaSharedMemoryUnregister", cuda_unregister));

  // Triton's endpoints forecastd does not serve: 501, naming what and why, after the same
  // authorization as the gRPC method.
  struct Unsupported {
    const char* pattern;
    const char* grpc_method;
    const char* message;
  };
  static constexpr Unsupported kUnsupported[] = {
      {R"(/v2(?:/models/[^/]+)?/trace/setting)", "TraceSetting",
       "forecastd does not support Triton's request tracing (trace/setting); its Prometheus "
       "metrics give queue and compute time per model"},
      {R"(/v2/models/[^/]+(?:/versions/[^/]+)?/generate(?:_stream)?)", "ModelInfer",
       "forecastd does not support the generate extension: forecasters take tensors at "
       ".../infer"},
  };
  for (const Unsupported& u : kUnsupported) {
    const auto handler = endpoint(u.grpc_method, [message = u.message](const auto&, auto&) {
      return absl::UnimplementedError(message);
    });
    http.Get(u.pattern, handler);
    http.Post(u.pattern, handler);
  }

  // What the routes above did not answer with a body of their own (unknown paths, methods,
  // oversized or malformed requests) still gets KServe's error body.
  http.set_error_handler(
      httplib::Server::HandlerWithResponse([](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return httplib::Server::HandlerResponse::Unhandled;
        std::string message;
        switch (res.status) {
          case 404:
            message = absl::StrCat("forecastd has no endpoint ", req.method, " ", req.path);
            break;
          case 413:
            message = "the request body is larger than --max-message-bytes";
            break;
          case 400:
            message =
                "malformed HTTP request (a POST without a body needs 'Content-Length: 0', as "
                "curl -d '' sends)";
            break;
          default:
            message = absl::StrCat("the HTTP request cannot be served (status ", res.status, ")");
            break;
        }
        res.set_content(kserve::ErrorBody(message), kJsonType);
        return httplib::Server::HandlerResponse::Handled;
      }));
  http.set_exception_handler(
      [](const httplib::Request& req, httplib::Response& res, std::exception_ptr error) {
        std::string what = "unknown exception";
        try {
          std::rethrow_exception(error);
        } catch (const std::exception& e) {
          what = e.what();
        } catch (...) {
        }
        spdlog::error("REST {} {} failed: {}", req.method, req.path, what);
        ReplyError(res, absl::InternalError(absl::StrCat("internal error: ", what)));
      });
}

}  // namespace forecastd
