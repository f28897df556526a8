#include "client/forecastctl/command.h"

#include <utility>

#include "absl/strings/str_cat.h"

namespace forecastd::ctl {

absl::StatusOr<ForecastdClient*> Context::Client() {
  if (client_ == nullptr) {
    ForecastdClient::Options options;
    options.address = flags.address;
    options.timeout = absl::Seconds(flags.timeout_seconds);
    absl::StatusOr<std::unique_ptr<ForecastdClient>> client = ForecastdClient::Create(options);
    if (!client.ok()) return client.status();
    client_ = *std::move(client);
  }
  return client_.get();
}

CLI::App* AddCommand(CLI::App& parent, const std::string& name, const std::string& description,
                     const std::string& example) {
  CLI::App* command = parent.add_subcommand(name, description);
  command->footer(
      absl::StrCat("Example:\n", example,
                   "\n\nGlobal flags (before or after the command): --address HOST:PORT (env "
                   "FORECASTD_ADDRESS), --timeout SECONDS, --metrics-address HOST:PORT, --json"));
  return command;
}

}  // namespace forecastd::ctl
