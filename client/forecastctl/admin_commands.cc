// `forecastctl status` and `forecastctl models ...`: the Admin service.
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/list_view.h"
#include "client/forecastctl/output.h"
#include "kernels/base/status.h"

namespace forecastd::ctl {
namespace {

std::string StateName(v1::ModelState state) {
  return ShortName(v1::ModelState_Name(state), "MODEL_");
}

// A count summed over the model's loaded versions (requests in flight, queued).
int64_t SumOverLoaded(const v1::ModelStatus& model, int64_t (v1::LoadedVersion::*count)() const) {
  int64_t n = 0;
  for (const v1::LoadedVersion& v : model.loaded()) n += (v.*count)();
  return n;
}

std::string Versions(const v1::ModelStatus& model) {
  return model.versions().empty() ? "-" : absl::StrJoin(model.versions(), ",");
}

std::string Architecture(const v1::ModelConfig& c) {
  const auto recurrent = [](absl::string_view kind, const v1::RecurrentConfig& r) {
    return absl::StrCat(kind, " (hidden ", r.hidden_size(), ", ", r.num_layers(), " layer",
                        r.num_layers() == 1 ? "" : "s", r.bidirectional() ? ", bidirectional" : "",
                        ")");
  };
  switch (c.architecture_case()) {
    case v1::ModelConfig::kLstm:
      return recurrent("lstm", c.lstm());
    case v1::ModelConfig::kGru:
      return recurrent("gru", c.gru());
    case v1::ModelConfig::kTransformer: {
      const v1::TransformerConfig& t = c.transformer();
      return absl::StrCat("transformer (d_model ", t.d_model(), ", ", t.num_heads(), " heads, ",
                          t.num_layers(), " layers, d_ff ", t.dim_feedforward(),
                          t.norm_first() ? ", pre-LN" : "", t.causal() ? ", causal" : "", ")");
    }
    case v1::ModelConfig::kMlp: {
      const v1::MlpConfig& m = c.mlp();
      if (m.num_layers() == 0) return "mlp (linear: no hidden layers)";
      const v1::Activation act =
          m.activation() == v1::ACTIVATION_UNSPECIFIED ? v1::ACTIVATION_GELU : m.activation();
      return absl::StrCat("mlp (hidden ", m.hidden_size(), ", ", m.num_layers(), " layer",
                          m.num_layers() == 1 ? "" : "s", ", ",
                          absl::AsciiStrToLower(v1::Activation_Name(act).substr(11)), ")");
    }
    default:
      return "-";
  }
}

// How inputs are scaled before the model and forecasts mapped back: the normaliser, then any
// window scaling.
std::string Scaling(const v1::ModelConfig& c) {
  std::string out = c.normalization() == v1::NORMALIZATION_NONE
                        ? "none per feature"
                        : "per feature (mean and std of the training data)";
  const v1::WindowScaling& w = c.window_scaling();
  switch (w.kind()) {
    case v1::WindowScaling::WINDOW_SCALING_MEAN_STD:
      absl::StrAppend(&out, "; each window by its own mean and std");
      break;
    case v1::WindowScaling::WINDOW_SCALING_LAST_VALUE:
      absl::StrAppend(&out, "; each window by its last value");
      break;
    default:
      break;
  }
  if (w.affine()) absl::StrAppend(&out, ", learnable affine");
  if (w.forecast_change()) absl::StrAppend(&out, "; forecasts the change from the last value");
  return out;
}

// One line after load / unload / promote.
void PrintSummary(const v1::ModelStatus& model) {
  std::cout << model.name() << ": " << StateName(model.state());
  if (model.serving_version() > 0) std::cout << ", serving version " << model.serving_version();
  std::cout << " (versions on disk: " << Versions(model) << ")\n";
  if (!model.last_error().empty()) std::cout << "last error: " << model.last_error() << "\n";
}

int RunStatus(Context& context) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::ServerStatus> status = (*client)->GetServerStatus();
  if (!status.ok()) return ServerError(status.status());
  if (context.flags.json) {
    PrintJson(*status);
    return kExitOk;
  }
  const v1::ServerStatus& s = *status;
  std::cout << "forecastd " << s.version() << " at " << context.flags.address << ": "
            << (s.ready() ? "ready" : "NOT READY") << ", up "
            << FormatSeconds(static_cast<double>(s.uptime_ms()) / 1e3) << "\n"
            << "models loaded: " << s.models_loaded()
            << "   requests queued: " << s.requests_queued()
            << "   training jobs: " << s.train_jobs_running() << " running, "
            << s.train_jobs_total() << " total\n\n";
  // LENT TEAMS: how often idle CPU workers lent their threads to a running request.
  TextTable devices(
      {"DEVICE", "NAME", "WORKERS", "BUSY", "LENT TEAMS", "MEMORY USED", "MEMORY TOTAL"});
  for (const v1::DeviceStatus& d : s.devices()) {
    devices.AddRow({d.id(), d.name(), absl::StrCat(d.workers()), absl::StrCat(d.busy_workers()),
                    absl::StrCat(d.lent_teams()),
                    FormatBytes(static_cast<double>(d.memory_used_bytes())),
                    FormatBytes(static_cast<double>(d.memory_total_bytes()))});
  }
  std::cout << devices.Render();
  return kExitOk;
}

absl::StatusOr<Listing> ListModels(ForecastdClient& client) {
  ASSIGN_OR_RETURN(v1::ListModelsResponse list, client.ListModels());
  Listing listing{nullptr,
                  ListTable({{"NAME"},
                             {"STATE"},
                             {"SERVING"},
                             {"VERSIONS"},
                             {"IN-FLIGHT"},
                             {"QUEUED", true},
                             {"DEVICE"},
                             {"ARCHITECTURE", true},
                             {"LOOKBACK", true},
                             {"HORIZON", true},
                             {"FEATURES", true},
                             {"TARGETS", true},
                             {"STREAMS", true},
                             {"LAST ERROR", false, 60}}),
                  "no models in the repository"};
  for (const v1::ModelStatus& m : list.models()) {
    const v1::ModelConfig& c = m.config();
    listing.table.AddRow(
        {m.name(), StateName(m.state()),
         m.serving_version() > 0 ? ListCell(absl::StrCat(m.serving_version())) : ListCell("-", ""),
         ListCell(Versions(m), absl::StrJoin(m.versions(), " ")),
         absl::StrCat(SumOverLoaded(m, &v1::LoadedVersion::in_flight)),
         absl::StrCat(SumOverLoaded(m, &v1::LoadedVersion::queued)),
         m.device().empty() ? ListCell("-", "") : ListCell(m.device()), Architecture(c),
         absl::StrCat(c.lookback()), absl::StrCat(c.horizon()),
         absl::StrJoin(c.feature_names(), " "), absl::StrJoin(c.target_names(), " "),
         absl::StrCat(m.streams()),
         m.last_error().empty() ? ListCell("-", "") : ListCell(m.last_error())});
  }
  listing.response = std::make_unique<v1::ListModelsResponse>(std::move(list));
  return listing;
}

int RunModelsShow(Context& context, const std::string& name) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::ModelStatus> model = (*client)->GetModel(name);
  if (!model.ok()) return ServerError(model.status());
  if (context.flags.json) {
    PrintJson(*model);
    return kExitOk;
  }
  const v1::ModelStatus& m = *model;
  const v1::ModelConfig& c = m.config();
  const auto row = [](absl::string_view key, absl::string_view value) {
    std::cout << absl::StrCat(key, ":") << std::string(key.size() < 17 ? 17 - key.size() : 1, ' ')
              << value << "\n";
  };
  row("name", m.name());
  if (!c.description().empty()) row("description", c.description());
  row("state", StateName(m.state()));
  row("device", m.device().empty() ? "-" : m.device());
  row("serving version", m.serving_version() > 0 ? absl::StrCat(m.serving_version()) : "-");
  row("versions on disk", Versions(m));
  row("architecture", Architecture(c));
  row("lookback", absl::StrCat(c.lookback()));
  row("horizon", absl::StrCat(c.horizon()));
  row("features", absl::StrJoin(c.feature_names(), ", "));
  row("targets", absl::StrJoin(c.target_names(), ", "));
  if (!c.quantiles().empty()) row("quantiles", absl::StrJoin(c.quantiles(), ", "));
  row("scaling", Scaling(c));
  const v1::BatchingConfig& b = c.batching();
  row("batching",
      absl::StrCat("max batch ", b.max_batch_size() == 0 ? 32 : b.max_batch_size(),
                   ", max queue delay ", b.max_queue_delay_us(), "us, ",
                   b.priority_levels() == 0 ? 1 : b.priority_levels(), " priority level(s)"));
  row("tick streams",
      absl::StrCat(m.stream_mode() == v1::StreamingConfig::STREAM_MODE_STATE ? "state" : "window",
                   " mode, ", m.streams(), " open or kept, ", m.stream_state_bytes(),
                   " bytes of state"));
  if (!m.last_error().empty()) row("last error", m.last_error());
  if (!m.loaded().empty()) {
    std::cout << "\n";
    TextTable loaded({"LOADED VERSION", "SERVING", "IN-FLIGHT", "QUEUED", "DEVICE", "COMPUTE"});
    for (const v1::LoadedVersion& v : m.loaded()) {
      loaded.AddRow({absl::StrCat(v.version()), v.serving() ? "yes" : "no",
                     absl::StrCat(v.in_flight()), absl::StrCat(v.queued()), v.device(),
                     v.compute().empty() ? "-" : v.compute()});
    }
    std::cout << loaded.Render();
  }
  // Every version on disk, with where it came from when forecastd trained it.
  std::cout << "\n";
  TextTable versions({"VERSION", "SERVING", "JOB", "DATA ROWS", "DATA DIGEST", "SEED", "BEST EPOCH",
                      "VAL LOSS", "BASE", "PUBLISHED (UTC)", "FORECASTD"});
  for (const int64_t version : m.versions()) {
    const bool serving = version == m.serving_version();
    const auto found = m.lineage().find(version);
    if (found == m.lineage().end()) {
      versions.AddRow({absl::StrCat(version), serving ? "yes" : "no", "-", "-", "-", "-", "-", "-",
                       "-", "-", "-"});
      continue;
    }
    const v1::VersionLineage& l = found->second;
    versions.AddRow({absl::StrCat(version), serving ? "yes" : "no", l.job_id(),
                     absl::StrCat(l.data_rows()), l.data_digest(), absl::StrCat(l.seed()),
                     absl::StrCat(l.best_epoch()),
                     l.has_best_validation_loss() ? FormatNumber(l.best_validation_loss()) : "-",
                     l.base_version() > 0 ? absl::StrCat(l.base_version()) : "-",
                     TimeCell(l.published_unix_ms()).text, l.forecastd_version()});
  }
  std::cout << versions.Render();
  return kExitOk;
}

// load, unload and promote: one call returning the model's status.
template <typename Call>
int RunModelChange(Context& context, Call&& call) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::ModelStatus> model = call(**client);
  if (!model.ok()) return ServerError(model.status());
  if (context.flags.json) {
    PrintJson(*model);
  } else {
    PrintSummary(*model);
  }
  return kExitOk;
}

struct ModelArgs {
  std::string name;
  int64_t version = 0;
};

int RunModelsDelete(Context& context, const ModelArgs& args) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::DeleteModelVersionResponse> deleted =
      (*client)->DeleteModelVersion(args.name, args.version);
  if (!deleted.ok()) return ServerError(deleted.status());
  if (context.flags.json) {
    PrintJson(*deleted);
    return kExitOk;
  }
  std::cout << "deleted version " << args.version << " of " << args.name;
  if (deleted->removed_checkpoints_size() > 0) {
    std::cout << " and " << deleted->removed_checkpoints_size() << " checkpoint"
              << (deleted->removed_checkpoints_size() == 1 ? "" : "s")
              << " of fine-tunings from it";
  }
  std::cout << "\n";
  PrintSummary(deleted->model());
  return kExitOk;
}

}  // namespace

void AddAdminCommands(CLI::App& app, Context& context) {
  CLI::App* status = AddCommand(app, "status", "Show the server's version, readiness and devices",
                                "  forecastctl status\n  forecastctl --address 10.0.0.5:8001 "
                                "status --json");
  status->callback([&context] { context.action = [&context] { return RunStatus(context); }; });

  CLI::App* models =
      AddCommand(app, "models", "List, inspect, load, unload, promote and delete models",
                 "  forecastctl models list\n  forecastctl models show demo_lstm\n"
                 "  forecastctl models promote demo_lstm 2");
  models->require_subcommand(1);
  auto args = std::make_shared<ModelArgs>();

  CLI::App* list =
      AddCommand(*models, "list",
                 "Table of models: state, serving version, versions on disk, "
                 "requests in flight, last error",
                 "  forecastctl models list\n  forecastctl models list -o wide --watch\n"
                 "  forecastctl models list -o json | jq '.models[].name'");
  auto list_flags = std::make_shared<ListFlags>();
  AddListFlags(*list, *list_flags);
  list->callback([&context, list_flags] {
    context.action = [&context, list_flags] { return RunList(context, *list_flags, ListModels); };
  });

  CLI::App* show = AddCommand(*models, "show", "A model's state, versions and configuration",
                              "  forecastctl models show demo_lstm\n"
                              "  forecastctl models show demo_lstm --json");
  show->add_option("NAME", args->name, "model name")->required();
  show->callback([&context, args] {
    context.action = [&context, args] { return RunModelsShow(context, args->name); };
  });

  CLI::App* load = AddCommand(*models, "load", "Load a model (its serving version)",
                              "  forecastctl models load demo_transformer");
  load->add_option("NAME", args->name, "model name")->required();
  load->callback([&context, args] {
    context.action = [&context, args] {
      return RunModelChange(context, [&](ForecastdClient& c) { return c.LoadModel(args->name); });
    };
  });

  CLI::App* unload =
      AddCommand(*models, "unload", "Unload a model after its in-flight requests drain",
                 "  forecastctl models unload demo_transformer");
  unload->add_option("NAME", args->name, "model name")->required();
  unload->callback([&context, args] {
    context.action = [&context, args] {
      return RunModelChange(context, [&](ForecastdClient& c) { return c.UnloadModel(args->name); });
    };
  });

  CLI::App* promote = AddCommand(
      *models, "promote",
      "Serve VERSION of a model (promote or roll back): loaded and warmed up beside the serving "
      "version, then switched to with no downtime",
      "  forecastctl models promote demo_lstm 2     # serve version 2\n"
      "  forecastctl models promote demo_lstm 1     # roll back");
  promote->add_option("NAME", args->name, "model name")->required();
  promote->add_option("VERSION", args->version, "version to serve")->required()->check(Positive());
  promote->callback([&context, args] {
    context.action = [&context, args] {
      return RunModelChange(context, [&](ForecastdClient& c) {
        return c.SetServingVersion(args->name, args->version);
      });
    };
  });

  CLI::App* remove =
      AddCommand(*models, "delete",
                 "Delete VERSION of a model from disk, its weights, lineage and the checkpoints of "
                 "fine-tunings from it (refused for the version that serves)",
                 "  forecastctl models delete demo_lstm 1\n"
                 "  forecastctl models delete demo_lstm 3 --json");
  remove->add_option("NAME", args->name, "model name")->required();
  remove->add_option("VERSION", args->version, "version to delete")->required()->check(Positive());
  remove->callback([&context, args] {
    context.action = [&context, args] { return RunModelsDelete(context, *args); };
  });
}

}  // namespace forecastd::ctl
