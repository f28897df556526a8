#include "server/command_line.h"

#include <string>
#include <vector>

#include "tests/testing/catch.h"

namespace forecastd {
namespace {

CommandLine Parse(std::vector<std::string> flags) {
  flags.insert(flags.begin(), "forecastd");
  return ParseCommandLine(flags);
}

TEST_CASE("Defaults are Triton's ports, the models/ repository and the CPU", "[unit][flags]") {
  const CommandLine cl = Parse({});
  REQUIRE_FALSE(cl.should_exit);
  REQUIRE(cl.options.grpc_address == "127.0.0.1:8001");
  REQUIRE(cl.options.http_address == "127.0.0.1:8000");
  REQUIRE(cl.options.http_threads == 16);
  REQUIRE(cl.options.metrics_address == "127.0.0.1:8002");
  REQUIRE(cl.options.model_repository == "models");
  REQUIRE(cl.options.devices == std::vector<DeviceSpec>{{DeviceKind::kCpu, 0}});
  REQUIRE(cl.options.log.level == spdlog::level::info);
  REQUIRE(cl.options.log.format == LogFormat::kText);
}

TEST_CASE("Every flag lands in the options", "[unit][flags]") {
  const CommandLine cl = Parse(
      {"--grpc-address", "0.0.0.0:9001", "--metrics-address=[::1]:9002", "--model-repository",
       "/srv/models", "--devices", "cpu,cuda:1", "--log-level", "debug", "--log-format", "json",
       "--shutdown-grace-seconds", "2.5", "--http-address", "0.0.0.0:9000", "--http-threads", "4"});
  REQUIRE_FALSE(cl.should_exit);
  CAPTURE(cl.message);
  REQUIRE(cl.options.grpc_address == "0.0.0.0:9001");
  REQUIRE(cl.options.http_address == "0.0.0.0:9000");
  REQUIRE(cl.options.http_threads == 4);
  REQUIRE(Parse({"--http-address", ""}).options.http_address.empty());
  REQUIRE(cl.options.metrics_address == "[::1]:9002");
  REQUIRE(cl.options.model_repository == "/srv/models");
  REQUIRE(cl.options.devices ==
          std::vector<DeviceSpec>{{DeviceKind::kCpu, 0}, {DeviceKind::kCuda, 1}});
  REQUIRE(cl.options.log.level == spdlog::level::debug);
  REQUIRE(cl.options.log.format == LogFormat::kJson);
  REQUIRE(cl.options.shutdown_grace == absl::Milliseconds(2500));
  // Serving-path switches: on by default, each flag turns its one off.
  const CommandLine defaults = Parse({});
  REQUIRE(defaults.options.inline_when_idle);
  REQUIRE(defaults.options.gpu_completion_thread);
  REQUIRE(defaults.options.tick_batches_per_model == -1);  // one on the CPU, none on a GPU
  REQUIRE(defaults.options.gpu_resident_step_idle_us == 2000);
  const CommandLine serving =
      Parse({"--no-inline-when-idle", "--no-gpu-completion-thread", "--tick-batches-per-model", "3",
             "--gpu-resident-step-idle-us", "0"});
  REQUIRE_FALSE(serving.should_exit);
  REQUIRE_FALSE(serving.options.inline_when_idle);
  REQUIRE_FALSE(serving.options.gpu_completion_thread);
  REQUIRE(serving.options.tick_batches_per_model == 3);
  REQUIRE(serving.options.gpu_resident_step_idle_us == 0);
  // CPU workers: planned from the machine unless given.
  REQUIRE(defaults.options.cpu_workers == 0);
  REQUIRE(defaults.options.cpu_pinning == "auto");
  REQUIRE(defaults.options.cpu_min_batch_rows == 0);
  REQUIRE(defaults.options.cpu_helpers == -1);
  const CommandLine cpu = Parse({"--cpu-workers", "4", "--cpu-pinning", "core",
                                 "--cpu-min-batch-rows", "2", "--cpu-helpers", "0"});
  REQUIRE_FALSE(cpu.should_exit);
  REQUIRE(cpu.options.cpu_workers == 4);
  REQUIRE(cpu.options.cpu_pinning == "core");
  REQUIRE(cpu.options.cpu_min_batch_rows == 2);
  REQUIRE(cpu.options.cpu_helpers == 0);
}

TEST_CASE("Security and limit flags land in the options, with sane defaults", "[unit][flags]") {
  const CommandLine defaults = Parse({});
  REQUIRE_FALSE(defaults.options.tls.enabled());
  REQUIRE(defaults.options.token_file.empty());
  REQUIRE(defaults.options.max_batch_rows == 1024);
  REQUIRE(defaults.options.max_request_memory_bytes == int64_t{512} << 20);
  REQUIRE(defaults.options.max_train_series_rows == 10'000'000);
  REQUIRE(defaults.options.max_queue_per_model == 1024);

  const CommandLine cl = Parse({"--tls-cert", "server.crt", "--tls-key", "server.key",
                                "--tls-client-ca", "ca.crt", "--token-file", "/etc/fd/tokens",
                                "--max-batch-rows", "64", "--max-request-memory-bytes", "1048576",
                                "--max-train-series-rows", "5000", "--max-queue-per-model", "0"});
  CAPTURE(cl.message);
  REQUIRE_FALSE(cl.should_exit);
  REQUIRE(cl.options.tls.cert_path == "server.crt");
  REQUIRE(cl.options.tls.key_path == "server.key");
  REQUIRE(cl.options.tls.client_ca_path == "ca.crt");
  REQUIRE(cl.options.tls.mutual());
  REQUIRE(cl.options.token_file == "/etc/fd/tokens");
  REQUIRE(cl.options.max_batch_rows == 64);
  REQUIRE(cl.options.max_request_memory_bytes == 1048576);
  REQUIRE(cl.options.max_train_series_rows == 5000);
  REQUIRE(cl.options.max_queue_per_model == 0);

  const CommandLine help = Parse({"--help"});
  for (const char* flag :
       {"--tls-cert", "--tls-key", "--tls-client-ca", "--token-file", "no authentication", "SIGHUP",
        "--max-batch-rows", "--max-request-memory-bytes", "--max-train-series-rows",
        "--max-queue-per-model"}) {
    CAPTURE(flag);
    REQUIRE(help.message.find(flag) != std::string::npos);
  }
}

TEST_CASE("--help and --version print and exit 0", "[unit][flags]") {
  const CommandLine help = Parse({"--help"});
  REQUIRE(help.should_exit);
  REQUIRE(help.exit_code == kExitOk);
  for (const char* flag :
       {"--grpc-address", "--http-address", "--metrics-address", "--model-repository", "--devices",
        "--log-level", "--log-format", "Example:"}) {
    CAPTURE(flag);
    REQUIRE(help.message.find(flag) != std::string::npos);
  }
  const CommandLine version = Parse({"--version"});
  REQUIRE(version.should_exit);
  REQUIRE(version.exit_code == kExitOk);
  REQUIRE(version.message.rfind("forecastd 0.", 0) == 0);
  // It names the GPU libraries built in, so that an image's variant can be told from outside.
#if FORECASTD_WITH_CUDA
  CAPTURE(version.message);
  REQUIRE(version.message.find(", CUDA 1") != std::string::npos);
  REQUIRE(version.message.find(", cuDNN 9.") != std::string::npos);
  REQUIRE(version.message.find(", NCCL 2.") != std::string::npos);
#else
  REQUIRE(version.message.find(", CPU only") != std::string::npos);
#endif
}

TEST_CASE("Bad flags and values are usage errors that say what is wrong", "[unit][flags]") {
  struct Case {
    std::vector<std::string> flags;
    std::string expected;
  };
  const std::vector<Case> cases = {
      {{"--no-such-flag"}, "--no-such-flag"},
      {{"--grpc-address", "localhost"}, "bad --grpc-address 'localhost': no port"},
      {{"--grpc-address", ":8001"}, "no host"},
      {{"--metrics-address", "127.0.0.1:70000"}, "port must be a number from 0 to 65535"},
      {{"--metrics-address", "::1:8002"}, "needs brackets"},
      {{"--http-address", "localhost"}, "bad --http-address 'localhost': no port"},
      {{"--http-threads", "0"}, "--http-threads must be >= 1"},
      {{"--devices", "tpu:0"}, "--devices: bad device 'tpu:0'"},
      {{"--log-level", "loud"}, "--log-level: bad log level 'loud'"},
      {{"--log-format", "xml"}, "--log-format: bad log format 'xml'"},
      {{"--shutdown-grace-seconds", "-1"}, "--shutdown-grace-seconds"},
      {{"--shutdown-grace-seconds", "soon"}, "--shutdown-grace-seconds"},
      {{"--model-repository", ""}, "--model-repository is empty"},
      {{"stray-argument"}, "stray-argument"},
      {{"--tls-cert", "server.crt"}, "--tls-cert and --tls-key go together"},
      {{"--tls-key", "server.key"}, "--tls-cert and --tls-key go together"},
      {{"--tls-client-ca", "ca.crt"}, "--tls-client-ca needs --tls-cert and --tls-key"},
      {{"--max-batch-rows", "0"}, "--max-batch-rows must be >= 1"},
      {{"--max-request-memory-bytes", "100"}, "--max-request-memory-bytes must be >= 1024"},
      {{"--max-train-series-rows", "0"}, "--max-train-series-rows must be >= 1"},
      {{"--max-queue-per-model", "-1"}, "--max-queue-per-model"},
      {{"--tick-batches-per-model", "-2"}, "--tick-batches-per-model"},
      {{"--gpu-resident-step-idle-us", "-1"}, "--gpu-resident-step-idle-us"},
      {{"--cpu-workers", "-1"}, "--cpu-workers must be between 0 and 1024"},
      {{"--cpu-min-batch-rows", "-1"}, "--cpu-min-batch-rows must be between 0 and 1048576"},
      {{"--cpu-helpers", "-2"}, "--cpu-helpers must be between -1 and 1023"},
      {{"--cpu-pinning", "socket"},
       "--cpu-pinning: bad CPU pinning 'socket': expected auto, none, node or core"},
  };
  for (const Case& c : cases) {
    const CommandLine cl = Parse(c.flags);
    CAPTURE(c.flags, cl.message);
    REQUIRE(cl.should_exit);
    REQUIRE(cl.exit_code == kExitUsageError);
    REQUIRE(cl.message.find(c.expected) != std::string::npos);
    REQUIRE(cl.message.find("forecastd --help") != std::string::npos);
  }
}

}  // namespace
}  // namespace forecastd
