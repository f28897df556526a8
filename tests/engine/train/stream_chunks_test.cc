// StreamChunks: how stateful training cuts a part of the series into parallel streams and
// chunks, and what each chunk's inputs and targets are.
#include "engine/train/stream_chunks.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tests/engine/train/data_test_util.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace {

using data_test::RequireStatus;

// rows x 2 features: row r is (r, 100 + r); no normalisation, no validation part.
std::unique_ptr<WindowedDataset> Counting(int64_t rows, int64_t P, double fraction = 0.0) {
  Series series;
  series.column_names = {"a", "b"};
  series.rows = rows;
  for (int64_t r = 0; r < rows; ++r) {
    series.values.push_back(static_cast<float>(r));
    series.values.push_back(static_cast<float>(100 + r));
  }
  WindowedDatasetOptions options;
  options.lookback = 2;
  options.horizon = P;
  options.target_indices = {1};
  options.validation_fraction = fraction;
  options.normalization = NormalizationMode::kNone;
  return WindowedDataset::Create(std::move(series), options).value();
}

TEST_CASE("Streams are contiguous, chunks walk them in order, the last chunk is short",
          "[unit][train]") {
  // 23 rows, 2 streams of 11 (row 22 unused), horizon 2: 9 steps per stream; chunks of 4:
  // 4, 4, 1 steps.
  const std::unique_ptr<WindowedDataset> data = Counting(23, 2);
  const StreamChunks chunks = StreamChunks::Create(*data, Split::kTrain, 2, 4).value();
  REQUIRE(chunks.streams() == 2);
  REQUIRE(chunks.stream_rows() == 11);
  REQUIRE(chunks.steps() == 9);
  REQUIRE(chunks.num_chunks() == 3);
  REQUIRE(chunks.chunk_steps(0) == 4);
  REQUIRE(chunks.chunk_steps(2) == 1);

  // Chunk 1: steps 4..7 of each stream; stream 1 starts at row 11.
  std::vector<float> x(2 * 4 * 2), y(2 * 4 * 2 * 1);
  REQUIRE(chunks.FillChunk(1, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  REQUIRE(x == std::vector<float>{4, 104, 5, 105, 6, 106, 7, 107,  //
                                  15, 115, 16, 116, 17, 117, 18, 118});
  // Each step forecasts target b of the next two rows.
  REQUIRE(y == std::vector<float>{105, 106, 106, 107, 107, 108, 108, 109,  //
                                  116, 117, 117, 118, 118, 119, 119, 120});
  // The last chunk: step 8 reads row 8 (19) and forecasts rows 9, 10 (20, 21).
  std::vector<float> x2(2 * 1 * 2), y2(2 * 1 * 2);
  REQUIRE(chunks.FillChunk(2, absl::MakeSpan(x2), absl::MakeSpan(y2)).ok());
  REQUIRE(x2 == std::vector<float>{8, 108, 19, 119});
  REQUIRE(y2 == std::vector<float>{109, 110, 120, 121});

  RequireStatus(chunks.FillChunk(3, absl::MakeSpan(x2), absl::MakeSpan(y2)),
                absl::StatusCode::kOutOfRange, "chunk 3");
  RequireStatus(chunks.FillChunk(2, absl::MakeSpan(x), absl::MakeSpan(y2)),
                absl::StatusCode::kInvalidArgument, "(B, K, F)");
}

TEST_CASE("The validation part is cut alike, into as many streams as have a step",
          "[unit][train]") {
  // 40 rows, fraction 0.25: 30 training rows, 10 validation rows (30..39).
  const std::unique_ptr<WindowedDataset> data = Counting(40, 3, 0.25);
  // Streams of at least horizon + 1 = 4 rows: at most 2 of the 10 rows.
  REQUIRE(StreamChunks::StreamsFor(*data, Split::kValidation, 8) == 2);
  REQUIRE(StreamChunks::StreamsFor(*data, Split::kValidation, 1) == 1);
  const StreamChunks chunks = StreamChunks::Create(*data, Split::kValidation, 2, 16).value();
  REQUIRE(chunks.steps() == 2);
  REQUIRE(chunks.num_chunks() == 1);
  std::vector<float> x(2 * 2 * 2), y(2 * 2 * 3);
  REQUIRE(chunks.FillChunk(0, absl::MakeSpan(x), absl::MakeSpan(y)).ok());
  REQUIRE(x == std::vector<float>{30, 130, 31, 131, 35, 135, 36, 136});
}

TEST_CASE("Streams too short for one step, and empty settings, are refused", "[unit][train]") {
  const std::unique_ptr<WindowedDataset> data = Counting(23, 2);
  RequireStatus(StreamChunks::Create(*data, Split::kTrain, 8, 4).status(),
                absl::StatusCode::kInvalidArgument, "at least 24 training rows");
  RequireStatus(StreamChunks::Create(*data, Split::kTrain, 0, 4).status(),
                absl::StatusCode::kInvalidArgument, "stream");
  RequireStatus(StreamChunks::Create(*data, Split::kTrain, 2, 0).status(),
                absl::StatusCode::kInvalidArgument, "chunk");
}

}  // namespace
}  // namespace forecastd
