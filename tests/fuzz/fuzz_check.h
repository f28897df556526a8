// FUZZ_CHECK, the invariant assertion of the fuzz targets in tests/fuzz: on failure it prints
// the condition, its place and a message, then aborts, which libFuzzer (and the corpus
// regression runner) reports as a crash with the input that caused it. Unlike assert() it
// stays on in release builds. Stateless; thread-safe.
#ifndef FORECASTD_TESTS_FUZZ_FUZZ_CHECK_H_
#define FORECASTD_TESTS_FUZZ_FUZZ_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <string>

#define FUZZ_CHECK(condition, message)                                                           \
  do {                                                                                           \
    if (!(condition)) {                                                                          \
      std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: %s\n", __FILE__, __LINE__, #condition, \
                   std::string(message).c_str());                                                \
      std::abort();                                                                              \
    }                                                                                            \
  } while (false)

#endif  // FORECASTD_TESTS_FUZZ_FUZZ_CHECK_H_
