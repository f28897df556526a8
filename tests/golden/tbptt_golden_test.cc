// Stateful training parity with PyTorch: for each stateful golden case (make_golden.py's
// TBPTT_CASES), `tbptt.safetensors` holds a raw series and what PyTorch computes when it trains
// the case's model on it with truncated back-propagation through time (nn.LSTM / nn.GRU with
// the state carried and detached between chunks): the gradients of the first chunk, the loss
// of each of ten optimiser steps, the stateful validation loss before and after them, and the
// weights after them. forecastd's dataset split and normaliser, StreamChunks, the model's chunk
// pair and the host training engine must reproduce them within 1e-4, on the reference and on
// the oneDNN backend.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "backends/cpu/dnnl_backend.h"
#include "backends/reference_backend.h"
#include "engine/models/model_config.h"
#include "engine/models/model_files.h"
#include "engine/safetensors.h"
#include "engine/train/dataset.h"
#include "engine/train/stream_chunks.h"
#include "engine/train/training_engine.h"
#include "tests/golden/golden_dir.h"
#include "tests/golden/golden_training.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

constexpr const char* kTbpttCases[] = {"lstm_tbptt", "gru_tbptt"};
constexpr int kSteps = 10;

int64_t Integer(const SafetensorsFile& file, const std::string& key) {
  int64_t x = 0;
  INFO(key);
  REQUIRE(absl::SimpleAtoi(GoldenText(file, key), &x));
  return x;
}

// The largest error RequireClose met in the current case, reported at its end.
double worst_error = 0.0;

void RequireClose(const std::string& what, double got, double want) {
  CAPTURE(what, got, want);
  const double error = GoldenError(got, want);
  REQUIRE(error <= kTrainGoldenTolerance);
  worst_error = std::max(worst_error, error);
}

// The stateful loss over `chunks` from zero states, as TrainJob validates.
double StatefulLoss(TrainingEngine& engine, const StreamChunks& chunks, const Forecaster& m) {
  const int64_t B = chunks.streams();
  REQUIRE(engine.ResetStates(B).ok());
  double total = 0.0;
  for (int64_t c = 0; c < chunks.num_chunks(); ++c) {
    const int64_t K = chunks.chunk_steps(c);
    std::vector<float> x(static_cast<size_t>(B * K * m.num_features()));
    std::vector<float> y(static_cast<size_t>(B * K * m.horizon() * m.num_targets()));
    REQUIRE(chunks.FillChunk(c, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
    const absl::StatusOr<double> loss = engine.EvaluateChunk(x.data(), y.data(), B, K);
    REQUIRE(loss.ok());
    total += *loss * static_cast<double>(K);
  }
  return total / static_cast<double>(chunks.steps());
}

void CheckCase(const std::string& name, Backend& backend) {
  CAPTURE(name, backend.name());
  worst_error = 0.0;
  const std::string dir = GoldenCaseDir(name);
  absl::StatusOr<ModelConfig> config = ReadModelConfig(dir + "/config.json");
  REQUIRE(config.ok());
  std::unique_ptr<Forecaster> model = Forecaster::Create(*config).value();
  Forecaster& m = *model;
  REQUIRE(LoadWeights(dir + "/model.safetensors", m).ok());
  absl::StatusOr<SafetensorsFile> file = SafetensorsFile::Read(dir + "/tbptt.safetensors");
  INFO(file.status().ToString());
  REQUIRE(file.ok());
  const SafetensorsFile& golden = *file;
  const int F = m.num_features();

  // The series, split and standardised as a TrainJob does: the normaliser fitted on the
  // training rows must be the one the golden model carries.
  const TensorInfo* series_info = golden.Find("series").value();
  Series series;
  series.column_names = {config->feature_names().begin(), config->feature_names().end()};
  series.rows = series_info->shape[0];
  series.values = golden.ReadF32("series", series_info->shape).value();
  v1::DataConfig data;
  data.set_validation_fraction(GoldenNumber(golden, "validation_fraction"));
  absl::StatusOr<WindowedDatasetOptions> options = OptionsFromConfig(data, *config);
  REQUIRE(options.ok());
  absl::StatusOr<std::unique_ptr<WindowedDataset>> dataset =
      WindowedDataset::Create(std::move(series), *options);
  INFO(dataset.status().ToString());
  REQUIRE(dataset.ok());
  REQUIRE((*dataset)->num_train_rows() == Integer(golden, "train_rows"));
  for (int f = 0; f < F; ++f) {
    RequireClose("normalizer.mean", (*dataset)->mean()[f], m.parameters().at("normalizer.mean")[f]);
    RequireClose("normalizer.std", (*dataset)->std()[f], m.parameters().at("normalizer.std")[f]);
  }
  const int64_t B = Integer(golden, "batch_size"), k = Integer(golden, "chunk_length");
  const StreamChunks train = StreamChunks::Create(**dataset, Split::kTrain, B, k).value();
  const StreamChunks validation =
      StreamChunks::Create(**dataset, Split::kValidation,
                           StreamChunks::StreamsFor(**dataset, Split::kValidation, B), k)
          .value();

  // The first chunk's gradients, from zero states, through the model's chunk pair.
  const TrainingLoss loss = GoldenLoss(golden, m.config());
  {
    const int64_t K = train.chunk_steps(0);
    std::vector<float> x(static_cast<size_t>(B * K * F));
    std::vector<float> y(static_cast<size_t>(B * K * loss.per_window()));
    REQUIRE(train.FillChunk(0, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
    std::vector<float> state_0(static_cast<size_t>(m.ChunkStateFloats(B)), 0.0f);
    std::vector<float> state_n(state_0.size());
    std::vector<float> pred(static_cast<size_t>(B * K * m.num_outputs())), dpred(pred.size());
    std::vector<float> grads(static_cast<size_t>(m.parameters().size()), NAN);
    TrainingTape tape;
    REQUIRE(m.ForwardTrainChunk(backend, pred.data(), state_n.data(), x.data(), state_0.data(), B,
                                K, tape)
                .ok());
    const double loss0 = loss.Compute(dpred.data(), pred.data(), y.data(), B * K);
    RequireClose("loss", loss0, golden.ReadF32("loss", {1}).value()[0]);
    REQUIRE(m.Backward(backend, grads.data(), dpred.data(), tape).ok());
    for (const ParameterSpec& spec : m.parameters().specs()) {
      if (!Forecaster::IsTrainable(spec)) continue;
      const std::vector<float> want =
          golden.ReadF32(absl::StrCat("grad.", spec.name), spec.shape).value();
      for (int64_t i = 0; i < spec.numel; ++i) {
        CAPTURE(i);
        RequireClose("grad." + spec.name, grads[static_cast<size_t>(spec.offset + i)],
                     want[static_cast<size_t>(i)]);
      }
    }
  }

  // Ten optimiser steps through the host training engine: epochs of chunks, states reset at
  // every epoch's start.
  std::unique_ptr<Optimizer> optimizer = GoldenOptimizer(golden, m.parameters());
  std::unique_ptr<TrainingEngine> engine =
      MakeHostTrainingEngine(backend, m, *optimizer, loss, v1::TrainingConfig{}).value();
  const std::vector<float> want_validation = golden.ReadF32("validation_loss", {2}).value();
  RequireClose("validation_loss[0]", StatefulLoss(*engine, validation, m), want_validation[0]);
  const std::vector<float> losses = golden.ReadF32("losses", {kSteps}).value();
  const float lr = GoldenNumber(golden, "lr");
  REQUIRE(train.num_chunks() < kSteps);  // the steps cross an epoch start
  int step = 0;
  while (step < kSteps) {
    REQUIRE(engine->ResetStates(B).ok());
    for (int64_t c = 0; c < train.num_chunks() && step < kSteps; ++c, ++step) {
      const int64_t K = train.chunk_steps(c);
      std::vector<float> x(static_cast<size_t>(B * K * F));
      std::vector<float> y(static_cast<size_t>(B * K * loss.per_window()));
      REQUIRE(train.FillChunk(c, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
      const absl::StatusOr<double> value =
          engine->StepChunk(x.data(), y.data(), B, K, lr, std::nullopt);
      REQUIRE(value.ok());
      CAPTURE(step);
      RequireClose("losses", *value, losses[static_cast<size_t>(step)]);
    }
  }
  RequireClose("validation_loss[1]", StatefulLoss(*engine, validation, m), want_validation[1]);
  for (const ParameterSpec& spec : m.parameters().specs()) {
    if (!Forecaster::IsTrainable(spec)) continue;
    const std::vector<float> want =
        golden.ReadF32(absl::StrCat("after.", spec.name), spec.shape).value();
    for (int64_t i = 0; i < spec.numel; ++i) {
      CAPTURE(i);
      RequireClose("after." + spec.name, m.parameters().data()[spec.offset + i],
                   want[static_cast<size_t>(i)]);
    }
  }
  std::printf("%s on %s: largest error %.2g\n", name.c_str(), std::string(backend.name()).c_str(),
              worst_error);
}

TEST_CASE("Stateful training matches PyTorch's truncated BPTT on the reference backend",
          "[golden][train]") {
  ReferenceBackend backend;
  for (const char* name : kTbpttCases) CheckCase(name, backend);
}

TEST_CASE("Stateful training matches PyTorch's truncated BPTT on the oneDNN backend",
          "[golden][train]") {
  auto backend = DnnlBackend::Create({});
  REQUIRE(backend.ok());
  for (const char* name : kTbpttCases) CheckCase(name, **backend);
}

}  // namespace
}  // namespace forecastd
