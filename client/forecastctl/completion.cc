// `forecastctl completion bash|zsh|fish` and the hidden `forecastctl __complete -- WORDS...`
// the scripts call. The scripts only pass the words typed so far and offer what comes back;
// __complete walks the CLI11 command tree itself (so it never drifts from the commands that
// exist) and, where a model name, a version, a job id or a stream key goes, asks the server at
// the --address typed on the line (or FORECASTD_ADDRESS) with a short deadline.
//
// Protocol: one candidate per line; the single line ":files" asks the shell for file names.
#include <algorithm>
#include <iostream>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/output.h"

namespace forecastd::ctl {
namespace {

// How long __complete waits for the server: a shell waits on it while the user types.
constexpr double kCompletionTimeoutSeconds = 2.0;

constexpr char kFiles[] = ":files";

struct CompletionArgs {
  std::string shell;
  std::vector<std::string> words;
};

bool Hidden(const CLI::App& app) { return app.get_group().empty(); }

// The choices of a flag checked by CLI::IsMember: its type name reads "TEXT:{a,b,c}".
std::vector<std::string> Choices(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  const size_t open = type.find('{');
  const size_t close = type.find('}', open);
  if (open == std::string::npos || close == std::string::npos) return {};
  return absl::StrSplit(type.substr(open + 1, close - open - 1), ',');
}

bool Numeric(const CLI::Option& option) {
  const std::string type = option.get_type_name();
  return absl::StartsWith(type, "INT") || absl::StartsWith(type, "UINT") ||
         absl::StartsWith(type, "FLOAT") || absl::StartsWith(type, "NUMBER");
}

// Where the words typed so far leave the command line.
struct LineState {
  const CLI::App* command = nullptr;      // the deepest subcommand typed
  std::vector<std::string> positionals;   // its positional arguments typed so far
  const CLI::Option* value_of = nullptr;  // the option whose value the last word is
  // The global flags typed (--address, --tls-ca, --token-file, ...): name and value.
  std::vector<std::pair<std::string, std::string>> global_flags;
};

LineState Walk(const CLI::App& root, const std::vector<std::string>& words) {
  LineState state{&root, {}, nullptr, {}};
  // Every word but the last, which is the one being completed.
  for (size_t i = 0; i + 1 < words.size(); ++i) {
    const std::string& word = words[i];
    if (word.size() > 1 && word[0] == '-') {
      const CLI::Option* option = FindOption(*state.command, root, word);
      const size_t eq = word.find('=');
      std::string value = eq == std::string::npos ? "true" : word.substr(eq + 1);
      if (ValueFollows(option, word)) {
        if (i + 2 == words.size()) {
          state.value_of = option;  // its value is being typed
          continue;
        }
        value = words[++i];
      }
      const std::string name = word.substr(0, eq);
      if (option != nullptr && root.get_option_no_throw(name) == option) {
        state.global_flags.emplace_back(name, std::move(value));
      }
      continue;
    }
    const CLI::App* next = nullptr;
    for (const CLI::App* sub :
         state.command->get_subcommands([](const CLI::App*) { return true; })) {
      if (!Hidden(*sub) && sub->check_name(word)) next = sub;
    }
    if (next != nullptr && state.positionals.empty()) {
      state.command = next;
    } else {
      state.positionals.push_back(word);
    }
  }
  return state;
}

// The global flags typed on the line applied to `context`, so that names come from the server
// the command would talk to.
void ApplyGlobalFlags(CLI::App& root, const LineState& state, Context& context) {
  for (const auto& [name, value] : state.global_flags) {
    CLI::Option* option = root.get_option_no_throw(name);
    try {
      option->clear();
      option->add_result(value);
      option->run_callback();
    } catch (const CLI::Error&) {
      // A value that does not parse yet (the user is still typing): the default stays.
    }
  }
  context.flags.timeout_seconds =
      std::min(context.flags.timeout_seconds, kCompletionTimeoutSeconds);
}

// What the server names for `kind` ("model", "version", "job", "key"); none when it cannot be
// reached in time (completion must never print an error into the user's line).
std::vector<std::string> FromServer(Context& context, const std::string& kind,
                                    const std::string& model) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return {};
  std::vector<std::string> names;
  if (kind == "model") {
    absl::StatusOr<v1::ListModelsResponse> list = (*client)->ListModels();
    if (!list.ok()) return {};
    for (const v1::ModelStatus& m : list->models()) names.push_back(m.name());
  } else if (kind == "version") {
    if (model.empty()) return {};
    absl::StatusOr<v1::ModelStatus> status = (*client)->GetModel(model);
    if (!status.ok()) return {};
    for (const int64_t v : status->versions()) names.push_back(absl::StrCat(v));
  } else if (kind == "job") {
    absl::StatusOr<v1::ListTrainJobsResponse> jobs = (*client)->ListTrainJobs("");
    if (!jobs.ok()) return {};
    // Newest first: the job one usually wants.
    for (auto it = jobs->jobs().rbegin(); it != jobs->jobs().rend(); ++it) {
      names.push_back(it->job_id());
    }
  } else if (kind == "key") {
    absl::StatusOr<v1::ListStreamsResponse> streams = (*client)->ListStreams(model);
    if (!streams.ok()) return {};
    for (const v1::StreamInfo& s : streams->streams()) names.push_back(s.key());
  }
  return names;
}

// The kind of server name an argument takes: by the positional's name, or the option's.
std::string KindOf(const CLI::Option& option) {
  if (option.get_positional()) {
    const std::string name = option.get_name(true);
    if (name == "NAME" || name == "MODEL") return "model";
    if (name == "VERSION") return "version";
    if (name == "ID") return "job";
    return "";
  }
  if (option.check_name("--model")) return "model";
  if (option.check_name("--version") || option.check_name("--base-version")) return "version";
  if (option.check_name("--key")) return "key";
  return "";
}

// The candidates for the last of `words` (possibly empty), each on its own line; ":files"
// when file names fit. The shells filter them by the prefix typed.
std::vector<std::string> Complete(CLI::App& root, const std::vector<std::string>& words,
                                  Context& context) {
  if (words.empty()) return {};
  const LineState state = Walk(root, words);
  const std::string& typed = words.back();
  const CLI::App& command = *state.command;
  // The model the line names, for versions and keys.
  const std::string model = state.positionals.empty() ? "" : state.positionals.front();
  const auto values_of = [&](const CLI::Option& option) -> std::vector<std::string> {
    if (std::vector<std::string> choices = Choices(option); !choices.empty()) return choices;
    if (const std::string kind = KindOf(option); !kind.empty()) {
      ApplyGlobalFlags(root, state, context);
      return FromServer(context, kind, model);
    }
    if (Numeric(option)) return {};
    return {kFiles};
  };
  if (state.value_of != nullptr) return values_of(*state.value_of);

  std::vector<std::string> candidates;
  if (!typed.empty() && typed[0] == '-') {
    // The command's flags, then the global ones (they fall through to every command).
    for (const CLI::App* at : {&command, static_cast<const CLI::App*>(&root)}) {
      for (const CLI::Option* option : at->get_options()) {
        if (option->get_positional()) continue;
        if (at != &command && (option->check_name("--help") || option->check_name("--version"))) {
          continue;  // each command has its own --help; --version is the root's alone
        }
        for (const std::string& l : option->get_lnames()) candidates.push_back("--" + l);
        for (const std::string& s : option->get_snames()) candidates.push_back("-" + s);
      }
      if (at == &root) break;
    }
  } else {
    if (state.positionals.empty()) {
      for (const CLI::App* sub : command.get_subcommands([](const CLI::App*) { return true; })) {
        if (!Hidden(*sub)) candidates.push_back(sub->get_name());
      }
    }
    // The positional argument the word fills, if the command takes one there.
    size_t index = 0;
    for (const CLI::Option* option : command.get_options()) {
      if (!option->get_positional()) continue;
      if (index++ == state.positionals.size()) {
        for (std::string& v : values_of(*option)) candidates.push_back(std::move(v));
        break;
      }
    }
  }
  // Unique, in the order found (":files" only alone).
  std::vector<std::string> unique;
  for (std::string& c : candidates) {
    if (c == kFiles && candidates.size() > 1) continue;
    if (std::find(unique.begin(), unique.end(), c) == unique.end()) unique.push_back(std::move(c));
  }
  return unique;
}

constexpr char kBashScript[] = R"(# bash completion for forecastctl.
#   source <(forecastctl completion bash)
# or save it as /etc/bash_completion.d/forecastctl. Candidates come from `forecastctl
# __complete`, which knows every command and flag and asks the server (at the --address on the
# line, or FORECASTD_ADDRESS) for model names, versions, job ids and stream keys.
_forecastctl() {
  local line="${COMP_LINE:0:COMP_POINT}" out
  local -a words
  read -r -a words <<< "$line"
  [[ "$line" =~ [[:space:]]$ ]] && words+=("")
  local cur="${words[${#words[@]}-1]}"
  out=$("${words[0]}" __complete -- "${words[@]:1}" 2>/dev/null) || return 0
  if [[ "$out" == ":files" ]]; then
    compopt -o filenames 2>/dev/null
    mapfile -t COMPREPLY < <(compgen -f -- "$cur")
    return 0
  fi
  local IFS=$'\n'
  mapfile -t COMPREPLY < <(compgen -W "$out" -- "$cur")
}
complete -F _forecastctl forecastctl
)";

constexpr char kZshScript[] = R"(#compdef forecastctl
# zsh completion for forecastctl.
#   source <(forecastctl completion zsh)      (after compinit)
# or save it as _forecastctl in a directory of $fpath. Candidates come from `forecastctl
# __complete`, which knows every command and flag and asks the server (at the --address on the
# line, or FORECASTD_ADDRESS) for model names, versions, job ids and stream keys.
_forecastctl() {
  local out
  local -a candidates
  out=$("${words[1]}" __complete -- "${(@)words[2,CURRENT]}" 2>/dev/null) || return 1
  [[ -z "$out" ]] && return 1
  if [[ "$out" == ":files" ]]; then
    _files
    return
  fi
  candidates=("${(@f)out}")
  compadd -a candidates
}
if [[ "${funcstack[1]}" == "_forecastctl" ]]; then
  _forecastctl "$@"
else
  compdef _forecastctl forecastctl
fi
)";

constexpr char kFishScript[] = R"(# fish completion for forecastctl.
#   forecastctl completion fish | source
# or save it as ~/.config/fish/completions/forecastctl.fish. Candidates come from `forecastctl
# __complete`, which knows every command and flag and asks the server (at the --address on the
# line, or FORECASTD_ADDRESS) for model names, versions, job ids and stream keys.
function __forecastctl_complete
    set -l words (commandline -opc)
    set -l current (commandline -ct)
    set -l out ($words[1] __complete -- $words[2..-1] "$current" 2>/dev/null)
    if test "$out" = ":files"
        __fish_complete_path "$current"
        return
    end
    printf '%s\n' $out
end
complete -c forecastctl -f -a '(__forecastctl_complete)'
)";

}  // namespace

void AddCompletionCommand(CLI::App& app, Context& context) {
  auto args = std::make_shared<CompletionArgs>();
  CLI::App* completion = AddCommand(
      app, "completion",
      "Print a shell completion script (bash, zsh or fish); it completes commands, flags, and "
      "model names, versions, job ids and stream keys from the server",
      "  source <(forecastctl completion bash)\n"
      "  source <(forecastctl completion zsh)\n"
      "  forecastctl completion fish > ~/.config/fish/completions/forecastctl.fish");
  completion->add_option("SHELL", args->shell, "the shell")
      ->required()
      ->check(CLI::IsMember({"bash", "zsh", "fish"}));
  // The callback keeps `args` (which SHELL is bound to) alive as long as the app.
  completion->callback([&context, args] {
    context.action = [args] {
      std::cout << (args->shell == "bash"  ? kBashScript
                    : args->shell == "zsh" ? kZshScript
                                           : kFishScript);
      return kExitOk;
    };
  });

  // Hidden (no group): what the scripts call with the words typed after `forecastctl`.
  CLI::App* complete = app.add_subcommand("__complete", "completion candidates, one per line");
  complete->group("");
  complete->add_option("WORDS", args->words, "the words typed, the last one being completed");
  CLI::App* root = &app;
  complete->callback([&context, root, args] {
    context.action = [&context, root, args] {
      for (const std::string& candidate : Complete(*root, args->words, context)) {
        std::cout << candidate << "\n";
      }
      return kExitOk;
    };
  });
}

}  // namespace forecastd::ctl
