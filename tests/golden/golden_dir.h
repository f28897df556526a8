// Where the golden cases are read from at run time: the folder the environment variable
// FORECASTD_GOLDEN_DIR names (tests/golden of a forecastd checkout), never a path compiled into
// the binary, so golden test binaries run from any directory and on hosts where the checkout
// lives elsewhere. ctest sets it for golden_test, train_golden_test and golden_gpu_test;
// bench/gpu_session.sh sets it for the GPU bundle. Thread-safe (reads the environment only).
#ifndef FORECASTD_TESTS_GOLDEN_GOLDEN_DIR_H_
#define FORECASTD_TESTS_GOLDEN_GOLDEN_DIR_H_

#include <string>

namespace forecastd {

inline constexpr char kGoldenDirVariable[] = "FORECASTD_GOLDEN_DIR";

// $FORECASTD_GOLDEN_DIR. Fails the calling test, with a message naming the variable, when it
// is unset or does not name a folder.
std::string GoldenDir();

// GoldenDir()/<name>, the folder of one case; fails the calling test, naming the variable,
// when that folder does not exist.
std::string GoldenCaseDir(const std::string& name);

}  // namespace forecastd

#endif  // FORECASTD_TESTS_GOLDEN_GOLDEN_DIR_H_
