#!/usr/bin/env bash
# Builds forecastd with AddressSanitizer + UndefinedBehaviorSanitizer (build-asan) and with
# ThreadSanitizer (build-tsan), and runs the unit, golden and integration tests in each
# (`ctest -LE 'slow|gpu|lint'`; the lint checks read the sources, the same for every build):
# `make sanitize`. A sanitizer report fails the test that caused it
# (halt_on_error everywhere, and UBSan built with -fno-sanitize-recover). Exits non-zero when
# any test failed in any build. Settings come from the environment:
#   SANITIZERS      which builds, space-separated                (asan tsan)
#   ASAN_BUILD_DIR  build directory of the ASan+UBSan build      (build-asan)
#   TSAN_BUILD_DIR  build directory of the TSan build            (build-tsan)
#   BUILD_TYPE      CMAKE_BUILD_TYPE                             (RelWithDebInfo)
#   JOBS            parallel build jobs and tests                (nproc)
#   CTEST_FLAGS     extra ctest arguments, e.g. "-R dataset"     (--output-on-failure)
#   CC, CXX         the compilers (gcc and clang both work)      (CMake's default)
#
# Third-party libraries (Debian's abseil, gRPC, protobuf, oneDNN, libgomp) are not
# instrumented; scripts/sanitize/ holds what that needs, each with its reason:
#   lsan.supp                LeakSanitizer suppressions (ASan build)
#   tsan.supp                ThreadSanitizer suppressions
#   absl_tsan_preload.cc     makes abseil's locks visible to TSan (LD_PRELOADed, TSan only)
# and the TSan run sets OMP_NUM_THREADS=1: libgomp's barriers and thread pool are invisible to
# TSan, so OpenMP parallel regions (ours in backends/cpu, and oneDNN's) would report races
# between the team's threads that the barriers order. With one thread the regions still run,
# serially; the ASan build runs them with every thread.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

SANITIZERS=${SANITIZERS:-asan tsan}
BUILD_TYPE=${BUILD_TYPE:-RelWithDebInfo}
JOBS=${JOBS:-$(nproc)}
# shellcheck disable=SC2206  # word splitting is the point: CTEST_FLAGS holds several arguments
ctest_flags=(${CTEST_FLAGS:---output-on-failure})

# configure_and_build <build dir> <FORECASTD_SANITIZE value>
configure_and_build() {
  (
    set -x
    cmake -S . -B "$1" -DCMAKE_BUILD_TYPE="$BUILD_TYPE" -DFORECASTD_CUDA=OFF \
      -DFORECASTD_SANITIZE="$2"
    cmake --build "$1" -j "$JOBS"
  )
}

# run_tests <build dir> <name> [VAR=value...]: ctest in the build dir with that environment;
# appends a line to `summary` and the name to `failed` when a test failed or when any process
# (a test, or a daemon or tool it started) wrote a sanitizer report. Reports go to files under
# <build dir>/sanitizer-reports (the sanitizers' log_path, set by the callers), so that one
# from a subprocess whose exit status a test does not check is not lost.
summary=()
failed=()
run_tests() {
  local dir=$1 name=$2
  shift 2
  local log="$dir/sanitize-ctest.log"
  echo "=== $name: ctest -LE 'slow|gpu|lint' in $dir ($*)"
  (cd "$dir" && env "$@" ctest -LE 'slow|gpu|lint' -j "$JOBS" "${ctest_flags[@]}") 2>&1 |
    tee "$log" || true
  local result reports
  result=$(grep -E 'tests passed|No tests were found' "$log" | tail -n 1 || true)
  reports=$(find "$dir/sanitizer-reports" -type f 2> /dev/null | sort)
  if [[ -n $reports ]]; then
    echo "=== $name: sanitizer reports:"
    for report in $reports; do
      echo "--- $report"
      head -n 80 "$report"
    done
    result="$result; $(echo "$reports" | wc -l) sanitizer report file(s) in $dir/sanitizer-reports"
  fi
  summary+=("$(printf '%-5s %s' "$name" "${result:-no ctest summary (see $log)}")")
  if ! grep -q '100% tests passed' "$log" || [[ -n $reports ]]; then failed+=("$name"); fi
}

for sanitizer in $SANITIZERS; do
  case $sanitizer in
    asan)
      dir=${ASAN_BUILD_DIR:-build-asan}
      configure_and_build "$dir" "address,undefined"
      reports="$root/$dir/sanitizer-reports"
      rm -rf "$reports" && mkdir -p "$reports"
      # detect_stack_use_after_return and the init-order checks are off by default in ASan.
      run_tests "$dir" asan \
        ASAN_OPTIONS="detect_leaks=1:halt_on_error=1:detect_stack_use_after_return=1:check_initialization_order=1:strict_init_order=1:log_path=$reports/asan:${ASAN_OPTIONS:-}" \
        LSAN_OPTIONS="suppressions=$root/scripts/sanitize/lsan.supp:print_suppressions=0:${LSAN_OPTIONS:-}" \
        UBSAN_OPTIONS="print_stacktrace=1:halt_on_error=1:log_path=$reports/ubsan:${UBSAN_OPTIONS:-}"
      ;;
    tsan)
      dir=${TSAN_BUILD_DIR:-build-tsan}
      configure_and_build "$dir" "thread"
      # The preload library is built without sanitizers: python3 and other uninstrumented
      # processes that the tests start load it too (see absl_tsan_preload.cc).
      preload="$root/$dir/libforecastd_absl_tsan_preload.so"
      (
        set -x
        "${CXX:-c++}" -std=c++20 -O1 -g -fPIC -shared -o "$preload" \
          scripts/sanitize/absl_tsan_preload.cc -ldl
      )
      reports="$root/$dir/sanitizer-reports"
      rm -rf "$reports" && mkdir -p "$reports"
      run_tests "$dir" tsan \
        TSAN_OPTIONS="suppressions=$root/scripts/sanitize/tsan.supp:halt_on_error=1:second_deadlock_stack=1:log_path=$reports/tsan:${TSAN_OPTIONS:-}" \
        LD_PRELOAD="$preload${LD_PRELOAD:+:$LD_PRELOAD}" \
        OMP_NUM_THREADS=1
      ;;
    *)
      echo "sanitize.sh: unknown sanitizer build '$sanitizer' (asan, tsan)" >&2
      exit 2
      ;;
  esac
done

printf '%s\n' "" "sanitize summary:" "${summary[@]}"
if ((${#failed[@]})); then
  echo "sanitize: tests failed under: ${failed[*]} (logs: <build dir>/sanitize-ctest.log)" >&2
  exit 1
fi
