#!/usr/bin/env bash
# forecastd's fault and overload tests (ctest label `slow`) with their figures: runs
# bench/fault.py with every argument passed through. Builds nothing: build the fault_test
# target first (`make build` builds it).
#
#   bench/fault.sh                       run and print the table
#   bench/fault.sh --build-dir build --record
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

FORECASTD_BENCH_COMMAND="bench/fault.sh"
for arg in "$@"; do
  if [[ "${arg}" =~ ^[A-Za-z0-9_./:=,+-]+$ ]]; then
    FORECASTD_BENCH_COMMAND+=" ${arg}"
  else
    FORECASTD_BENCH_COMMAND+=" $(printf '%q' "${arg}")"
  fi
done
export FORECASTD_BENCH_COMMAND
exec python3 bench/fault.py "$@"
