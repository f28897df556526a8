// forecastctl's command tree: the global flags every command reads, the Context a parsed
// command runs with, and one function per command group that adds its subcommands to the
// CLI11 app. A command's CLI11 callback only records what to run (Context::action); main()
// runs it once parsing has succeeded, so a parse error never leaves a half-done command.
// Everything here runs on the main thread.
#ifndef FORECASTD_CLIENT_FORECASTCTL_COMMAND_H_
#define FORECASTD_CLIENT_FORECASTCTL_COMMAND_H_

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/status/statusor.h"
#include "client/client_security.h"
#include "client/forecastd_client.h"

namespace forecastd::ctl {

inline constexpr char kDefaultAddress[] = "127.0.0.1:8001";
inline constexpr char kDefaultMetricsAddress[] = "127.0.0.1:8002";

// Flags of the root command, accepted before or after any subcommand.
struct GlobalFlags {
  std::string address = kDefaultAddress;                 // --address / FORECASTD_ADDRESS
  double timeout_seconds = 30.0;                         // --timeout, per unary call
  std::string metrics_address = kDefaultMetricsAddress;  // --metrics-address
  bool json = false;                                     // --json: machine-readable output
  // --tls, --tls-ca, --tls-cert, --tls-key: how the gRPC channel is secured.
  ClientTlsFiles tls;
  // --token-file / FORECASTD_TOKEN_FILE; when empty, the token is FORECASTD_TOKEN's value.
  std::string token_file;
};

class Context {
 public:
  GlobalFlags flags;
  // Set by the callback of the subcommand that was parsed; returns the exit code.
  std::function<int()> action;

  // The client for --address, --timeout, the TLS files and the token, made on first use.
  absl::StatusOr<ForecastdClient*> Client();

 private:
  std::unique_ptr<ForecastdClient> client_;
};

// Adds a subcommand with a description and an "Example:" footer (and the note on global
// flags); every command is made with it so `--help` always shows an example. `list` also
// answers to `ls`, and `show` to `get` and `describe`, as kubectl users type them.
CLI::App* AddCommand(CLI::App& parent, const std::string& name, const std::string& description,
                     const std::string& example);

// Value checks whose messages state the valid range in plain numbers ("must be above 0, not
// -3"), for CLI11 options (CLI11's own print the limits of double).
CLI::Validator Positive();     // > 0
CLI::Validator NonNegative();  // >= 0
CLI::Validator Between(double lo, double hi);

// The word among `candidates` nearest to `typed` (edit distance, a swap of two neighbouring
// letters counting once), when it is near enough to be a likely typo; "" otherwise.
std::string NearestWord(const std::string& typed, const std::vector<std::string>& candidates);

// The option of `app` (or, as global flags fall through, of the root) named by `token`
// ("--json", "-o", "--address=x"); nullptr when none is.
const CLI::Option* FindOption(const CLI::App& app, const CLI::App& root, std::string token);
// Whether the word after `token` is the value of `opt` (an option that takes one, given as
// "--flag value" rather than "--flag=value").
bool ValueFollows(const CLI::Option* opt, const std::string& token);

// status; models list|show|load|unload|promote|delete.
void AddAdminCommands(CLI::App& app, Context& context);
// predict.
void AddPredictCommand(CLI::App& app, Context& context);
// train; jobs list|show|watch|cancel.
void AddTrainCommands(CLI::App& app, Context& context);
// stream, streams: tick streams.
void AddStreamCommands(CLI::App& app, Context& context);
// bench.
void AddBenchCommand(CLI::App& app, Context& context);
// metrics.
void AddMetricsCommand(CLI::App& app, Context& context);
// completion bash|zsh|fish, and the hidden `__complete` the scripts call: add it last, as it
// completes from `app`'s commands and options.
void AddCompletionCommand(CLI::App& app, Context& context);

}  // namespace forecastd::ctl

#endif  // FORECASTD_CLIENT_FORECASTCTL_COMMAND_H_
