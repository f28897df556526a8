// forecastd: flags in, options out, serve until SIGTERM or SIGINT; SIGHUP re-reads the token
// file.
#include <cerrno>
#include <csignal>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "absl/synchronization/mutex.h"
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
  // Debian's abseil is built without NDEBUG, so every absl::Mutex acquisition would also record
  // a stack trace into a lock-order graph: a few per cent of the daemon's CPU under load. The
  // tests (built in-process against the same abseil) keep the detection on.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);

  // Block the signals handled here before any thread starts, so every thread inherits the
  // mask and only sigwait() below sees them. A SIGHUP during the start waits until then.
  sigset_t handled_signals;
  sigemptyset(&handled_signals);
  sigaddset(&handled_signals, SIGTERM);
  sigaddset(&handled_signals, SIGINT);
  sigaddset(&handled_signals, SIGHUP);
  pthread_sigmask(SIG_BLOCK, &handled_signals, nullptr);
  std::signal(SIGPIPE, SIG_IGN);

  absl::StatusOr<std::unique_ptr<forecastd::Server>> server =
      forecastd::Server::Create(command_line.options);
  if (!server.ok()) {
    spdlog::critical("cannot start: {}", server.status().ToString());
    return forecastd::kExitRuntimeError;
  }

  int signal_number = 0;
  for (;;) {
    if (sigwait(&handled_signals, &signal_number) != 0) {
      spdlog::critical("sigwait failed: {}", std::strerror(errno));
      return forecastd::kExitRuntimeError;
    }
    if (signal_number != SIGHUP) break;
    spdlog::info("received SIGHUP, reloading the token file");
    // The outcome is logged; a bad file leaves the old tokens in force.
    (*server)->ReloadTokens().IgnoreError();
  }
  spdlog::info("received SIG{}, shutting down", sigabbrev_np(signal_number));
  (*server)->Shutdown();
  return forecastd::kExitOk;
}
