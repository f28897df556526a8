#include "client/forecastctl/command.h"

#include <cstdlib>
#include <utility>

#include "absl/strings/str_cat.h"

namespace forecastd::ctl {

absl::StatusOr<ForecastdClient*> Context::Client() {
  if (client_ == nullptr) {
    ForecastdClient::Options options;
    options.address = flags.address;
    options.timeout = absl::Seconds(flags.timeout_seconds);
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        MakeChannelCredentials(flags.tls);
    if (!credentials.ok()) return credentials.status();
    options.credentials = *std::move(credentials);
    if (!flags.token_file.empty()) {
      absl::StatusOr<std::string> token = ReadBearerToken(flags.token_file);
      if (!token.ok()) return token.status();
      options.bearer_token = *std::move(token);
    } else if (const char* token = std::getenv("FORECASTD_TOKEN"); token != nullptr) {
      options.bearer_token = token;
    }
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
                   "FORECASTD_ADDRESS), --timeout SECONDS, --metrics-address HOST:PORT, --json, "
                   "--tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --token-file FILE "
                   "(env FORECASTD_TOKEN_FILE, or the token itself in FORECASTD_TOKEN)"));
  return command;
}

}  // namespace forecastd::ctl
