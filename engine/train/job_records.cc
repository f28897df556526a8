#include "engine/train/job_records.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/file_io.h"
#include "kernels/base/status.h"
#include "nlohmann/json.hpp"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

using Json = nlohmann::json;

constexpr const char* kStates[] = {"RUNNING", "SUCCEEDED", "FAILED", "CANCELLED"};

// NaN (no validation part) as null, which JSON has and NaN it has not.
Json Number(double v) { return std::isnan(v) ? Json(nullptr) : Json(v); }
double NumberOr(const Json& j, const char* key) {
  const auto it = j.find(key);
  return it == j.end() || it->is_null() ? std::numeric_limits<double>::quiet_NaN()
                                        : it->get<double>();
}

int64_t UnixMillis(absl::Time t) { return t == absl::InfinitePast() ? 0 : absl::ToUnixMillis(t); }
absl::Time FromUnixMillis(int64_t ms) {
  return ms == 0 ? absl::InfinitePast() : absl::FromUnixMillis(ms);
}

// The record's JSON and back (INVALID_ARGUMENT naming what is wrong).
std::string JobRecordJson(const JobSnapshot& job) {
  const TrainResult& r = job.result;
  Json j = {
      {"id", job.id},
      {"model", job.model},
      {"state", kStates[static_cast<int>(job.state)]},
      {"error", job.error},
      {"promoted", job.promoted},
      {"created_unix_ms", UnixMillis(job.created)},
      {"finished_unix_ms", UnixMillis(job.finished)},
      {"result",
       {{"epochs_run", r.epochs_run},
        {"steps", r.steps},
        {"stopped_early", r.stopped_early},
        {"best_epoch", r.best_epoch},
        {"best_validation_loss", Number(r.best_validation_loss)},
        {"version", r.version},
        {"resumed_from_epoch", r.resumed_from_epoch},
        {"device", r.device}}},
  };
  Json train = Json::array(), validation = Json::array();
  for (double v : r.train_losses) train.push_back(Number(v));
  for (double v : r.validation_losses) validation.push_back(Number(v));
  j["result"]["train_losses"] = std::move(train);
  j["result"]["validation_losses"] = std::move(validation);
  if (job.latest.has_value()) {
    const TrainProgress& p = *job.latest;
    j["latest"] = {{"epoch", p.epoch},
                   {"epochs", p.epochs},
                   {"step", p.step},
                   {"total_steps", p.total_steps},
                   {"train_loss", Number(p.train_loss)},
                   {"validation_loss", Number(p.validation_loss)},
                   {"best_validation_loss", Number(p.best_validation_loss)},
                   {"samples_per_second", p.samples_per_second}};
  }
  return j.dump(2) + "\n";
}

absl::StatusOr<JobSnapshot> ParseJobRecord(const std::string& text) {
  try {
    const Json j = Json::parse(text);
    JobSnapshot job;
    job.id = j.at("id").get<std::string>();
    job.model = j.at("model").get<std::string>();
    const std::string state = j.at("state").get<std::string>();
    const auto found = std::find(std::begin(kStates), std::end(kStates), state);
    if (found == std::end(kStates)) {
      return absl::InvalidArgumentError(absl::StrCat("unknown state '", state, "'"));
    }
    job.state = static_cast<JobState>(found - std::begin(kStates));
    job.error = j.value("error", std::string());
    job.promoted = j.value("promoted", false);
    job.created = FromUnixMillis(j.value("created_unix_ms", int64_t{0}));
    job.finished = FromUnixMillis(j.value("finished_unix_ms", int64_t{0}));
    if (const auto r = j.find("result"); r != j.end()) {
      TrainResult& out = job.result;
      out.epochs_run = r->value("epochs_run", int64_t{0});
      out.steps = r->value("steps", int64_t{0});
      out.stopped_early = r->value("stopped_early", false);
      out.best_epoch = r->value("best_epoch", int64_t{0});
      out.best_validation_loss = NumberOr(*r, "best_validation_loss");
      out.version = r->value("version", int64_t{0});
      out.resumed_from_epoch = r->value("resumed_from_epoch", int64_t{0});
      out.device = r->value("device", std::string());
      const auto losses = [&](const char* key, std::vector<double>& into) {
        for (const Json& v : r->value(key, Json::array())) {
          into.push_back(v.is_null() ? std::numeric_limits<double>::quiet_NaN() : v.get<double>());
        }
      };
      losses("train_losses", out.train_losses);
      losses("validation_losses", out.validation_losses);
    }
    if (const auto p = j.find("latest"); p != j.end()) {
      TrainProgress progress;
      progress.kind = TrainProgress::Kind::kEpoch;
      progress.epoch = p->value("epoch", int64_t{0});
      progress.epochs = p->value("epochs", int64_t{0});
      progress.step = p->value("step", int64_t{0});
      progress.total_steps = p->value("total_steps", int64_t{0});
      progress.train_loss = NumberOr(*p, "train_loss");
      progress.validation_loss = NumberOr(*p, "validation_loss");
      progress.best_validation_loss = NumberOr(*p, "best_validation_loss");
      progress.samples_per_second = p->value("samples_per_second", 0.0);
      job.latest = progress;
    }
    if (job.id.empty() || job.model.empty()) {
      return absl::InvalidArgumentError("a job record needs an id and a model");
    }
    return job;
  } catch (const Json::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("not a job record: ", e.what()));
  }
}

}  // namespace

absl::Status WriteJobRecord(const std::string& dir, const JobSnapshot& job) {
  RETURN_IF_ERROR(CreateDirectories(dir));
  return WriteFileAtomically(absl::StrCat(dir, "/", job.id, ".json"), JobRecordJson(job));
}

std::vector<JobSnapshot> ReadJobRecords(const std::string& dir) {
  std::vector<JobSnapshot> jobs;
  std::error_code error;
  if (!std::filesystem::is_directory(dir, error)) return jobs;
  for (const auto& entry : std::filesystem::directory_iterator(dir, error)) {
    const std::filesystem::path& path = entry.path();
    // Temporary files of an interrupted write start with a dot.
    if (path.extension() != ".json" || path.filename().string().front() == '.') continue;
    absl::StatusOr<std::string> text = ReadFileBytes(path.string(), "training job record");
    absl::StatusOr<JobSnapshot> job =
        text.ok() ? ParseJobRecord(*text) : absl::StatusOr<JobSnapshot>(text.status());
    if (!job.ok()) {
      spdlog::warn("training job record {} skipped: {}", path.string(),
                   std::string(job.status().message()));
      continue;
    }
    jobs.push_back(*std::move(job));
  }
  std::sort(jobs.begin(), jobs.end(), [](const JobSnapshot& a, const JobSnapshot& b) {
    return a.created != b.created ? a.created < b.created : a.id < b.id;
  });
  return jobs;
}

}  // namespace forecastd
