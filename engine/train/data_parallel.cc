#include "engine/train/data_parallel.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "engine/hash.h"
#include "engine/random.h"
#include "kernels/base/status.h"
#include "spdlog/spdlog.h"

namespace forecastd {
namespace {

// A thread that runs one task at a time for its rank: the rank's engine is made, stepped and
// read on it, so a GPU rank's CUDA calls all come from one thread.
class RankThread {
 public:
  RankThread() : thread_([this] { Loop(); }) {}
  ~RankThread() {
    {
      absl::MutexLock lock(&mu_);
      stop_ = true;
    }
    thread_.join();
  }
  RankThread(const RankThread&) = delete;
  RankThread& operator=(const RankThread&) = delete;

  // Starts `task`; Join() waits for it and returns its status.
  void Start(std::function<absl::Status()> task) {
    absl::MutexLock lock(&mu_);
    task_ = std::move(task);
    done_ = false;
  }
  absl::Status Join() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(&done_));
    return result_;
  }

 private:
  void Loop() {
    while (true) {
      std::function<absl::Status()> task;
      {
        absl::MutexLock lock(&mu_);
        const auto ready = [this]() ABSL_SHARED_LOCKS_REQUIRED(mu_) {
          return stop_ || task_ != nullptr;
        };
        mu_.Await(absl::Condition(&ready));
        if (task_ == nullptr) return;
        task = std::move(task_);
        task_ = nullptr;
      }
      absl::Status result = task();
      absl::MutexLock lock(&mu_);
      result_ = std::move(result);
      done_ = true;
    }
  }

  absl::Mutex mu_;
  std::function<absl::Status()> task_ ABSL_GUARDED_BY(mu_);
  absl::Status result_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = true;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::thread thread_;  // last: it runs Loop() over the members above
};

// One rank: its replica of the model and optimiser (rank 0 uses the job's own), its
// communicator and engine, and the thread they run on.
struct Rank {
  int local = 0;   // index among this process's ranks
  int global = 0;  // the group's rank
  std::unique_ptr<Forecaster> own_model;
  std::unique_ptr<Optimizer> own_optimizer;
  Forecaster* model = nullptr;
  Optimizer* optimizer = nullptr;
  std::unique_ptr<Communicator> communicator;
  std::unique_ptr<TrainingEngine> engine;
  std::unique_ptr<RankThread> thread;  // declared last: joined before the rest goes
};

class DataParallelEngine final : public TrainingEngine {
 public:
  DataParallelEngine(DataParallelOptions options, Forecaster& model, Optimizer& optimizer,
                     const TrainingLoss& loss)
      : options_(std::move(options)), model_(model), optimizer_(optimizer), loss_(loss) {}

  ~DataParallelEngine() override {
    // Rank threads first: nothing may still run on a rank when its engine goes.
    for (Rank& rank : ranks_) rank.thread.reset();
  }

  absl::Status Init(const v1::TrainingConfig& config) {
    const int n = options_.ranks;
    ranks_.resize(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) {
      Rank& rank = ranks_[static_cast<size_t>(i)];
      rank.local = i;
      rank.global = options_.first_rank + i;
      if (i == 0) {
        rank.model = &model_;
        rank.optimizer = &optimizer_;
      } else {
        ASSIGN_OR_RETURN(rank.own_model, Forecaster::Create(model_.config()));
        ASSIGN_OR_RETURN(rank.own_optimizer,
                         Optimizer::Create(optimizer_.config(), rank.own_model->parameters()));
        rank.model = rank.own_model.get();
        rank.optimizer = rank.own_optimizer.get();
      }
      rank.thread = std::make_unique<RankThread>();
    }
    // Every rank's communicator at once: a group forms only when all of its ranks join.
    RETURN_IF_ERROR(OnRanks([this](Rank& rank) -> absl::Status {
      const absl::Time start = absl::Now();
      ASSIGN_OR_RETURN(rank.communicator, options_.make_communicator(rank.local));
      spdlog::debug("data-parallel rank {} of {}: communicator joined in {}", rank.global,
                    options_.world_size, absl::FormatDuration(absl::Now() - start));
      if (rank.communicator->rank() != rank.global ||
          rank.communicator->size() != options_.world_size) {
        return absl::InternalError(
            absl::StrCat("local rank ", rank.local, " was given the communicator of rank ",
                         rank.communicator->rank(), " of ", rank.communicator->size(),
                         ", not rank ", rank.global, " of ", options_.world_size));
      }
      return absl::OkStatus();
    }));
    communicators_made_ = true;
    return OnRanks([this, &config](Rank& rank) -> absl::Status {
      const absl::Time start = absl::Now();
      ASSIGN_OR_RETURN(rank.engine, options_.make_engine(rank.local, *rank.model, *rank.optimizer,
                                                         loss_, config));
      spdlog::debug("data-parallel rank {} of {}: engine on {} made in {}", rank.global,
                    options_.world_size, rank.engine->device(),
                    absl::FormatDuration(absl::Now() - start));
      return absl::OkStatus();
    });
  }

  std::string device() const override {
    std::vector<std::string> devices;
    for (const Rank& rank : ranks_) devices.push_back(rank.engine->device());
    return absl::StrJoin(devices, ",");
  }

  absl::Status Push() override {
    std::vector<std::pair<std::string, std::vector<float>>> state;
    for (const auto& [name, values] : optimizer_.state()) state.emplace_back(name, *values);
    const ParameterArena& params = model_.parameters();
    return OnRanks([&](Rank& rank) -> absl::Status {
      if (rank.local > 0) {
        std::copy(params.data(), params.data() + params.size(), rank.model->parameters().data());
        RETURN_IF_ERROR(rank.optimizer->Restore(state, optimizer_.steps_taken()));
      }
      RETURN_IF_ERROR(rank.engine->Push());
      // Ranks in other processes start from the group's rank 0: its weights may be a resumed
      // checkpoint's or a fine-tuned version's that only its process has.
      if (SpansProcesses()) RETURN_IF_ERROR(rank.engine->BroadcastState(*rank.communicator));
      return absl::OkStatus();
    });
  }

  absl::Status ShareFromFirstRank(std::vector<uint32_t>& words) override {
    if (!SpansProcesses() || words.empty()) return absl::OkStatus();
    const auto n = static_cast<int64_t>(words.size());
    std::vector<std::vector<float>> values(ranks_.size(), std::vector<float>(words.size()));
    RETURN_IF_ERROR(OnRanks([&](Rank& rank) -> absl::Status {
      // The words travel as the bits of floats: a broadcast copies them unchanged.
      std::vector<float>& mine = values[static_cast<size_t>(rank.local)];
      std::memcpy(mine.data(), words.data(), words.size() * sizeof(uint32_t));
      return rank.engine->HostCollective(mine.data(), n, *rank.communicator);
    }));
    std::memcpy(words.data(), values.front().data(), words.size() * sizeof(uint32_t));
    return absl::OkStatus();
  }

  void Abort() override {
    if (communicators_made_) AbortAll();
  }

  absl::Status Pull() override {
    Rank& first = ranks_.front();
    first.thread->Start([&first] { return first.engine->Pull(); });
    return first.thread->Join();
  }

  int64_t steps_taken() const override { return ranks_.front().engine->steps_taken(); }

  absl::StatusOr<double> Step(const float* x, const float* y, int64_t B, float lr,
                              std::optional<uint64_t> dropout_seed) override {
    if (B < 1) return absl::InvalidArgumentError("a step of no windows");
    const int64_t x_row = model_.input_floats();
    const int64_t y_row = loss_.per_window();
    std::vector<double> losses(ranks_.size(), 0.0);
    const absl::Time start = absl::Now();
    RETURN_IF_ERROR(OnRanks([&](Rank& rank) -> absl::Status {
      const auto [begin, end] = ShardRows(B, rank.global, options_.world_size);
      const int64_t rows = end - begin;
      // Every rank its own masks; the first keeps the step's, so one rank is one device.
      std::optional<uint64_t> seed = dropout_seed;
      if (seed.has_value() && rank.global > 0) {
        seed = DeriveSeed(*seed, SeedPurpose::kDropout, static_cast<uint64_t>(rank.global));
      }
      const float share = static_cast<float>(rows) / static_cast<float>(B);
      double& loss = losses[static_cast<size_t>(rank.local)];
      ASSIGN_OR_RETURN(loss, rank.engine->StepShard(x + begin * x_row, y + begin * y_row, rows, lr,
                                                    seed, *rank.communicator, share));
      if (SpansProcesses()) {
        // Some shards' losses are elsewhere: the global loss is their weighted sum.
        float global = static_cast<float>(loss);
        RETURN_IF_ERROR(rank.engine->HostCollective(&global, 1, *rank.communicator, share));
        loss = global;
      }
      return absl::OkStatus();
    }));
    if (options_.collective_margin > absl::ZeroDuration()) {
      // The rank threads are idle now: their communicators may be set from here.
      slowest_step_ = std::max(slowest_step_, absl::Now() - start);
      for (Rank& rank : ranks_) {
        rank.communicator->SetTimeout(options_.collective_margin + slowest_step_);
      }
    }
    if (SpansProcesses()) return losses.front();
    return Combine(losses, B, /*over_group=*/true);
  }

  absl::StatusOr<double> Evaluate(const float* x, const float* y, int64_t B) override {
    if (B < 1) return absl::InvalidArgumentError("an evaluation of no windows");
    const int64_t x_row = model_.input_floats();
    const int64_t y_row = loss_.per_window();
    std::vector<double> losses(ranks_.size(), 0.0);
    // No collective: this process's ranks split the windows among themselves.
    RETURN_IF_ERROR(OnRanks([&](Rank& rank) -> absl::Status {
      const auto [begin, end] = ShardRows(B, rank.local, options_.ranks);
      if (end == begin) return absl::OkStatus();
      ASSIGN_OR_RETURN(losses[static_cast<size_t>(rank.local)],
                       rank.engine->Evaluate(x + begin * x_row, y + begin * y_row, end - begin));
      return absl::OkStatus();
    }));
    return Combine(losses, B, /*over_group=*/false);
  }

  absl::StatusOr<std::vector<uint64_t>> WeightChecksums() override {
    std::vector<uint64_t> sums(ranks_.size(), 0);
    RETURN_IF_ERROR(OnRanks([&sums](Rank& rank) -> absl::Status {
      // Rank 0's Pull is the job's own; the others' land in their replicas.
      RETURN_IF_ERROR(rank.engine->Pull());
      const ParameterArena& params = rank.model->parameters();
      sums[static_cast<size_t>(rank.local)] = ArenaChecksum(params.data(), params.size());
      return absl::OkStatus();
    }));
    return sums;
  }

 private:
  // Runs `task` on every rank's thread at once and waits for all of them. A rank that fails
  // aborts its communicator, so the others' collectives end instead of waiting for it. Returns
  // the first failure's status, preferring the cause (an error other than UNAVAILABLE) over the
  // aborted ranks' UNAVAILABLE.
  absl::Status OnRanks(const std::function<absl::Status(Rank&)>& task) {
    for (Rank& rank : ranks_) {
      rank.thread->Start([this, &task, &rank] {
        absl::Status status = task(rank);
        // A failure on one rank ends the group: the others' collectives would wait for it.
        if (!status.ok() && communicators_made_) AbortAll();
        return status;
      });
    }
    absl::Status first, cause;
    for (Rank& rank : ranks_) {
      absl::Status status = rank.thread->Join();
      if (status.ok()) continue;
      if (first.ok()) first = status;
      if (cause.ok() && !absl::IsUnavailable(status)) cause = status;
    }
    return cause.ok() ? first : cause;
  }

  void AbortAll() {
    for (Rank& rank : ranks_) rank.communicator->Abort();
  }

  bool SpansProcesses() const { return options_.world_size > options_.ranks; }

  // The loss of B windows from this process's ranks' losses on their shards, each weighted by
  // its rows: shards of the group's split (`over_group`, as Step takes them) or of this
  // process's own (as Evaluate does).
  double Combine(const std::vector<double>& losses, int64_t B, bool over_group) const {
    double total = 0.0;
    int64_t rows = 0;
    for (const Rank& rank : ranks_) {
      const auto [begin, end] = over_group ? ShardRows(B, rank.global, options_.world_size)
                                           : ShardRows(B, rank.local, options_.ranks);
      total += losses[static_cast<size_t>(rank.local)] * static_cast<double>(end - begin);
      rows += end - begin;
    }
    return rows > 0 ? total / static_cast<double>(rows) : 0.0;
  }

  const DataParallelOptions options_;
  Forecaster& model_;
  Optimizer& optimizer_;
  const TrainingLoss& loss_;
  std::vector<Rank> ranks_;
  // Set once every rank has its communicator (before any later task starts; read by the rank
  // threads, and by Abort() from any thread, only after that).
  std::atomic<bool> communicators_made_{false};
  absl::Duration slowest_step_ = absl::ZeroDuration();  // of Step, over every rank
};

}  // namespace

std::pair<int64_t, int64_t> ShardRows(int64_t B, int rank, int ranks) {
  return {B * rank / ranks, B * (rank + 1) / ranks};
}

uint64_t ArenaChecksum(const float* data, int64_t n) {
  return Fnv1a(absl::string_view(reinterpret_cast<const char*>(data),
                                 static_cast<size_t>(n) * sizeof(float)));
}

absl::StatusOr<std::unique_ptr<TrainingEngine>> MakeDataParallelTrainingEngine(
    DataParallelOptions options, Forecaster& model, Optimizer& optimizer, const TrainingLoss& loss,
    const v1::TrainingConfig& config) {
  if (options.world_size == 0) options.world_size = options.ranks;
  if (options.ranks < 1 || options.first_rank < 0 ||
      options.first_rank + options.ranks > options.world_size) {
    return absl::InvalidArgumentError(absl::StrCat("data-parallel ranks [", options.first_rank,
                                                   ", ", options.first_rank + options.ranks,
                                                   ") of a group of ", options.world_size));
  }
  if (!options.make_communicator || !options.make_engine) {
    return absl::InvalidArgumentError(
        "data-parallel training needs a communicator and an engine for each rank");
  }
  if (config.stateful().chunk_length() > 0) {
    return absl::FailedPreconditionError(
        "stateful training (training.stateful.chunk_length > 0) runs on one device; name one "
        "device, or train on windows");
  }
  const int64_t batch = config.batch_size() > 0 ? config.batch_size() : 32;
  if (batch % options.world_size != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("batch_size ", batch, " does not split evenly over ", options.world_size,
                     " devices; use a multiple of ", options.world_size));
  }
  auto engine = std::make_unique<DataParallelEngine>(std::move(options), model, optimizer, loss);
  RETURN_IF_ERROR(engine->Init(config));
  return engine;
}

}  // namespace forecastd
