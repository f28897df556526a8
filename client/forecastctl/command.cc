#include "client/forecastctl/command.h"

#include <algorithm>
#include <cstdlib>
#include <functional>
#include <limits>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/forecastctl/output.h"

namespace forecastd::ctl {

absl::StatusOr<ForecastdClient*> Context::Client() {
  if (client_ == nullptr) {
    SetServerAddress(flags.address);
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
  if (name == "list") command->alias("ls");
  if (name == "show") command->alias("get")->alias("describe");
  command->footer(
      absl::StrCat("Example:\n", example,
                   "\n\nGlobal flags (before or after the command): --address HOST:PORT (env "
                   "FORECASTD_ADDRESS), --timeout SECONDS, --metrics-address HOST:PORT, --json, "
                   "--tls, --tls-ca FILE, --tls-cert FILE, --tls-key FILE, --token-file FILE "
                   "(env FORECASTD_TOKEN_FILE, or the token itself in FORECASTD_TOKEN)"));
  return command;
}

const CLI::Option* FindOption(const CLI::App& app, const CLI::App& root, std::string token) {
  token = token.substr(0, token.find('='));
  for (const CLI::App* at : {&app, &root}) {
    for (const CLI::Option* opt : at->get_options()) {
      if (!opt->get_positional() && opt->check_name(token)) return opt;
    }
  }
  return nullptr;
}

bool ValueFollows(const CLI::Option* opt, const std::string& token) {
  return opt != nullptr && opt->get_type_size_max() > 0 && token.find('=') == std::string::npos;
}

namespace {

// A plain decimal for messages: "0.95", "600000", not "6.000000e+05".
std::string Plain(double v) { return absl::StrFormat("%.10g", v); }

CLI::Validator NumberCheck(std::string description,
                           std::function<std::string(double, const std::string&)> check) {
  return CLI::Validator(
      [check = std::move(check)](std::string& value) -> std::string {
        double v = 0;
        if (!absl::SimpleAtod(value, &v)) return absl::StrCat("'", value, "' is not a number");
        return check(v, value);
      },
      std::move(description));
}

}  // namespace

CLI::Validator Positive() {
  return NumberCheck("NUMBER > 0", [](double v, const std::string& text) -> std::string {
    return v > 0 ? "" : absl::StrCat("must be above 0, not ", text);
  });
}

CLI::Validator NonNegative() {
  return NumberCheck("NUMBER >= 0", [](double v, const std::string& text) -> std::string {
    return v >= 0 ? "" : absl::StrCat("must be 0 or more, not ", text);
  });
}

CLI::Validator Between(double lo, double hi) {
  return NumberCheck(absl::StrCat("NUMBER in [", Plain(lo), ", ", Plain(hi), "]"),
                     [lo, hi](double v, const std::string& text) -> std::string {
                       return v >= lo && v <= hi ? ""
                                                 : absl::StrCat("must be from ", Plain(lo), " to ",
                                                                Plain(hi), ", not ", text);
                     });
}

std::string NearestWord(const std::string& typed, const std::vector<std::string>& candidates) {
  // Optimal string alignment distance: insertions, deletions, substitutions and swaps of
  // neighbours, each 1.
  const auto distance = [](const std::string& a, const std::string& b) {
    std::vector<std::vector<size_t>> d(a.size() + 1, std::vector<size_t>(b.size() + 1));
    for (size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (size_t i = 1; i <= a.size(); ++i) {
      for (size_t j = 1; j <= b.size(); ++j) {
        const size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
        d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
        if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1]) {
          d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
      }
    }
    return d[a.size()][b.size()];
  };
  std::string best;
  size_t best_distance = std::numeric_limits<size_t>::max();
  for (const std::string& c : candidates) {
    const size_t dist = distance(typed, c);
    if (dist < best_distance) {
      best_distance = dist;
      best = c;
    }
  }
  // Near enough: at most 2 edits, and fewer than half the word's letters.
  const size_t limit = std::min<size_t>(2, std::max<size_t>(1, typed.size() / 2));
  return best_distance <= limit ? best : "";
}

}  // namespace forecastd::ctl
