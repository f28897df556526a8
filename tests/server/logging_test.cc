#include "server/logging.h"

#include <memory>
#include <sstream>
#include <string>

#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

std::string LogOneLine(LogFormat format, const std::string& message) {
  std::ostringstream out;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out);
  ApplyLogFormat(*sink, format);
  spdlog::logger logger("test", sink);
  logger.warn("{}", message);
  return out.str();
}

TEST_CASE("JSON log lines are one valid object with the message escaped", "[unit][logging]") {
  const std::string line = LogOneLine(LogFormat::kJson, "model \"m\\1\"\nloaded\t\x01ok");
  CAPTURE(line);
  REQUIRE(line.front() == '{');
  REQUIRE(line.find('\n') == line.size() - 1);  // exactly one line
  REQUIRE(line.find(R"("level":"warning")") != std::string::npos);
  REQUIRE(line.find(R"("msg":"model \"m\\1\"\nloaded\t\u0001ok"})") != std::string::npos);
  REQUIRE(line.find(R"("ts":")") != std::string::npos);
  REQUIRE(line.find(R"(Z",)") != std::string::npos);  // UTC
}

TEST_CASE("Text log lines carry time, level and message", "[unit][logging]") {
  const std::string line = LogOneLine(LogFormat::kText, "hello");
  CAPTURE(line);
  REQUIRE(line.find("Z warning [") != std::string::npos);
  REQUIRE(line.find("] hello\n") != std::string::npos);
}

TEST_CASE("Log levels and formats parse, bad ones are rejected", "[unit][logging]") {
  REQUIRE(ParseLogLevel("trace").value() == spdlog::level::trace);
  REQUIRE(ParseLogLevel("warn").value() == spdlog::level::warn);
  REQUIRE(ParseLogLevel("error").value() == spdlog::level::err);
  REQUIRE(ParseLogLevel("off").value() == spdlog::level::off);
  REQUIRE(ParseLogLevel("INFO").status().code() == absl::StatusCode::kInvalidArgument);
  REQUIRE(ParseLogFormat("json").value() == LogFormat::kJson);
  REQUIRE(ParseLogFormat("yaml").status().code() == absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace forecastd
