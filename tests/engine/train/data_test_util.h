// Helpers that the tests of the training-data modules (csv_series, data_source, dataset)
// share: a scratch directory, writing a file, checking a status's code and message, and a
// small model config. Test-only; each helper is used by one test thread at a time.
#ifndef FORECASTD_TESTS_ENGINE_TRAIN_DATA_TEST_UTIL_H_
#define FORECASTD_TESTS_ENGINE_TRAIN_DATA_TEST_UTIL_H_

#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "engine/models/model_config.h"
#include "tests/testing/catch.h"

namespace forecastd {
namespace data_test {

namespace fs = std::filesystem;

// A fresh directory, removed with everything in it at scope exit.
struct TempDir {
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "data_test.XXXXXX").string();
    REQUIRE(mkdtemp(tmpl.data()) != nullptr);
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
  fs::path path;
};

inline void WriteFile(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  REQUIRE(out.good());
}

inline void RequireStatus(const absl::Status& status, absl::StatusCode code,
                          absl::string_view what) {
  CAPTURE(status.ToString());
  CHECK(status.code() == code);
  CHECK(absl::StrContains(status.message(), what));
}

inline ModelConfig SmallModel(int T, int P, std::vector<std::string> features,
                              std::vector<std::string> targets) {
  ModelConfig config;
  config.set_name("m");
  config.set_lookback(T);
  config.set_horizon(P);
  for (const auto& f : features) config.add_feature_names(f);
  for (const auto& t : targets) config.add_target_names(t);
  config.mutable_lstm()->set_hidden_size(4);
  config.mutable_lstm()->set_num_layers(1);
  return config;
}

}  // namespace data_test
}  // namespace forecastd

#endif  // FORECASTD_TESTS_ENGINE_TRAIN_DATA_TEST_UTIL_H_
