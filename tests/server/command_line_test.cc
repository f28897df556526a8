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
  REQUIRE(cl.options.metrics_address == "127.0.0.1:8002");
  REQUIRE(cl.options.model_repository == "models");
  REQUIRE(cl.options.devices == std::vector<DeviceSpec>{{DeviceKind::kCpu, 0}});
  REQUIRE(cl.options.log.level == spdlog::level::info);
  REQUIRE(cl.options.log.format == LogFormat::kText);
}

TEST_CASE("Every flag lands in the options", "[unit][flags]") {
  const CommandLine cl =
      Parse({"--grpc-address", "0.0.0.0:9001", "--metrics-address=[::1]:9002", "--model-repository",
             "/srv/models", "--devices", "cpu,cuda:1", "--log-level", "debug", "--log-format",
             "json", "--shutdown-grace-seconds", "2.5"});
  REQUIRE_FALSE(cl.should_exit);
  CAPTURE(cl.message);
  REQUIRE(cl.options.grpc_address == "0.0.0.0:9001");
  REQUIRE(cl.options.metrics_address == "[::1]:9002");
  REQUIRE(cl.options.model_repository == "/srv/models");
  REQUIRE(cl.options.devices ==
          std::vector<DeviceSpec>{{DeviceKind::kCpu, 0}, {DeviceKind::kCuda, 1}});
  REQUIRE(cl.options.log.level == spdlog::level::debug);
  REQUIRE(cl.options.log.format == LogFormat::kJson);
  REQUIRE(cl.options.shutdown_grace == absl::Milliseconds(2500));
}

TEST_CASE("--help and --version print and exit 0", "[unit][flags]") {
  const CommandLine help = Parse({"--help"});
  REQUIRE(help.should_exit);
  REQUIRE(help.exit_code == kExitOk);
  for (const char* flag : {"--grpc-address", "--metrics-address", "--model-repository", "--devices",
                           "--log-level", "--log-format", "Example:"}) {
    CAPTURE(flag);
    REQUIRE(help.message.find(flag) != std::string::npos);
  }
  const CommandLine version = Parse({"--version"});
  REQUIRE(version.should_exit);
  REQUIRE(version.exit_code == kExitOk);
  REQUIRE(version.message.rfind("forecastd 0.", 0) == 0);
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
      {{"--devices", "tpu:0"}, "--devices: bad device 'tpu:0'"},
      {{"--log-level", "loud"}, "--log-level: bad log level 'loud'"},
      {{"--log-format", "xml"}, "--log-format: bad log format 'xml'"},
      {{"--shutdown-grace-seconds", "-1"}, "--shutdown-grace-seconds"},
      {{"--shutdown-grace-seconds", "soon"}, "--shutdown-grace-seconds"},
      {{"--model-repository", ""}, "--model-repository is empty"},
      {{"stray-argument"}, "stray-argument"},
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
