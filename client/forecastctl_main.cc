// forecastctl: the operator's command line for forecastd. main() builds the CLI11 command tree
// (client/forecastctl/*.cc add one command group each), parses, and runs the command that
// was parsed. Exit codes: 0 success, 1 server error, 2 usage error.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/output.h"
#include "kernels/base/version.h"

namespace forecastd::ctl {
namespace {

// "forecastctl models show": the chain of subcommands parsed so far.
std::string CommandPath(const CLI::App& app) {
  std::string path = app.get_name();
  const CLI::App* at = &app;
  while (!at->get_subcommands().empty()) {
    at = at->get_subcommands().front();
    path += " " + at->get_name();
  }
  return path;
}

int Main(int argc, char** argv) {
  Context context;
  CLI::App app(
      "forecastctl: operate a forecastd daemon: models, forecasts, tick streams, training "
      "jobs, benchmarks and metrics.",
      "forecastctl");
  app.set_version_flag("--version", absl::StrCat("forecastctl ", kForecastdVersion));
  // Global flags may follow the subcommand: `forecastctl models list --json`.
  app.fallthrough();
  app.require_subcommand(1);
  app.footer(
      "Examples:\n"
      "  forecastctl status\n"
      "  forecastctl models list\n"
      "  forecastctl predict demo_lstm --csv models/sample_input.csv\n"
      "  forecastctl stream demo_lstm --csv models/sample_input.csv --key AAPL\n"
      "  forecastctl train my_model --inline-csv series.csv --epochs 20 --promote\n"
      "  forecastctl --address 10.0.0.5:8001 jobs list --json\n"
      "  forecastctl --address fd.example:8001 --tls-ca ca.pem --token-file ~/.fd-token status\n"
      "\n"
      "Run 'forecastctl COMMAND --help' for a command's flags and an example.\n"
      "Exit codes: 0 success, 1 server error, 2 usage error.");
  GlobalFlags& flags = context.flags;
  app.add_option("--address", flags.address, "forecastd gRPC address, host:port")
      ->envname("FORECASTD_ADDRESS")
      ->capture_default_str()
      ->check([](const std::string& v) { return v.empty() ? "the address is empty" : ""; });
  app.add_option("--timeout", flags.timeout_seconds, "seconds each unary call may take")
      ->capture_default_str()
      ->check(CLI::PositiveNumber);
  app.add_option("--metrics-address", flags.metrics_address,
                 "forecastd metrics address (host:port) for 'metrics'")
      ->envname("FORECASTD_METRICS_ADDRESS")
      ->capture_default_str()
      ->check([](const std::string& v) { return v.empty() ? "the address is empty" : ""; });
  app.add_flag("--json", flags.json,
               "machine-readable JSON output (protobuf JSON for RPC results)");
  app.add_flag("--tls", flags.tls.enabled,
               "connect with TLS, trusting the system's CAs (implied by --tls-ca and --tls-cert)");
  app.add_option("--tls-ca", flags.tls.ca_path,
                 "PEM CA certificates to verify forecastd's certificate with");
  app.add_option("--tls-cert", flags.tls.cert_path,
                 "PEM client certificate, for a forecastd started with --tls-client-ca");
  app.add_option("--tls-key", flags.tls.key_path, "PEM private key of --tls-cert");
  app.add_option("--token-file", flags.token_file,
                 "file holding the bearer token to send (default: the token in env "
                 "FORECASTD_TOKEN, if set)")
      ->envname("FORECASTD_TOKEN_FILE");

  AddAdminCommands(app, context);
  AddPredictCommand(app, context);
  AddStreamCommands(app, context);
  AddTrainCommands(app, context);
  AddBenchCommand(app, context);
  AddMetricsCommand(app, context);
  AddCompletionCommand(app, context);

  if (argc <= 1) {
    std::cout << app.help();
    return kExitUsage;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    const std::string path = CommandPath(app);
    UsageError(e.what());
    std::fprintf(stderr, "Run '%s --help' for usage.\n", path.c_str());
    return kExitUsage;
  }
  if (!context.action) {
    std::cout << app.help();
    return kExitUsage;
  }
  try {
    return context.action();
  } catch (const std::exception& e) {
    return ServerError(absl::InternalError(e.what()));
  }
}

}  // namespace
}  // namespace forecastd::ctl

int main(int argc, char** argv) { return forecastd::ctl::Main(argc, argv); }
