#!/usr/bin/env bash
# forecastd's Predict under closed-loop gRPC load against the floor of gRPC on this machine
# (bench/echo_server), with dynamic batching off and on: runs bench/load.py with every argument
# passed through. Builds nothing: run `make build` first (or pass --build-dir DIR).
#
#   bench/load.sh                                levels 1,4,16,64, 2 s per point
#   bench/load.sh --concurrency 1,64 --duration-s 5
#   bench/load.sh --build-dir build-release --record
#
# load.py stops every server it started when it exits, fails or gets SIGINT/SIGTERM, and its
# children die with it (PR_SET_PDEATHSIG) if it is killed outright. Needs only the standard
# library of python3 (no PyTorch).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/load.sh "$@"
exec python3 bench/load.py "$@"
