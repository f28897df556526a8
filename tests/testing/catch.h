// Lets the tests build against Catch2 v2 (Debian 12, single header) and v3 (Ubuntu 24.04).
#ifndef FORECASTD_TESTS_TESTING_CATCH_H_
#define FORECASTD_TESTS_TESTING_CATCH_H_

#if __has_include(<catch2/catch_all.hpp>)
#include <catch2/catch_all.hpp>
#define FORECASTD_CATCH_V3 1
#else
#include <catch2/catch.hpp>
#define FORECASTD_CATCH_V3 0
#endif

#endif  // FORECASTD_TESTS_TESTING_CATCH_H_
