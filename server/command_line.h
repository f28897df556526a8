// Turns forecastd's command line into ServerOptions, or into the text and exit code that
// `--help`, `--version` or a usage error call for. Pure function of its arguments, so it is
// thread-safe and testable without starting anything.
#ifndef FORECASTD_SERVER_COMMAND_LINE_H_
#define FORECASTD_SERVER_COMMAND_LINE_H_

#include <string>
#include <vector>
#include "absl/strings/string_view.h"

#include "absl/status/status.h"
#include "server/server_options.h"

namespace forecastd {

// Exit codes of the forecastd binary.
inline constexpr int kExitOk = 0;
inline constexpr int kExitRuntimeError = 1;  // could not start or failed while serving
inline constexpr int kExitUsageError = 2;    // bad flags or flag values

struct CommandLine {
  ServerOptions options;
  // When set, print `message` (to stdout for exit code 0, stderr otherwise) and exit with
  // `exit_code` instead of serving.
  bool should_exit = false;
  int exit_code = kExitOk;
  std::string message;
};

// `args[0]` is the program name.
CommandLine ParseCommandLine(const std::vector<std::string>& args);

// "host:port" with a non-empty host (a bracketed IPv6 literal is fine) and a port in
// 0..65535; INVALID_ARGUMENT naming `flag` otherwise.
absl::Status ValidateHostPort(absl::string_view flag, absl::string_view address);

// The version line with the GPU libraries built in, e.g. "forecastd 0.1.0 (git 1a2b3c4), CUDA
// 13.0, cuDNN 9.13.0, NCCL 2.28.3" or "forecastd 0.1.0 (git 1a2b3c4), CPU only".
std::string VersionString();

}  // namespace forecastd

#endif  // FORECASTD_SERVER_COMMAND_LINE_H_
