#include "client/forecastctl/job_watch.h"

#include <fcntl.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <thread>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/forecastctl/interrupt.h"
#include "client/forecastctl/output.h"

namespace forecastd::ctl {
namespace {

std::string Loss(double loss) { return std::isnan(loss) ? "-" : absl::StrFormat("%.6g", loss); }

int TerminalColumns() {
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 20) return size.ws_col;
  return 100;
}

// Prints progress events as they arrive.
class ProgressPrinter {
 public:
  enum class Mode { kTerminal, kPlain, kJson };
  explicit ProgressPrinter(Mode mode) : mode_(mode) {}

  void Print(const v1::TrainProgressEvent& e) {
    switch (mode_) {
      case Mode::kJson: {
        v1::TrainJobEvent event;
        *event.mutable_progress() = e;
        std::cout << ProtoJson(event, /*one_line=*/true) << std::endl;
        return;
      }
      case Mode::kTerminal:
        if (e.kind() == v1::TrainProgressEvent::EPOCH) {
          EndLine();
          std::cout << EpochLine(e) << std::endl;
        } else {
          std::string line = StepLine(e);
          const size_t width = static_cast<size_t>(TerminalColumns() - 1);
          if (line.size() > width) line.resize(width);
          // Carriage return and erase-to-end-of-line redraw the bar in place.
          std::cout << "\r" << line << "\033[K" << std::flush;
          line_open_ = true;
        }
        return;
      case Mode::kPlain:
        if (e.kind() == v1::TrainProgressEvent::EPOCH) {
          std::cout << EpochLine(e) << std::endl;
        } else if (absl::Now() - last_step_line_ >= absl::Seconds(10)) {
          // A log, not a screen: a step line now and then shows that the job moves.
          last_step_line_ = absl::Now();
          std::cout << StepLine(e) << std::endl;
        }
        return;
    }
  }

  // Moves past a redrawn line so the next output starts on a fresh one.
  void EndLine() {
    if (line_open_) std::cout << "\r\033[K" << std::flush;
    line_open_ = false;
  }

 private:
  static std::string Eta(const v1::TrainProgressEvent& e) {
    return e.eta_seconds() > 0 ? absl::StrCat("  ETA ", FormatSeconds(e.eta_seconds())) : "";
  }

  std::string StepLine(const v1::TrainProgressEvent& e) const {
    const double done =
        e.total_steps() > 0
            ? std::clamp(static_cast<double>(e.step()) / static_cast<double>(e.total_steps()), 0.0,
                         1.0)
            : 0.0;
    std::string bar;
    if (mode_ == Mode::kTerminal) {
      constexpr int kBarWidth = 24;
      const int filled = static_cast<int>(done * kBarWidth);
      bar = absl::StrCat(" [", std::string(filled, '#'), std::string(kBarWidth - filled, '.'), "]");
    }
    return absl::StrCat("epoch ", e.epoch(), "/", e.epochs(), bar,
                        absl::StrFormat(" %3.0f%%", done * 100), "  step ", e.step(), "/",
                        e.total_steps(), "  loss ", Loss(e.train_loss()), Eta(e), "  ",
                        FormatRate(e.samples_per_second()), " samples/s");
  }

  static std::string EpochLine(const v1::TrainProgressEvent& e) {
    return absl::StrCat("epoch ", e.epoch(), "/", e.epochs(), "  train loss ", Loss(e.train_loss()),
                        "  validation loss ", Loss(e.validation_loss()), "  best ",
                        Loss(e.best_validation_loss()), "  lr ",
                        absl::StrFormat("%.3g", e.learning_rate()), "  ",
                        FormatRate(e.samples_per_second()), " samples/s", Eta(e));
  }

  const Mode mode_;
  bool line_open_ = false;
  absl::Time last_step_line_ = absl::InfinitePast();
};

// Asks `question` on the controlling terminal; false when there is none (not interactive),
// on EOF, on another Ctrl-C, or for any answer but y/yes.
bool AskOnTerminal(const std::string& question) {
  const int fd = open("/dev/tty", O_RDWR | O_CLOEXEC | O_NOCTTY);
  if (fd < 0) return false;
  if (write(fd, question.data(), question.size()) < 0) {
    close(fd);
    return false;
  }
  std::string answer;
  bool complete = false;
  char c = 0;
  while (true) {
    const ssize_t n = read(fd, &c, 1);
    if (n <= 0) break;  // EOF, or EINTR from another Ctrl-C: no
    if (c == '\n') {
      complete = true;
      break;
    }
    answer.push_back(c);
  }
  if (!complete) (void)!write(fd, "\n", 1);
  close(fd);
  const std::string a = absl::AsciiStrToLower(absl::StripAsciiWhitespace(answer));
  return complete && (a == "y" || a == "yes");
}

void PrintResumeHint(const Context& context, const std::string& job_id) {
  std::string address;
  const char* env = std::getenv("FORECASTD_ADDRESS");
  if (context.flags.address != kDefaultAddress &&
      (env == nullptr || context.flags.address != env)) {
    address = absl::StrCat(" --address ", context.flags.address);
  }
  std::fprintf(stderr,
               "Detached: job %s keeps running on the server.\n"
               "Watch it again with: forecastctl%s jobs watch %s\n",
               job_id.c_str(), address.c_str(), job_id.c_str());
}

// After Ctrl-C: cancel the job (and wait for its final state) or detach.
int CancelOrDetach(Context& context, ForecastdClient& client, const std::string& job_id) {
  if (!AskOnTerminal(absl::StrCat("Cancel job ", job_id, "? [y/N] (N detaches) "))) {
    PrintResumeHint(context, job_id);
    return kExitDetached;
  }
  ClearInterrupted();
  absl::StatusOr<v1::TrainJobInfo> info = client.CancelTrainJob(job_id);
  if (!info.ok()) return ServerError(info.status());
  std::fprintf(stderr, "Cancelling job %s...\n", job_id.c_str());
  // The job stops between steps; its final state follows shortly.
  while (!IsFinal(info->state())) {
    if (Interrupted()) {
      PrintResumeHint(context, job_id);
      return kExitDetached;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    info = client.GetTrainJob(job_id);
    if (!info.ok()) return ServerError(info.status());
  }
  return ReportFinished(*info, context.flags.json);
}

}  // namespace

bool IsFinal(v1::TrainJobState state) {
  return state == v1::TRAIN_JOB_SUCCEEDED || state == v1::TRAIN_JOB_FAILED ||
         state == v1::TRAIN_JOB_CANCELLED;
}

std::string JobStateName(v1::TrainJobState state) {
  return ShortName(v1::TrainJobState_Name(state), "TRAIN_JOB_");
}

std::string DescribeJob(const v1::TrainJobInfo& info) {
  std::string out = absl::StrCat("job ", info.job_id(), " (model ", info.model(),
                                 "): ", JobStateName(info.state()));
  if (info.state() == v1::TRAIN_JOB_SUCCEEDED) {
    absl::StrAppend(&out, ", version ", info.published_version(), " published",
                    info.promoted() ? " and promoted" : "");
  }
  if (info.epochs_run() > 0) {
    absl::StrAppend(&out, ", ", info.epochs_run(), " epoch", info.epochs_run() == 1 ? "" : "s",
                    " run", info.stopped_early() ? " (stopped early)" : "");
  }
  if (info.best_epoch() > 0) {
    absl::StrAppend(&out, ", best epoch ", info.best_epoch(), " (validation loss ",
                    Loss(info.best_validation_loss()), ")");
  }
  if (info.finished_unix_ms() > 0 && info.created_unix_ms() > 0) {
    absl::StrAppend(
        &out, ", took ",
        FormatSeconds(static_cast<double>(info.finished_unix_ms() - info.created_unix_ms()) / 1e3));
  }
  return out;
}

int ReportFinished(const v1::TrainJobInfo& info, bool json) {
  const int code = info.state() == v1::TRAIN_JOB_SUCCEEDED ? kExitOk : kExitServerError;
  if (json) {
    v1::TrainJobEvent event;
    *event.mutable_finished() = info;
    std::cout << ProtoJson(event, /*one_line=*/true) << std::endl;
    return code;
  }
  if (info.state() == v1::TRAIN_JOB_FAILED || info.state() == v1::TRAIN_JOB_CANCELLED) {
    std::cout.flush();
    const std::string reason = !info.error().empty()                     ? info.error()
                               : info.state() == v1::TRAIN_JOB_CANCELLED ? "cancelled"
                                                                         : "no reason given";
    std::fprintf(stderr, "error: job %s %s: %s (%s)\n", info.job_id().c_str(),
                 JobStateName(info.state()).c_str(), reason.c_str(), DescribeJob(info).c_str());
  } else {
    std::cout << DescribeJob(info) << std::endl;
  }
  return code;
}

int WatchJob(Context& context, const std::string& job_id) {
  absl::StatusOr<ForecastdClient*> client = context.Client();
  if (!client.ok()) return UsageError(client.status().message());
  const ProgressPrinter::Mode mode = context.flags.json           ? ProgressPrinter::Mode::kJson
                                     : isatty(STDOUT_FILENO) != 0 ? ProgressPrinter::Mode::kTerminal
                                                                  : ProgressPrinter::Mode::kPlain;
  ProgressPrinter printer(mode);
  SigintTrap trap;
  std::fprintf(stderr, "Watching job %s (Ctrl-C to detach or cancel)\n", job_id.c_str());

  // The stream blocks in gRPC; a helper thread turns a Ctrl-C into TryCancel, which ends it.
  grpc::ClientContext call;
  std::atomic<bool> done{false};
  std::thread watcher([&call, &done] {
    while (!done.load()) {
      if (Interrupted()) {
        call.TryCancel();
        return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });
  absl::StatusOr<v1::TrainJobInfo> info = (*client)->WatchTrainJob(
      job_id, call, [&printer](const v1::TrainProgressEvent& e) { printer.Print(e); });
  done.store(true);
  watcher.join();
  printer.EndLine();
  if (info.ok()) return ReportFinished(*info, context.flags.json);
  if (Interrupted()) return CancelOrDetach(context, **client, job_id);
  return ServerError(info.status());
}

}  // namespace forecastd::ctl
