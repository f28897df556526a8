// `forecastctl train MODEL` (a TrainRequest from flags or a JSON spec, then a live watch) and
// `forecastctl jobs list|show|watch|cancel`.
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "client/forecastctl/command.h"
#include "client/forecastctl/job_watch.h"
#include "client/forecastctl/list_view.h"
#include "client/forecastctl/output.h"
#include "client/input_windows.h"
#include "google/protobuf/util/json_util.h"
#include "kernels/base/status.h"

namespace forecastd::ctl {
namespace {

struct TrainArgs {
  std::string model;
  std::string spec;
  std::string config;
  std::string csv;
  std::string inline_csv;
  std::string timestamp_column;
  std::string series_column;
  int epochs = 0;
  int batch_size = 0;
  double lr = 0.0;
  std::string optimizer;
  std::string loss;
  std::string devices;
  std::vector<std::string> workers;  // ADDRESS[=DEVICES], one per --worker
  bool resume_on_failure = false;
  int patience = 0;
  uint64_t seed = 0;
  double validation_fraction = 0.0;
  int stride = 0;
  int64_t base_version = 0;
  bool promote = false;
  bool detach = false;
  // The options above whose presence matters (a flag given overrides the spec's field).
  CLI::Option* epochs_option = nullptr;
  CLI::Option* batch_size_option = nullptr;
  CLI::Option* lr_option = nullptr;
  CLI::Option* patience_option = nullptr;
  CLI::Option* seed_option = nullptr;
  CLI::Option* validation_fraction_option = nullptr;
  CLI::Option* stride_option = nullptr;
  CLI::Option* base_version_option = nullptr;
};

struct JobArgs {
  std::string job_id;
  std::string model;
  bool wait = false;
};

template <typename Message>
absl::Status ParseJsonFile(const std::string& path, Message& message) {
  absl::StatusOr<std::string> text = ReadInput(path);
  if (!text.ok()) return text.status();
  const auto status = google::protobuf::util::JsonStringToMessage(*text, &message);
  if (!status.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": not a ", message.GetTypeName(),
                     " in protobuf JSON: ", status.message().ToString()));
  }
  return absl::OkStatus();
}

v1::OptimizerKind OptimizerFromName(const std::string& name) {
  if (name == "sgd") return v1::OPTIMIZER_SGD;
  if (name == "adamw") return v1::OPTIMIZER_ADAMW;
  return v1::OPTIMIZER_ADAM;
}

// A --worker value, ADDRESS[=DEVICES] with DEVICES comma-separated (none: the worker's
// training device).
absl::StatusOr<v1::TrainingWorker> ParseWorker(absl::string_view text) {
  const std::pair<absl::string_view, absl::string_view> parts =
      absl::StrSplit(text, absl::MaxSplits('=', 1));
  v1::TrainingWorker worker;
  worker.set_address(std::string(absl::StripAsciiWhitespace(parts.first)));
  if (worker.address().empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--worker ", text, ": expected ADDRESS[=DEVICES], e.g. 10.0.0.2:8001=cuda:0"));
  }
  for (absl::string_view device : absl::StrSplit(parts.second, ',', absl::SkipEmpty())) {
    device = absl::StripAsciiWhitespace(device);
    if (!device.empty()) worker.add_devices(std::string(device));
  }
  return worker;
}

v1::LossKind LossFromName(const std::string& name) {
  if (name == "mae") return v1::LOSS_MAE;
  if (name == "huber") return v1::LOSS_HUBER;
  if (name == "quantile") return v1::LOSS_QUANTILE;
  return v1::LOSS_MSE;
}

// The TrainRequest the flags describe: the spec file's, then --config, then each flag given.
// Returns the exit code of a usage or server error through `code`, or the request.
absl::StatusOr<v1::TrainRequest> BuildRequest(Context& context, const TrainArgs& args, int* code) {
  *code = kExitUsage;
  v1::TrainRequest request;
  if (!args.spec.empty()) RETURN_IF_ERROR(ParseJsonFile(args.spec, request));
  if (!args.model.empty()) request.set_model(args.model);
  if (request.model().empty()) {
    return absl::InvalidArgumentError("name the model: forecastctl train MODEL ...");
  }
  if (!args.config.empty()) {
    RETURN_IF_ERROR(ParseJsonFile(args.config, *request.mutable_config()));
    if (request.config().name().empty()) request.mutable_config()->set_name(request.model());
  }
  v1::TrainingConfig& t = *request.mutable_training();
  if (args.epochs_option->count() > 0) t.set_epochs(args.epochs);
  if (args.batch_size_option->count() > 0) t.set_batch_size(args.batch_size);
  if (args.lr_option->count() > 0) {
    t.mutable_optimizer()->set_learning_rate(static_cast<float>(args.lr));
  }
  if (!args.optimizer.empty()) t.mutable_optimizer()->set_kind(OptimizerFromName(args.optimizer));
  if (!args.devices.empty()) {
    t.clear_devices();
    for (absl::string_view device : absl::StrSplit(args.devices, ',', absl::SkipEmpty())) {
      t.add_devices(std::string(absl::StripAsciiWhitespace(device)));
    }
  }
  if (!args.workers.empty()) {
    t.clear_workers();
    for (const std::string& text : args.workers) {
      ASSIGN_OR_RETURN(v1::TrainingWorker worker, ParseWorker(text));
      *t.add_workers() = std::move(worker);
    }
  }
  if (args.resume_on_failure) t.set_resume_on_failure(true);
  if (!args.loss.empty()) t.mutable_loss()->set_kind(LossFromName(args.loss));
  if (args.patience_option->count() > 0) t.set_early_stopping_patience(args.patience);
  if (args.seed_option->count() > 0) t.set_seed(args.seed);
  if (args.validation_fraction_option->count() > 0) {
    t.mutable_data()->set_validation_fraction(static_cast<float>(args.validation_fraction));
  }
  if (args.stride_option->count() > 0) t.mutable_data()->set_stride(args.stride);
  if (args.base_version_option->count() > 0) t.set_base_version(args.base_version);
  if (args.promote) request.set_promote(true);

  v1::DataConfig& data = *t.mutable_data();
  if (!args.csv.empty()) {
    data.set_csv_path(args.csv);
    if (!args.timestamp_column.empty()) data.set_timestamp_column(args.timestamp_column);
    if (!args.series_column.empty()) data.set_series_column(args.series_column);
  } else if (!args.inline_csv.empty()) {
    // The series goes in the request in the model's feature order, so the names come from
    // the config given or the model the server has.
    std::vector<std::string> features;
    if (request.has_config()) {
      features.assign(request.config().feature_names().begin(),
                      request.config().feature_names().end());
    } else {
      absl::StatusOr<ForecastdClient*> client = context.Client();
      if (!client.ok()) return client.status();
      absl::StatusOr<v1::ModelStatus> model = (*client)->GetModel(request.model());
      if (!model.ok()) {
        *code = kExitServerError;
        return absl::Status(model.status().code(),
                            absl::StrCat(model.status().message(),
                                         " (a new model needs --config FILE with its "
                                         "ModelConfig)"));
      }
      features.assign(model->config().feature_names().begin(),
                      model->config().feature_names().end());
    }
    absl::StatusOr<std::string> text = ReadInput(args.inline_csv);
    if (!text.ok()) return text.status();
    absl::StatusOr<Series> series = ParseCsvSeries(*text, features);
    if (!series.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(args.inline_csv, ": ", series.status().message()));
    }
    v1::InlineSeries& inline_series = *data.mutable_inline_series();
    inline_series.set_rows(series->rows);
    inline_series.mutable_values()->Assign(series->values.begin(), series->values.end());
  }
  if (data.source_case() == v1::DataConfig::SOURCE_NOT_SET) {
    return absl::InvalidArgumentError(
        "give the training data: --csv PATH (inside the server's --data-dir), --inline-csv "
        "LOCAL_FILE, or a --spec whose training.data names one");
  }
  return request;
}

int RunTrain(Context& context, const TrainArgs& args) {
  int error_code = kExitUsage;
  absl::StatusOr<v1::TrainRequest> request = BuildRequest(context, args, &error_code);
  if (!request.ok()) {
    return error_code == kExitUsage ? UsageError(request.status().message())
                                    : ServerError(request.status());
  }
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::TrainResponse> started = (*client)->Train(*request);
  if (!started.ok()) return ServerError(started.status());
  const std::string& id = started->job_id();
  if (args.detach) {
    if (context.flags.json) {
      PrintJson(*started, /*one_line=*/true);
    } else {
      std::cout << id << std::endl;
      std::fprintf(stderr, "Watch it with: forecastctl jobs watch %s\n", id.c_str());
    }
    return kExitOk;
  }
  if (context.flags.json) {
    PrintJson(*started, /*one_line=*/true);
  } else {
    std::cout << "job " << id << " started: training model " << request->model()
              << (request->promote() ? " (promote when done)" : "") << std::endl;
  }
  return WatchJob(context, id);
}

std::string EpochOf(const v1::TrainJobInfo& job) {
  if (!job.has_latest() || job.latest().epochs() == 0) return "-";
  return absl::StrCat(job.latest().epoch(), "/", job.latest().epochs());
}

absl::StatusOr<Listing> ListJobs(ForecastdClient& client, const std::string& model) {
  ASSIGN_OR_RETURN(v1::ListTrainJobsResponse jobs, client.ListTrainJobs(model));
  Listing listing{nullptr,
                  ListTable({{"JOB"},
                             {"MODEL"},
                             {"STATE"},
                             {"EPOCH"},
                             {"TRAIN LOSS"},
                             {"BEST VAL LOSS"},
                             {"BEST EPOCH", true},
                             {"VERSION"},
                             {"PROMOTED", true},
                             {"AGE"},
                             {"CREATED (UTC)", true},
                             {"FINISHED (UTC)", true},
                             {"ERROR", false, 50}}),
                  model.empty() ? "no training jobs" : "no training jobs for model " + model};
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  const auto number = [](double v) {
    return std::isfinite(v) ? ListCell(FormatNumber(v), JsonDouble(v)) : ListCell("-", "");
  };
  for (const v1::TrainJobInfo& job : jobs.jobs()) {
    const bool has = job.has_latest();
    // The best validation loss so far: the job's once it ends, its latest event's before.
    const double best = job.best_epoch() > 0 ? job.best_validation_loss()
                        : has                ? job.latest().best_validation_loss()
                                             : NAN;
    const double age_s = static_cast<double>(now_ms - job.created_unix_ms()) / 1e3;
    listing.table.AddRow(
        {job.job_id(), job.model(), JobStateName(job.state()),
         has && job.latest().epochs() > 0
             ? ListCell(EpochOf(job), absl::StrCat(job.latest().epoch()))
             : ListCell("-", ""),
         has ? number(job.latest().train_loss()) : ListCell("-", ""), number(best),
         job.best_epoch() > 0 ? ListCell(absl::StrCat(job.best_epoch())) : ListCell("-", ""),
         job.published_version() > 0 ? ListCell(absl::StrCat(job.published_version()))
                                     : ListCell("-", ""),
         job.promoted() ? "yes" : "no",
         job.created_unix_ms() > 0 ? ListCell(FormatSeconds(age_s), absl::StrCat(age_s))
                                   : ListCell("-", ""),
         TimeCell(job.created_unix_ms()), TimeCell(job.finished_unix_ms()),
         job.error().empty() ? ListCell("-", "") : ListCell(job.error())});
  }
  listing.response = std::make_unique<v1::ListTrainJobsResponse>(std::move(jobs));
  return listing;
}

int RunJobsShow(Context& context, const JobArgs& args) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  absl::StatusOr<v1::TrainJobInfo> job = (*client)->GetTrainJob(args.job_id);
  if (!job.ok()) return ServerError(job.status());
  if (context.flags.json) {
    PrintJson(*job);
    return kExitOk;
  }
  std::cout << DescribeJob(*job) << "\n";
  if (!job->error().empty()) std::cout << "error: " << job->error() << "\n";
  if (job->has_latest()) {
    const v1::TrainProgressEvent& e = job->latest();
    std::cout << "latest: epoch " << e.epoch() << "/" << e.epochs() << ", step " << e.step() << "/"
              << e.total_steps() << ", train loss " << FormatNumber(e.train_loss()) << ", "
              << FormatRate(e.samples_per_second()) << " samples/s";
    if (e.eta_seconds() > 0 && job->state() == v1::TRAIN_JOB_RUNNING) {
      std::cout << ", ETA " << FormatSeconds(e.eta_seconds());
    }
    std::cout << "\n";
  }
  return kExitOk;
}

int RunJobsCancel(Context& context, const JobArgs& args) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  // A job that has ended has nothing to cancel: saying so (exit 1) keeps a script from taking
  // "cancelled" for what happened to it.
  absl::StatusOr<v1::TrainJobInfo> before = (*client)->GetTrainJob(args.job_id);
  if (!before.ok()) return ServerError(before.status());
  if (IsFinal(before->state())) {
    if (context.flags.json) PrintJson(*before);
    std::fprintf(stderr, "error: job %s already finished: %s\n", args.job_id.c_str(),
                 DescribeJob(*before).c_str());
    return kExitServerError;
  }
  absl::StatusOr<v1::TrainJobInfo> job = (*client)->CancelTrainJob(args.job_id);
  if (!job.ok()) return ServerError(job.status());
  while (args.wait && !IsFinal(job->state())) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    job = (*client)->GetTrainJob(args.job_id);
    if (!job.ok()) return ServerError(job.status());
  }
  if (context.flags.json) {
    PrintJson(*job);
  } else {
    std::cout << (args.wait ? "" : "cancel requested: ") << DescribeJob(*job) << "\n";
  }
  return kExitOk;
}

}  // namespace

void AddTrainCommands(CLI::App& app, Context& context) {
  auto args = std::make_shared<TrainArgs>();
  CLI::App* train = AddCommand(
      app, "train", "Train or fine-tune a model into a new version, following the job live",
      "  forecastctl train my_model --config my_model.json --inline-csv series.csv \\\n"
      "      --epochs 20 --batch-size 32 --lr 1e-3 --patience 3 --promote\n"
      "  forecastctl train demo_lstm --csv prices/2024.csv --timestamp-column time \\\n"
      "      --epochs 5 --base-version 1        # fine-tune on a file in the server's data dir\n"
      "  forecastctl train demo_lstm --csv prices/2024.csv --devices all --batch-size 256\n"
      "  forecastctl train demo_lstm --csv prices/2024.csv --devices cuda:0 --batch-size 256 \\\n"
      "      --worker 10.0.0.2:8001=cuda:0,cuda:1 --worker 10.0.0.3:8001   # across daemons\n"
      "  forecastctl train --spec job.json --detach   # a forecastd.v1.TrainRequest in JSON\n"
      "Ctrl-C while watching asks whether to cancel the job or detach from it. Exit code: 0\n"
      "when the job SUCCEEDED, 1 when it FAILED or was CANCELLED, 130 when detached by\n"
      "Ctrl-C or SIGINT (the job keeps running).");
  train->add_option("MODEL", args->model,
                    "model to train (a new one needs --config); optional with --spec");
  train->add_option("--spec", args->spec,
                    "a forecastd.v1.TrainRequest in protobuf JSON; flags given override it");
  train->add_option("--config", args->config, "ModelConfig JSON (config.json) for a new model");
  CLI::Option* csv = train->add_option(
      "--csv", args->csv, "CSV path relative to the server's data dir (DataConfig.csv_path)");
  CLI::Option* inline_csv =
      train->add_option("--inline-csv", args->inline_csv,
                        "local CSV sent in the request (columns named like the model's features)");
  csv->excludes(inline_csv);
  train
      ->add_option("--timestamp-column", args->timestamp_column,
                   "with --csv: the timestamp column, whose values must increase")
      ->needs(csv);
  train
      ->add_option("--series-column", args->series_column,
                   "with --csv: the column naming each row's series (one model for many series; "
                   "each series' rows contiguous and in time order)")
      ->needs(csv);
  args->epochs_option =
      train->add_option("--epochs", args->epochs, "epochs to run")->check(Positive());
  args->batch_size_option =
      train->add_option("--batch-size", args->batch_size, "windows per step (server default 32)")
          ->check(Positive());
  args->lr_option = train->add_option("--lr", args->lr, "peak learning rate (server default 1e-3)")
                        ->check(Positive());
  train->add_option("--devices", args->devices,
                    "where the steps run: cuda:0,cuda:1,... (one data-parallel rank per GPU, "
                    "--batch-size the global batch), all (every GPU the server uses) or cpu; "
                    "default: the server's training device");
  // One value per --worker, so that MODEL after it stays the model.
  train
      ->add_option("--worker", args->workers,
                   "ADDRESS[=DEVICES] (repeatable): another forecastd that runs ranks of this "
                   "job on the GPUs listed (comma-separated; none: its training device); it "
                   "needs the same data and must grant the server's --train-worker-token-file "
                   "the train role")
      ->allow_extra_args(false);
  train->add_flag("--resume-on-failure", args->resume_on_failure,
                  "with --worker: when a worker is lost, go on from the last checkpoint on "
                  "this server's own ranks instead of failing");
  train->add_option("--optimizer", args->optimizer, "adam, adamw or sgd (default adam)")
      ->check(CLI::IsMember({"adam", "adamw", "sgd"}));
  train
      ->add_option("--loss", args->loss,
                   "mse, mae, huber or quantile (default: mse; quantile for quantile models)")
      ->check(CLI::IsMember({"mse", "mae", "huber", "quantile"}));
  args->patience_option =
      train
          ->add_option("--patience", args->patience,
                       "early stopping: epochs without improvement (0: run every epoch)")
          ->check(NonNegative());
  args->seed_option = train->add_option("--seed", args->seed, "seed for init, shuffling, dropout");
  args->validation_fraction_option =
      train
          ->add_option("--validation-fraction", args->validation_fraction,
                       "last fraction of the series held out (server default 0.2)")
          ->check(Between(0.0, 0.95));
  args->stride_option =
      train->add_option("--stride", args->stride, "rows between window starts (default 1)")
          ->check(Positive());
  args->base_version_option =
      train
          ->add_option("--base-version", args->base_version,
                       "fine-tune from this version's weights and normalisation")
          ->check(Positive());
  train->add_flag("--promote", args->promote, "serve the result as soon as it is published");
  train->add_flag("--detach", args->detach, "print the job id and return without watching");
  train->callback(
      [&context, args] { context.action = [&context, args] { return RunTrain(context, *args); }; });

  auto job_args = std::make_shared<JobArgs>();
  CLI::App* jobs = AddCommand(app, "jobs", "List, inspect, watch and cancel training jobs",
                              "  forecastctl jobs list\n  forecastctl jobs watch <id>\n"
                              "  forecastctl jobs cancel <id> --wait");
  jobs->require_subcommand(1);
  CLI::App* list =
      AddCommand(*jobs, "list", "Table of training jobs, newest state of each",
                 "  forecastctl jobs list\n  forecastctl jobs list --model demo_lstm -o json\n"
                 "  forecastctl jobs list --watch");
  list->add_option("--model", job_args->model, "only this model's jobs");
  auto list_flags = std::make_shared<ListFlags>();
  AddListFlags(*list, *list_flags);
  list->callback([&context, job_args, list_flags] {
    context.action = [&context, job_args, list_flags] {
      return RunList(context, *list_flags, [job_args](ForecastdClient& client) {
        return ListJobs(client, job_args->model);
      });
    };
  });
  CLI::App* show = AddCommand(*jobs, "show", "A job's state, result and latest progress",
                              "  forecastctl jobs show <id>\n  forecastctl jobs show <id> --json");
  show->add_option("ID", job_args->job_id, "job id")->required();
  show->callback([&context, job_args] {
    context.action = [&context, job_args] { return RunJobsShow(context, *job_args); };
  });
  CLI::App* watch = AddCommand(
      *jobs, "watch", "Follow a job's progress to its end (earlier events are replayed)",
      "  forecastctl jobs watch <id>\n  forecastctl jobs watch <id> --json | jq -c .progress");
  watch->add_option("ID", job_args->job_id, "job id")->required();
  watch->callback([&context, job_args] {
    context.action = [&context, job_args] { return WatchJob(context, job_args->job_id); };
  });
  CLI::App* cancel =
      AddCommand(*jobs, "cancel", "Cancel a job (it stops between steps; its checkpoint stays)",
                 "  forecastctl jobs cancel <id>\n  forecastctl jobs cancel <id> --wait");
  cancel->add_option("ID", job_args->job_id, "job id")->required();
  cancel->add_flag("--wait", job_args->wait, "wait for the job's final state");
  cancel->callback([&context, job_args] {
    context.action = [&context, job_args] { return RunJobsCancel(context, *job_args); };
  });
}

}  // namespace forecastd::ctl
