// Catch2 with its session runner, for a test binary that has a main() of its own: one that
// runs its tests only where the machine has what they test, and otherwise says why and exits
// with kSkipExitCode, which its ctest registration (SKIP_RETURN_CODE 77) reports as skipped.
// Include it first, instead of tests/testing/catch.h.
#ifndef FORECASTD_TESTS_TESTING_CATCH_SESSION_H_
#define FORECASTD_TESTS_TESTING_CATCH_SESSION_H_

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#include <catch2/catch_session.hpp>
#else
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>
#endif

#include <cstdio>
#include <string>

namespace forecastd {

inline constexpr int kSkipExitCode = 77;

// main()'s body: the tests when `runs`, else "SKIPPED: <why>" and kSkipExitCode.
inline int RunTestsWhere(bool runs, const std::string& why, int argc, char* argv[]) {
  if (!runs) {
    std::printf("SKIPPED: %s\n", why.c_str());
    return kSkipExitCode;
  }
  return Catch::Session().run(argc, argv);
}

}  // namespace forecastd

#endif  // FORECASTD_TESTS_TESTING_CATCH_SESSION_H_
