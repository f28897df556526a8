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

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/fault.sh "$@"
exec python3 bench/fault.py "$@"
