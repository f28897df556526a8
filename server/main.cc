// forecastd: flags in, options out, serve until SIGTERM or SIGINT.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "server/command_line.h"
#include "server/logging.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

int main(int argc, char** argv) {
  const forecastd::CommandLine command_line =
      forecastd::ParseCommandLine(std::vector<std::string>(argv, argv + argc));
  if (command_line.should_exit) {
    (command_line.exit_code == forecastd::kExitOk ? std::cout : std::cerr) << command_line.message;
    return command_line.exit_code;
  }
  forecastd::ConfigureLogging(command_line.options.log);

  // Block the termination signals before any thread starts, so every thread inherits the
  // mask and only sigwait() below sees them.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<forecastd::Server>> server =
      forecastd::Server::Create(command_line.options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return forecastd::kExitRuntimeError;
  }

  int signal_number = 0;
  if (sigwait(&stop_signals, &signal_number) != 0) {
    spdlog::critical("sigwait failed: {}", std::strerror(errno));
    return forecastd::kExitRuntimeError;
  }
  spdlog::info("received SIG{}, shutting down", sigabbrev_np(signal_number));
  (*server)->Shutdown();
  return forecastd::kExitOk;
}
