#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang (ASan + UBSan) and runs each for
# FUZZ_SECONDS from its committed seed corpus: `make fuzz`. The corpus is copied into a scratch
# directory first, so the committed one is never mutated; inputs libFuzzer finds go to the
# scratch copy, and a crashing input is kept as <work dir>/<target>/crash-* (rerun it with
# `<build dir>/tests/fuzz/<target> <file>`; add it to tests/fuzz/crash_regressions/<name>/
# once fixed). Exits non-zero when any target crashed, leaked, timed out or ran out of memory.
# Settings come from the environment:
#   FUZZ_BUILD_DIR  build directory                               (build-fuzz)
#   FUZZ_SECONDS    seconds per target (-max_total_time)          (60)
#   FUZZ_TARGETS    targets to run, space-separated               (all five)
#   FUZZ_WORK_DIR   scratch corpora, logs and crash files         ($FUZZ_BUILD_DIR/fuzz-work)
#   FUZZ_FLAGS      extra libFuzzer flags, e.g. "-jobs=2 -workers=2"
#   JOBS            parallel build jobs                           (nproc)
#   CC, CXX         the compilers                                 (clang, clang++)
set -euo pipefail
cd "$(dirname "$0")/.."

BUILD_DIR=${FUZZ_BUILD_DIR:-build-fuzz}
SECONDS_PER_TARGET=${FUZZ_SECONDS:-60}
TARGETS=${FUZZ_TARGETS:-safetensors_fuzzer model_config_fuzzer csv_fuzzer predict_request_fuzzer stream_request_fuzzer}
WORK_DIR=${FUZZ_WORK_DIR:-$BUILD_DIR/fuzz-work}
JOBS=${JOBS:-$(nproc)}
# shellcheck disable=SC2206  # word splitting is the point: several flags
extra_flags=(${FUZZ_FLAGS:-})

# libFuzzer comes with clang: Debian's clang and libclang-rt-<version>-dev packages.
if ! echo 'extern "C" int LLVMFuzzerTestOneInput(const char*, unsigned long) { return 0; }' |
  "${CXX:-clang++}" -x c++ -fsanitize=fuzzer -o /dev/null - > /dev/null 2>&1; then
  echo "fuzz.sh: ${CXX:-clang++} cannot link a libFuzzer target;" \
    "install clang and its runtime: apt-get install clang libclang-rt-14-dev" >&2
  exit 1
fi

set -x
cmake -S . -B "$BUILD_DIR" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_C_COMPILER="${CC:-clang}" -DCMAKE_CXX_COMPILER="${CXX:-clang++}" \
  -DFORECASTD_CUDA=OFF -DFORECASTD_FUZZ=ON
cmake --build "$BUILD_DIR" -j "$JOBS" --target forecastd_fuzzers
{ set +x; } 2> /dev/null

export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:symbolize=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
failed=()
summary=()
for target in $TARGETS; do
  name=${target%_fuzzer}
  seeds=tests/fuzz/corpus/$name
  dict=tests/fuzz/dictionaries/$name.dict
  corpus=$WORK_DIR/$target/corpus
  rm -rf "${WORK_DIR:?}/$target"
  mkdir -p "$corpus"
  cp -R "$seeds/." "$corpus/"
  flags=(-max_total_time="$SECONDS_PER_TARGET" -timeout=10 -rss_limit_mb=2560
         -artifact_prefix="$WORK_DIR/$target/" -print_final_stats=1)
  [[ -f $dict ]] && flags+=(-dict="$dict")
  echo "=== $target: ${SECONDS_PER_TARGET}s from $(find "$seeds" -type f | wc -l) seeds"
  log=$WORK_DIR/$target/fuzz.log
  if "$BUILD_DIR/tests/fuzz/$target" "${flags[@]}" "${extra_flags[@]}" "$corpus" > "$log" 2>&1; then
    status=ok
  else
    status=FAILED
    failed+=("$target")
    tail -n 60 "$log"
  fi
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  secs=$(sed -n 's/^stat::\(average_exec_per_sec\): *//p' "$log" | tail -n 1)
  cov=$(grep -o 'cov: [0-9]*' "$log" | tail -n 1 || true)
  summary+=("$(printf '%-24s %-6s execs=%s exec/s=%s %s corpus=%s log=%s' "$target" "$status" \
    "${execs:-?}" "${secs:-?}" "${cov:-}" "$(find "$corpus" -type f | wc -l)" "$log")")
done

printf '%s\n' "" "fuzz summary (${SECONDS_PER_TARGET}s per target):" "${summary[@]}"
if ((${#failed[@]})); then
  echo "fuzz: FAILED: ${failed[*]} (crash inputs under $WORK_DIR/<target>/)" >&2
  exit 1
fi
