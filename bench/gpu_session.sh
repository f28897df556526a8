#!/usr/bin/env bash
# Everything the GPU host does in one call: unpack the bundle that bench/make_gpu_bundle.sh
# built (.gpu/bundle.tgz, carried with the working tree), run every GPU test binary in it
# (one line each: pass / fail / skipped, with Catch2's summary), check the daemon serving and
# training on the GPU (bench/gpu_daemon_check.py), Triton's perf_analyzer with CUDA shared memory
# where .gpu/perf_analyzer holds it (bench/perf_analyzer_gpu.sh; on hosts with two GPUs or more also training
# on two GPUs under Predict load, bench/gpu_multi_daemon_check.py, with the arguments in
# FORECASTD_GPU_MULTI_DAEMON_ARGS, e.g. "--quick"), then bench/run_gpu.sh (forecastd vs PyTorch
# on the same GPU), and print a short table last.
#
#   OUT=/some/dir bash bench/gpu_session.sh [run_gpu.sh arguments...]
#
# Writes under $OUT (default /tmp/forecastd-gpu-session): session.log (everything printed),
# gpu_tests.log (the tests' full output), gpu_bench.txt and gpu_bench.json (run_gpu.py's table and
# JSON line). Meant to finish inside one 10-minute device call: each test binary gets
# FORECASTD_GPU_TEST_TIMEOUT_S (default 150 s) and the benchmark skips the pairs it has no time
# left for (FORECASTD_GPU_SESSION_BUDGET_S, default 540 s for the whole session).
#
# FORECASTD_GPU_SESSION_MULTI picks the multi-GPU training benchmark, bench/run_gpu_multi.sh
# (forecastd's data-parallel engine vs PyTorch DDP on cuda:0 and cuda:1; needs two GPUs):
#   unset or 0   not run (the default);
#   1            run after everything above, with the time left (extra arguments in
#                FORECASTD_GPU_MULTI_ARGS, e.g. "--quick": the whole session still has
#                FORECASTD_GPU_SESSION_BUDGET_S);
#   only         run alone: no tests, no daemon check, no run_gpu.sh; the arguments go to
#                run_gpu_multi.sh (then FORECASTD_GPU_MULTI_ARGS).
# It writes gpu_multi.txt and gpu_multi.json under $OUT.
# Exit status: 0 when every test passed (or was skipped) and the benchmarks succeeded.
set -uo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}" || exit 2
start_s=${SECONDS}
budget_s=${FORECASTD_GPU_SESSION_BUDGET_S:-540}
test_timeout_s=${FORECASTD_GPU_TEST_TIMEOUT_S:-150}
out="${OUT:-/tmp/forecastd-gpu-session}"
multi="${FORECASTD_GPU_SESSION_MULTI:-0}"
case "${multi}" in
  0 | 1 | only) ;;
  *)
    echo "gpu_session.sh: FORECASTD_GPU_SESSION_MULTI=${multi}: expected 0, 1 or only" >&2
    exit 2
    ;;
esac
# shellcheck disable=SC2206  # word splitting is the point: several arguments in one variable
multi_args=(${FORECASTD_GPU_MULTI_ARGS:-})
mkdir -p "${out}"
# A table of an earlier session must not pass for this one's.
rm -f "${out}/gpu_multi.txt" "${out}/gpu_multi.json"
exec > >(tee "${out}/session.log") 2>&1

if [[ ! -f .gpu/bundle.tgz ]]; then
  echo "gpu_session.sh: .gpu/bundle.tgz missing: run bench/make_gpu_bundle.sh here first and" \
       "carry .gpu to the GPU host" >&2
  exit 2
fi
rm -rf /tmp/bundle
tar xzf .gpu/bundle.tgz -C /tmp || exit 2
# shellcheck disable=SC1091
source /tmp/bundle/env.sh
nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used,temperature.gpu \
  --format=csv,noheader 2>/dev/null || echo "(nvidia-smi unavailable)"

# Prints the multi-GPU benchmark's table (indented), or why there is none.
multi_table() {
  if [[ -f "${out}/gpu_multi.txt" ]]; then
    sed 's/^/  /' "${out}/gpu_multi.txt"
  else
    echo "  (no table: run_gpu_multi.sh failed before writing one)"
  fi
}

if [[ "${multi}" == only ]]; then
  left_s=$((budget_s - (SECONDS - start_s)))
  echo
  echo "=== bench/run_gpu_multi.sh (${left_s} s left)"
  bash bench/run_gpu_multi.sh --bin-dir /tmp/bundle/bin --out "${out}" \
    --budget-s "$((left_s > 60 ? left_s : 60))" "$@" "${multi_args[@]}"
  multi_rc=$?
  echo
  echo "==================== summary ($((SECONDS - start_s)) s) ===================="
  echo "forecastd vs PyTorch DDP, training (run_gpu_multi.sh exit ${multi_rc}; full JSON in" \
       "${out}/gpu_multi.json):"
  multi_table
  exit "${multi_rc}"
fi

# --- GPU tests
# Test data comes from this checkout, not from the path the bundle was built at
# (golden_gpu_test reads its cases from FORECASTD_GOLDEN_DIR: tests/golden/golden_dir.h).
export FORECASTD_GOLDEN_DIR="${repo}/tests/golden"
# The daemon the tests that start one run (cuda_shared_memory_gpu_test).
export FORECASTD_BINARY=/tmp/bundle/bin/forecastd
summary=()
tests_ok=1
: > "${out}/gpu_tests.log"
for t in /tmp/bundle/bin/*_gpu_test; do
  [[ -x "${t}" ]] || continue
  name="$(basename "${t}")"
  t0=${SECONDS}
  echo "=== ${name}" >> "${out}/gpu_tests.log"
  timeout "${test_timeout_s}" "${t}" >> "${out}/gpu_tests.log" 2>&1
  rc=$?
  took=$((SECONDS - t0))
  # Catch2's last summary line: "All tests passed (...)" or "test cases: N | P passed | F failed".
  line="$(sed -n '/=== '"${name}"'$/,$p' "${out}/gpu_tests.log" |
          grep -E '^(All tests passed|test cases:)' | tail -1)"
  case "${rc}" in
    0) verdict="pass" ;;
    77) verdict="skipped" ;;
    124) verdict="TIMEOUT (${test_timeout_s} s)"; tests_ok=0 ;;
    *) verdict="FAIL (exit ${rc})"; tests_ok=0 ;;
  esac
  summary+=("$(printf '%-26s %-22s %4ss  %s' "${name}" "${verdict}" "${took}" "${line}")")
  echo "${name}: ${verdict} in ${took}s ${line}"
done
if [[ ${#summary[@]} == 0 ]]; then
  summary+=("(no *_gpu_test in the bundle)")
  tests_ok=0
fi
# The failing tests' own lines, so they come back in the output's tail too.
if [[ ${tests_ok} == 0 ]]; then
  grep -nE 'FAILED|REQUIRE|CHECK|with expansion|error' "${out}/gpu_tests.log" | head -40
fi

# --- the daemon serving on the GPU: forecasts against a CPU daemon's, per-GPU metrics (NVML)
echo
echo "=== forecastd --devices cuda:0,cpu: models on the GPU, forecasts, per-GPU metrics"
if [[ -x /tmp/bundle/bin/forecastd && -x /tmp/bundle/bin/forecastctl ]]; then
  python3 bench/gpu_daemon_check.py /tmp/bundle/bin
  daemon_rc=$?
else
  echo "  (no forecastd or forecastctl in the bundle)"
  daemon_rc=1
fi
summary+=("$(printf '%-26s %-22s' "forecastd on the GPU" "$([[ ${daemon_rc} == 0 ]] && echo pass || echo FAIL)")")
[[ ${daemon_rc} == 0 ]] || tests_ok=0

# --- Triton's perf_analyzer over gRPC, tensors in the requests, in system and in CUDA shared
# memory (only where .gpu/perf_analyzer was fetched, bench/fetch_perf_analyzer.sh, or packed as
# .gpu/perf_analyzer.tgz, a third of its size to carry)
pa_dir=.gpu/perf_analyzer
if [[ -f .gpu/perf_analyzer.tgz ]]; then
  rm -rf /tmp/pa && mkdir -p /tmp/pa && tar xzf .gpu/perf_analyzer.tgz -C /tmp/pa &&
    pa_dir=/tmp/pa/perf_analyzer
fi
if [[ -x "${pa_dir}/perf_analyzer" && -x /tmp/bundle/bin/forecastd ]]; then
  echo
  echo "=== perf_analyzer against forecastd --devices cuda:0 (demo_lstm)"
  bash bench/perf_analyzer_gpu.sh --bin-dir /tmp/bundle/bin --pa-dir "${pa_dir}" \
    --out "${out}/perf_analyzer" | tee "${out}/perf_analyzer.txt"
  pa_rc=${PIPESTATUS[0]}
  summary+=("$(printf '%-26s %-22s' "perf_analyzer (3 modes)" "$([[ ${pa_rc} == 0 ]] && echo pass || echo FAIL)")")
  [[ ${pa_rc} == 0 ]] || tests_ok=0
fi

# --- the daemon training on two GPUs while it serves (only where there are two)
gpu_count="$(nvidia-smi -L 2>/dev/null | grep -c '^GPU ')"
if [[ ${gpu_count} -ge 2 && -x /tmp/bundle/bin/forecastd && -x /tmp/bundle/bin/forecastctl ]]; then
  echo
  echo "=== forecastd --devices cuda:0,cuda:1: training on both GPUs under Predict load"
  # shellcheck disable=SC2086  # word splitting is the point: several arguments in one variable
  python3 bench/gpu_multi_daemon_check.py --bin-dir /tmp/bundle/bin ${FORECASTD_GPU_MULTI_DAEMON_ARGS:-}
  multi_daemon_rc=$?
  summary+=("$(printf '%-26s %-22s' "forecastd on 2 GPUs" "$([[ ${multi_daemon_rc} == 0 ]] && echo pass || echo FAIL)")")
  [[ ${multi_daemon_rc} == 0 ]] || tests_ok=0
fi

# --- forecastd vs PyTorch
left_s=$((budget_s - (SECONDS - start_s)))
echo
echo "=== bench/run_gpu.sh (${left_s} s left)"
bash bench/run_gpu.sh --bin-dir /tmp/bundle/bin --out "${out}" --budget-s "$((left_s > 60 ? left_s : 60))" "$@"
bench_rc=$?

multi_rc=0
if [[ "${multi}" == 1 ]]; then
  left_s=$((budget_s - (SECONDS - start_s)))
  echo
  echo "=== bench/run_gpu_multi.sh (${left_s} s left)"
  bash bench/run_gpu_multi.sh --bin-dir /tmp/bundle/bin --out "${out}" \
    --budget-s "$((left_s > 30 ? left_s : 30))" "${multi_args[@]}"
  multi_rc=$?
fi

echo
echo "==================== summary ($((SECONDS - start_s)) s) ===================="
echo "GPU tests:"
printf '  %s\n' "${summary[@]}"
echo "forecastd vs PyTorch (run_gpu.sh exit ${bench_rc}; full JSON in ${out}/gpu_bench.json):"
if [[ -f "${out}/gpu_bench.txt" ]]; then
  sed 's/^/  /' "${out}/gpu_bench.txt"
else
  echo "  (no table: run_gpu.sh failed before writing one)"
fi
if [[ "${multi}" == 1 ]]; then
  echo "forecastd vs PyTorch DDP, training (run_gpu_multi.sh exit ${multi_rc}; full JSON in" \
       "${out}/gpu_multi.json):"
  multi_table
fi
[[ ${tests_ok} == 1 && ${bench_rc} == 0 && ${multi_rc} == 0 ]]
