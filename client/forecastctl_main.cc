// forecastctl: the operator's command line for forecastd. main() builds the CLI11 command tree
// (client/forecastctl/*.cc add one command group each), parses, and runs the command that
// was parsed. Exit codes: 0 success, 1 server error, 2 usage error.
#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

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

// After a parse error: the first word or flag of `args` that names no command or option where
// it stands, and the nearest that does ("did you mean ..."); empty when every word is known.
struct Typo {
  std::string typed;
  std::string suggestion;
  std::string where;  // the command path it was typed after
};
Typo FindTypo(const CLI::App& root, const std::vector<std::string>& args) {
  const CLI::App* at = &root;
  std::string where = root.get_name();
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& token = args[i];
    if (token.size() > 1 && token[0] == '-') {
      const CLI::Option* opt = FindOption(*at, root, token);
      if (opt == nullptr) {
        std::vector<std::string> names;
        for (const CLI::App* app : {at, &root}) {
          for (const CLI::Option* o : app->get_options()) {
            for (const std::string& l : o->get_lnames()) names.push_back("--" + l);
          }
        }
        return {token, NearestWord(token.substr(0, token.find('=')), names), where};
      }
      if (ValueFollows(opt, token)) ++i;
      continue;
    }
    const std::vector<const CLI::App*> subcommands =
        at->get_subcommands([](const CLI::App*) { return true; });
    if (subcommands.empty()) continue;  // a positional argument of `at`
    const CLI::App* next = nullptr;
    std::vector<std::string> names;
    for (const CLI::App* sub : subcommands) {
      if (sub->check_name(token)) next = sub;
      if (sub->get_group().empty()) continue;  // hidden (__complete): never suggested
      names.push_back(sub->get_name());
      for (const std::string& alias : sub->get_aliases()) names.push_back(alias);
    }
    if (next == nullptr) return {token, NearestWord(token, names), where};
    at = next;
    where += " " + next->get_name();
  }
  return {};
}

// kubectl's word order: `get models`, `get model NAME`, `describe job ID`, `get jobs` become
// `models list`, `models show NAME`, `jobs show ID`, `jobs list`. Other words stay as they are.
std::vector<std::string> KubectlOrder(const CLI::App& root, std::vector<std::string> args) {
  // The first word that is not a global flag or its value.
  size_t i = 0;
  while (i < args.size() && args[i].size() > 1 && args[i][0] == '-') {
    i += ValueFollows(FindOption(root, root, args[i]), args[i]) ? 2 : 1;
  }
  if (i + 1 >= args.size() || (args[i] != "get" && args[i] != "describe")) return args;
  std::string resource = args[i + 1];
  if (resource == "model" || resource == "job") resource += "s";
  if (resource != "models" && resource != "jobs") return args;
  const bool named = i + 2 < args.size() && args[i + 2].rfind('-', 0) != 0;
  const std::string verb = args[i] == "describe" || named ? "show" : "list";
  args[i] = resource;
  args[i + 1] = verb;
  return args;
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
      "  forecastctl get models; forecastctl describe model demo_lstm   # kubectl's order\n"
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
      ->check(Positive());
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
  std::vector<std::string> args =
      KubectlOrder(app, std::vector<std::string>(argv + 1, argv + argc));
  try {
    // CLI11 parses a reversed vector (it pops arguments off the back).
    std::vector<std::string> reversed(args.rbegin(), args.rend());
    app.parse(reversed);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::string path = CommandPath(app);
    const Typo typo = FindTypo(app, args);
    if (!typo.typed.empty()) {
      const bool flag = typo.typed[0] == '-';
      UsageError(absl::StrCat(
          "'", typo.typed, "' is not a ", flag ? "flag" : "command", " of '", typo.where, "'",
          typo.suggestion.empty() ? "" : absl::StrCat("; did you mean '", typo.suggestion, "'?")));
      path = typo.where;
    } else {
      UsageError(e.what());
    }
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
