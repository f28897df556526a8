#!/usr/bin/env bash
# forecastd vs PyTorch on the CPU: finds a fair PyTorch (PyPI's, with MKL and oneDNN) and runs
# bench/run_cpu.py with every argument passed through. Builds nothing: run `make build` first.
#
#   bench/run_cpu.sh                         the default workloads
#   bench/run_cpu.sh --case lstm_h256_l2:1,32 --record
#   FORECASTD_TORCH_PYTHON=/path/to/python bench/run_cpu.sh ...
#
# The interpreter, first that fits: $FORECASTD_TORCH_PYTHON; /opt/torch-venv/bin/python;
# .venv-bench/bin/python; else .venv-bench is created and `pip install torch numpy` run into it.
# Debian's python3-torch is refused: its reference BLAS makes it 5-15x slower than PyPI's
# build, which would flatter forecastd.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "${repo}"

# The binary: build/bench/forecast_bench unless --forecast-bench says otherwise; none is needed
# for --peer-only, --dry-run, --list or --help.
bench_bin="build/bench/forecast_bench"
need_bin=1
prev=""
for arg in "$@"; do
  case "${arg}" in
    --forecast-bench=*) bench_bin="${arg#*=}" ;;
    --peer-only | --dry-run | --list | -h | --help) need_bin=0 ;;
  esac
  if [[ "${prev}" == "--forecast-bench" ]]; then
    bench_bin="${arg}"
  fi
  prev="${arg}"
done
if [[ "${need_bin}" == 1 && ! -x "${bench_bin}" ]]; then
  echo "run_cpu.sh: ${bench_bin} not found; run \`make build\` first" >&2
  exit 2
fi

# Prints why $1 is not a fair PyTorch for timing, or nothing when it is.
torch_problem() {
  "$1" - <<'EOF' 2>&1 || true
import sys
try:
    import numpy  # noqa: F401
    import torch
except Exception as e:  # noqa: BLE001
    print(f"cannot import torch and numpy: {e}")
    sys.exit(0)
config = torch.__config__.show()
has_mkl = "BLAS_INFO=mkl" in config or "Math Kernel Library" in config
if torch.__file__.startswith("/usr/lib/python3/dist-packages/") and not has_mkl:
    print(f"torch {torch.__version__} at {torch.__file__} is Debian's python3-torch (reference "
          "BLAS): not a fair peer for timing")
EOF
}

python=""
if [[ -n "${FORECASTD_TORCH_PYTHON:-}" ]]; then
  problem="$(torch_problem "${FORECASTD_TORCH_PYTHON}")"
  if [[ -n "${problem}" ]]; then
    echo "run_cpu.sh: FORECASTD_TORCH_PYTHON=${FORECASTD_TORCH_PYTHON}: ${problem}" >&2
    exit 2
  fi
  python="${FORECASTD_TORCH_PYTHON}"
else
  for candidate in /opt/torch-venv/bin/python .venv-bench/bin/python; do
    if [[ -x "${candidate}" && -z "$(torch_problem "${candidate}")" ]]; then
      python="${candidate}"
      break
    fi
  done
fi
if [[ -z "${python}" ]]; then
  echo "run_cpu.sh: no PyPI torch found; creating .venv-bench (pip install torch numpy)" >&2
  python3 -m venv .venv-bench
  .venv-bench/bin/python -m pip install --upgrade pip
  .venv-bench/bin/python -m pip install torch numpy
  python=".venv-bench/bin/python"
  problem="$(torch_problem "${python}")"
  if [[ -n "${problem}" ]]; then
    echo "run_cpu.sh: ${python}: ${problem}" >&2
    exit 2
  fi
fi

# The Python driver records this command line as what produced the figures.
source "${repo}/bench/bench_command.sh"
export_bench_command bench/run_cpu.sh "$@"
exec "${python}" bench/run_cpu.py "$@"
